"""scripts/dev/benchmark.py's model-FLOP count, against the model's FLOPs written out."""
import itertools
import os
import subprocess
import sys

import pytest
import torch

from support import REPO

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


@pytest.mark.parametrize('variant', ['vanilla', 'synthesizer', 'perceiver', 'rope'])
def test_flops_from_a_few_counted_lengths_are_every_lengths_count(variant):
    """training_flops counts a few lengths and takes the others from the quadratic they
    confirm: the same mean as counting every length, also across the perceiver's bottleneck
    (16 here), where the count changes form."""
    from torch.utils.flop_counter import FlopCounterMode
    conf = benchmark.model.config_for(variant, 30, 128, 16, n_layer=1, n_head=2, n_embd=16,
                                      fast_attention=False, skip_padding=False)
    gpt = benchmark.model.GPT(conf)
    lengths = [1, 2, 3, 5, 9, 12] + list(range(14, 20)) + [23, 30, 41, 64, 65, 99, 120, 127] * 2
    counted = {}
    for n in set(lengths):
        x = torch.ones(1, n, dtype=torch.long)
        with FlopCounterMode(display=False) as counter:
            gpt(x, x)[1].backward()
        counted[n] = counter.get_total_flops()
    want = sum(counted[n] for n in lengths) / len(lengths)
    assert benchmark.training_flops(gpt, lengths) == want


def test_mfu_is_flops_per_second_over_the_precisions_peak():
    assert benchmark.mfu(3e12, 2.0, 'bf16', {'fp32': 10.0, 'bf16': 6.0}) == '1.5 TFLOP/s, 25.0%'
    assert benchmark.mfu(3e12, 2.0, 'bf16', {}) == '—'
    assert benchmark.peak_tflops('cpu', [1.0, 2.0]) == {'fp32': 1.0, 'bf16': 2.0}
    assert benchmark.peak_tflops('cpu', None) == {}


def test_the_default_against_every_candidate(monkeypatch):
    """The candidates take turns (3 rounds, each forced as given); the row gives each one's
    median and the chosen one's speed over the fastest's (stand-in timings: the kernel 0.5 s,
    the math 0.4 s, one slow outlier round for each)."""
    forced = []
    times = {('fp32', True): [0.5, 0.9, 0.5], ('fp32', False): [0.4, 0.4, 0.8]}

    def fake_steps(gpt, data, batch, steps, device, compile_model, path=None):
        forced.append(path)
        return times[path][sum(p == path for p in forced) - 1], path[0], path[1]
    monkeypatch.setattr(benchmark, 'fast_steps', fake_steps)
    monkeypatch.setattr(benchmark.cpu_paths, 'cpu_candidates', lambda m: [('fp32', True), ('fp32', False)])
    wiki = type('Wiki', (), {'vocab_size': 256})()
    args = type('Args', (), {'preset': 'cpu-45min', 'steps': 2})()
    row = benchmark.against_candidates('vanilla', wiki, 64, args, ('fp32', True))
    assert forced == [('fp32', True), ('fp32', False)] * 3
    tokens = 64 * 127
    assert row == ['vanilla', f'fp32 + attention kernel {tokens / 0.5:,.0f} tok/s, '
                              f'fp32 + attention math {tokens / 0.4:,.0f} tok/s',
                   'fp32 + attention kernel', '0.80x']
    forced.clear()
    assert benchmark.against_candidates('vanilla', wiki, 64, args, ('fp32', False))[3] == '1.00x'
    # one candidate (attention dropout, no bf16): nothing to measure
    monkeypatch.setattr(benchmark.cpu_paths, 'cpu_candidates', lambda m: [('fp32', None)])
    forced.clear()
    assert benchmark.against_candidates('vanilla', wiki, 64, args, ('fp32', None))[3] == '1.00x (the only one)'
    assert forced == []


def test_a_forced_candidate_is_the_path_trained(monkeypatch):
    """fast_steps(path=...) trains with that precision and attention path (a narrow model, 1 step)."""
    monkeypatch.setitem(benchmark.presets.PRESETS, 'narrow', benchmark.presets._preset(
        model=dict(n_layer=1, n_head=2, n_embd=32, embd_pdrop=0.0, resid_pdrop=0.0, attn_pdrop=0.0)))
    text = open(os.path.join(REPO, 'data', 'wiki.txt'), encoding='utf-8').read()[:20000]
    data = benchmark.dataset.CharCorruptionDataset(text, benchmark.presets.BLOCK_SIZE)
    for path in (('fp32', True), ('fp32', False)):
        gpt = benchmark.build('vanilla', data.vocab_size, True, 'narrow')
        seconds, precision, kernel = benchmark.fast_steps(gpt, data, 4, 1, 'cpu', False, path=path)
        assert (precision, kernel) == path and seconds > 0


@pytest.mark.parametrize('model,capability,bf16,want', [
    ('AMD EPYC', 'AVX2', False, 'amd-epyc-avx2'),
    ('AMD EPYC 9B14', 'AVX512', True, 'amd-epyc-9b14-avx512-bf16'),
    ('Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz', 'AVX512', True,
     'intel-xeon-platinum-8481c-cpu-2-70ghz-avx512-bf16'),
])
def test_the_machine_kind_names_the_cpu_and_its_arithmetic(monkeypatch, model, capability, bf16, want):
    """The default report name tells the machines apart whose fastest paths differ."""
    monkeypatch.setattr(benchmark.cpu_paths, 'cpu_model', lambda: model)
    monkeypatch.setattr(benchmark.devices, 'cpu_has_bf16', lambda: bf16)
    monkeypatch.setattr(benchmark.torch.backends.cpu, 'get_cpu_capability', lambda: capability)
    assert benchmark.machine_kind('cpu') == want


def test_the_compiled_rows_timed_steps_compile_nothing(monkeypatch):
    """--compile: every batch width the timed steps meet is compiled before the clock runs.
    Compiled here with dynamo's eager backend and static shapes (no inductor code generation,
    and every new width a new graph, as a GPU's trimmed batches would be without dynamic
    shapes); the compiles during the timed run are counted. Before the warm-up took the timed
    batches, each width first met in the timed steps compiled there."""
    import functools
    import torch._dynamo
    from torch._dynamo.utils import counters
    monkeypatch.setattr(torch, 'compile', functools.partial(torch.compile, backend='eager',
                                                            dynamic=False))
    monkeypatch.setitem(benchmark.presets.PRESETS, 'tiny',
                        benchmark.presets._preset(model=dict(n_layer=1, n_head=2, n_embd=32)))
    lines = [f'{"abcdefgh"[i % 8] * (5 + 7 * i)} end.' for i in range(40)]
    data = benchmark.dataset.CharCorruptionDataset('\n'.join(lines), benchmark.presets.BLOCK_SIZE)
    compiled_during = []

    class CountingClock(benchmark.StepClock):
        def on_train_start(self, trainer):
            self.graphs = counters['stats']['unique_graphs']

        def on_train_end(self, trainer):
            compiled_during.append(counters['stats']['unique_graphs'] - self.graphs)
    monkeypatch.setattr(benchmark, 'StepClock', CountingClock)
    torch._dynamo.reset()
    before = counters['stats']['unique_graphs']
    benchmark.utils.set_seed(0)
    gpt = benchmark.build('vanilla', data.vocab_size, True, 'tiny')
    # (rows in 4 groups: a few widths a step)
    benchmark.fast_steps(gpt, data, 8, 3, 'cpu', True, path=('fp32', False), row_groups=4)
    compiled = counters['stats']['unique_graphs'] - before
    torch._dynamo.reset()
    assert compiled >= 2  # a graph per width met: compiling did happen, before the clock
    assert compiled_during == [0]


def test_the_plain_loop_takes_more_steps_than_an_epoch_holds():
    """--steps 40 on wiki.txt (23 batches) stopped with StopIteration on an H100
    (git show 4bebd9e:results/h100-80gb-hbm3/README.md): the plain loop now goes on into the next epoch."""
    torch.manual_seed(0)
    data = [(torch.randint(1, 20, (8,)), torch.randint(1, 20, (8,))) for _ in range(3)]
    loader = torch.utils.data.DataLoader(data, batch_size=2)
    sizes = [len(x) for x, _ in itertools.islice(benchmark.epoch_after_epoch(loader), 5)]
    assert sizes == [2, 1, 2, 1, 2]
    gpt = benchmark.model.GPT(benchmark.model.GPTConfig(20, 8, n_layer=1, n_head=2, n_embd=16))
    assert benchmark.plain_steps(gpt, data, 2, 4, 'cpu') > 0


def test_the_step_clock_reads_the_time_at_two_steps_of_the_whole_run(monkeypatch):
    """--compile graphs times the second of two epochs (every shape and size recorded in the
    first): the clock counts the steps over both epochs, not within one."""
    ticks = iter(range(100))
    monkeypatch.setattr(benchmark.time, 'perf_counter', lambda: next(ticks))
    clock = benchmark.StepClock('cpu', last=7, first=3)
    for epoch in range(2):
        for it in range(4):
            clock.on_step_end(None, epoch, it)
    assert clock.marks == [0, 1]  # read at the end of epoch 1 and of epoch 2 only
    plain = benchmark.StepClock('cpu', last=3)
    for it in range(4):
        plain.on_step_end(None, 0, it)
    assert plain.marks == [2, 3]


def test_recorded_steps_are_timed_in_a_second_pass_over_the_batches(monkeypatch):
    """fast_steps(compile='graphs'): the timed Trainer runs the timed batches twice, the clock
    over the second epoch's steps (its trainers' step stand in for the recording here)."""
    runs = []
    clocks = []

    class Trainer:
        def __init__(self, gpt, data, test, config):
            self.config, self.callbacks = config, []
            self.run = self  # (the stand-in is its own run: the callbacks and config are here)
            runs.append((len(data), config.max_epochs, config.compile, config.row_groups))

        def train(self):
            self.config.precision = 'fp32'
            for clock in self.callbacks:
                clocks.append(clock)
                for step in range(self.config.max_epochs * 5):
                    clock.on_step_end(self, step // 5, step % 5)
    monkeypatch.setattr(benchmark.trainer, 'Trainer', Trainer)
    monkeypatch.setattr(benchmark, 'sync', lambda device: None)
    ticks = iter([10.0, 16.0])
    monkeypatch.setattr(benchmark.time, 'perf_counter', lambda: next(ticks))
    per_step, _, _ = benchmark.fast_steps(torch.nn.Linear(1, 1), list(range(100)), 4, 4, 'cuda', 'graphs',
                                          precision='fp32', row_groups=4)
    # the warm-up on one batch, then the timed run: 5 batches, twice (no compile run before it)
    assert runs == [(4, 1, 'graphs', 4), (20, 2, 'graphs', 4)]
    assert (clocks[0].first, clocks[0].last) == (4, 9) and per_step == 6.0 / 5


@pytest.mark.parametrize('flags,message', [
    (['--compile', 'graphs'], 'a GPU'),
    (['--row_groups', '-1'], '--row_groups')])
def test_gpu_options_are_refused_where_they_cannot_be_timed(flags, message):
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'dev', 'benchmark.py')]
                          + flags, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr
