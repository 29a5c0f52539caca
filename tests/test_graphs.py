"""--compile graphs (engine/graphs.py): the whole training step recorded as a CUDA graph per batch
shape and replayed. Without a GPU the recording is played by a stand-in that keeps the step and
runs it at each replay, writing its loss into the one tensor a recording hands out, as a CUDA
graph does: what is checked here is what the engine does around the graph (the shapes, the
copies into the graph's inputs, the learning rate read from device tensors, the loss copied out
of the graph's memory). On a GPU the real graphs run the same comparison."""
import pytest
import torch
from torch.utils.data import Subset

import trainer
import utils
from conftest import LossLog
from engine import graphs
from test_fast_paths import VARIANTS, assert_same_run, data, fast_and_plain, tiny  # noqa: F401


class Replays:
    """CUDA graphs' stand-in: a recording runs nothing; a replay runs the step recorded."""

    def __init__(self):
        self.log = []

    def eager(self, step):
        self.log.append('eager')
        return step()

    def record(self, step, optimizer):
        self.log.append('record')
        loss = torch.zeros(())

        def replay():
            self.log.append('replay')
            loss.copy_(step())
        return replay, loss


def train(pre, compile, variant='vanilla', steps=9):
    """A one-layer model (every position computed, as on a GPU; dropout 0) trained by the
    Trainer on 15 examples in batches of 6, 6 and 3, three epochs, the handout's schedule
    (warmup, then the cosine: a new learning rate every step), losses read back every 4 steps."""
    utils.set_seed(5)
    gpt = tiny(pre.vocab_size, VARIANTS[variant], skip_padding=False, dropout=0.0, n_layer=1)
    log = LossLog()
    conf = trainer.TrainerConfig(max_epochs=3, batch_size=6, learning_rate=3e-3, lr_decay=True,
                                 warmup_tokens=6 * 128 * 2, final_tokens=6 * 128 * 12,
                                 compile=compile, writer=log, log_every=4)
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
