"""Engine (free to change): device, precision and random states.

Where the arithmetic runs and in which precision: the device, whether it has bf16, autocast,
and the random states training draws from there. One answer for run.py, the trainer and the
scripts."""
import random

import torch

from engine.common import UsageError


def pick_device(name, variant=None):
    """'auto' -> 'cuda' when a GPU is visible, else 'mps' (Apple's GPU) for the vanilla model
    where there is one, as the 2024-25 starter chooses (its RoPE used complex numbers, which MPS
    lacked; the project's other paths are untested there), else 'cpu'. A device asked for that
    is not there is a UsageError."""
    if name == 'auto':
        name = 'cuda' if torch.cuda.is_available() else \
            'mps' if variant == 'vanilla' and mps_available() else 'cpu'
    if name == 'cuda' and not torch.cuda.is_available():
        raise UsageError('--device cuda: no CUDA device is available')
    if name == 'mps' and not mps_available():
        raise UsageError('--device mps: no Apple MPS device is available')
    return name


def mps_available():
    """Whether Apple's Metal GPU can run torch here."""
    return bool(getattr(torch.backends, 'mps', None)) and torch.backends.mps.is_available()


def cpu_has_bf16():
    """Whether this CPU has bf16 arithmetic (AVX-512-BF16 or AMX): bf16 is a candidate there."""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def bf16_supported(device):
    """Whether `device` ('cpu', 'cuda', 'cuda:1', a torch.device) computes in bf16 natively."""
    if torch.device(device).type == 'cuda':
        try:  # natively: torch also counts a T4's or a V100's slow emulation of bf16
            return torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # (torch before 2.3: no emulation counted)
            return torch.cuda.is_bf16_supported()
    return cpu_has_bf16()


def lacks_bf16(device):
    """Whether `device` is a CUDA GPU without bf16 (a T4, a V100): fp16 is its fast arithmetic."""
    return torch.device(device).type == 'cuda' and not bf16_supported(device)


def pick_precision(name, device, training, measure=True):
    """auto: in training on a CPU, where `measure` (a preset that adapts to the machine), the
    run's plan measures which is faster here (plan.py); in training on a GPU without bf16,
    fp16 (its tensor cores' arithmetic; fp32 there is several times slower); otherwise fp32, the
    handout's arithmetic. An explicit 'fp32', 'tf32', 'bf16' or 'fp16' stays."""
    if name != 'auto':
        return name
    if training and measure and torch.device(device).type == 'cpu':
        return 'auto'
    if training and lacks_bf16(device):
        return 'fp16'
    # Not bf16 on a GPU, though recorded steps take half the time there: the handout computes
    # in fp32, and bf16 learned as fp32 did only with one attention kernel (see autocast).
    return 'fp32'


HALF = {'bf16': torch.bfloat16, 'fp16': torch.float16}  # the precisions autocast computes in


class autocast:
    """The arithmetic of a step (a reusable context): autocast to bf16 or fp16 for those
    precisions, and on a GPU two choices torch leaves global, set for the step and put back
    after it: 'tf32' lets the fp32 matrix products use the tensor cores (TF32, 10 bits of
    mantissa), and under bf16 or fp16 attention takes the flash kernel (the written-out math
    where flash cannot serve), since cuDNN's kernel, torch's default choice for bf16 on recent
    GPUs, and the memory-efficient one stopped learning with the handout's attention dropout
    while flash and the math followed fp32 (docs/gpu.md; fp16 takes the same kernels, not yet
    measured over a whole run). `scaler`: fp16's loss scaling (torch.amp.GradScaler: its
    gradients would underflow unscaled), which the training step applies; for the other
    precisions a disabled one, which passes the loss and the optimizer's step through."""

    def __init__(self, device, precision):
        self.gpu = torch.device(device).type == 'cuda'
        self.precision = precision
        self.cast = torch.autocast(torch.device(device).type, dtype=HALF.get(precision),
                                   enabled=precision in HALF)
        self.scaler = torch.amp.GradScaler(torch.device(device).type,
                                           enabled=precision == 'fp16')

    def __enter__(self):
        self.cast.__enter__()
        if self.gpu and self.precision == 'tf32':
            self.tf32_before = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = True
        if self.gpu and self.precision in HALF:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            self.kernels = sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH])
            self.kernels.__enter__()
        return self

    def __exit__(self, *exc):
        if self.gpu and self.precision in HALF:
            self.kernels.__exit__(*exc)
        if self.gpu and self.precision == 'tf32':
            torch.backends.cuda.matmul.allow_tf32 = self.tf32_before
        return self.cast.__exit__(*exc)


def random_states(device):
    """The random states a training process draws from: Python's (the corruptions), torch's CPU
    generator and, training on a GPU, that GPU's generator alone (the dropout masks). Only the
    training device's: a CPU run on a GPU machine never initialises CUDA, and a checkpoint does
    not depend on how many GPUs are visible."""
    device = torch.device(device)
    return {'python': random.getstate(), 'torch': torch.get_rng_state(),
            'cuda': torch.cuda.get_rng_state(device) if device.type == 'cuda' else None}


def set_random_states(states, device):
    """Put back what random_states(device) returned (CPU byte tensors)."""
    random.setstate(states['python'])
    torch.set_rng_state(states['torch'])
    if states['cuda'] is not None and torch.device(device).type == 'cuda':
        torch.cuda.set_rng_state(states['cuda'], torch.device(device))
