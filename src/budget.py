"""The time budget (run.py --time_budget, a preset's budget): train the epochs that end within a
number of seconds on the machine the run is on, the learning-rate schedule compressed to them.

Before the first epoch a few training steps are timed (and undone: Trainer.timed_steps), and the
epochs that fit are kept, at most the max_epochs asked for; final_tokens is scaled like the epochs,
so the cosine keeps its shape and reaches its floor at the last step. After the first epoch the
plan is made again at the pace that epoch ran, and after every epoch the run stops early if
another epoch would end past the budget. A budgeted run that fits every epoch is the unbudgeted run.
"""
import time

import distributed
from utils import UsageError


def epochs_that_fit(seconds, epoch_seconds):
    """Whole epochs of `epoch_seconds` within `seconds`, 5% kept for epoch ends, saves, noise."""
    return int(0.95 * seconds // epoch_seconds)


class TimeBudget:
    """The trainer's extra for config.time_budget (seconds, counted from config.start_time, else
    from the start of training), read from `clock` (the trainer's: time.time unless a test drives
    its own)."""

    def __init__(self, clock=time.time):
        self.clock = clock

    def on_train_start(self, trainer):
        config = trainer.config
        self.start = config.start_time if config.start_time is not None else self.clock()
        if not config.resume:  # a resumed run continues the plan its checkpoint holds
            self.plan(trainer)
        self.loop_start = self.clock()

    def on_epoch_end(self, trainer, epoch):
        """Re-plan after the first epoch; True (stop) when another epoch would end past the budget."""
        spent = self.clock() - self.loop_start
        if epoch == 0 and not trainer.config.resume:
            self.replan(trainer, spent)
        return self.out_of_time(trainer, spent, epoch + 1 - trainer.start_epoch, epoch + 1)

    def left(self, trainer):
        return trainer.config.time_budget - (self.clock() - self.start)

    def plan(self, trainer):
        """Fix max_epochs to what ends within time_budget, from a few timed training steps of this
        model on batches of this dataset, with this run's settings."""
        config = trainer.config
        # past 3 timed steps, stop once the measuring costs 2% of the budget
        times = trainer.timed_steps(
            config.precision, warm=3 if config.compile else 2, timed=10,
            ahead=trainer.batches.ahead,
            stop=lambda t: len(t) >= 3 and self.clock() - self.start > 0.02 * config.time_budget)
        step = sorted(times)[len(times) // 2]  # the median: one slow step is no trend
        step = distributed.agree(step, trainer.device, 'max')  # every rank plans the slowest's epochs
        steps_per_epoch = trainer.steps_per_epoch
        epoch_seconds = step * steps_per_epoch
        fit = epochs_that_fit(self.left(trainer), epoch_seconds)
        if fit < 1:
            too_small = (f'{config.time_budget / 60:g} min is too small for one epoch: an epoch '
                         f'takes about {epoch_seconds / 60:.2f} min here ({steps_per_epoch} steps '
                         f'of {step:.3f} s)')
            if not config.budget_may_grow:
                raise UsageError('--time_budget ' + too_small)
            if trainer.rank == 0:  # a preset's budget (or run_all's share) on a slow machine: still params
                print(f'warning: the time budget of {too_small}; training one epoch', flush=True)
            fit = 1
        self.asked = config.max_epochs, config.final_tokens  # what train_epochs scales
        epochs = min(fit, config.max_epochs)
        if trainer.rank == 0:
            print(f'time budget {config.time_budget / 60:g} min: {epochs} epochs of {steps_per_epoch} '
                  f'steps ({step:.3f} s per step measured, {epoch_seconds:.1f} s per epoch) -> about '
                  f'{epochs * epoch_seconds / 60:.1f} min'
                  + ('' if epochs < config.max_epochs else f' (all {epochs}: the most asked for)'),
                  flush=True)
        self.train_epochs(trainer, epochs)

    def train_epochs(self, trainer, epochs):
        """Train `epochs` of the max_epochs asked for, the learning-rate schedule laid over them
        (final_tokens scaled by the same factor: the cosine keeps its shape, compressed)."""
        asked, asked_final = self.asked
        trainer.config.final_tokens = asked_final * epochs / asked if epochs < asked else asked_final
        trainer.config.max_epochs = epochs

    def replan(self, trainer, epoch_seconds):
        """After the first epoch: the epochs that fit at the pace it ran, the schedule laid over
        them from here on. The few steps plan() timed can mislead (their batches shorter or
        longer than the average, none of the per-step logging or the epoch's end, a machine
        busier or idler then than later); a whole epoch says more. The first epoch keeps the lr
        of the first plan (near the top of the cosine either way)."""
        config = trainer.config
        epochs = min(1 + max(epochs_that_fit(self.left(trainer), epoch_seconds), 0), self.asked[0])
        epochs = int(distributed.agree(epochs, trainer.device, 'min'))  # the fewest any rank can
        if epochs == config.max_epochs:
            return
        if trainer.rank == 0:
            print(f'\ntime budget: the first epoch took {epoch_seconds:.1f} s: {epochs} epochs '
                  f'instead of {config.max_epochs} -> about {epochs * epoch_seconds / 60:.1f} min',
                  flush=True)
        self.train_epochs(trainer, epochs)
        trainer.progress.set_total(trainer.steps_per_epoch * config.max_epochs)

    def out_of_time(self, trainer, spent, epochs_done, epoch):
        """Whether another epoch, at the pace so far, would end past the budget (the machine got
        slower than planned). The run then ends early, its schedule unfinished."""
        config = trainer.config
        if epoch >= config.max_epochs:
            return False
        late = self.clock() - self.start + spent / epochs_done > config.time_budget
        late = bool(distributed.agree(late, trainer.device, 'sum'))
        if late and trainer.rank == 0:
            print(f'\ntime budget: stopping after epoch {epoch} of {config.max_epochs} (the epochs '
                  'ran slower than measured)', flush=True)
        return late
