"""Engine (free to change): the machine measured once, before training: the run's plan.

Before the run's Trainer exists, `make` measures what the run needs on this machine, each on
the settings chosen before it, with training steps that change nothing (measure.StepTimer):

  threads    torch's threads for the load other processes put on the CPUs while the first
             steps ran (cpu_load; a CPU preset that adapts to the machine);
  precision  'auto': the fastest of the ways of training that compute the same function, or
             the one remembered for this machine (cpu_paths);
  depth      a CPU recipe's model for a slow machine, where the preset's fits too few steps
             into the time budget here (presets.slow_machine);
  epochs     those that end within the time budget (budget).

Nothing is timed where nothing can change: a run of one epoch takes a remembered precision
unchecked, a preset's budget over one epoch is not measured, and a resumed run goes on with the
plan its checkpoint holds. The plan is printed as one
line (`plan: ...`, where anything was measured or chosen), written into the run's .run.json
(record()), and handed to the Trainer; during training only the re-plan (budget.TimeBudget:
epochs at the pace the epochs run; cpu_load.FollowLoad: threads at the load) and resume act.
"""
import dataclasses
import time
from typing import Optional

import torch

from engine.machine import cpu_load
from engine.machine import cpu_paths
from engine import distributed
from engine.fast import graphs
from engine.fast.batches import steps_per_epoch, workers_for
from engine.machine.budget import budgeted, epochs_that_fit, kept
from engine.common import UsageError
from engine.machine.measure import StepTimer, median

LOAD_SECONDS = 1.0  # the first steps run at least this long: the window the load is read over


@dataclasses.dataclass
class Plan:
    precision: str  # 'fp32', 'tf32' (a GPU's), 'bf16' or 'fp16' (autocast)
    kernel: Optional[bool] = None  # the CPU attention path set on the model (None: its own)
    how: Optional[str] = None  # how 'auto' chose the precision and path, where it did
    threads: Optional[int] = None  # torch's threads to start training on (None: as they are)
    most_threads: Optional[int] = None  # the thread count with nobody else on the machine
    others: Optional[float] = None  # the share of the CPUs other processes used meanwhile
    step_seconds: Optional[float] = None  # a training step here, as measured
    steps_per_epoch: Optional[int] = None
    epochs: Optional[int] = None  # the epochs that end within the time budget (None: no budget)
    final_tokens: Optional[float] = None  # where the cosine ends over those epochs
    budget_note: str = ''  # what the budget's figures mean
    depth: Optional[str] = None  # a slow machine's model, where the plan chose it
    # not in the record: the timed (compiled) model, the clock's time the budget counts from
    wrapped: object = dataclasses.field(default=None, repr=False)
    start: Optional[float] = dataclasses.field(default=None, repr=False)

    def line(self, config):
        """The plan in one line; None where nothing was measured or chosen."""
        parts = []
        if self.how is not None:
            parts.append(f'{cpu_paths.path_name((self.precision, self.kernel))} ({self.how})')
        if self.threads is not None and self.threads != self.most_threads:
            parts.append(f'{self.threads} of {self.most_threads} threads (other processes used '
                         f'{self.others:.0%} of the CPUs; {cpu_load.FIXED}=fixed keeps '
                         f'{self.most_threads})')
        if self.depth is not None:
            parts.append(self.depth)
        if self.epochs is not None:
            epoch_seconds = self.step_seconds * self.steps_per_epoch
            after = (f' ({config.budget_after:g} epoch{"" if config.budget_after == 1 else "s"}\' '
                     'time of it kept for what follows)' if config.budget_after else '')
            parts.append(f'time budget {config.time_budget / 60:g} min{after}: {self.epochs} '
                         f'epochs of {self.steps_per_epoch} steps ({self.step_seconds:.3f} s per step '
                         f'measured, {epoch_seconds:.1f} s per epoch) -> about '
                         f'{self.epochs * epoch_seconds / 60:.1f} min' + self.budget_note)
        return 'plan: ' + '; '.join(parts) if parts else None

    def record(self):
        """The plan as the run's .run.json holds it."""
        record = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.repr}
        for name in ('others', 'step_seconds'):  # (figures, not float noise)
            record[name] = None if record[name] is None else round(record[name], 4)
        return record


def make(model, dataset, config, step, optimizer, clock=time.time, cpu_times=cpu_load.cpu_times,
         smaller=None, say=print):
    """The plan for training `model` on `dataset` with TrainerConfig `config`, measured with the
    handout's `step` and `optimizer` (loop.train_step, loop.make_optimizer) on `clock` and
    the CPU counters `cpu_times` (tests drive their own). smaller: (build, below_steps) of a CPU
    recipe's slow-machine model: build() is trained instead where the model fits fewer than
    below_steps steps into the budget (and fewer than asked). Returns (plan, the model to train)."""
    device = torch.device(config.device)
    cpu = device.type == 'cpu'
    plan = Plan(precision='fp32' if config.precision == 'auto' and not cpu else config.precision)
    if budgeted(config):  # the clock's time the budget counts from
        plan.start = config.start_time if config.start_time is not None else clock()
    if config.resume and resume_plan(plan, model, config, device):
        return announce(plan, config, say), model
    budget = budgeted(config) and not config.resume  # (a resumed run goes on with its plan)
    candidates = cpu_paths.cpu_candidates(model) if plan.precision == 'auto' else []
    set_path(plan, model, device)
    if not (budget or candidates):  # nothing to measure or choose
        return plan, model
    # (under --compile graphs the recorded step's pace: an eager one took about twice as long)
    timer = StepTimer(model, dataset, config, device, graphs.steps(config, step), optimizer, clock)
    meter = cpu_load.LoadMeter(clock, cpu_times)
    one_epoch = config.max_epochs <= 1  # (a run the choice of a path cannot change much)
    measures = budget or (len(candidates) > 1 and not one_epoch and not distributed.active())
    if measures and follows(config, device):
        plan_threads(plan, timer, config, clock, cpu_times)
    try:
        if candidates:
            choose_path(plan, timer, candidates, config, meter, one_epoch)
        if budget:
            model = plan_epochs(plan, timer, model, dataset, config, clock, smaller, say)
    except BaseException:  # (no training follows: the threads go back as they were)
        if plan.threads is not None:
            torch.set_num_threads(plan.most_threads)
        raise
    plan.wrapped = timer.wrapped
    return announce(plan, config, say), model


def announce(plan, config, say):
    """The plan's line said (where anything was measured or chosen); the plan."""
    line = plan.line(config)
    if line is not None and distributed.rank() == 0:
        say(line, flush=True)
    return plan


def resume_plan(plan, model, config, device):
    """A resumed run goes on as the interrupted one chose (its checkpoint's plan): its precision
    and attention path where 'auto' would measure them again, and its threads; the epochs are
    its schedule's (checkpoint.Resumable.load). False where the checkpoint holds no plan
    (written before plans were kept): the run measures anew."""
    try:
        saved = torch.load(config.resume_path, map_location='cpu', weights_only=True).get('plan')
    except Exception:  # (unreadable: Resumable.load says why)
        return False
    if not isinstance(saved, dict):
        return False
    if plan.precision == 'auto':
        plan.precision, plan.kernel = saved['precision'], saved.get('kernel')
        plan.how = 'as the interrupted run chose it (its checkpoint)'
    set_path(plan, model, device)
    if saved.get('threads') is not None and follows(config, device):
        plan.threads, plan.most_threads = saved['threads'], saved['most_threads']
        plan.others = saved.get('others') or 0.0
        torch.set_num_threads(plan.threads)
    return True


def set_path(plan, model, device):
    """The CPU attention path the plan chose, set on `model`; told bf16 (nothing measured), the
    written-out math where no path is set (under bf16 the faster where it was measured)."""
    if plan.kernel is not None:
        cpu_paths.set_attention_path(model, plan.kernel)
    elif plan.precision == 'bf16' and device.type == 'cpu':
        cpu_paths.set_attention_path(model, False, unset_only=True)


def follows(config, device):
    """Whether torch's thread count follows the load in this run (cpu_load.FollowLoad)."""
    return (config.follow_load and device.type == 'cpu' and not distributed.active()
            and config.cpu_workers == 0)  # (workers' CPU time would read as other processes')


def plan_threads(plan, timer, config, clock, cpu_times):
    """Threads for the load other processes put on the CPUs while the first steps ran (at least
    LOAD_SECONDS of them: they also wait for what a run sets up once)."""
    meter = cpu_load.LoadMeter(clock, cpu_times)
    precision = 'fp32' if config.precision == 'auto' else config.precision
    for _ in range(10):
        timer.times(precision, warm=1, timed=0)
        if clock() - meter.wall >= LOAD_SECONDS:
            break
    plan.most_threads, plan.others = torch.get_num_threads(), meter.others()
    plan.threads = cpu_load.threads_for(plan.others, meter.cores, plan.most_threads)
    torch.set_num_threads(plan.threads)


def choose_path(plan, timer, candidates, config, meter, one_epoch):
    """precision 'auto' on a CPU resolved, the attention path set on the model: the only
    candidate; under torchrun the rule (the ranks must agree: bf16 where the CPU has it, the
    model's own path); else measured or remembered (cpu_paths.choose)."""
    if len(candidates) == 1 or distributed.active():
        choice = candidates[0] if len(candidates) == 1 else (candidates[-1][0], None)
    else:
        choice, plan.how = cpu_paths.choose(timer, candidates, config.path_cache, meter,
                                            check=not one_epoch, remember=distributed.rank() == 0)
    plan.precision, plan.kernel = choice
    cpu_paths.set_attention_path(timer.model, plan.kernel)


def measured_step(timer, precision, config, clock):
    """Seconds per training step here: the median of a few timed steps, the slowest rank's
    under torchrun. Past 3 timed steps the timing stops once 2% of the budget has passed."""
    start = clock()
    times = timer.times(precision, warm=3 if config.compile else 2, timed=10,
                        ahead=workers_for(config, timer.device) > 0,
                        stop=lambda t: len(t) >= 3 and clock() - start > 0.02 * config.time_budget)
    return distributed.agree(median(times), timer.device, 'max')


def plan_epochs(plan, timer, model, dataset, config, clock, smaller, say):
    """The epochs that end within the budget (counted from plan.start), at the pace of a
    few timed steps; first, where `smaller` is given, the model to train. Returns that model."""
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
            set_path(plan, model, timer.device)
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
    plan.final_tokens = config.final_tokens
    if plan.epochs < config.max_epochs:  # the cosine keeps its shape over the epochs that fit
        plan.final_tokens *= plan.epochs / config.max_epochs
    else:
        plan.budget_note = f' (all {plan.epochs}: the most asked for)'
    return model


def layers_of(model):
    """The number of transformer blocks of a GPT (a perceiver's down and up blocks too)."""
    return len(model.blocks) + (2 if hasattr(model, 'down_block') else 0)
