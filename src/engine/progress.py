"""Engine (free to change): the handout's training log, read back in groups.

The handout's training log, read back from the device in groups (engine, not the handout):
the progress bar's `epoch E iter I: train loss L. lr LR` (the starter's tqdm description) and the
tensorboard scalars train/loss and train/lr of every step; a loss that is not finite stops the
run before anything is saved."""
import math
import time

import torch
from tqdm import tqdm


class LossNotFinite(Exception):
    """The training loss became inf or nan: the run stops (nothing more is trained or saved)."""


class Progress:
    """The handout's logging: the progress bar's `epoch E iter I: train loss L. lr LR` and the
    tensorboard scalars train/loss and train/lr every step. Losses stay on the device until
    log_every steps have gathered (reading one back waits for the GPU), then are read together."""

    def __init__(self, log_every, writer, disable):
        self.log_every, self.writer, self.disable = log_every, writer, disable
        self.pbar = None
        self.pending = []  # (step, loss tensor, lr) not yet read back from the device

    def start(self, total, initial, tokens):
        self.pbar = tqdm(total=total, initial=initial, unit='step', dynamic_ncols=True,
                         disable=self.disable)
        self.start_time, self.start_tokens = time.time(), tokens

    def set_total(self, total):
        self.pbar.total = total

    def log(self, step, loss, lr, epoch, it, tokens):
        self.pending.append((step, loss, lr))
        self.epoch, self.it = epoch, it
        if len(self.pending) >= self.log_every:
            self.flush(tokens)

    def flush(self, tokens):
        if not self.pending:
            return
        losses = torch.stack([loss for _, loss, _ in self.pending]).float().cpu().tolist()
        for (step, _, lr), loss in zip(self.pending, losses):
            if not math.isfinite(loss):  # nothing after it could be saved as a model
                self.pending.clear()
                raise LossNotFinite(f'the training loss became {loss} at step {step + 1} '
                                    f'(learning rate {lr:g})')
        for (step, _, lr), loss in zip(self.pending, losses):
            if self.writer is not None:
                self.writer.add_scalar('train/loss', loss, step)
                self.writer.add_scalar('train/lr', lr, step)
        self.pbar.set_description(f"epoch {self.epoch+1} iter {self.it}: train loss {losses[-1]:.5f}. "
                                  f"lr {self.pending[-1][2]:e}")
        self.pbar.update(len(self.pending))
        tok_s = (tokens - self.start_tokens) / max(time.time() - self.start_time, 1e-9)
        self.pbar.set_postfix_str(f'{tok_s:,.0f} tok/s', refresh=False)
        self.pending.clear()

    def close(self, tokens):
        if self.pbar is not None:
            self.flush(tokens)
            self.pbar.close()
