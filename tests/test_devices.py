"""devices.py gives one answer to "does this device compute in bf16?" for run.py, the trainer and
the scripts, whatever the device is called: under torchrun a GPU rank's device is 'cuda:N'."""
import torch

import devices


def test_a_numbered_gpu_is_asked_about_its_own_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_bf16_supported', lambda *a, **k: True)
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: False)
    for name in ('cuda', 'cuda:0', 'cuda:3', torch.device('cuda', 1)):
        assert devices.bf16_supported(name) is True
        assert devices.pick_precision('auto', name, training=True) == 'bf16'
        assert devices.pick_precision('auto', name, training=False) == 'fp32'
    assert devices.bf16_supported('cpu') is False
    assert devices.pick_precision('auto', 'cpu', training=True) == 'auto'  # measured: cpu_paths
    monkeypatch.setattr(torch.cuda, 'is_bf16_supported', lambda *a, **k: False)
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: True)
    assert devices.bf16_supported('cuda:2') is False and devices.bf16_supported('cpu') is True
