"""--compile graphs (engine/fast/graphs.py): the whole training step recorded as a CUDA graph per batch
shape and replayed. Without a GPU the recording is played by a stand-in that keeps the step and
runs it at each replay, writing its loss into the one tensor a recording hands out, as a CUDA
graph does: what is checked here is what the engine does around the graph (the shapes, the
copies into the graph's inputs, the learning rate read from device tensors, the loss copied out
of the graph's memory). On a GPU the real graphs run the same comparison."""
import re

import pytest
import torch
from torch.utils.data import Subset

import trainer
import utils
from support import LossLog, Replays
from engine.fast import graphs
from engine.training import loop
from test_fast_paths import (VARIANTS, assert_same_run, data, fast_and_plain,  # noqa: F401
                             spans_seen, tiny)


def train(pre, compile, variant='vanilla', steps=9, row_groups=0):
    """A one-layer model (dropout 0; each batch in one group of rows unless row_groups asks for
    more) trained by the Trainer on 15 examples in batches of 6, 6 and 3, three epochs, the
    handout's schedule (warmup, then the cosine: a new learning rate every step), losses read
    back every 4 steps."""
    utils.set_seed(5)
    gpt = tiny(pre.vocab_size, VARIANTS[variant], dropout=0.0, n_layer=1)
    log = LossLog()
    conf = trainer.TrainerConfig(max_epochs=3, batch_size=6, learning_rate=3e-3, lr_decay=True,
                                 warmup_tokens=6 * 128 * 2, final_tokens=6 * 128 * 12,
                                 compile=compile, writer=log, log_every=4,
                                 row_groups=row_groups)
    trainer.Trainer(gpt, Subset(pre, range(15)), None, conf).train()
    assert len(log.values) == steps
    return log.values, gpt


@pytest.mark.parametrize('variant', VARIANTS)
def test_replayed_steps_train_as_the_eager_steps_do(data, monkeypatch, variant):  # noqa: F811
    """Shapes padded (PAD rows, columns to a multiple of WIDTH), each shape's first batch an
    eager step and its second recorded, every later one a replay after its batch and the loop's
    learning rate are copied in: the losses and weights of the eager run, within rounding, for
    each variant (the perceiver's bottleneck follows the width: the padding must not matter)."""
    pre, _ = data
    replays = Replays()
    monkeypatch.setattr(graphs, 'CudaGraphs', lambda: replays)
    monkeypatch.setattr(graphs, 'WIDTH', 16)  # a few column widths among these batches
    got, graphed = train(pre, 'graphs', variant)
    want, eager = train(pre, False, variant)
    assert want[-1] < want[0]
    shapes = replays.log.count('eager')
    assert replays.log.count('record') >= 1 and replays.log.count('replay') >= 3
    assert shapes + replays.log.count('replay') == 9  # every step once: eager or replayed
    assert_same_run(got, want, graphed, eager, tolerance=1e-5)


def test_grouped_steps_are_recorded_per_shape_and_groups(data, monkeypatch):  # noqa: F811
    """With row_groups a recording also fixes its groups of rows (fastpath.row_groups' spans,
    counted on the host before the batch is copied into the recording's inputs): a shape and
    groups' first batch an eager step, its second recorded, the later ones replayed. The losses
    and weights of the eager run computing each batch whole, within rounding."""
    pre, _ = data
    replays = Replays()
    monkeypatch.setattr(graphs, 'CudaGraphs', lambda: replays)
    monkeypatch.setattr(graphs, 'WIDTH', 128)  # one width: the shapes differ by the groups only
    seen = spans_seen(monkeypatch)
    got, graphed = train(pre, 'graphs', row_groups=2)
    # one count a step, on the host; an eager or recorded step takes its groups from its key
    seen = list(seen)
    assert len(seen) == 9
    want, eager = train(pre, False)
    # (the batches of 3 examples and 3 PAD rows: a group with no target, not computed)
    assert set(seen) == {((3, 127), (3, 127)), ((3, 127), (3, 0))}
    assert replays.log.count('eager') == 2 and replays.log.count('record') == 2
    assert replays.log.count('replay') == 7
    assert_same_run(got, want, graphed, eager, tolerance=1e-5)


def test_a_step_that_cannot_be_recorded_leaves_eager_steps(data, monkeypatch, capsys):  # noqa: F811
    """A recording that fails (an operation some torch or GPU cannot record): one note, then
    every step eager, and the run is the eager run's."""
    pre, _ = data

    class Unrecordable(Replays):
        def record(self, step, optimizer):
            self.log.append('record')
            raise RuntimeError('CUDA error: operation not permitted when stream is capturing\n'
                               'Compile with TORCH_USE_CUDA_DSA to enable device-side assertions.')
    replays = Unrecordable()
    monkeypatch.setattr(graphs, 'CudaGraphs', lambda: replays)
    got, graphed = train(pre, 'graphs')
    want, eager = train(pre, False)
    assert replays.log == ['eager', 'record']  # the first shape's eager step, one try
    err = capsys.readouterr().err
    assert err.count('note: --compile graphs could not record the training step (CUDA error: '
                     'operation not permitted when stream is capturing); eager steps') == 1, err
    assert_same_run(got, want, graphed, eager, tolerance=1e-5)


def test_grouped_steps_are_recorded_per_groups_columns(data, monkeypatch):  # noqa: F811
    """A recording's groups have the columns their rows need, rounded up to WIDTH (the rows
    sorted by length on the host): the losses and weights of the eager run computing each batch
    whole."""
    pre, _ = data
    replays = Replays()
    monkeypatch.setattr(graphs, 'CudaGraphs', lambda: replays)
    monkeypatch.setattr(graphs, 'WIDTH', 16)
    seen = spans_seen(monkeypatch)
    got, graphed = train(pre, 'graphs', row_groups=2)
    seen = list(seen)
    want, eager = train(pre, False)
    assert all(len(spans) == 2 and all(t % 16 == 0 or t == 127 for _, t in spans)
               for spans in seen)
    assert any(0 < t < 112 for spans in seen for _, t in spans)  # columns skipped
    shapes = replays.log.count('eager')  # (a shape met once is never recorded)
    assert replays.log.count('record') <= shapes and shapes + replays.log.count('replay') == 9
    assert_same_run(got, want, graphed, eager, tolerance=1e-5)


def test_a_budget_plans_at_the_pace_of_recorded_steps(name_data, monkeypatch, capsys):  # noqa: F811
    """Under --compile graphs a budgeted run's plan times the steps the run will take, recorded
    and replayed, not eager ones: on a stand-in clock an eager step takes 0.1 s and a replayed
    one 0.01 s, and 1 s holds about 30 epochs of 3 replayed steps (a few of eager ones)."""
    from test_budget import FakeClock, budgeted_run
    clock, replaying = FakeClock(), []

    class TimedReplays(Replays):
        def record(self, step, optimizer):
            replay, loss = super().record(step, optimizer)

            def timed_replay():
                replaying.append(True)
                try:
                    replay()
                finally:
                    replaying.pop()
            return timed_replay, loss

    real = loop.train_step

    def step(*args):
        clock.now += 0.01 if replaying else 0.1
        return real(*args)
    monkeypatch.setattr(loop, 'train_step', step)
    made = []
    monkeypatch.setattr(graphs, 'CudaGraphs', lambda: made.append(TimedReplays()) or made[-1])
    budgeted_run(name_data, 1.0, max_epochs=100, clock=clock, compile='graphs')
    planned = int(re.search(r'time budget [\d.]+ min: (\d+) epochs', capsys.readouterr().out)[1])
    assert planned >= 20, planned  # (timing eager steps planned 1)
    assert len(made) == 2 and 'replay' in made[0].log  # the plan's recordings, then the run's


def test_a_batch_is_trimmed_to_its_width_and_padded_to_the_batch_size(monkeypatch):
    monkeypatch.setattr(graphs, 'WIDTH', 4)
    x = torch.tensor([[5, 6, 7, 8, 9, 0, 0, 0, 0, 0], [5, 6, 7, 0, 0, 0, 0, 0, 0, 0]])
    y = torch.tensor([[6, 7, 8, 9, 3, 0, 0, 0, 0, 0], [6, 7, 0, 0, 0, 0, 0, 0, 0, 0]])
    xs, ys = graphs.CapturedSteps.shaped(x, y, 3)
    assert xs.tolist() == [[5, 6, 7, 8, 9, 0, 0, 0], [5, 6, 7, 0, 0, 0, 0, 0], [0] * 8]
    assert ys.tolist() == [[6, 7, 8, 9, 3, 0, 0, 0], [6, 7, 0, 0, 0, 0, 0, 0], [0] * 8]
    xs, ys = graphs.CapturedSteps.shaped(x[:, :6], y[:, :6], 2)  # no wider than the batch
    assert xs.shape == (2, 6) and ys.tolist() == y[:, :6].tolist()


@pytest.mark.skipif(not torch.cuda.is_available(), reason='CUDA graphs are a GPU\'s')
def test_cuda_graph_steps_match_the_plain_loop(data, monkeypatch):  # noqa: F811
    """The real recording, on a GPU: the plain loop's losses and weights (fp32, dropout 0). One
    width for every batch, so that after the eager step and the recording most steps replay."""
    recorded = []

    class Counted(graphs.CudaGraphs):
        def record(self, step, optimizer):
            recorded.append(step)
            return super().record(step, optimizer)
    monkeypatch.setattr(graphs, 'CudaGraphs', Counted)
    monkeypatch.setattr(graphs, 'WIDTH', 128)
    assert_same_run(*fast_and_plain(data, 'vanilla', compile='graphs', device='cuda', n_layer=1),
                    tolerance=1e-4)
    assert len(recorded) == 1  # the first step eager, the other five replays of one recording


def batches_of_one_size(vocab=30, T=128, rows=128, seed=3):
    """Two batches of `rows` examples over all T columns (a dataset of (x, y) pairs) whose
    targets end at random lengths, the second batch's lengths a shuffle of the first's: the
    same groups of rows in every batch."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, T, (rows,), generator=gen)
    lengths = torch.cat([lengths, lengths[torch.randperm(rows, generator=gen)]])
    x = torch.randint(1, vocab, (2 * rows, T), generator=gen)
    y = torch.randint(1, vocab, (2 * rows, T), generator=gen)
    y[torch.arange(T) >= lengths[:, None]] = 0
    return list(zip(x, y))


def test_grouped_steps_at_the_handouts_batch_size_train_as_eager_ones(device, monkeypatch):
    """The handout's pretraining shape (128 rows of 128 columns: a CUDA graph then records the
    embeddings' backward in its path for large inputs), in presets.GPU's groups of rows, each
    on its columns rounded up to 32, and recorded (on a CPU, the stand-in plays the recording),
    against eager steps computing each batch whole: the same losses and weights."""
    data = batches_of_one_size()
    if device == 'cpu':
        replays = Replays()
        monkeypatch.setattr(graphs, 'CudaGraphs', lambda: replays)
    from engine import presets
    seen = spans_seen(monkeypatch)
    runs = []
    for compile, groups in (('graphs', presets.GPU['row_groups']), (False, 1)):
        utils.set_seed(5)
        gpt = tiny(30, {}, dropout=0.0, n_layer=1)
        log = LossLog()
        conf = trainer.TrainerConfig(max_epochs=3, batch_size=128, learning_rate=3e-3,
                                     compile=compile, writer=log, log_every=3, device=device,
                                     row_groups=groups)
        trainer.Trainer(gpt, data, None, conf).train()
        runs.append((log.values, gpt))
    (got, graphed), (want, eager) = runs
    assert len(want) == 6 and want[-1] < want[0]
    if device == 'cpu':  # (the two batches' lengths are one shuffled: the same groups)
        assert replays.log == ['eager', 'record'] + ['replay'] * 5
    assert len(set(seen[:6])) == 1 and any(t < 128 for _, t in seen[0])
    assert_same_run(got, want, graphed.cpu(), eager.cpu(), tolerance=1e-4)
