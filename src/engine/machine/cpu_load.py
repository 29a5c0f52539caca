"""Engine (free to change): the other processes' load, and threads that follow it.

A student's laptop is rarely idle. OpenMP's threads (torch's CPU parallelism) spin while they
wait for work: the fastest on an idle machine, and the slowest when another process wants the
same cores (the spinning threads take its turns and theirs). Fewer threads, one per core the
others leave free, are as fast as waiting passively when the machine is busy and cost nothing
when it is idle; and unlike the wait policy (read once, when OpenMP starts) the thread count can
change at any step. So the trainer re-measures the others' share every few seconds and gives
torch the cores they leave (FollowLoad): docs/speed.md has the figures. At the end of a
pretraining whose preset measured runs under load, one line says what the run had and what
such runs answered (SawLoad), so a student whose run was starved knows why.
"""
import os
import time

import torch

from engine import distributed

LOAD_SECONDS = 1.0  # a plan's first steps run at least this long: the window the load is read over
BUSY_SHARE = 0.25  # other processes using this share of the CPUs or more: a busy machine
FIXED = 'CS224N_THREADS'  # set to "fixed" to keep torch's thread count whatever the load


def cpu_times():
    """(CPU seconds all processes of this machine have used, those this process has used), both
    cumulative, from /proc; None where there is no /proc (the load is then not known)."""
    try:
        with open('/proc/stat') as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]
        # user nice system idle iowait irq softirq steal: all but idle and iowait are busy (steal:
        # a hypervisor gave the CPU to another machine)
        busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf('SC_CLK_TCK')
        return busy, sum(os.times()[:2])
    except (OSError, ValueError, IndexError):
        return None


def machine_cores():
    """The machine's CPUs, which /proc's counters cover (1 where it cannot be told)."""
    return os.cpu_count() or 1


class LoadMeter:
    """The share of the machine's CPUs that other processes used since it was made."""

    def __init__(self, clock=time.time, times=cpu_times, cores=None):
        self.clock, self.times = clock, times
        self.cores = cores or machine_cores()
        self.wall, self.start = clock(), times()

    def others(self):
        """That share (0..1), or None when it cannot be told."""
        wall = self.clock() - self.wall
        now = self.times()
        if now is None or self.start is None or wall <= 0:
            return None
        busy, own = (now[0] - self.start[0]), (now[1] - self.start[1])
        return max(0.0, busy - own) / (wall * self.cores)


def busy(others):
    """Whether other processes using the share `others` of the CPUs (None: not known) make a busy
    machine: the one rule for "busy" (a measured choice is then not remembered; on two cores it
    is where FollowLoad gives up a thread)."""
    return others is not None and others >= BUSY_SHARE


def threads_for(others, cores, most):
    """torch's threads when other processes use the share `others` of `cores` CPUs: one per core
    they leave (half a core or more of theirs counts as a core), at least 1 and at most `most`;
    `most` when the share is not known."""
    if others is None:
        return most
    return max(1, min(most, cores - int(others * cores + 0.5)))


def follows(environ=os.environ):
    """Whether a CPU run lets its thread count follow the load: not when the user fixed it
    ($OMP_NUM_THREADS, or $CS224N_THREADS=fixed)."""
    return 'OMP_NUM_THREADS' not in environ and environ.get(FIXED) != 'fixed'


def follows_load(config, device):
    """Whether torch's thread count follows the load in a run of TrainerConfig `config` on
    `device` (FollowLoad): a CPU run alone, asked to, without DataLoader workers (their CPU time
    would read as other processes')."""
    return (config.follow_load and device.type == 'cpu' and not distributed.active()
            and config.cpu_workers == 0)


def plan_threads(plan, timer, config, device, clock, cpu_times, saved=None, measure=False):
    """The threads of the run's plan (plan.py) set: a resumed run's (`saved`, its checkpoint's
    plan); else, where `measure`, those for the load other processes put on the CPUs while the
    first steps ran (at least LOAD_SECONDS of them: they also wait for what a run sets up once),
    in the run's precision ('auto': fp32). Only where the run follows the load. Returns a
    LoadMeter started first (a measured choice reads the load over these steps and its own), or
    None where nothing is timed (no `timer`)."""
    meter = LoadMeter(clock, cpu_times) if timer is not None else None
    if not follows_load(config, device):
        return meter
    if saved is not None:
        if saved.get('threads') is not None:
            plan.threads, plan.most_threads = saved['threads'], saved['most_threads']
            plan.others = saved.get('others') or 0.0
            torch.set_num_threads(plan.threads)
    elif measure:
        load = LoadMeter(clock, cpu_times)
        precision = 'fp32' if config.precision == 'auto' else config.precision
        for _ in range(10):
            timer.times(precision, warm=1, timed=0)
            if clock() - load.wall >= LOAD_SECONDS:
                break
        plan.most_threads, plan.others = torch.get_num_threads(), load.others()
        plan.threads = threads_for(plan.others, load.cores, plan.most_threads)
        torch.set_num_threads(plan.threads)
    return meter


class FollowLoad:
    """Trainer extra: after a step, once `every` seconds have passed since the last measurement
    (the first after FIRST seconds, so a run that starts on a busy machine adapts at once), set
    torch's thread count from the other processes' share of the CPUs in that window. Says so the
    first time it changes, how much of the run it spent on fewer threads at the end, and gives
    the count back when training ends. A load that comes and goes is followed both ways."""
    FIRST = 1.0

    def __init__(self, every=5.0, times=cpu_times, threads=None, cores=None, say=print):
        self.get_threads, self.set_threads = threads or (torch.get_num_threads, torch.set_num_threads)
        self.every, self.times, self.say = every, times, say
        self.cores = cores or machine_cores()

    def on_train_start(self, run):
        # the plan may have started the run on fewer threads than the machine's (plan.py)
        self.clock, most = run.clock, run.plan.most_threads
        self.now = self.get_threads()
        self.most = most if most is not None else self.now
        self.measure_for(self.FIRST)
        self.changes, self.fewer, self.steps = 0, 0, 0

    def measure_for(self, seconds):
        """Start a measurement window that ends at the first step `seconds` from now."""
        self.meter, self.window = LoadMeter(self.clock, self.times, self.cores), seconds

    def on_step_end(self, run, epoch, it):
        self.steps += 1
        self.fewer += self.now < self.most
        if self.clock() - self.meter.wall < self.window:
            return
        others = self.meter.others()
        self.measure_for(self.every)
        threads = threads_for(others, self.cores, self.most)
        if threads == self.now:
            return
        if self.changes == 0:
            self.say(f'\ncpu: other processes are using {others:.0%} of the CPUs: torch uses '
                     f'{threads} of {self.most} threads while they do (measured every '
                     f'{self.every:g} s; {FIXED}=fixed keeps {self.most})', flush=True)
        self.changes += 1
        self.now = threads
        self.set_threads(threads)

    def on_train_end(self, run):
        if self.now != self.most:
            self.set_threads(self.most)
            self.now = self.most
        if self.fewer:
            self.say(f'cpu: {self.fewer} of {self.steps} steps ran on fewer threads than '
                     f'{self.most} ({self.changes} changes with the load)', flush=True)


def usable_cores():
    """The CPUs this process may run on (fewer than the machine's under `taskset`)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return machine_cores()


class SawLoad:
    """Trainer extra: at the end of training, one line with what the run had: the share of the
    CPUs other processes used while it trained, the CPUs it could use, the steps it trained, and,
    where it trained fewer steps than the preset's idle runs did here (or a shallower model), what
    those runs and the measured runs nearest to it answered (`measured`: the preset's
    `under_load`, presets.py). The share also goes into the run's record (run.others_share)."""

    def __init__(self, measured, times=cpu_times, cores=None, usable=None, say=print):
        self.measured, self.times, self.say = measured, times, say
        self.cores = cores or machine_cores()
        self.usable = usable or usable_cores()

    def on_train_start(self, run):
        self.meter, self.first_step = LoadMeter(run.clock, self.times, self.cores), run.step

    def on_train_end(self, run):
        others = run.others_share = self.meter.others()
        if run.rank != 0:
            return
        minutes = (run.clock() - self.meter.wall) / 60
        steps, layers = run.step - self.first_step, len(getattr(run.model, 'blocks', ()))
        share = 'not known' if others is None else f'{others:.0%}'
        cpus = f'{self.cores}' if self.usable >= self.cores else f'{self.usable} of its {self.cores}'
        line = (f'cpu: other processes used {share} of the machine\'s CPUs while this trained '
                f'(it could use {cpus}); {steps:,} steps of {layers} layers in {minutes:.1f} min')
        near = expected(self.measured, run.step, layers)
        self.say(line + ('' if near is None else f'. {near}'), flush=True)


def expected(measured, steps, layers):
    """What the preset's idle runs trained and answered, and the measured runs of this depth whose
    steps come nearest to `steps`; None where the run trained a model as deep as the idle runs'
    for at least as many steps as they (or nothing was measured). A run's steps are what its
    time bought: a busy machine and a slow one both show there."""
    if not measured:
        return None
    runs = measured['runs']
    idle = runs['idle']
    if layers == idle['layers'] and steps >= idle['steps'][0]:
        return None
    alike = {name: row for name, row in runs.items() if row['layers'] == layers} or runs
    name, row = min(alike.items(), key=lambda item: max(item[1]['steps'][0] - steps,
                                                        steps - item[1]['steps'][1], 0))
    return (f'Idle runs of this preset trained {span(idle["steps"])} steps of {idle["layers"]} '
            f'layers and answered {idle["dev"]} of dev' + ('' if name == 'idle' else
            f'; runs {name} ({span(row["steps"])} of {row["layers"]}) answered {row["dev"]}')
            + f' ({measured["source"]})')


def span(steps):
    low, high = steps
    return f'{low:,}' if low == high else f'{low:,}-{high:,}'
