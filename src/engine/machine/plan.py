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
from engine.machine.budget import plan_epochs
from engine.machine.measure import StepTimer


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
    # not in the record: the budget's seconds and the epochs of what follows it (the line's), the
    # timed (compiled) model, the clock's time the budget counts from
    time_budget: Optional[float] = dataclasses.field(default=None, repr=False)
    budget_after: float = dataclasses.field(default=0, repr=False)
    wrapped: object = dataclasses.field(default=None, repr=False)
    start: Optional[float] = dataclasses.field(default=None, repr=False)

    def line(self):
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
            after = (f' ({self.budget_after:g} epoch{"" if self.budget_after == 1 else "s"}\' '
                     'time of it kept for what follows)' if self.budget_after else '')
            parts.append(f'time budget {self.time_budget / 60:g} min{after}: {self.epochs} '
                         f'epochs of {self.steps_per_epoch} steps ({self.step_seconds:.3f} s per step '
                         f'measured, {epoch_seconds:.1f} s per epoch) -> about '
                         f'{self.epochs * epoch_seconds / 60:.1f} min' + self.budget_note)
        return 'plan: ' + '; '.join(parts) if parts else None

    @staticmethod
    def saved(resume_path):
        """The plan a resumable checkpoint holds (a dict), or None: unreadable (Resumable.load
        says why), or written before plans were kept (the run measures anew)."""
        try:
            saved = torch.load(resume_path, map_location='cpu', weights_only=True).get('plan')
        except Exception:
            return None
        return saved if isinstance(saved, dict) else None

    def record(self):
        """The plan as the run's .run.json holds it."""
        record = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.repr}
        for name in ('others', 'step_seconds'):  # (figures, not float noise)
            record[name] = None if record[name] is None else round(record[name], 4)
        return record


def budgeted(config):
    """Whether a TrainerConfig's run is fitted to its time budget: a preset's budget over one
    epoch changes nothing (too small, it still trains that epoch), so nothing is measured; the
    user's own --time_budget is (too small, it is an error)."""
    return config.time_budget is not None and not (config.max_epochs == 1 and config.budget_may_grow)


def make(model, dataset, config, step, optimizer, clock=time.time, cpu_times=cpu_load.cpu_times,
         smaller=None, say=print):
    """The plan for training `model` on `dataset` with TrainerConfig `config`, measured with the
    handout's `step` and `optimizer` (loop.train_step, optim.make_optimizer) on `clock` and
    the CPU counters `cpu_times` (tests drive their own). smaller: (build, below_steps) of a CPU
    recipe's slow-machine model: build() is trained instead where the model fits fewer than
    below_steps steps into the budget (and fewer than asked). Returns (plan, the model to train).

    One step after another: what a resumed run chose (its checkpoint's plan: nothing more is
    measured), the clock's start, the attention path, the steps' timer, the threads for the
    load, the precision and path 'auto' chooses, the depth and the epochs the budget holds, the
    plan's line."""
    device = torch.device(config.device)
    if config.precision == 'auto' and device.type != 'cpu':  # (the command decides: flags.py)
        raise ValueError(f"precision 'auto' is measured by a CPU's plan, not on {device.type}")
    plan = Plan(precision=config.precision)
    saved = plan.saved(config.resume_path) if config.resume else None
    budget = budgeted(config)
    if budget:  # the clock's time the budget counts from
        plan.start = config.start_time if config.start_time is not None else clock()
    candidates = cpu_paths.plan_path(plan, model, device, saved)
    fit_epochs = budget and not config.resume  # (a resumed run goes on with its schedule)
    timer = None  # (nothing to measure or choose: none)
    if saved is None and (fit_epochs or candidates):
        # (under --compile graphs the recorded step's pace: an eager one took about twice as long)
        timer = StepTimer(model, dataset, config, device, graphs.steps(config, step), optimizer,
                          clock)
    one_epoch = config.max_epochs <= 1  # (a run the choice of a path cannot change much)
    measures = timer is not None and (
        fit_epochs or (len(candidates) > 1 and not one_epoch and not distributed.active()))
    try:
        meter = cpu_load.plan_threads(plan, timer, config, device, clock, cpu_times, saved,
                                      measures)
        if timer is not None and candidates:
            cpu_paths.choose_path(plan, timer, candidates, config, meter, one_epoch)
        if timer is not None and fit_epochs:
            model = plan_epochs(plan, timer, model, dataset, config, clock, smaller, say)
    except BaseException:  # (no training follows: the threads go back as they were)
        if plan.threads is not None and saved is None:
            torch.set_num_threads(plan.most_threads)
        raise
    if timer is not None:
        plan.wrapped = timer.wrapped
    line = plan.line()
    if line is not None and distributed.rank() == 0:
        say(line, flush=True)
    return plan, model
