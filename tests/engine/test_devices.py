"""devices.py gives one answer to "does this device compute in bf16?" for run.py, the trainer and
the scripts, whatever the device is called: under torchrun a GPU rank's device is 'cuda:N'."""
import warnings

import pytest
import torch

from engine import devices
from engine.common import UsageError


def test_a_numbered_gpu_is_asked_about_its_own_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_bf16_supported', lambda *a, **k: True)
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: False)
    for name in ('cuda', 'cuda:0', 'cuda:3', torch.device('cuda', 1)):
        assert devices.bf16_supported(name) is True
        # auto is fp32 on a GPU even with bf16 there: bf16 pretraining diverged on an H100
        assert devices.pick_precision('auto', name, training=True) == 'fp32'
        assert devices.pick_precision('auto', name, training=False) == 'fp32'
        assert devices.pick_precision('bf16', name, training=True) == 'bf16'  # asked for: kept
    assert devices.bf16_supported('cpu') is False
    assert devices.pick_precision('auto', 'cpu', training=True) == 'auto'  # measured: cpu_paths
    monkeypatch.setattr(torch.cuda, 'is_bf16_supported', lambda *a, **k: False)
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: True)
    assert devices.bf16_supported('cuda:2') is False and devices.bf16_supported('cpu') is True


def test_random_states_touch_only_the_training_device(monkeypatch):
    """#30: the checkpoint kept torch.cuda.get_rng_state_all(): every visible GPU's state, so a
    resume with fewer GPUs raised IndexError, and a --device cpu run on a GPU machine initialised
    CUDA. Now only the training device's generator is read and written. Reached without a GPU:
    torch.cuda is replaced by a stand-in that records what is asked of it."""
    asked = []
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'get_rng_state_all', lambda: asked.append('all'))
    monkeypatch.setattr(torch.cuda, 'set_rng_state_all', lambda s: asked.append('set all'))
    monkeypatch.setattr(torch.cuda, 'get_rng_state',
                        lambda device: asked.append(('get', str(device))) or torch.zeros(16, dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, 'set_rng_state',
                        lambda state, device: asked.append(('set', str(device))))
    states = devices.random_states('cpu')
    devices.set_random_states(states, 'cpu')
    assert states['cuda'] is None and asked == []  # a CPU run leaves CUDA alone
    states = devices.random_states('cuda:1')
    devices.set_random_states(states, 'cuda:1')
    assert asked == [('get', 'cuda:1'), ('set', 'cuda:1')]


def sdpa_backends():
    b = torch.backends.cuda
    return dict(flash=b.flash_sdp_enabled(), efficient=b.mem_efficient_sdp_enabled(),
                math=b.math_sdp_enabled(), cudnn=b.cudnn_sdp_enabled())


def test_tf32_holds_for_the_step_and_is_put_back_after_it():
    """--precision tf32: the fp32 matrix products may use the tensor cores inside each step (the
    context is reused, step after step) and not after it; fp32 and a CPU leave the switch alone.
    The switch is a flag torch keeps without a GPU, so this runs anywhere."""
    assert torch.backends.cuda.matmul.allow_tf32 is False  # conftest's: fp32 means fp32
    step = devices.autocast('cuda', 'tf32')
    for _ in range(2):
        with step:
            assert torch.backends.cuda.matmul.allow_tf32 is True
        assert torch.backends.cuda.matmul.allow_tf32 is False
    for device, precision in (('cuda', 'fp32'), ('cpu', 'fp32'), ('cpu', 'bf16')):
        with devices.autocast(device, precision):
            assert torch.backends.cuda.matmul.allow_tf32 is False


def test_bf16_on_a_gpu_attends_with_flash_or_the_math_and_puts_the_choice_back():
    """cuDNN's attention (torch's default for bf16 on an H100) and the memory-efficient kernel
    stopped learning under bf16 with the handout's attention dropout; flash and the math did not
    (docs/gpu.md). The backends torch may pick are set for the step only."""
    before = sdpa_backends()
    assert all(before.values())
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # autocast('cuda') without a GPU: "disabling autocast"
        step = devices.autocast('cuda:0', 'bf16')
    for _ in range(2):
        with step:
            assert sdpa_backends() == dict(flash=True, efficient=False, math=True, cudnn=False)
        assert sdpa_backends() == before
    for device, precision in (('cuda', 'fp32'), ('cuda', 'tf32'), ('cpu', 'bf16')):
        with devices.autocast(device, precision):
            assert sdpa_backends() == before


@pytest.mark.skipif(not torch.cuda.is_available(), reason='the kernel torch picks on a GPU')
def test_bf16_on_a_gpu_picks_the_flash_kernel_for_the_handouts_attention():
    from torch.nn.attention import SDPBackend
    q = torch.randn(128, 8, 128, 32, device='cuda', dtype=torch.bfloat16)
    with devices.autocast('cuda', 'bf16'):
        choice = torch._fused_sdp_choice(q, q, q, None, 0.1, True)
    assert choice == int(SDPBackend.FLASH_ATTENTION)


def test_auto_takes_apples_gpu_for_the_vanilla_model_as_the_2024_starter(monkeypatch):
    """Where there is no CUDA GPU and MPS is available (stood in for: no Apple hardware here),
    auto picks MPS for the vanilla model and the CPU for the others (the 2024-25 starter's rule:
    its RoPE used complex numbers, which MPS lacked); asking for MPS where there is none is one
    error. Untested on real Apple hardware."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(devices, 'mps_available', lambda: True)
    assert devices.pick_device('auto', 'vanilla') == 'mps'
    assert [devices.pick_device('auto', v) for v in ('rope', 'perceiver', 'synthesizer')] == \
        ['cpu'] * 3
    assert devices.pick_device('mps', 'rope') == 'mps'  # asked for: taken
    monkeypatch.setattr(devices, 'mps_available', lambda: False)
    assert devices.pick_device('auto', 'vanilla') == 'cpu'
    with pytest.raises(UsageError, match='--device mps: no Apple MPS device'):
        devices.pick_device('mps', 'vanilla')
