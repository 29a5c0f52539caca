"""devices.py gives one answer to "does this device compute in bf16?" for run.py, the trainer and
the scripts, whatever the device is called: under torchrun a GPU rank's device is 'cuda:N'."""
import torch

from engine import devices


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
