"""What a turn costs the host in run_all --one_process (src/engine/training/turns.py): N members
in threads hand the baton round after each empty 'step', their random states going out and
coming back with it; prints the microseconds one handover takes, beside the step times it is
added to (a GPU's recorded pretraining step is a few milliseconds: docs/gpu.md).

    python scripts/dev/benchmark_turns.py                  # 2 and 7 members, the CPU's states
    python scripts/dev/benchmark_turns.py --device cuda    # the GPU's random state as well
"""
import argparse
import os
import platform
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'src'))
import torch  # noqa: E402

from engine.training import turns  # noqa: E402


def handover_seconds(members, steps, device):
    """Seconds per handover: `members` threads, each `steps` ends of a step, all joined before
    the first step (the first member waits for the others while it holds the baton)."""
    team = turns.Team(device)
    joined = threading.Event()

    def member(index):
        with team.member(str(index)) as me:
            if index == 0:
                joined.wait()
            for _ in range(steps):
                me.on_step_end(None, 0, 0)
    threads = [threading.Thread(target=member, args=(i,)) for i in range(members)]
    threads[0].start()
    while not team._ring:
        time.sleep(0.001)
    for t in threads[1:]:
        t.start()
    while len(team._ring) < members:
        time.sleep(0.001)
    start = time.perf_counter()
    joined.set()
    for t in threads:
        t.join()
    return (time.perf_counter() - start) / max(1, len(team.turns) - members)


def main():
    ap = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--members', default='2,7', help='comma-separated numbers of members')
    ap.add_argument('--steps', type=int, default=3000, help='steps per member')
    ap.add_argument('--device', default='cpu', choices=['cpu', 'cuda'])
    args = ap.parse_args()
    if args.device == 'cuda' and not torch.cuda.is_available():
        ap.error('--device cuda: no CUDA device is available')
    where = torch.cuda.get_device_name() if args.device == 'cuda' else \
        f'{platform.processor() or platform.machine()}, {os.cpu_count()} cores'
    print(f'# one handover of run_all --one_process\'s baton ({args.device}: {where}; '
          f'torch {torch.__version__}, Python {platform.python_version()})\n')
    print('| members | steps each | microseconds per handover |')
    print('|---|---|---|')
    for members in (int(m) for m in args.members.split(',')):
        seconds = handover_seconds(members, args.steps, args.device)
        print(f'| {members} | {args.steps} | {seconds * 1e6:.0f} |')


if __name__ == '__main__':
    main()
