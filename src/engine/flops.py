"""Engine (free to change): model FLOPs and a device's peak.

The model FLOP utilisation (MFU) that the benchmark and run_all's report give."""
from torch.utils.flop_counter import FlopCounterMode

import torch

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


def training_flops(gpt, lengths):
    """Mean FLOPs of training `gpt` on one example (forward + backward) over `lengths` positions,
    counted once per distinct length (the model as built: count on the plain fp32 one for the
    handout's work)."""
    counts = {}
    for n in sorted(set(lengths)):
        x = torch.ones(1, n, dtype=torch.long)
        with FlopCounterMode(display=False) as counter:
            gpt(x, x)[1].backward()
        counts[n] = counter.get_total_flops()
    gpt.zero_grad(set_to_none=True)
    return sum(counts[n] for n in lengths) / len(lengths)


def mfu(flops, seconds, precision, peaks):
    """'X TFLOP/s, Y%' of the precision's peak, or '—' where the peak is not known."""
    if precision not in peaks:
        return '—'
    return f'{flops / seconds / 1e12:,.1f} TFLOP/s, {flops / seconds / 1e12 / peaks[precision]:.1%}'
