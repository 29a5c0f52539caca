"""Engine (free to change): the handout's training log, read back in groups.

Read back from the device in groups: the progress bar's `epoch E iter I: train loss L. lr LR`
(the starter's tqdm description) and the tensorboard scalars train/loss and train/lr of every
step; a loss that is not finite stops the run before anything is saved."""
import math
import time

import torch
from tqdm import tqdm


class LossNotFinite(Exception):
    """The training loss became inf or nan: the run stops (nothing more is trained or saved)."""


class Progress:
    """The handout's logging: the progress bar's `epoch E iter I: train loss L. lr LR` and the
    tensorboard scalars train/loss and train/lr every step. Losses stay on the device until
    log_every steps have gathered (reading one back waits for the GPU), then are read together.
    With `lag` (a GPU's) the newest step's loss stays behind: reading it would wait for the
    step just launched, and the device would then idle while the loop prepares the next one
    (scripts/dev/benchmark_loop.py measures it). What saves
    params or a checkpoint reads every loss first: nothing is saved after a loss not read."""

    def __init__(self, log_every, writer, disable, lag=False):
        self.log_every, self.writer, self.disable, self.lag = log_every, writer, disable, int(lag)
        self.pbar = self.start_time = self.end_time = None  # (the times: the training's own)
        self.pending = []  # (step, loss tensor, lr, epoch, it) not yet read back from the device

    def start(self, total, initial, tokens):
        self.pbar = tqdm(total=total, initial=initial, unit='step', dynamic_ncols=True,
                         disable=self.disable)
        self.start_time, self.start_tokens = time.time(), tokens

    def set_total(self, total):
        self.pbar.total = total

    def log(self, step, loss, lr, epoch, it, tokens):
        self.pending.append((step, loss, lr, epoch, it))
        if len(self.pending) >= self.log_every + self.lag:
            self.flush(tokens, keep=self.lag)

    def flush(self, tokens, keep=0):
        """Read back the pending losses but the newest `keep`; log them."""
        cut = len(self.pending) - keep
        ready, self.pending = self.pending[:cut], self.pending[cut:]
        if not ready:
            return
        losses = torch.stack([entry[1] for entry in ready]).float().cpu().tolist()
        for (step, _, lr, _, _), loss in zip(ready, losses):
            if not math.isfinite(loss):  # nothing after it could be saved as a model
                self.pending.clear()
                raise LossNotFinite(f'the training loss became {loss} at step {step + 1} '
                                    f'(learning rate {lr:g})')
        for (step, _, lr, _, _), loss in zip(ready, losses):
            if self.writer is not None:
                self.writer.add_scalar('train/loss', loss, step)
                self.writer.add_scalar('train/lr', lr, step)
        _, _, lr, epoch, it = ready[-1]
        self.pbar.set_description(f"epoch {epoch+1} iter {it}: train loss {losses[-1]:.5f}. "
                                  f"lr {lr:e}")
        self.pbar.update(len(ready))
        tok_s = (tokens - self.start_tokens) / max(time.time() - self.start_time, 1e-9)
        self.pbar.set_postfix_str(f'{tok_s:,.0f} tok/s', refresh=False)

    def epoch_end(self, tokens, saving):
        """An epoch's end: its losses read back, a GPU's newest left on the device (lag) unless
        params are saved now (`saving`): nothing is saved after a loss not read."""
        self.flush(tokens, keep=0 if saving else self.lag)

    def close(self, tokens):
        if self.pbar is not None:
            self.flush(tokens)
            self.pbar.close()
            self.end_time = time.time()


class EpochClock:
    """The trainer's extra that keeps each epoch's seconds on the wall clock (run.epoch_walls,
    for the run's record), read from `clock`: where a short GPU stage's time goes, its first
    epochs holding the workers' start and the steps' recordings, a checkpoint the epoch that
    wrote it. Last of the extras, so an epoch's seconds hold what the others did at its end."""

    def __init__(self, clock=time.time):
        self.clock = clock

    def on_train_start(self, run):
        self.last, run.epoch_walls = self.clock(), []

    def on_epoch_end(self, run, epoch):
        now = self.clock()
        run.epoch_walls.append(now - self.last)
        self.last = now
