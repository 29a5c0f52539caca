"""Engine (free to change): the time budget (the schedule itself: training/schedule.py).

run.py --time_budget (or a preset's budget) trains the epochs that end within a number of
seconds on the machine the run is on, with the learning-rate schedule laid over them.

Before training, the run's plan (plan.py) times a few training steps (undone) and keeps the
epochs that fit, at most the max_epochs asked for; final_tokens is scaled like the epochs,
so the cosine keeps its shape and reaches its floor at the last step. After every epoch
(TimeBudget, here) the epochs left are fitted again to the time left, at the pace the epochs
have run (a few timed steps can mislead, and a machine gets busier or idler): the mean epoch
since the pace last
changed (Pace), so that one slow epoch among many short ones (a GPU's 0.3 s epochs with a 0.5 s
one now and then) moves nothing; the run's first step, which waits for what is set up once, is
left out of its first epoch's pace. When that changes the plan, the rest of the cosine is laid
over the new number of epochs from where the schedule stands (the learning rate goes on
smoothly, and the last step is at the floor). The plan changes only when it matters, judged at
the pace less or plus its uncertainty (Pace.error): it shrinks when the epochs planned would end
past the budget less half its margin, and grows when at least GROW more epochs (one, in the last
few) surely fit, so a pace that wavers leaves it alone. The run trains the number of epochs
it printed last. A budgeted run that fits every epoch is the unbudgeted run.

A budget may also hold what follows the training (config.budget_after: that many epochs at the
run's own pace, main.sh's finetuning): that time is kept at its end as it is measured, beside a
smaller margin the plan may not run into (an overrun would come out of what follows).
"""
import statistics
import time

from engine import distributed
from engine.common import UsageError
from engine.fast.batches import steps_per_epoch, workers_for
from engine.machine.cpu_paths import set_plan_path
from engine.machine.measure import median

MARGIN = 0.05  # of the budget, kept for epoch ends, saves, the evaluation after and noise
# of a budget that holds what follows (its time is kept apart, at the run's pace): enough for the
# saves and noise, since an overrun would come out of what follows (tests/engine/test_budget.py replays
# recorded runs' epoch times against it)
FOLLOWED_MARGIN = 0.01
# A plan grows by this share of its epochs or more (and at least 2): no trend else. In its last
# that many epochs no later epoch can tell, and one more that surely fits is time not left
# unused (a slow run's last epochs would otherwise stay slack).
GROW = 0.05


def margin(config):
    """Seconds of a TrainerConfig's budget kept for epoch ends, saves and noise."""
    return (FOLLOWED_MARGIN if config.budget_after else MARGIN) * config.time_budget


def kept(config, epoch_seconds):
    """Seconds at the end of the budget that no epoch may use: the margin, and the time of what
    follows the training (config.budget_after epochs of `epoch_seconds`)."""
    return margin(config) + config.budget_after * epoch_seconds


def overrun(config):
    """How far into its margin a plan may run before it is shrunk: half of a budget's own (a
    pace's noise is no trend), none of a budget that holds what follows (it would come out of
    that: main.sh's finetuning would end past its 20 minutes)."""
    return 0.0 if config.budget_after else margin(config) / 2


def epochs_that_fit(seconds, epoch_seconds, keep):
    """Whole epochs (or steps) of `epoch_seconds` within `seconds`, less `keep` seconds."""
    return int((seconds - keep) // epoch_seconds)


def measured_step(timer, precision, config, clock):
    """Seconds per training step here: the median of a few timed steps, the slowest rank's
    under torchrun. Past 3 timed steps the timing stops once 2% of the budget has passed."""
    start = clock()
    times = timer.times(precision, warm=3 if config.compile else 2, timed=10,
                        ahead=workers_for(config, timer.device) > 0,
                        stop=lambda t: len(t) >= 3 and clock() - start > 0.02 * config.time_budget)
    return distributed.agree(median(times), timer.device, 'max')


def plan_epochs(plan, timer, model, dataset, config, clock, smaller, say):
    """The run's plan (plan.py): the epochs that end within the budget (counted from plan.start),
    at the pace of a few timed steps; first, where `smaller` is given, the model to train.
    Returns that model."""
    start = plan.start
    per_epoch = steps_per_epoch(len(dataset), config.batch_size)
    step = measured_step(timer, plan.precision, config, clock)
    if smaller is not None:
        build, below = smaller
        fit = epochs_that_fit(config.time_budget - (clock() - start), step,
                              kept(config, step * per_epoch))  # (in steps)
        fit = int(distributed.agree(max(fit, 0), timer.device, 'min'))
        if fit < min(below, config.max_epochs * per_epoch):
            layers = layers_of(model)
            model = build()
            set_plan_path(plan, model, timer.device)
            timer.use(model)
            plan.depth = (f'a {layers_of(model)}-layer model: the preset\'s {layers} layers fit '
                          f'{fit:,} steps ({step:.3f} s each) into the budget here, fewer than '
                          f'{below:,}')
            step = measured_step(timer, plan.precision, config, clock)
    epoch_seconds = step * per_epoch
    fit = epochs_that_fit(config.time_budget - (clock() - start), epoch_seconds,
                          kept(config, epoch_seconds))
    if fit < 1:
        too_small = (f'{config.time_budget / 60:g} min is too small for one epoch: an epoch '
                     f'takes about {epoch_seconds / 60:.2f} min here ({per_epoch} steps '
                     f'of {step:.3f} s)')
        if not config.budget_may_grow:
            raise UsageError('--time_budget ' + too_small)
        if distributed.rank() == 0:  # a preset's budget (or run_all's share) on a slow machine
            say(f'warning: the time budget of {too_small}; training one epoch', flush=True)
        fit = 1
    plan.epochs = min(fit, config.max_epochs)
    plan.step_seconds, plan.steps_per_epoch = step, per_epoch
    plan.time_budget, plan.budget_after = config.time_budget, config.budget_after
    plan.final_tokens = config.final_tokens
    if plan.epochs < config.max_epochs:  # the cosine keeps its shape over the epochs that fit
        plan.final_tokens *= plan.epochs / config.max_epochs
    else:
        plan.budget_note = f' (all {plan.epochs}: the most asked for)'
    return model


def layers_of(model):
    """The number of transformer blocks of a GPT (a perceiver's down and up blocks too)."""
    return len(model.blocks) + (2 if hasattr(model, 'down_block') else 0)


class Pace:
    """Seconds per epoch now: the mean of the epochs since the pace last changed. A change is
    the mean of the last RECENT epochs lying more than SIGMAS standard errors from the mean of
    the epochs before them (their spread, at least FLOOR of their mean): a machine that got busy
    or idle shows within RECENT epochs, a stray slow epoch never."""
    RECENT, SIGMAS, FLOOR = 4, 4.0, 0.02

    def __init__(self):
        self.times, self.since = [], 0

    def add(self, seconds):
        self.times.append(seconds)
        before, recent = self.times[self.since:-self.RECENT], self.times[-self.RECENT:]
        if len(before) >= 2:
            mean = statistics.fmean(before)
            spread = max(statistics.stdev(before), self.FLOOR * mean)
            if abs(statistics.fmean(recent) - mean) > self.SIGMAS * spread / self.RECENT ** 0.5:
                self.since = len(self.times) - self.RECENT

    def seconds(self):
        return statistics.fmean(self.times[self.since:])

    def error(self):
        """How far seconds() may be off: its standard error, and at least half the mean over the
        number of epochs (a first epoch, often the slowest, or two say little of the rest)."""
        times = self.times[self.since:]
        n, mean = len(times), statistics.fmean(times)
        return max(2 * statistics.stdev(times) / n ** 0.5 if n > 1 else 0.0, mean / (2 * n))


class TimeBudget:
    """The trainer's extra for config.time_budget (seconds, counted from config.start_time, else
    from the start of training), read from `clock` (the trainer's: time.time unless a test drives
    its own)."""

    def __init__(self, clock=time.time):
        self.clock = clock

    def on_train_start(self, run):
        self.start = run.plan.start  # config.start_time, else when the plan began measuring
        self.epoch_start, self.pace = self.clock(), Pace()
        # the steps of the run's first epoch (None once it has ended) and when its first ended
        self.first_epoch_steps, self.after_first_step = 0, None

    def on_step_end(self, run, epoch, it):
        # The run's first step waits for what a run sets up once (worker processes, the first
        # batches, memory): the first epoch's pace is taken from its other steps. (A GPU's first
        # step can take longer than its whole epoch otherwise does: counted in, it would cut
        # the plan to a fraction of its epochs, which the next epochs would win back slowly.)
        if self.first_epoch_steps is not None:
            self.first_epoch_steps += 1
            if self.first_epoch_steps == 1:
                self.after_first_step = self.clock()

    def on_epoch_end(self, run, epoch):
        """Fit the epochs left to the time left; True (stop) when not one more fits."""
        now = self.clock()
        seconds, n = now - self.epoch_start, self.first_epoch_steps
        if n is not None:  # the run's first epoch (a resumed one may have started mid-epoch)
            if n > 1:
                seconds = (now - self.after_first_step) / (n - 1) * run.steps_per_epoch
            self.first_epoch_steps = None
        self.pace.add(seconds)
        run.epoch_seconds = self.pace.times  # (for the run's record)
        self.epoch_start = now
        return self.replan(run, epoch + 1)

    def left(self, run):
        return run.config.time_budget - (self.clock() - self.start)

    def replan(self, run, done):
        """After `done` epochs: the epochs that fit in the time left at the pace now (Pace), the
        rest of the schedule laid over them."""
        config, schedule = run.config, run.schedule
        if done >= schedule.max_epochs:
            return False
        pace, error = self.pace.seconds(), self.pace.error()
        left, keep = self.left(run), kept(config, pace)
        fit = max(epochs_that_fit(left, pace, keep), 0)
        epochs = min(done + fit, config.max_epochs)
        planned = schedule.max_epochs
        # act on the pace only where its uncertainty (a few epochs' mean) cannot explain the change
        if epochs < planned and (planned - done) * (pace - error) <= left - keep + overrun(config):
            epochs = planned  # the plan still ends inside the budget (see overrun)
        surely = done + max(epochs_that_fit(left, pace + error, kept(config, pace + error)), 0)
        trend = max(2, GROW * planned)
        if planned < epochs and surely < planned + (1 if planned - done <= trend else trend):
            epochs = planned  # a few more epochs would fit: a faster epoch or two is no trend
        epochs = int(distributed.agree(epochs, run.device, 'min'))  # the fewest any rank can
        if epochs == schedule.max_epochs:
            return False
        if epochs <= done:
            if run.rank == 0:
                print(f'\ntime budget: stopping after epoch {done} of {schedule.max_epochs} (the '
                      'epochs ran slower than measured: no time for another)', flush=True)
            schedule.max_epochs = done
            return True
        if run.rank == 0:
            print(f'\ntime budget: after epoch {done} ({pace:.1f} s per epoch): {epochs} epochs '
                  f'instead of {schedule.max_epochs} -> about '
                  f'{(self.clock() - self.start + (epochs - done) * pace) / 60:.1f} min in all',
                  flush=True)
        self.relay(run, done, epochs)
        schedule.max_epochs = epochs
        run.progress.set_total(run.steps_per_epoch * epochs)
        return False

    def relay(self, run, done, epochs):
        """The rest of the cosine, from where it stands now, laid over the epochs up to `epochs`:
        it ends where the schedule asked for ends after all its epochs (at its floor)."""
        schedule = run.schedule
        # (the tokens the loop started from: a resumed run's, loaded after this extra's start)
        per_epoch = (run.tokens - run.progress.start_tokens) / (done - run.start_epoch)
        t0 = max(run.tokens, schedule.warmup_tokens)
        p0 = run.schedule.progress(t0)
        asked, asked_final = run.config.max_epochs, run.config.final_tokens
        p1 = (asked * per_epoch - schedule.warmup_tokens) / max(1, asked_final - schedule.warmup_tokens)
        schedule.relaid = (t0, p0, t0 + (epochs - done) * per_epoch, max(p0, p1))
