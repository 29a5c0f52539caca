"""Engine (free to change): model FLOPs and a device's peak.

The model FLOP utilisation (MFU) that the benchmark and run_all's report give: the FLOPs of the
positions that can change the loss (padding is not counted as work), per second, over the
device's peak."""
from fractions import Fraction

from torch.utils.flop_counter import FlopCounterMode

import torch

from engine.fast.batches import collate
from engine.fast.fastpath import kept_lengths

# Dense peak TFLOP/s (fp32 without tensor cores; tf32 and bf16 on tensor cores, without the
# data sheets' 2:4 sparsity) from NVIDIA's data sheets, matched against torch.cuda.get_device_name().
PEAK_TFLOPS = (('H100 PCIe', {'fp32': 51.2, 'tf32': 378.0, 'bf16': 756.0}),
               ('H100 NVL', {'fp32': 60.0, 'tf32': 417.5, 'bf16': 835.0}),
               ('H100', {'fp32': 66.9, 'tf32': 494.7, 'bf16': 989.4}),  # SXM (80GB HBM3)
               ('H200', {'fp32': 66.9, 'tf32': 494.7, 'bf16': 989.4}),
               ('A100', {'fp32': 19.5, 'tf32': 156.0, 'bf16': 312.0}))


def peaks_of(device_name):
    """{'fp32': ..., 'tf32': ..., 'bf16': ...} for a GPU's name, or {} when it is not known."""
    return next((peaks for key, peaks in PEAK_TFLOPS if key in device_name), {})


def needed_lengths(data, rows=2000, seed=0):
    """How many positions of each of `rows` examples of `data` (its first ones, cycled) can
    change the loss: up to the last non-PAD target (fastpath.kept_lengths), the least any path
    computes of them. Their random draws come from `seed` (the caller's left as they were)."""
    _, targets = collate(data, [i % len(data) for i in range(rows)], seed)
    return kept_lengths(targets).tolist()


def training_flops(gpt, lengths):
    """Mean FLOPs of training `gpt` on one example (forward + backward) over `lengths` positions
    (the model as built: count on the plain fp32 one for the handout's work). A length's FLOPs
    are a quadratic in it (attention's products grow with its square, the rest with it) between
    the few lengths where the model changes shape (the perceiver's bottleneck): counted at a few
    lengths, the quadratic through three of them gives the others wherever two more counts
    confirm it, and every length is counted where they do not. (Counting each of wiki.txt's 109
    lengths took 10 s on the 2-core EPYC.)"""
    counts = {}

    def count(n):
        if n not in counts:
            x = torch.ones(1, n, dtype=torch.long)
            with FlopCounterMode(display=False) as counter:
                gpt(x, x)[1].backward()
            counts[n] = counter.get_total_flops()
        return counts[n]

    distinct = sorted(set(lengths))
    _fill(distinct, count, counts)
    gpt.zero_grad(set_to_none=True)
    return sum(counts[n] for n in lengths) / len(lengths)


def _fill(ns, count, counts):
    """counts[n] for every n of the sorted `ns`: counted, or from a quadratic the counts confirm."""
    if len(ns) < 6:
        for n in ns:
            count(n)
        return
    fit = _quadratic([(n, count(n)) for n in (ns[0], ns[len(ns) // 2], ns[-1])])
    if all(fit(n) == count(n) for n in (ns[len(ns) // 4], ns[3 * len(ns) // 4])):
        counts.update((n, int(fit(n))) for n in ns if n not in counts)
        return
    _fill(ns[:len(ns) // 2 + 1], count, counts)
    _fill(ns[len(ns) // 2:], count, counts)


def _quadratic(points):
    """The quadratic through three (x, y) points, exactly (fractions): x -> y."""
    (x0, y0), (x1, y1), (x2, y2) = [(Fraction(x), Fraction(y)) for x, y in points]

    def value(x):
        return (y0 * (x - x1) * (x - x2) / ((x0 - x1) * (x0 - x2))
                + y1 * (x - x0) * (x - x2) / ((x1 - x0) * (x1 - x2))
                + y2 * (x - x0) * (x - x1) / ((x2 - x0) * (x2 - x1)))
    return value


def mfu(flops, seconds, precision, peaks):
    """'X TFLOP/s, Y%' of the precision's peak, or '—' where the peak is not known."""
    if precision not in peaks:
        return '—'
    return f'{flops / seconds / 1e12:,.1f} TFLOP/s, {flops / seconds / 1e12 / peaks[precision]:.1%}'
