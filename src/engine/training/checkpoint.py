"""Engine (free to change): resume and stop.

The resumable checkpoint (WRITING_PARAMS_PATH.ckpt in run.py) holds everything needed to go on
where the run stands: model, optimizer, schedule position, the epoch's order and every random
state. It is written every `checkpoint_every` epochs and when a first Ctrl-C or SIGTERM arrives
(between two steps); `resume` continues from it, giving the params of the uninterrupted run.
"""
import signal
import threading
import time

import torch

from engine import distributed
from engine.common import UsageError, atomic_write, state_difference
from engine.devices import random_states, set_random_states


def spent(run):
    """The calls this run has taken so far and their seconds (the whole command's, and its
    training's alone), this call's up to now included: a resumed run's record counts them all,
    or its tokens would be divided by the last call's time alone."""
    now = time.time()
    training = run.progress.start_time if run.progress is not None else None
    training = now if training is None else training
    start = run.config.start_time  # (None: the Trainer used alone, its command the training)
    start = training if start is None else start
    return dict(calls=run.before['calls'] + 1, seconds=run.before['seconds'] + now - start,
                training=run.before['training'] + now - training)


class TrainingInterrupted(Exception):
    """Ctrl-C or SIGTERM: a resumable checkpoint has been written (its path is the message)."""


_IN_THREADS = set()  # the StopRequests of commands run in threads (signals reach the main one)


def stop_threads():
    """Ask every command running in a thread of this process to stop as a signal would (its
    process's main thread, which the signal reached, calls this: training/turns.py)."""
    for request in list(_IN_THREADS):
        request.requested = True


class StopRequest:
    """Turns the first SIGINT/SIGTERM into a flag the loop checks after each step (so the
    checkpoint is written between steps); a second Ctrl-C stops at once. In a thread other
    than the main one, stop_threads raises the flag."""

    def __init__(self):
        self.requested = False
        self.previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        else:
            _IN_THREADS.add(self)
        return self

    def _handle(self, signum, frame):
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc):
        _IN_THREADS.discard(self)
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}


# the most a checkpoint's time count may hold: a million calls, about 30 years of seconds (a
# forged 10**400 would overflow the run record's arithmetic once the run is over)
MOST_CALLS, MOST_SECONDS = 10 ** 6, 10 ** 9


def plausible_count(spent, keys):
    """Whether a checkpoint's `spent` is a time count this project could have written: each of
    `keys` a number (not a bool) from 0 to its bound, nan and inf out."""
    if not isinstance(spent, dict):
        return False
    for key in keys:
        value = spent.get(key)
        most = MOST_CALLS if key == 'calls' else MOST_SECONDS
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= most:
            return False
    return True


class Resumable:
    """The trainer's extra for config.resume_path: loads the checkpoint before the first epoch
    (config.resume), writes it after every checkpoint_every-th epoch (once checkpoint_seconds
    have passed since the last one), and on a stop request writes it after the current step and
    raises TrainingInterrupted."""

    def __init__(self):
        self.stop = None

    def on_train_start(self, run):
        self.stop = StopRequest().__enter__()
        self.saved_at = run.clock()  # (checkpoint_seconds counts from here, then each save)
        if run.config.resume:
            self.load(run)

    def on_step_end(self, run, epoch, it):
        requested = self.stop.requested
        if run.distributed:
            # every rank stops at the same step: they agree on it where the losses are read back
            # anyway (every log_every steps), not at every step, which would wait for the GPU
            if run.step % run.config.log_every:
                return
            requested = bool(distributed.agree(requested, run.device, 'sum'))
        if requested:
            self.save(run, epoch, it + 1, run.epoch_start_state)
            raise TrainingInterrupted(run.config.resume_path)

    def on_epoch_end(self, run, epoch):
        config = run.config
        if config.checkpoint_every and (epoch + 1) % config.checkpoint_every == 0 \
                and epoch + 1 < run.schedule.max_epochs and self.due(run):
            self.save(run, epoch + 1, 0, run.generator.get_state())

    def due(self, run):
        """Whether checkpoint_seconds have passed since the last checkpoint (presets.GPU's on a
        GPU). Under torchrun rank 0's clock decides for all: every rank takes part in a save."""
        seconds = run.config.checkpoint_seconds
        if not seconds:
            return True
        return bool(distributed.agree(run.clock() - self.saved_at >= seconds if
                                      run.rank == 0 else 0, run.device, 'max'))

    def on_train_end(self, run):
        if self.stop is not None:
            self.stop.__exit__()

    def save(self, run, epoch, it, generator_state):
        """Everything needed to continue exactly where the run stands: before batch `it` of
        `epoch`, whose order (a shuffle) and seeds are drawn from generator_state."""
        config = run.config
        run.progress.flush(run.tokens)  # every loss read: none saved after one not finite
        # each rank's own random states: under torchrun the ranks' dropout draws differ (their
        # rows differ, a last short batch leaves one a dummy row), so rank 0's are not theirs
        randoms = distributed.gather(random_states(run.device))
        if run.rank != 0:
            return
        state = {
            'model': run.model.state_dict(), 'optimizer': run.optimizer.state_dict(),
            'tokens': run.tokens, 'step': run.step, 'epoch': epoch, 'it': it,
            'generator': generator_state, 'random': randoms,
            'batch_size': config.batch_size, **run.schedule.state_dict(),
            'plan': run.plan.record(),  # (a resumed run goes on with it: plan.make)
            'scaler': run.scaler.state_dict(),  # ({} unless fp16's)
            'spent': spent(run),
        }
        atomic_write(config.resume_path, lambda tmp: torch.save(state, tmp))
        self.saved_at = run.clock()

    def load(self, run):
        config, path = run.config, run.config.resume_path
        try:
            # onto the CPU: the random states must stay CPU byte tensors (set_rng_state takes no
            # other); the model and the optimizer copy their tensors to the device themselves
            state = torch.load(path, map_location='cpu', weights_only=True)
            mismatch = state_difference(state['model'], run.model.state_dict(),
                                        'in the checkpoint')
            if mismatch is None:
                run.model.load_state_dict(state['model'])
        except Exception as e:
            first = str(e).splitlines()[0][:120] if str(e) else ''
            raise UsageError(f'--resume: cannot read the checkpoint {path} '
                             f'({type(e).__name__}: {first})')
        if mismatch is not None:
            raise UsageError(f'--resume: {path} was written for another model ({mismatch}: '
                             'another corpus, variant or --preset?)')
        if state['batch_size'] != config.batch_size:
            raise UsageError(f'--resume: {path} was written with batch size {state["batch_size"]}, '
                             f'this run has {config.batch_size}')
        run.optimizer.load_state_dict(state['optimizer'])
        if state.get('scaler'):  # (fp16: the loss scale it reached)
            run.scaler.load_state_dict(state['scaler'])
        if config.time_budget is not None and 'final_tokens' in state:
            # a budgeted run continues the plan it made, not a new one
            run.schedule.load_state_dict(state)
        run.tokens, run.step = state['tokens'], state['step']
        spent = state.get('spent')  # (absent from older checkpoints: their calls go uncounted)
        if plausible_count(spent, run.before):
            run.before = {k: spent[k] for k in run.before}
        run.generator.set_state(state['generator'])
        randoms, rank = state.get('random'), run.rank
        if randoms is None:  # written before the states were kept per rank
            randoms = [{'python': state['python_random'], 'torch': state['torch_rng'], 'cuda': None}]
        if len(randoms) != distributed.world() and rank == 0:
            print(f'note: {path} holds the random states of {len(randoms)} processes, this run '
                  f'has {distributed.world()}: dropout draws will differ from an uninterrupted run')
        set_random_states(randoms[min(rank, len(randoms) - 1)], run.device)
        run.start_epoch, run.start_it = state['epoch'], state['it']
