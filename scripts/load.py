"""Two loads a student's laptop has, to run beside a command: what the 20-minute run is measured under.

    python scripts/load.py light -- bash scripts/main.sh    # bursts, about a quarter of one core
    python scripts/load.py heavy -- bash scripts/main.sh    # one process keeping a whole core busy
    python scripts/load.py light --seconds 60               # the load alone, for a minute

light: every 40 ms (a video's 25 frames a second) one process works for 10 ms and sleeps the rest,
as a browser playing a video does. heavy: one process that never sleeps, as a compiler or a second
training does. Beside a command, the load starts a second before it (the run's start-up sees it)
and stops when it ends; the exit status is the command's. At the end one line says the share of
one core the load took (its CPU time over the wall time), so a figure measured under it can say so.
"""
import argparse
import os
import signal
import subprocess
import sys
import time

LOADS = {  # name -> (period, busy seconds in each period); busy == period: never sleeps
    'light': (0.040, 0.010),
    'heavy': (1.0, 1.0),
}


def work(load, until, clock=time.perf_counter, sleep=time.sleep):
    """Be `load` until clock() reaches `until`; returns the seconds spent busy (the clock's)."""
    period, busy = LOADS[load]
    start = now = clock()
    spent = 0.0
    while now < until:
        burst = now
        while now - burst < busy and now < until:
            now = clock()
        spent += now - burst
        if busy < period:  # sleep to the next period's start, whatever the burst overran
            wake = min(until, start + (int((now - start) / period) + 1) * period)
            sleep(max(0.0, wake - now))
            now = clock()
    return spent


def interrupted(signum, frame):
    """SIGTERM (kill PID) stops the load as Ctrl-C does (a command beside it goes on)."""
    raise KeyboardInterrupt


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    command = argv[argv.index('--') + 1:] if '--' in argv else []
    own = argv[:argv.index('--')] if '--' in argv else argv
    ap = argparse.ArgumentParser(prog='python scripts/load.py', description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('load', choices=sorted(LOADS))
    ap.add_argument('--seconds', type=float, default=None,
                    help='how long the load alone runs (without a command: until Ctrl-C)')
    ap.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    args = ap.parse_args(own)
    if args.seconds is not None and (args.seconds <= 0 or args.seconds != args.seconds):
        ap.error(f'--seconds must be a positive number of seconds, not {args.seconds:g}')
    if command and args.seconds is not None:
        ap.error('--seconds is for the load alone; beside a command it lasts as long as the command')
    if args.worker:
        try:
            work(args.load, time.perf_counter() + (args.seconds or float('inf')))
        except KeyboardInterrupt:  # Ctrl-C reaches the whole process group
            pass
        return 0
    signal.signal(signal.SIGTERM, interrupted)
    worker = subprocess.Popen([sys.executable, os.path.abspath(__file__), args.load, '--worker']
                              + (['--seconds', str(args.seconds)] if args.seconds else []))
    began, status, usage = time.monotonic(), 0, None
    try:
        if command:
            time.sleep(1)
            status = subprocess.call(command)
        else:
            usage = os.wait4(worker.pid, 0)[2]
    except KeyboardInterrupt:
        status = 130
    finally:
        if usage is None:
            worker.terminate()
            usage = os.wait4(worker.pid, 0)[2]
        wall = time.monotonic() - began
        print(f'load {args.load}: {usage.ru_utime + usage.ru_stime:.1f} CPU seconds in {wall:.1f} s '
              f'of wall time ({(usage.ru_utime + usage.ru_stime) / max(wall, 1e-9):.0%} of one core)',
              file=sys.stderr, flush=True)
    return status


if __name__ == '__main__':
    sys.exit(main())
