"""The training loop's own cost, the model left out: how long a device would sit idle waiting for
trainer.Trainer's loop (the batches from the DataLoader workers, the epochs' ends), on the
handout's pretraining data (wiki.txt, batches of 128, no shuffle).

    python scripts/dev/benchmark_loop.py [--step_ms 2] [--epochs 20] [--workers 4,8] [--rounds 2]
                                         [--out FILE]

The model's step is a stand-in for a GPU's: it trims the batch as the real step does, spends
--launch_ms of CPU time (launching kernels; a replayed CUDA graph takes a fraction of a
millisecond) and hands --step_ms of work to a simulated device, which works through it while the
loop goes on; reading the losses back (every 25 steps and at each epoch's end, as on a GPU)
waits for the device (for the steps read: with lagged reads, all but the newest). So the loop runs as it would beside a GPU of that step time, on this
machine's CPUs (pinning and copying the batches to a GPU are not part of it).

For each worker count, side by side (taking turns --rounds times): the DataLoader asked for an
epoch's batches when the epoch starts (`afresh`, the code before 2026-11-27), the next epochs'
batches built while an epoch ends (`ahead`), and these sent from the workers as bytes rather than
as shared-memory tensors (`ahead, bytes`: engine/fast/batches.py's default), and the newest loss
left on the device when a group of losses is read (`ahead, bytes, lagged reads`: the trainer's
default on a GPU, engine/training/progress.py). Printed per
configuration: the device's idle time per step (the wall time over the steps' --step_ms), and
the part of it at the epochs' first steps (per epoch); then what taking a batch the workers have
already built costs the loop, as tensors and as bytes. The figures are this machine's: a GPU
machine's CPUs give their own.
"""
import argparse
import contextlib
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'src'))
import torch  # noqa: E402

from engine import presets  # noqa: E402
from engine.command import inputs  # noqa: E402
from engine.fast import batches  # noqa: E402
from engine.training import loop, progress  # noqa: E402
import dataset  # noqa: E402
from engine.machine.cpu_paths import cpu_model  # noqa: E402
from engine.datafiles import resolve  # noqa: E402
from engine.machine.plan import Plan  # noqa: E402
import trainer  # noqa: E402


class Device:
    """A simulated GPU: work handed to it queues behind what it has; reading back waits for it.
    Idle time is counted where work arrives after the queue ran dry."""

    def __init__(self, clock=time.perf_counter, sleep=time.sleep):
        self.clock, self.sleep = clock, sleep
        self.free_at = None  # when the queued work ends
        self.idle = []  # (step, seconds idle before its work)
        self.ends = []  # when each step's work ends (steps numbered from 0 in the order run)

    def run(self, step, seconds):
        now = self.clock()
        if self.free_at is None:  # the first step: nothing waited for yet
            self.free_at = now
        self.idle.append((step, max(0.0, now - self.free_at)))
        self.free_at = max(now, self.free_at) + seconds
        self.ends.append(self.free_at)

    def wait(self, step=None):
        """Wait for all the work queued, or for the work of step `step` only."""
        if self.free_at is not None:
            until = self.free_at if step is None else self.ends[step]
            self.sleep(max(0.0, until - self.clock()))


def busy(seconds, clock=time.perf_counter):
    """Spend `seconds` of this process's CPU (a kernel launch's Python and driver work)."""
    end = clock() + seconds
    while clock() < end:
        pass


MODES = {  # name -> (Batches.across, Batches.as_bytes, the log's lag)
    'afresh': (False, False, False),  # the loader asked for each epoch's batches at its start
    'ahead': (True, False, False),  # the next epoch's batches built while an epoch ends
    'ahead, bytes': (True, True, False),  # and sent as bytes (engine/fast/batches.py's default)
    # and the newest loss left on the device when a group is read (progress.py; a GPU's default)
    'ahead, bytes, lagged reads': (True, True, True),
}


@contextlib.contextmanager
def switched(mode):
    """Batches' switches and the trainer's log (its lag) set for `mode` inside, put back after."""
    was = batches.Batches.across, batches.Batches.as_bytes, loop.Progress
    batches.Batches.across, batches.Batches.as_bytes, lag = MODES[mode]
    # (the trainer asks for the lag on a GPU only; the stand-in device runs beside a CPU trainer)
    loop.Progress = lambda *args, lag_=lag, **kwargs: progress.Progress(
        *args, **dict(kwargs, lag=lag_))
    try:
        yield
    finally:
        batches.Batches.across, batches.Batches.as_bytes, loop.Progress = was


def measure(data, workers, mode, epochs, step_s, launch_s):
    """(idle seconds per step, idle seconds at the epochs' first steps per epoch, steps) of one
    run of the loop with the stand-in step."""
    device = Device()
    steps_seen = []

    def stand_in(model, optimizer, autocast, x, y, config, dev):
        batches.to_device(x, y, dev, config)  # the real step's trim
        busy(launch_s)
        device.run(len(steps_seen), step_s)
        steps_seen.append(len(steps_seen))
        return torch.zeros(())

    real_flush, real_step = progress.Progress.flush, loop.train_step

    def flush(self, tokens, keep=0):
        if len(self.pending) > keep:  # reading the losses back waits for their steps
            device.wait(self.pending[len(self.pending) - keep - 1][0])
        return real_flush(self, tokens, keep)

    progress.Progress.flush, loop.train_step = flush, stand_in
    try:
        config = trainer.TrainerConfig(max_epochs=epochs, batch_size=128, learning_rate=6e-4,
                                       lr_decay=True, warmup_tokens=512 * 20,
                                       final_tokens=200 * 128 * len(data), num_workers=workers,
                                       cpu_workers=workers, log_every=25, **presets.HANDOUT_TRAINER)
        model = torch.nn.Linear(1, 1)  # the optimizer's parameters; the stand-in uses none
        with switched(mode):
            trainer.Trainer(model, data, None, config, plan=Plan(precision='fp32')).train()
        device.wait()
    finally:
        progress.Progress.flush, loop.train_step = real_flush, real_step
    per_epoch = batches.steps_per_epoch(len(data), 128)
    idle = device.idle[per_epoch:]  # the first epoch's wait for the workers' start-up left out
    at_starts = [s for step, s in idle if step % per_epoch == 0]
    return (sum(s for _, s in idle) / len(idle), sum(at_starts) / max(1, len(at_starts)),
            len(idle))


def receive(data, workers, mode, count=40, pause=0.03):
    """Median seconds the loop takes to get a batch the workers have ready (each asked for
    `pause` seconds after the last, by which time the next is built)."""
    with switched(mode):
        b = batches.Batches(data, workers, 128)
        try:
            generator, times = torch.Generator().manual_seed(0), []
            while len(times) < count:
                drawn = b.draw(generator)
                epoch = b.epoch(drawn, generator)
                for _ in drawn[:count - len(times)]:
                    time.sleep(pause)
                    start = time.perf_counter()
                    next(epoch)
                    times.append(time.perf_counter() - start)
        finally:
            b.close()
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    p.add_argument('--step_ms', type=float, default=2.0, help="the simulated device's step")
    p.add_argument('--launch_ms', type=float, default=0.2, help='CPU time a step takes to launch')
    p.add_argument('--epochs', type=int, default=20)
    p.add_argument('--workers', default='4,8', help='DataLoader worker counts, comma-separated')
    p.add_argument('--rounds', type=int, default=2)
    p.add_argument('--corpus', default=None, help="the pretraining corpus (default wiki.txt)")
    p.add_argument('--out', default=None, help='also write the tables here, after every round')
    args = p.parse_args()
    if args.epochs < 2 or args.rounds < 1:
        raise SystemExit('error: --epochs 2 or more (the first, the workers\' start-up, is not '
                         'counted) and --rounds 1 or more')
    counts = [int(w) for w in args.workers.split(',')]
    if any(w < 1 for w in counts):
        raise SystemExit('error: --workers: worker counts are 1 or more '
                         '(the loop without workers builds its batches between steps)')
    data = inputs.read_corpus(args.corpus or resolve('wiki.txt', 'wiki.txt'),
                              dataset.CharCorruptionDataset)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    head = (f'# {cpu_model()}, {cpus} CPUs, torch '
            f'{torch.__version__}; step {args.step_ms:g} ms on the simulated device, '
            f'{args.launch_ms:g} ms to launch; {args.epochs} epochs of '
            f'{batches.steps_per_epoch(len(data), 128)} steps')
    results, received = {}, {}
    for done in range(1, args.rounds + 1):
        for w in counts:
            for mode in MODES:
                results.setdefault((w, mode), []).append(
                    measure(data, w, mode, args.epochs, args.step_ms / 1e3, args.launch_ms / 1e3))
        for mode in ('ahead', 'ahead, bytes'):
            received.setdefault(mode, []).append(receive(data, counts[0], mode))
        report = table(head + f', medians of {done} round{"s" * (done > 1)}', results, received,
                       args.step_ms / 1e3, counts[0])
        if args.out:  # after every round: a run stopped early keeps the rounds done
            with open(args.out + '.tmp', 'w', encoding='utf-8') as f:
                f.write(report)
            os.replace(args.out + '.tmp', args.out)
    print(report, end='')


def table(head, results, received, step_s, workers):
    lines = [head, '', '| workers | batches | device idle per step (ms) | of which at an epoch\'s '
             'start (ms per epoch) | idle share |', '|---|---|---|---|---|']
    for (w, mode), runs in results.items():
        idle = statistics.median(r[0] for r in runs)
        starts = statistics.median(r[1] for r in runs)
        lines.append(f'| {w} | {mode} | {idle * 1e3:.2f} | {starts * 1e3:.1f} | '
                     f'{idle / (idle + step_s):.0%} |')
    lines += ['', f'| batches ({workers} worker{"s" * (workers > 1)}) | ms to take a batch '
              'already built (median) |', '|---|---|']
    for mode, times in received.items():
        lines.append(f'| {"as tensors" if mode == "ahead" else "as bytes"} | '
                     f'{statistics.median(times) * 1e3:.2f} |')
    return '\n'.join(lines) + '\n'


if __name__ == '__main__':
    main()
