"""How the cost of a forward pass grows with the input length l: vanilla GPT vs the perceiver
(handout 2022-23, question 2(g)ii), measured on src/model.GPT.

    python scripts/written/perceiver_complexity.py                    # d=256, L=4, m=32, l=128..2048
    python scripts/written/perceiver_complexity.py --bottleneck_dim 64 --lengths 64 128 256 512

For each l it counts the floating-point operations of one forward pass (batch 1) with
torch.utils.flop_counter, split into
  mix    the attention's own matmuls (scores q k^T and weights @ v), which the handout's
         expressions describe: vanilla 4*L*l^2*d, perceiver 4*l*m*d (down) + 4*(L-2)*m^2*d
         (middle blocks) + 4*l*m*d (up), i.e. O(L l^2 d) vs O(l m d + (L-2) m^2 d)
  linear every Linear layer (key/query/value/proj, the MLP, the head): vanilla 24*L*l*d^2,
         perceiver 24*l*d^2 + 24*(L-1)*m*d^2, plus 2*l*d*V for the head; both O(L l d^2)
and times the forward pass (fused attention, the code's default; median of --repeats runs).
The counts use the plain attention math (--plain's path), because the fused kernel's
matmuls are invisible to the counter; the arithmetic is the same.
"""
import argparse
import contextlib
import io
import os
import sys
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'src'))
import model  # noqa: E402  (src/model.py)
from engine.machine.cpu_paths import cpu_model  # noqa: E402

MIX_OPS = ('aten.bmm',)                 # q @ k^T and att @ v (4-D matmuls become bmm)
LINEAR_OPS = ('aten.addmm', 'aten.mm')  # nn.Linear with and without bias


def build(variant, length, args, fast):
    cfg = model.GPTConfig(args.vocab_size, length, n_layer=args.n_layer, n_head=args.n_head,
                          n_embd=args.n_embd, perceiver=variant == 'perceiver',
                          bottleneck_dim=args.bottleneck_dim, fast_attention=fast)
    with contextlib.redirect_stdout(io.StringIO()):  # GPT prints its parameter count
        gpt = model.GPT(cfg)
    return gpt.eval()


def count_flops(variant, length, args):
    """(mix, linear) FLOPs of one forward pass on a batch of one sequence of `length` tokens."""
    gpt = build(variant, length, args, fast=False)
    idx = torch.zeros(1, length, dtype=torch.long)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        gpt(idx)
    counts = {str(op): n for op, n in counter.get_flop_counts()['Global'].items()}
    return (sum(counts.get(op, 0) for op in MIX_OPS),
            sum(counts.get(op, 0) for op in LINEAR_OPS))


def predicted_mix(variant, length, args):
    L, d, m = args.n_layer, args.n_embd, args.bottleneck_dim
    if variant == 'vanilla':
        return 4 * L * length * length * d
    return 4 * length * m * d + 4 * (L - 2) * m * m * d + 4 * length * m * d


def predicted_linear(variant, length, args):
    L, d, m, V = args.n_layer, args.n_embd, args.bottleneck_dim, args.vocab_size
    head = 2 * length * d * V
    if variant == 'vanilla':
        return 24 * L * length * d * d + head
    return 24 * length * d * d + 24 * (L - 1) * m * d * d + head


def time_forward(variant, length, args):
    gpt = build(variant, length, args, fast=True)
    idx = torch.randint(0, args.vocab_size, (args.batch_size, length))
    times = []
    with torch.no_grad():
        gpt(idx)  # warm-up
        for _ in range(args.repeats):
            t = time.perf_counter()
            gpt(idx)
            times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def measure(args):
    rows = []
    for length in args.lengths:
        row = {'l': length}
        for variant in ('vanilla', 'perceiver'):
            mix, linear = count_flops(variant, length, args)
            row[variant] = dict(mix=mix, linear=linear,
                                mix_pred=predicted_mix(variant, length, args),
                                linear_pred=predicted_linear(variant, length, args),
                                ms=None if args.no_time else 1000 * time_forward(variant, length, args))
        rows.append(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--lengths', type=int, nargs='+', default=[128, 256, 512, 1024, 2048])
    ap.add_argument('--n_layer', type=int, default=4)
    ap.add_argument('--n_head', type=int, default=8)
    ap.add_argument('--n_embd', type=int, default=256)
    ap.add_argument('--bottleneck_dim', type=int, default=32, help='m (run.py default 32; the handout runs 64)')
    ap.add_argument('--vocab_size', type=int, default=256)
    ap.add_argument('--batch_size', type=int, default=4, help='batch size of the timed passes')
    ap.add_argument('--repeats', type=int, default=3)
    ap.add_argument('--threads', type=int, default=None, help='torch threads (default: torch\'s)')
    ap.add_argument('--no_time', action='store_true', help='count operations only')
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    print(f'L={args.n_layer} layers, d={args.n_embd}, {args.n_head} heads, m={args.bottleneck_dim}; '
          f'FLOPs of one sequence; time: batch {args.batch_size}, median of {args.repeats}')
    print(f'{cpu_model()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, '
          f'torch {torch.__version__}')
    rows = measure(args)
    mf = lambda n: f'{n / 1e6:10.1f}'  # noqa: E731  MFLOP
    print()
    print(f'{"l":>5} | {"vanilla mix":>11} {"perc. mix":>10} | {"vanilla lin":>11} {"perc. lin":>10} | '
          f'{"vanilla":>10} {"perceiver":>9}')
    print(f'{"":>5} | {"MFLOP":>11} {"MFLOP":>10} | {"MFLOP":>11} {"MFLOP":>10} | {"ms":>10} {"ms":>9}')
    print('-' * 76)
    for row in rows:
        v, p = row['vanilla'], row['perceiver']
        t = '' if v['ms'] is None else f'{v["ms"]:10.1f} {p["ms"]:9.1f}'
        print(f'{row["l"]:5d} | {mf(v["mix"]):>11} {mf(p["mix"]):>10} | {mf(v["linear"]):>11} '
              f'{mf(p["linear"]):>10} | {t}')
    print()
    ok = all(r[x]['mix'] == r[x]['mix_pred'] and r[x]['linear'] == r[x]['linear_pred']
             for r in rows for x in ('vanilla', 'perceiver'))
    print('counted FLOPs == the formulas in the docstring for every row:', ok)
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        k = b['l'] / a['l']
        print(f'l x{k:g} ({a["l"]} -> {b["l"]}): vanilla mix x{b["vanilla"]["mix"] / a["vanilla"]["mix"]:.1f} '
              f'(l^2: x{k * k:g}), perceiver mix x{b["perceiver"]["mix"] / a["perceiver"]["mix"]:.1f} '
              f'(~l: x{k:g}); total vanilla x{(b["vanilla"]["mix"] + b["vanilla"]["linear"]) / (a["vanilla"]["mix"] + a["vanilla"]["linear"]):.1f}, '
              f'perceiver x{(b["perceiver"]["mix"] + b["perceiver"]["linear"]) / (a["perceiver"]["mix"] + a["perceiver"]["linear"]):.1f}')
        if a['vanilla']['ms'] is not None:
            print(f'time: vanilla x{b["vanilla"]["ms"] / a["vanilla"]["ms"]:.1f}, '
                  f'perceiver x{b["perceiver"]["ms"] / a["perceiver"]["ms"]:.1f}')
    return rows


if __name__ == '__main__':
    main()
