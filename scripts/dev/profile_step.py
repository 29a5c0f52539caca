"""Where the handout's pretraining step spends its time: the loop, the recorded step, its kernels.

    python scripts/dev/profile_step.py --device cuda --precision fp32,tf32,bf16 \
        --attention default,math --row_groups 1,4 --steps 20 --out profile.md

For each precision, attention kernel (scaled_dot_product_attention held to one backend; bf16
always attends with flash, as run.py does) and number of groups of rows a step computes
(run.py --row_groups; 0: the device's choice), on the first --steps pretraining batches of
wiki.txt (the handout's order, model and batch of 128):
  loop:     trainer.Trainer as run.py runs it on a GPU (4 DataLoader workers, --compile graphs),
            ms a step over a second epoch;
  calls:    the recorded steps called one after another from batches already built (what the
            loop adds beyond them is its own cost);
  replay:   one recording replayed alone, nothing between replays (the device's time for a step);
  kernels:  torch.profiler over eager steps (the same kernels, launched one by one), each kernel's
            time summed by kind; where the profiler sees the kernels inside replays, theirs too.
On a CPU (for the tests) only the loop and the eager step's operators, by their own time.
"""
import argparse
import collections
import contextlib
import itertools
import os
import re
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchmark  # noqa: E402  (its sys.path holds src/)
from engine import presets  # noqa: E402
from engine.fast import graphs  # noqa: E402
from engine.training import loop, optim  # noqa: E402
from engine.fast.batches import batch_indices, collate  # noqa: E402
from engine.datafiles import resolve  # noqa: E402
from engine.devices import autocast  # noqa: E402
import dataset  # noqa: E402
import trainer  # noqa: E402
import utils  # noqa: E402

# A kernel's kind from its name, the first pattern that matches (attention before the matrix
# products: fused attention kernels are built from CUTLASS's)
KINDS = [
    ('attention', r'fmha|flash|attention|attn|sdpa'),
    ('matrix products', r'gemm|gemv|cutlass|cublas|xmma|matmul|addmm|\bmm\b|bmm|linear|splitk'),
    ('AdamW, clipping', r'adam|multi_tensor|foreach|lpnorm|clip'),
    ('layer norm, softmax, loss', r'layer_norm|layernorm|gammabeta|softmax|nll|cross_entropy'),
    ('dropout', r'dropout|philox|bernoulli|masked_scale'),
    ('gather, scatter, sort', r'index|gather|scatter|sort|radix|embedding|cub::|nonzero|take'),
    ('copies, fills', r'copy|fill|memset|memcpy|\bcat\b|zero|contiguous'),
]
OTHER = 'other elementwise, reductions'
BACKENDS = {'math': 'MATH', 'efficient': 'EFFICIENT_ATTENTION', 'flash': 'FLASH_ATTENTION',
            'cudnn': 'CUDNN_ATTENTION'}


def kind(name):
    low = name.lower()
    return next((k for k, pattern in KINDS if re.search(pattern, low)), OTHER)


def by_kind(kernels, steps):
    """{kind: (ms a step, kernels a step)} from (name, microseconds, count) over `steps` steps,
    every kind listed (zeros too), in KINDS' order, OTHER last."""
    out = {k: [0.0, 0.0] for k, _ in KINDS + [(OTHER, None)]}
    for name, us, count in kernels:
        out[kind(name)][0] += us / 1000 / steps
        out[kind(name)][1] += count / steps
    return {k: tuple(v) for k, v in out.items()}


def kernels_of(prof, device):
    """(name, microseconds, count) of each kernel name a profile saw; on a CPU each operator's
    own time (the time outside the operators it calls)."""
    if device == 'cuda':
        totals = collections.defaultdict(lambda: [0.0, 0])
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                totals[e.name][0] += e.time_range.elapsed_us()
                totals[e.name][1] += 1
        return [(name, us, n) for name, (us, n) in totals.items()]
    return [(e.key, e.self_cpu_time_total, e.count) for e in prof.key_averages()
            if e.self_cpu_time_total > 0 and not e.key.startswith('ProfilerStep')]


def held_to(attention):
    """scaled_dot_product_attention held to one backend ('default': torch's choice)."""
    if attention == 'default':
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([getattr(SDPBackend, BACKENDS[attention])])


def activities(device):
    """What a profile records: a GPU's kernels, or a CPU's operators."""
    return [torch.profiler.ProfilerActivity.CUDA if device == 'cuda' else
            torch.profiler.ProfilerActivity.CPU]


def sync(device):
    if device == 'cuda':
        torch.cuda.synchronize()


def timed(device, fn, n):
    """Milliseconds per call of fn() over n calls, the device waited for at both ends."""
    sync(device)
    start = time.perf_counter()
    for _ in range(n):
        fn()
    sync(device)
    return (time.perf_counter() - start) * 1000 / n


def measure(wiki, batches, device, precision, attention, preset, recorded, groups=0):
    """One configuration's figures: a dict of the loop's, the calls' and the replay's ms a
    step (None where not measured) and the kernels of eager steps and of replays. recorded:
    --compile graphs (a GPU's; the tests give a CPU a stand-in for the graphs)."""
    config = trainer.TrainerConfig(batch_size=len(batches[0][0]), device=device,
                                   precision=precision, row_groups=groups,
                                   compile='graphs' if recorded else False)
    fresh = lambda: benchmark.build('vanilla', wiki.vocab_size, True, preset).to(device)  # noqa: E731
    out = {}
    with held_to(attention):
        utils.set_seed(0)
        out['loop'] = 1000 * benchmark.fast_steps(fresh(), wiki, config.batch_size, len(batches),
                                                  device, config.compile, precision=precision,
                                                  row_groups=groups)[0]
        cast = autocast(device, precision)
        gpt = fresh()
        optimizer = optim.make_optimizer(gpt, config, 6e-4)
        out['calls'] = out['replay'] = None
        out['replayed'] = []
        if recorded:
            steps = graphs.CapturedSteps(loop.train_step)
            call = lambda b: steps(gpt, optimizer, cast, *b, config, torch.device(device))  # noqa: E731
            for b in batches + batches:  # every shape and size recorded
                call(b)
            turn = iter(batches * 2)
            out['calls'] = timed(device, lambda: call(next(turn)), len(batches))
            replay = next(iter(steps.recorded.values()))[0]
            out['replay'] = timed(device, replay, len(batches))
            with torch.profiler.profile(activities=activities(device)) as prof:
                timed(device, replay, 5)
            out['replayed'] = kernels_of(prof, device)
        eager = trainer.TrainerConfig(**{**vars(config), 'compile': False})
        gpt = fresh()
        optimizer = optim.make_optimizer(gpt, eager, 6e-4)
        step = lambda b: loop.train_step(gpt, optimizer, cast, *b, eager, torch.device(device))  # noqa: E731
        for b in batches[:2]:
            step(b)
        with torch.profiler.profile(activities=activities(device)) as prof:
            for b in batches[:5]:
                step(b)
            sync(device)
        out['eager'] = kernels_of(prof, device)
        out['eager_steps'] = min(5, len(batches))
    return out


def first_batches(preset, steps):
    """(wiki.txt's pretraining dataset, its first `steps` batches in the handout's order)."""
    utils.set_seed(0)
    text = open(resolve('wiki.txt', 'wiki.txt'), encoding='utf-8').read()
    wiki = dataset.CharCorruptionDataset(text, presets.BLOCK_SIZE)
    size = presets.stage_values(preset, 'pretrain')['batch_size']
    order = batch_indices(len(wiki), size, torch.Generator().manual_seed(0), shuffle=False)
    return wiki, [collate(wiki, indices, seed) for indices, seed in order[:steps]]


def report(rows, args, machine):
    """The markdown: a line per configuration, then its kernels by kind and its longest ones."""
    lines = ['# Where the pretraining step\'s time goes', '',
             f'- machine: {machine}',
             f'- command: `python scripts/dev/profile_step.py {" ".join(sys.argv[1:])}`',
             f'- the handout\'s vanilla model and batch of {args.batch}; the first {args.steps} '
             'pretraining batches of wiki.txt', '',
             '| precision, attention | loop (ms a step) | recorded calls (ms) | one recording '
             'replayed (ms) | eager step: kernel time (ms), kernels | replay: kernel time (ms), '
             'kernels |', '|---|---|---|---|---|---|']
    fmt = lambda v: '-' if v is None else f'{v:.2f}'  # noqa: E731
    failed = [(name, got['error']) for name, got in rows if 'error' in got]
    rows = [(name, got) for name, got in rows if 'error' not in got]
    lines[-2:-2] = [f'- {name}: failed: {error}' for name, error in failed] + [''] * bool(failed)
    for name, got in rows:
        eager = by_kind(got['eager'], got['eager_steps'])
        replay = by_kind(got['replayed'], 5) if got['replayed'] else None
        total = lambda table: (sum(v[0] for v in table.values()),  # noqa: E731
                               sum(v[1] for v in table.values()))
        seen = '%.2f, %.0f' % total(replay) if replay else 'not seen'
        lines.append(f'| {name} | {fmt(got["loop"])} | {fmt(got["calls"])} | '
                     f'{fmt(got["replay"])} | %.2f, %.0f | {seen} |' % total(eager))
    for name, got in rows:
        eager = by_kind(got['eager'], got['eager_steps'])
        replay = by_kind(got['replayed'], 5) if got['replayed'] else {}
        lines += ['', f'## {name}', '', '| kind | eager: ms a step | kernels | replay: ms a step '
                  '| kernels |', '|---|---|---|---|---|']
        for k, (ms, n) in eager.items():
            r = replay.get(k)
            lines.append(f'| {k} | {ms:.3f} | {n:.0f} | ' + (f'{r[0]:.3f} | {r[1]:.0f} |' if r else '- | - |'))
        lines += ['', 'Longest kernels of the eager step (ms a step, calls a step, kind):', '']
        top = sorted(got['eager'], key=lambda k: -k[1])[:12]
        lines += [f'- {us / 1000 / got["eager_steps"]:.3f} ms, {n / got["eager_steps"]:.0f}x, '
                  f'{kind(name)}: `{name[:100]}`' for name, us, n in top]
    return '\n'.join(lines) + '\n'


def main():
    ap = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--device', default='cuda', choices=('cpu', 'cuda'))
    ap.add_argument('--precision', default='fp32', help='comma-separated: fp32, tf32, bf16')
    ap.add_argument('--attention', default='default',
                    help='comma-separated: default, ' + ', '.join(BACKENDS))
    ap.add_argument('--row_groups', default='0',
                    help='comma-separated: run.py --row_groups (0: the device\'s choice)')
    ap.add_argument('--steps', type=int, default=20, help='batches (at most an epoch\'s, 23)')
    ap.add_argument('--preset', choices=sorted(presets.PRESETS), default='handout')
    ap.add_argument('--out', required=True)
    args = ap.parse_args()
    precisions, attentions = args.precision.split(','), args.attention.split(',')
    try:
        groups = [int(g) for g in args.row_groups.split(',')]
    except ValueError:
        groups = [-1]
    if min(groups) < 0:
        ap.error('--row_groups: whole numbers from 0 (0: the device\'s choice)')
    if args.device == 'cuda' and not torch.cuda.is_available():
        ap.error('--device cuda: no GPU here')
    if not set(precisions) <= {'fp32', 'tf32', 'bf16'} or \
            not set(attentions) <= {'default', *BACKENDS}:
        ap.error('--precision takes fp32, tf32, bf16; --attention default, ' + ', '.join(BACKENDS))
    if args.device == 'cpu' and set(precisions) - {'fp32', 'bf16'}:
        ap.error('on a CPU: fp32 or bf16')
    if not 2 <= args.steps <= 23:
        ap.error('--steps from 2 to 23 (one epoch of wiki.txt holds 23 batches)')
    wiki, batches = first_batches(args.preset, args.steps)
    args.batch = len(batches[0][0])
    machine = benchmark.machine(args.device)
    rows = []
    for precision, attention, group in itertools.product(precisions, attentions, groups):
        if precision == 'bf16' and attention != 'default':
            continue  # (bf16 attends with flash: devices.autocast)
        name = f'{precision}, {"flash" if precision == "bf16" else attention}' + \
            (f', {group} groups' if group else '')
        try:
            got = measure(wiki, batches, args.device, precision, attention,
                          args.preset, args.device == 'cuda', group)
        except Exception as e:  # (one configuration failing leaves the others' figures)
            got = dict(error=f'{type(e).__name__}: {e}'.splitlines()[0][:300])
        rows.append((name, got))
        print(name, {k: v for k, v in got.items() if k in ('loop', 'calls', 'replay', 'error')},
              flush=True)
        with open(args.out, 'w', encoding='utf-8') as f:  # rewritten after every row
            f.write(report(rows, args, machine))


if __name__ == '__main__':
    main()
