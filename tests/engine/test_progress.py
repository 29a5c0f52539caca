"""engine/training/progress.py: the handout's training log, its losses read back in groups."""
import pytest
import torch

from support import LossLog
from engine.training.progress import LossNotFinite, Progress


def logged(progress, losses, epoch=0):
    """Log `losses` as steps 0, 1, ... of `epoch`; after each, how many the writer holds."""
    seen = []
    for step, loss in enumerate(losses):
        progress.log(step, torch.tensor(loss), 1e-3, epoch, step, (step + 1) * 10)
        seen.append(len(progress.writer.values))
    return seen


def test_losses_are_read_back_every_log_every_steps():
    progress = Progress(3, LossLog(), disable=True)
    progress.start(10, 0, 0)
    assert logged(progress, [5.0, 4.0, 3.0, 2.0, 1.0, 0.5, 0.25]) == [0, 0, 3, 3, 3, 6, 6]
    progress.flush(70)  # an epoch's end: every loss
    assert progress.writer.values == [5.0, 4.0, 3.0, 2.0, 1.0, 0.5, 0.25]


def test_a_gpus_newest_loss_stays_on_the_device_until_an_epoch_ends():
    """lag (a GPU's): a group is read once one step more than log_every has been launched, the
    newest left behind; the progress bar then names the step of the last loss read, its own
    epoch and iteration; an epoch's end and the run's read them all."""
    progress = Progress(3, LossLog(), disable=True, lag=True)
    progress.start(10, 0, 0)
    assert logged(progress, [5.0, 4.0, 3.0, 2.0, 1.0, 0.5, 0.25, 0.125]) == [0, 0, 0, 3, 3, 3, 6, 6]
    assert progress.pbar.desc.startswith('epoch 1 iter 5: train loss 0.50000.')
    assert len(progress.pending) == 2
    progress.flush(80)
    assert progress.writer.values == [5.0, 4.0, 3.0, 2.0, 1.0, 0.5, 0.25, 0.125]
    assert progress.pbar.desc.startswith('epoch 1 iter 7: train loss 0.12500.')
    progress.close(80)


def test_a_loss_that_is_not_finite_stops_the_run_when_read():
    progress = Progress(2, LossLog(), disable=True, lag=True)
    progress.start(10, 0, 0)
    logged(progress, [5.0, float('nan')])  # read with the group after it (lag)
    with pytest.raises(LossNotFinite, match='became nan at step 2'):
        logged(progress, [4.0])
    assert progress.pending == []


def test_an_epochs_end_leaves_a_gpus_newest_loss_unless_params_are_saved():
    progress = Progress(3, LossLog(), disable=True, lag=True)
    progress.start(10, 0, 0)
    logged(progress, [5.0, float('nan')])
    progress.epoch_end(20, saving=False)  # the nan stays on the device
    assert progress.writer.values == [5.0]
    with pytest.raises(LossNotFinite):
        progress.epoch_end(20, saving=True)


def test_a_checkpoint_is_never_written_after_a_loss_not_read(tmp_path, monkeypatch):
    """A GPU's log (lag, forced here) leaves the newest loss on the device at an epoch's end;
    the periodic checkpoint that follows reads it first: the epoch's last loss is not finite,
    so the run stops and no checkpoint is written."""
    import dataset
    import model
    import trainer
    from engine.training import loop
    import utils
    from engine.training import progress
    monkeypatch.setattr(loop, 'Progress', lambda *a, **k: progress.Progress(
        *a, **dict(k, lag=True)))
    real_step, steps = loop.train_step, []

    def step(*args):
        steps.append(len(steps))
        loss = real_step(*args)
        return loss * float('nan') if len(steps) == 2 else loss  # epoch 1's last step
    monkeypatch.setattr(loop, 'train_step', step)
    utils.set_seed(0)
    data = dataset.CharCorruptionDataset('\n'.join(f'line {i} of a corpus' for i in range(12)), 32)
    gpt = model.GPT(model.GPTConfig(data.vocab_size, 32, n_layer=1, n_head=2, n_embd=16))
    ckpt = tmp_path / 'run.ckpt'
    conf = trainer.TrainerConfig(max_epochs=3, batch_size=8, log_every=25,
                                 resume_path=str(ckpt), checkpoint_every=1)
    with pytest.raises(LossNotFinite, match='at step 2 '):
        trainer.Trainer(gpt, data, None, conf).train()
    assert steps == [0, 1] and not ckpt.exists()
