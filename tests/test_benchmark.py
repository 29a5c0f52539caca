"""scripts/benchmark.py's model-FLOP count, against the model's FLOPs written out."""
import os
import sys

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, 'scripts'))
import benchmark  # noqa: E402


def handout_training_flops(n, vocab=256, layers=4, width=256):
    """Forward matrix products of the handout's GPT on n positions, times 3 (the backward pass
    computes two products of the same size per forward product)."""
    per_layer = (3 + 1) * 2 * n * width ** 2      # key, query, value; output projection
    per_layer += 2 * 2 * n * width * 4 * width    # the MLP's two Linear layers
    per_layer += 2 * 2 * n * n * width            # q @ k^T and att @ v, all heads together
    return 3 * (layers * per_layer + 2 * n * width * vocab)  # + the head


@pytest.mark.parametrize('preset,width', [('handout', 256), ('narrow', 128)])
def test_flops_per_example_is_the_vanilla_models_matmul_count(preset, width, monkeypatch):
    """--preset: the preset's model is counted (a narrower one added here for the test)."""
    monkeypatch.setitem(benchmark.presets.PRESETS, 'narrow',
                        benchmark.presets._preset(model=dict(n_head=4, n_embd=128)))
    lengths = [10, 127, 127, 64]
    expected = sum(handout_training_flops(n, width=width) for n in lengths) / len(lengths)
    got = benchmark.flops_per_example('vanilla', 256, lengths, preset)
    assert got == pytest.approx(expected, rel=1e-9)


def test_mfu_is_flops_per_second_over_the_precisions_peak():
    assert benchmark.mfu(3e12, 2.0, 'bf16', {'fp32': 10.0, 'bf16': 6.0}) == '1.5 TFLOP/s, 25.0%'
    assert benchmark.mfu(3e12, 2.0, 'bf16', {}) == '—'
    assert benchmark.peak_tflops('cpu', [1.0, 2.0]) == {'fp32': 1.0, 'bf16': 2.0}
    assert benchmark.peak_tflops('cpu', None) == {}
