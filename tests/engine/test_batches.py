"""batches.py: trim_padding cuts exactly the all-PAD columns; and the DataLoader worker path (the GPU's: num_workers > 0), run on a CPU where it is asked for
(TrainerConfig.cpu_workers, run.py --num_workers): workers build the very batches the training
process builds itself (each batch carries the seed of its examples' random draws), so the run is
the same, loss for loss and parameter for parameter; and a run resumed from a checkpoint, with or
without workers, continues exactly as the uninterrupted run."""
import os
import subprocess
import sys

import pytest
import torch

from engine.fast import batches
import dataset
import model
import trainer
import utils
from support import SRC, LossLog

HERE = os.path.dirname(os.path.abspath(__file__))  # (and support.py one folder up)
CORPUS = '\n'.join(f'Person {i} was born in Town {i % 7}, wrote {i} books and died in City {i % 5}.'
                   for i in range(40))


def run(workers, max_epochs=2, device='cpu', **extra):
    """Pretraining a tiny model on CORPUS (dropout on) with `workers` worker processes; returns
    (batches the model saw, losses, params)."""
    utils.set_seed(0)
    data = dataset.CharCorruptionDataset(CORPUS, 64)
    gpt = model.GPT(model.GPTConfig(data.vocab_size, 64, n_layer=2, n_head=2, n_embd=32))
    seen = []
    gpt.register_forward_pre_hook(lambda mod, args: seen.append(args[0].clone()))
    log = LossLog()
    conf = trainer.TrainerConfig(max_epochs=max_epochs, batch_size=8, learning_rate=3e-3,
                                 lr_decay=True, warmup_tokens=500, final_tokens=20000,
                                 cpu_workers=workers, num_workers=workers, device=device,
                                 writer=log, **extra)
    trainer.Trainer(gpt, data, None, conf).train()
    return [x.cpu() for x in seen], log.values, {k: v.cpu() for k, v in gpt.state_dict().items()}


def test_worker_batches_and_losses_are_the_in_process_ones():
    in_process, workers = run(0), run(2)
    assert len(in_process[0]) == len(workers[0]) == 10  # 40 lines: 5 batches of 8, 2 epochs
    for a, b in zip(in_process[0], workers[0]):
        assert torch.equal(a, b)
    assert in_process[1] == workers[1]
    assert all(torch.equal(in_process[2][k], workers[2][k]) for k in in_process[2])
    # and the corruptions differ from epoch to epoch (the seeds are drawn, not fixed)
    assert not torch.equal(in_process[0][0], in_process[0][5])


def test_on_a_gpu_worker_batches_pinned_after_trimming_train_as_in_process(device):
    """The GPU's way (4 workers in run.py; batches pinned after the trim, copied without
    waiting): the batches the model sees, the losses and the params are those of batches built
    in process."""
    in_process, workers = run(0, device=device), run(2, device=device)
    assert all(torch.equal(a, b) for a, b in zip(in_process[0], workers[0]))
    assert in_process[1] == workers[1]
    assert all(torch.equal(in_process[2][k], workers[2][k]) for k in in_process[2])


@pytest.mark.parametrize('first,then', [(2, 2), (2, 0), (0, 2)])
def test_resume_continues_the_run_with_or_without_workers(tmp_path, first, then):
    """A checkpoint written after epoch 1 of 3 (by a run with `first` workers), resumed with
    `then` workers: the same params as the uninterrupted run."""
    ckpt = tmp_path / 'pt.params.ckpt'
    _, losses, want = run(first, max_epochs=3, resume_path=str(ckpt), checkpoint_every=1)
    state = torch.load(ckpt, weights_only=True)
    assert state['epoch'] == 2  # the last checkpoint: after epoch 2, before the third
    _, resumed_losses, got = run(then, max_epochs=3, resume_path=str(ckpt), resume=True)
    assert resumed_losses == losses[-5:]  # the third epoch's 5 steps, the same losses
    assert all(torch.equal(got[k], want[k]) for k in want)


# ---- the next epoch built ahead ---------------------------------------------------------------------

def epochs_through(b, generator, epochs, skip=0):
    """The (drawn batches, (x, y) the Batches gave) of `epochs` epochs, as the trainer asks."""
    out = []
    for e in range(epochs):
        drawn = b.draw(generator)[skip if e == 0 else 0:]
        out.append((drawn, list(b.epoch(drawn, generator))))
    return out


def built_here(data, drawn):
    return [batches.collate(data, *batch) for batch in drawn]


def same(got, want):
    return len(got) == len(want) and all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                                         for a, b in zip(got, want))


@pytest.mark.parametrize('shuffle', [False, True])
def test_workers_build_the_next_epochs_ahead_without_a_restart(shuffle):
    """Epochs of 3 batches, 8 in the workers' hands: the stream runs epochs ahead of the loop,
    one stream for the whole run, and every epoch is the batches the trainer drew, built as in
    process (shuffled epochs too: the CPU presets')."""
    data = dataset.CharCorruptionDataset(CORPUS, 64)
    b = batches.Batches(data, workers=2, batch_size=16, shuffle=shuffle)
    generator = torch.Generator().manual_seed(5)
    try:
        first = epochs_through(b, generator, 1)
        stream = b.sampler.stream
        assert len(stream.out) + len(stream.ahead) > 0  # later epochs already handed out
        rest = epochs_through(b, generator, 3)
        assert b.sampler.stream is stream  # never restarted
    finally:
        b.close()
    epochs = first + rest
    assert all(same(got, built_here(data, drawn)) for drawn, got in epochs)
    assert len({tuple(seed for _, seed in drawn) for drawn, _ in epochs}) == 4  # fresh draws


def test_an_epoch_other_than_the_one_built_ahead_restarts_the_stream():
    """A resumed run's first epoch (its batches from a skip), then an epoch from a generator
    set elsewhere: the batches asked for, never the ones built ahead."""
    data = dataset.CharCorruptionDataset(CORPUS, 64)
    b = batches.Batches(data, workers=2, batch_size=8)
    try:
        skipped = epochs_through(b, torch.Generator().manual_seed(1), 1, skip=2)
        stream = b.sampler.stream
        other = torch.Generator().manual_seed(99)
        elsewhere = epochs_through(b, other, 1)
        assert b.sampler.stream is not stream
    finally:
        b.close()
    (drawn, got), = skipped
    assert len(got) == 3 and same(got, built_here(data, drawn))  # 5 batches, 2 skipped
    (drawn, got), = elsewhere
    assert same(got, built_here(data, drawn))


def test_a_stream_that_draws_nothing_more_ends():
    """starts_with and the workers' iteration stop where the following epochs are empty."""
    stream = batches._Stream([([0], 1)], following=lambda: [])
    assert not stream.starts_with([([0], 1), ([1], 2)])
    assert stream.starts_with([([0], 1)])
    assert list(stream) == [([0], 1)]


def test_closing_stops_the_workers_with_batches_built_ahead():
    data = dataset.CharCorruptionDataset(CORPUS, 64)
    b = batches.Batches(data, workers=2, batch_size=8)
    epochs_through(b, torch.Generator().manual_seed(1), 1)
    workers = list(b.iterator._workers)
    assert all(w.is_alive() for w in workers)
    b.close()
    assert not any(w.is_alive() for w in workers)


def test_a_run_with_workers_lets_its_process_exit(tmp_path):
    """The workers ignore SIGTERM (a Ctrl-C is the run's to handle), so workers left building
    the next epoch would keep the interpreter from exiting where the Trainer lives to the end
    (the starter's run.py builds it at module level): the trainer closes them."""
    script = (f'import sys; sys.path[:0] = [{SRC!r}, {HERE!r}, {os.path.dirname(HERE)!r}]\n'
              'import dataset, model, trainer, test_batches\n'
              'data = dataset.CharCorruptionDataset(test_batches.CORPUS, 64)\n'
              'gpt = model.GPT(model.GPTConfig(data.vocab_size, 64, n_layer=1, n_head=2, n_embd=16))\n'
              'run = trainer.Trainer(gpt, data, None, trainer.TrainerConfig(\n'
              '    max_epochs=1, batch_size=8, cpu_workers=2, num_workers=2))\n'
              'run.train()\n'
              'print("trained")\n')
    proc = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                          timeout=180, cwd=tmp_path)  # (a busy machine imports torch slowly)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == 'trained'


@pytest.mark.parametrize('low,high,small', [(0, 255, torch.uint8), (0, 256, torch.int16),
                                             (-100, 40, torch.int16), (0, 40000, torch.int32),
                                             (-1, 2 ** 40, torch.int64)])
def test_a_batch_sent_as_bytes_comes_back_as_the_same_tensors(low, high, small):
    """Workers send a batch's ids as the bytes of the smallest integer type holding them; the
    loop gets back the very tensors (values, dtype, shape)."""
    x = torch.randint(low, high + 1, (5, 7), generator=torch.Generator().manual_seed(0))
    y = torch.randint(low, high + 1, (5, 7), generator=torch.Generator().manual_seed(1))
    x[0, 0], y[0, 0] = low, high
    sent = batches.to_bytes(x, y)
    assert sent.small == small
    px, py = sent.tensors()
    assert px.dtype == py.dtype == torch.long and torch.equal(px, x) and torch.equal(py, y)


def test_what_is_not_a_batch_of_ids_goes_as_it_is():
    x, y = torch.zeros(3, 4, dtype=torch.long), torch.zeros(3, 5, dtype=torch.long)
    assert batches.to_bytes(x, y) == (x, y)  # two shapes
    f = torch.zeros(3, 4)
    assert batches.to_bytes(f, f) == (f, f)  # not ids
    i = torch.zeros(3, 4, dtype=torch.int32)
    assert batches.to_bytes(i, i) == (i, i)  # ids, but not as the datasets give them


def test_the_handouts_batches_travel_as_bytes():
    data = dataset.CharCorruptionDataset(CORPUS, 64)
    x, y = batches.collate(data, list(range(8)), 3)
    sent = batches.to_bytes(x, y)
    assert isinstance(sent, batches.BatchBytes) and sent.small == torch.uint8
    assert len(sent.data) == 2 * x.numel()  # a byte an id, against 8 as int64


# ---- trim_padding ---------------------------------------------------------------------------------

def batch(lengths, width=127, seed=0):
    """x random ids; y non-PAD (ids >= 1) on [0, length) of each row, PAD after."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(1, 20, (len(lengths), width), generator=gen)
    y = torch.randint(1, 20, (len(lengths), width), generator=gen)
    for i, n in enumerate(lengths):
        y[i, n:] = 0
    return x, y


def test_trim_padding_drops_exactly_the_all_pad_columns():
    x, y = batch([10, 37, 5])
    y[0, 3] = 0  # PAD inside a row does not matter
    tx, ty = batches.trim_padding(x, y)
    assert tx.shape == ty.shape == (3, 37)
    assert torch.equal(tx, x[:, :37]) and torch.equal(ty, y[:, :37])
    assert torch.all(y[:, 37:] == 0) and torch.any(ty[:, -1] != 0)


def test_trim_padding_multiple():
    x, y = batch([10, 37, 5])
    assert batches.trim_padding(x, y, multiple=8)[0].shape[1] == 40
    assert batches.trim_padding(x, y, multiple=1)[0].shape[1] == 37
    # never wider than the batch, even when rounding up would be
    x, y = batch([125])
    assert batches.trim_padding(x, y, multiple=8)[0].shape[1] == 127
    x, y = batch([127])
    assert batches.trim_padding(x, y, multiple=8)[0].shape[1] == 127
    # all PAD: one column is kept
    x, y = batch([0, 0])
    assert batches.trim_padding(x, y)[0].shape == (2, 1)
    # the trimmed tensors are contiguous (they are viewed by the loss)
    assert batches.trim_padding(*batch([10, 20]))[1].is_contiguous()


def test_a_checkpoint_resumes_for_a_model_on_another_device(tmp_path, monkeypatch):
    """--resume on a GPU: the checkpoint's random states must reach torch.set_rng_state as CPU
    byte tensors, whatever device the model trains on. Reached here without a GPU: torch.load
    is made to honour a map_location as a GPU would (tensors there, here on 'meta'), so reading
    the checkpoint straight onto the training device fails as it does on CUDA."""
    from engine.training import checkpoint
    ckpt = tmp_path / 'pt.params.ckpt'
    _, losses, want = run(0, max_epochs=3, resume_path=str(ckpt), checkpoint_every=1)
    real_load = torch.load

    def load_like_a_gpu(path, map_location=None, **kw):
        state = real_load(path, map_location='cpu', **kw)
        if str(map_location) == 'cpu':
            return state
        return torch.utils._pytree.tree_map(  # every tensor on the asked device, the RNG's too
            lambda t: t.to('meta') if torch.is_tensor(t) else t, state)
    monkeypatch.setattr(checkpoint.torch, 'load', load_like_a_gpu)
    real_loader = checkpoint.Resumable.load

    def load_for_another_device(self, trainer):
        device = trainer.device
        trainer.device = torch.device('meta')  # what the old code passed as map_location
        try:
            return real_loader(self, trainer)
        finally:
            trainer.device = device
    monkeypatch.setattr(checkpoint.Resumable, 'load', load_for_another_device)
    _, resumed_losses, got = run(0, max_epochs=3, resume_path=str(ckpt), resume=True)
    assert resumed_losses == losses[-5:]
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_a_resumed_run_on_a_gpu_continues_exactly(tmp_path, device):
    """--resume where the model trains (CUDA when there is one): the checkpoint's random states
    go back as CPU tensors, the GPU's own generator included."""
    ckpt = tmp_path / 'pt.params.ckpt'
    _, losses, want = run(0, max_epochs=3, device=device, resume_path=str(ckpt), checkpoint_every=1)
    _, resumed_losses, got = run(0, max_epochs=3, device=device, resume_path=str(ckpt), resume=True)
    assert resumed_losses == losses[-5:]
    assert all(torch.equal(got[k], want[k]) for k in want)
