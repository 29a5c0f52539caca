"""scripts/dev/profile_step.py (the next GPU call's profile of the pretraining step): kernels
sorted into the kinds its report sums, and the script end to end on a CPU with a tiny model."""
import sys

import pytest


import profile_step  # noqa: E402

# kernel names as torch 2.x and cuBLAS/cuDNN print them on an H100 (shortened templates)
NAMES = {
    'ampere_sgemm_128x64_nn': 'matrix products',
    'sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x128x32_cublas': 'matrix products',
    'cutlass_80_simt_sgemm_256x128_8x4_nn_align1': 'matrix products',
    'fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float>)':
        'attention',
    'void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits>':
        'attention',
    'cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64': 'attention',
    'void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>':
        'layer norm, softmax, loss',
    'void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>':
        'layer norm, softmax, loss',
    'void at::native::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>':
        'layer norm, softmax, loss',
    'void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int>':
        'dropout',
    'void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>':
        'AdamW, clipping',
    'void at::native::lpnorm_cleanup<float, NormType::L2, float>': 'AdamW, clipping',
    'void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<unsigned char, long>':
        'gather, scatter, sort',
    'void at::native::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>':
        'gather, scatter, sort',
    'void at::native::embedding_backward_feature_kernel<float, float, long>':
        'gather, scatter, sort',
    'Memcpy HtoD (Pinned -> Device)': 'copies, fills',
    'void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>':
        'copies, fills',
    'void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>':
        'copies, fills',
    'void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl(float)>':
        profile_step.OTHER,
    'void at::native::reduce_kernel<512, 1, ReduceOp<float, func_wrapper<float>>>':
        profile_step.OTHER,
}


@pytest.mark.parametrize('name', sorted(NAMES))
def test_a_kernel_is_counted_under_its_kind(name):
    assert profile_step.kind(name) == NAMES[name]


def test_kinds_sum_the_kernels_per_step():
    kernels = [(name, 1000.0 * (i + 1), 2) for i, name in enumerate(sorted(NAMES))]
    table = profile_step.by_kind(kernels, steps=2)
    assert list(table)[-1] == profile_step.OTHER and len(table) == len(profile_step.KINDS) + 1
    assert sum(ms for ms, _ in table.values()) == pytest.approx(
        sum(us for _, us, _ in kernels) / 1000 / 2)
    assert sum(n for _, n in table.values()) == len(NAMES)
    assert table['attention'] == pytest.approx((sum(
        1.0 * (i + 1) for i, n in enumerate(sorted(NAMES)) if NAMES[n] == 'attention') / 2, 3))


def test_the_script_on_a_cpu_reports_a_row_and_its_kinds(tmp_path, monkeypatch):
    """A one-layer model, 2 batches of 8: the report's row, and its kinds adding up to the
    row's total (the GPU's columns empty on a CPU); a configuration that fails is named with
    its error, and the others are measured."""
    presets = profile_step.presets
    monkeypatch.setitem(presets.PRESETS, 'tiny', presets._preset(
        model=dict(n_layer=1, n_head=2, n_embd=32), pretrain=dict(batch_size=8)))
    real = profile_step.measure

    def measure(wiki, batches, device, precision, attention, *rest):
        if attention == 'efficient':
            raise RuntimeError('No available kernel.  Aborting execution.')
        return real(wiki, batches, device, precision, attention, *rest)
    monkeypatch.setattr(profile_step, 'measure', measure)
    out = tmp_path / 'profile.md'
    monkeypatch.setattr(sys, 'argv', ['profile_step.py', '--device', 'cpu',
                                      '--steps', '2', '--preset', 'tiny', '--out', str(out),
                                      '--attention', 'efficient,default'])
    profile_step.main()
    text = out.read_text(encoding='utf-8')
    assert '- fp32, efficient: failed: RuntimeError: No available kernel.' in text
    assert '| fp32, efficient |' not in text and '## fp32, efficient' not in text
    row = next(line for line in text.splitlines() if line.startswith('| fp32, default |'))
    cells = [c.strip() for c in row.strip('|').split('|')]
    assert float(cells[1]) > 0 and cells[2] == cells[3] == '-' and cells[5] == 'not seen'
    total, count = (float(v) for v in cells[4].split(','))
    section = text[text.index('## fp32, default'):]
    kinds = [line.strip('|').split('|') for line in section.splitlines()[4:]
             if line.startswith('| ')]
    assert len(kinds) == len(profile_step.KINDS) + 1
    assert sum(float(k[1]) for k in kinds) == pytest.approx(total, abs=0.01 + 1e-3 * len(kinds))
    assert sum(float(k[2]) for k in kinds) == pytest.approx(count, abs=len(kinds))
    assert float(kinds[1][1]) > 0  # the matrix products: the profile saw the model's work


@pytest.mark.parametrize('argv, words', [
    (['--steps', '30'], '--steps'),
    (['--precision', 'fp64'], '--precision'),
    (['--device', 'cpu', '--precision', 'tf32'], 'on a CPU'),
    (['--row_groups', '-2'], '--row_groups'),
    (['--row_groups', 'four'], '--row_groups'),
])
def test_refusals(argv, words, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, 'argv', ['profile_step.py', '--device', 'cpu',
                                      '--out', str(tmp_path / 'p.md')] + argv)
    with pytest.raises(SystemExit) as stop:
        profile_step.main()
    assert stop.value.code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / 'p.md').exists()


@pytest.mark.parametrize('groups', [1, 2])
def test_the_recorded_figures_with_a_stand_in_for_the_graphs(monkeypatch, groups):
    """The GPU's branch (--compile graphs: the calls, one recording replayed alone, the
    replays' profile) on a CPU, CUDA graphs played by test_graphs' stand-in: every figure
    measured, and the replays' profile saw the model's own operators; also in groups of rows
    (the model then called once a group: more calls of its attention)."""
    from support import Replays
    presets = profile_step.presets
    monkeypatch.setitem(presets.PRESETS, 'tiny', presets._preset(
        model=dict(n_layer=1, n_head=2, n_embd=32), pretrain=dict(batch_size=8)))
    monkeypatch.setattr(profile_step.graphs, 'CudaGraphs', Replays)
    from engine.fast import fastmodel  # a GPU's attention (scaled_dot_product_attention), not a CPU's math
    monkeypatch.setattr(fastmodel, 'cpu_math', lambda layer, device: False)
    wiki, batches = profile_step.first_batches('tiny', 3)
    got = profile_step.measure(wiki, batches, 'cpu', 'fp32', 'default', 'tiny',
                               recorded=True, groups=groups)
    assert all(got[k] > 0 for k in ('loop', 'calls', 'replay'))
    ops = lambda kernels: {name for name, _, _ in kernels}  # noqa: E731
    model_ops = {'aten::mm', 'aten::addmm', 'aten::native_layer_norm'}
    assert model_ops <= ops(got['replayed']) and model_ops <= ops(got['eager'])
    calls = {name: n for name, _, n in got['eager']}
    # one layer, called once a group
    assert calls['aten::scaled_dot_product_attention'] == got['eager_steps'] * groups
