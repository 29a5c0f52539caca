"""Training throughput of several models pretraining at once on one device, summed over them.

    python scripts/dev/throughput.py --device cuda --models 1 2 3 5 --way threads processes \
        --seconds 15 --precision bf16 [--compile graphs] [--row_groups G] [--out FILE]

Each model is the handout's vanilla model pretraining on wiki.txt with the handout's batch and
the engine's loop (trainer.Trainer), its first epoch a warm-up. `threads`: the models are threads
of this process taking turns at the baton (engine/training/turns.py, as run_all.py
--one_process runs them: each on a CUDA stream of its own, eager steps); `processes`: each a
process of its own (as run_all.py --side_by_side; --compile applies to them: recorded steps
under `graphs`); --row_groups as run.py's. Every model trains for --seconds after its warm-up;
the training steps all the models ended while every one of them was past its warm-up and still
training, over that window's length, are the steps a second of that way and number of models. One line a measurement, and the
table in --out.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'src'))
import torch  # noqa: E402

import dataset  # noqa: E402
import model  # noqa: E402
import trainer  # noqa: E402
import utils  # noqa: E402
from engine import presets  # noqa: E402
from engine.datafiles import resolve  # noqa: E402
from engine.training import turns  # noqa: E402


class Clock:
    """A trainer extra: the time each training step ended, and the end of the first epoch (the
    warm-up); asks to stop at the end of the first epoch `seconds` past the warm-up."""

    def __init__(self, seconds):
        self.seconds, self.steps, self.warm = seconds, [], None

    def on_step_end(self, run, epoch, it):
        self.steps.append(time.time())

    def on_epoch_end(self, run, epoch):
        if self.warm is None:
            self.warm = time.time()
        return time.time() - self.warm >= self.seconds


def pretrain(seconds, device, precision, compile_, seed=0, lines=None, batch=None, groups=0,
             turn=None):
    """One vanilla pretraining for `seconds` after a warm-up epoch: (step end times, warm-up
    end). lines, batch: wiki.txt's first lines only, another batch size (the tests'); turn: the
    team member it trains as (turns.py), or None."""
    utils.set_seed(seed)
    with open(resolve('wiki.txt', 'wiki.txt'), encoding='utf-8') as f:
        text = f.read() if lines is None else ''.join(line for _, line in zip(range(lines), f))
    wiki = dataset.CharCorruptionDataset(text, presets.BLOCK_SIZE)
    conf = model.config_for('vanilla', wiki.vocab_size, presets.BLOCK_SIZE, **presets.MODEL)
    gpt = model.GPT(conf)
    batch = batch or presets.stage_values('handout', 'pretrain')['batch_size']
    tconf = trainer.TrainerConfig(max_epochs=10 ** 6, batch_size=batch, learning_rate=6e-4,
                                  device=device, precision=precision, compile=compile_,
                                  row_groups=groups, log_every=25, turn=turn)
    clock = Clock(seconds)
    job = trainer.Trainer(gpt, wiki, None, tconf)
    job.run.callbacks.append(clock)
    job.train()
    return clock.steps, clock.warm


def steps_a_second(runs):
    """Steps a second over the window in which every run is past its warm-up and still training:
    runs are (step end times, warm-up end) each. None where the windows do not overlap."""
    start = max(warm for _, warm in runs)
    end = min(steps[-1] for steps, _ in runs)
    if end <= start:
        return None
    return sum(start < t <= end for steps, _ in runs for t in steps) / (end - start)


def as_threads(n, seconds, device, precision, **data):
    """n pretrainings as threads of one team (run_all --one_process's way: eager steps)."""
    team, runs, errors = turns.Team(device), [None] * n, []

    def member(i):
        try:
            with team.member(f'model{i}') as turn:
                runs[i] = pretrain(seconds, device, precision, False, seed=i, turn=turn, **data)
        except BaseException as e:  # (reported below, not lost in a thread)
            errors.append(e)
    threads = [threading.Thread(target=member, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return runs


def as_processes(n, seconds, device, precision, compile_, lines=None, batch=None, groups=0):
    """n pretrainings as processes of their own, started together."""
    data = (['--lines', str(lines)] if lines else []) + (['--batch', str(batch)] if batch else []) \
        + ['--row_groups', str(groups)]
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), '--one', str(i),
                               '--seconds', str(seconds), '--device', device, '--precision',
                               precision, '--compile', compile_ or 'none', *data],
                              stdout=subprocess.PIPE, text=True) for i in range(n)]
    runs = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f'error: a pretraining process failed (exit {proc.returncode})')
        runs.append(tuple(json.loads(out.splitlines()[-1])))
    return runs


def main():
    ap = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--device', default='cuda', choices=('cpu', 'cuda'))
    ap.add_argument('--models', type=int, nargs='+', default=[1, 2, 3, 5])
    ap.add_argument('--way', nargs='+', choices=('threads', 'processes'),
                    default=['threads', 'processes'])
    ap.add_argument('--seconds', type=float, default=15.0)
    ap.add_argument('--precision', default='bf16', choices=('fp32', 'tf32', 'bf16'))
    ap.add_argument('--compile', default='none', choices=('none', 'graphs'),
                    help='the processes\' steps (threads take eager steps)')
    ap.add_argument('--row_groups', type=int, default=0, help='run.py --row_groups (0: the '
                    'engine\'s choice by device; run.py\'s recorded pretraining takes 4)')
    ap.add_argument('--label', default='', help='a word the lines begin with (e.g. mps)')
    ap.add_argument('--out', default=None, help='a markdown table, appended to')
    ap.add_argument('--lines', type=int, default=None, help=argparse.SUPPRESS)  # (the tests')
    ap.add_argument('--batch', type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument('--one', type=int, default=None, help=argparse.SUPPRESS)  # a process's model
    args = ap.parse_args()
    if min(args.models) < 1 or args.seconds <= 0:
        ap.error('--models from 1, --seconds more than 0')
    if args.device == 'cuda' and not torch.cuda.is_available():
        ap.error('--device cuda: no GPU here')
    if args.precision == 'tf32' and args.device == 'cpu':
        ap.error('--precision tf32 is a GPU\'s')
    compile_ = False if args.compile == 'none' else args.compile
    if args.one is not None:  # one process's pretraining: its times on the last line
        print(json.dumps(pretrain(args.seconds, args.device, args.precision, compile_,
                                  seed=args.one, lines=args.lines, batch=args.batch,
                                  groups=args.row_groups)))
        return
    data = dict(lines=args.lines, batch=args.batch, groups=args.row_groups)
    rows = []
    for way in args.way:
        for n in args.models:
            runs = as_threads(n, args.seconds, args.device, args.precision, **data) \
                if way == 'threads' else \
                as_processes(n, args.seconds, args.device, args.precision, compile_, **data)
            rate = steps_a_second(runs)
            steps = '-' if rate is None else f'{rate:.1f}'
            each = '-' if rate is None else f'{rate / n:.1f}'
            how = 'eager' if way == 'threads' or not compile_ else compile_
            how += f', {args.row_groups} row groups' if args.row_groups else ''
            rows.append(f'| {args.label or way} | {n} | {args.precision}, {how} | {steps} | {each} |')
            print(rows[-1], flush=True)
    if args.out:
        fresh = not os.path.exists(args.out)
        with open(args.out, 'a', encoding='utf-8') as f:
            if fresh:
                f.write('| way | models | arithmetic | steps a second, all | a model |\n'
                        '|---|---|---|---|---|\n')
            f.write('\n'.join(rows) + '\n')


if __name__ == '__main__':
    main()
