"""How busy this machine's CPUs are with other processes, and what a run does about it.

A student's laptop is rarely idle. OpenMP's threads (torch's CPU parallelism) spin while they
wait for work by default: the fastest on an idle machine, and the slowest when another process
wants the same cores (the spinning threads take its turns and theirs). Waiting passively is
the reverse. run.py measures the other processes' share of the CPUs for a tenth of a second
before torch starts (OpenMP reads its wait policy once, when it starts) and asks for passive
waiting when they hold a quarter of the CPUs or more: docs/speed.md has the figures.
Standard library only: it runs before torch is imported.
"""
import os
import time

BUSY_SHARE = 0.25  # other processes using this share of the CPUs or more: a busy machine
OFF = 'CS224N_WAIT_POLICY'  # set to "default" to leave OpenMP's wait policy alone


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


class LoadMeter:
    """The share of the machine's CPUs that other processes used since it was made."""

    def __init__(self, clock=time.time, times=cpu_times):
        self.clock, self.times = clock, times
        self.wall, self.start = clock(), times()

    def others(self):
        """That share (0..1), or None when it cannot be told."""
        wall = self.clock() - self.wall
        now = self.times()
        if now is None or self.start is None or wall <= 0:
            return None
        busy, own = (now[0] - self.start[0]), (now[1] - self.start[1])
        return max(0.0, busy - own) / (wall * (os.cpu_count() or 1))


def choose_wait_policy(environ=os.environ, measure=None, seconds=0.1):
    """Before torch starts: OMP_WAIT_POLICY=PASSIVE in `environ` when other processes hold
    BUSY_SHARE of the CPUs or more (measured over `seconds`, or by measure() -> share or None).
    Returns the line to print when it set it, else None. A wait policy the user set, or
    $CS224N_WAIT_POLICY=default, is left alone."""
    if 'OMP_WAIT_POLICY' in environ or environ.get(OFF) == 'default':
        return None
    if measure is None:
        meter = LoadMeter()
        time.sleep(seconds)
        share = meter.others()
    else:
        share = measure()
    if share is None or share < BUSY_SHARE:
        return None
    environ['OMP_WAIT_POLICY'] = 'PASSIVE'
    return (f'cpu: other processes are using {share:.0%} of the CPUs: torch\'s threads wait '
            f'passively (OMP_WAIT_POLICY=PASSIVE; {OFF}=default leaves the policy alone)')
