"""budget.py: a time budget plans the epochs that fit (measured steps undone), compresses the
schedule to them, re-plans after the first epoch, and treats a budget too small for one epoch as
the user's error (a flag's) or as one epoch with a warning (a preset's).

Time is a stand-in clock that each training step advances (FakeClock): no test measures the wall
clock, so a busy machine changes none of them."""
import json
import os
import random
import re

import pytest
import torch

from engine import common
from engine.training import loop, optim
from engine.machine import measure
from engine.machine import plan as planning
from support import REPO
import trainer
from support import Clock
from test_schedule import RecordingWriter, tiny_gpt
from tiny_run import command, preset_model, stage_config


def FakeClock():
    """The trainer's clock (TrainerConfig.clock): it moves only when a step advances it."""
    return Clock(1000.0)


def budgeted_run(data, budget, max_epochs=4, seed=0, clock=None, **config):
    """A Trainer run (dataset `data`, batches of 8) with time_budget seconds (and other
    TrainerConfig `config`), reading `clock`; (trainer, params, lrs logged)."""
    torch.manual_seed(seed)
    random.seed(seed)
    gpt = tiny_gpt(vocab=len(data.stoi), n_layer=1)
    writer = RecordingWriter()
    conf = trainer.TrainerConfig(max_epochs=max_epochs, batch_size=8, learning_rate=1e-3,
                                 lr_decay=True, warmup_tokens=100,
                                 final_tokens=max_epochs * 20 * 127,  # the cosine over every epoch
                                 writer=writer, time_budget=budget, **config)
    t = trainer.Trainer(gpt, data, None, conf, clock=clock)
    t.train()
    return t, gpt.state_dict(), [v for _, v in writer.scalars['train/lr']]


def test_a_budget_that_fits_every_epoch_changes_nothing(name_data, capsys):
    """The measured steps are undone (weights, random states, token count): with a budget that
    fits all max_epochs the run is the unbudgeted run, to the bit."""
    _, want, want_lrs = budgeted_run(name_data, None)
    t, got, lrs = budgeted_run(name_data, 600)
    assert 'time budget 10 min: 4 epochs of 3 steps' in capsys.readouterr().out
    assert t.run.schedule.max_epochs == 4 and t.run.tokens == 4 * 20 * 127 and lrs == want_lrs
    assert all(torch.equal(got[k], want[k]) for k in want)


def slow_steps(monkeypatch, seconds):
    """Every training step takes `seconds` on a stand-in clock (a slow machine, not a busy one;
    a function of the number of steps taken so far for a machine whose pace changes): returns the
    clock, for the runs' Trainer(clock=...)."""
    clock = FakeClock()
    real_step = loop.train_step
    taken = []

    def slow_step(*args):
        clock.now += seconds(len(taken)) if callable(seconds) else seconds
        taken.append(1)
        return real_step(*args)
    monkeypatch.setattr(loop, 'train_step', slow_step)
    return clock


def test_a_budget_too_small_for_one_epoch(name_data, monkeypatch, capsys):
    """A flag's budget too small for one epoch is the user's error; a preset's (run.py sets
    budget_may_grow) trains one epoch on such a machine, with a warning saying so."""
    clock = slow_steps(monkeypatch, 0.05)
    with pytest.raises(common.UsageError, match='--time_budget 0.0025 min is too small for one epoch'):
        budgeted_run(name_data, 0.15, clock=clock)
    t, _, lrs = budgeted_run(name_data, 0.15, budget_may_grow=True, clock=clock)
    assert t.run.schedule.max_epochs == 1 and len(lrs) == 3
    assert ("warning: the time budget of 0.0025 min is too small for one epoch"
            in capsys.readouterr().out)


def test_a_budget_that_binds_compresses_the_schedule(name_data, monkeypatch, capsys):
    """Steps of 50 ms (a stand-in for a slow machine), 3 per epoch, a 1.5 s budget: the epochs
    that end within 95% of what is left after measuring, the cosine laid over them (its 10% floor
    reached at the last step), and the run ends inside the budget."""
    clock = slow_steps(monkeypatch, 0.05)
    start = clock()
    t, _, lrs = budgeted_run(name_data, 1.5, max_epochs=50, clock=clock)
    took = clock() - start
    out = capsys.readouterr().out
    epochs = t.run.schedule.max_epochs
    # 2 untimed + 3 timed steps (then the measuring passed 2% of the budget): 0.25 s; an epoch
    # is 0.15 s, and int(0.95 * 1.25 / 0.15) = 7 epochs fit, which the first epoch confirms
    assert epochs == 7, out
    planned = int(re.search(r'time budget 0.025 min: (\d+) epochs of 3 steps', out).group(1))
    assert planned == epochs or f': {epochs} epochs instead of {planned}' in out  # (a re-plan)
    assert t.run.schedule.final_tokens == pytest.approx(50 * 20 * 127 * epochs / 50)
    assert len(lrs) == 3 * epochs and lrs[-1] == pytest.approx(1e-4)
    # the cosine reaches its floor (80% of the way) near the end, not long before
    assert lrs[int(0.7 * len(lrs)) - 1] > 1.5e-4
    assert took == pytest.approx(0.25 + 7 * 0.15) and took < 1.5


def test_the_first_epoch_corrects_a_misleading_measurement(name_data, monkeypatch, capsys):
    """The timed steps said 1 ms a step, the steps take 100 ms (3 per epoch): the plan's 50
    epochs would take 15 s of a 4 s budget. After the first epoch the run re-plans at the pace
    it saw: it ends inside the budget with its schedule finished (the lr at its 10% floor at the
    last step), not cut short by the safety net."""
    clock = slow_steps(monkeypatch, 0.1)
    monkeypatch.setattr(measure.StepTimer, 'times', lambda self, *a, **k: [0.001] * 3)
    start = clock()
    t, _, lrs = budgeted_run(name_data, 4, max_epochs=50, start_time=start, clock=clock)
    took = clock() - start
    out = capsys.readouterr().out
    epochs = t.run.schedule.max_epochs
    assert 'time budget 0.0666667 min: 50 epochs of 3 steps' in out
    # the first epoch took 0.3 s: 1 + int(0.95 * 3.7 / 0.3) = 12 epochs, 3.6 s
    assert f': {epochs} epochs instead of 50' in out and epochs == 12, out
    assert 'stopping after epoch' not in out
    # the rest of the cosine laid over the 12 epochs from where it stood after the first
    assert t.run.schedule.relaid is not None and t.run.schedule.relaid[0] == 20 * 127  # one epoch's tokens
    assert len(lrs) == 3 * epochs and lrs[-1] == pytest.approx(1e-4)
    assert all(b <= a + 1e-12 for a, b in zip(lrs[1:], lrs[2:]))  # no jump up after the warmup
    assert took == pytest.approx(12 * 0.3) and took < 4


def test_the_checkpoint_after_a_re_plan_holds_the_new_plan(name_data, monkeypatch, tmp_path):
    """A resumed budgeted run continues the plan its checkpoint holds: the checkpoint written
    after the first epoch must already hold the re-planned epochs and schedule."""
    from engine.training import checkpoint
    clock = slow_steps(monkeypatch, 0.1)
    monkeypatch.setattr(measure.StepTimer, 'times', lambda self, *a, **k: [0.001] * 3)
    saved = []
    real_save = checkpoint.Resumable.save

    def save(self, run, *args):
        saved.append((run.schedule.max_epochs, run.schedule.final_tokens))
        return real_save(self, run, *args)
    monkeypatch.setattr(checkpoint.Resumable, 'save', save)
    t, _, _ = budgeted_run(name_data, 4, max_epochs=50, start_time=clock(), clock=clock,
                           resume_path=str(tmp_path / 'run.ckpt'), checkpoint_every=1)
    assert t.run.schedule.max_epochs == 12 and len(saved) == 11  # after every epoch but the last
    assert set(saved) == {(12, t.run.schedule.final_tokens)}


def last_printed_epochs(out):
    return int(re.findall(r'(?:time budget [\d.]+ min: |: )(\d+) epochs', out)[-1])


@pytest.mark.parametrize('pace', ['slower', 'faster'])
def test_a_pace_that_changes_mid_run_is_fitted_again_and_the_schedule_finishes(
        name_data, monkeypatch, capsys, pace):
    """The steps take 50 ms, then from the 4th epoch on 100 ms (a machine that got busy), or
    the reverse (one that got idle), in a 3 s budget of at most 50 epochs: after each epoch the
    epochs left are fitted to the time left; the run trains the number it printed last, ends
    inside the budget with little of it unused, and its learning rate goes down smoothly to the
    floor at the last step."""
    first, then = (0.05, 0.1) if pace == 'slower' else (0.1, 0.05)
    clock = slow_steps(monkeypatch, lambda n: first if n < 5 + 9 else then)  # 5 timing steps
    start = clock()
    t, _, lrs = budgeted_run(name_data, 3, max_epochs=50, start_time=start, clock=clock)
    took = clock() - start
    out = capsys.readouterr().out
    planned = int(re.search(r'time budget 0.05 min: (\d+) epochs', out).group(1))
    epochs = t.run.schedule.max_epochs
    assert (epochs < planned) if pace == 'slower' else (epochs > planned), out
    assert len(lrs) == 3 * epochs and last_printed_epochs(out) == epochs, out
    assert 'stopping after epoch' not in out
    assert 0.85 * 3 <= took <= 3, (took, out)
    assert lrs[-1] == pytest.approx(1e-4)  # the floor, at the last step
    assert all(b <= a + 1e-12 for a, b in zip(lrs[1:], lrs[2:]))  # after the warmup's step


def test_a_resumed_budgeted_run_lays_its_schedule_over_the_epochs_it_trains(
        name_data, monkeypatch, tmp_path, capsys):
    """Interrupted after epoch 3 of a budgeted run and resumed on a faster machine: the plan
    made again after the first resumed epoch counts the tokens of the epochs it trained (not
    of the whole run), so the learning rate still ends at the floor at the last step."""
    import shutil
    from engine.training import checkpoint
    pace = [0.1]  # seconds per step: 0.05 once resumed
    clock = slow_steps(monkeypatch, lambda n: pace[0])
    monkeypatch.setattr(measure.StepTimer, 'times', lambda self, *a, **k: [0.001] * 3)
    ckpt, kept = tmp_path / 'run.ckpt', tmp_path / 'after-epoch-3.ckpt'
    real_save = checkpoint.Resumable.save

    def save(self, t, epoch, *args):
        real_save(self, t, epoch, *args)
        if epoch == 3:
            shutil.copyfile(ckpt, kept)
    monkeypatch.setattr(checkpoint.Resumable, 'save', save)
    start = clock()
    budgeted_run(name_data, 4, max_epochs=50, start_time=start, clock=clock,
                 resume_path=str(ckpt), checkpoint_every=1)
    assert torch.load(kept, weights_only=True)['max_epochs'] == 12
    shutil.copyfile(kept, ckpt)
    capsys.readouterr()
    clock.now = start + 0.3 * 3 + 0.01  # the resumed run starts where the 3 epochs ended
    pace[0] = 0.05
    t, _, lrs = budgeted_run(name_data, 4, max_epochs=50, start_time=start, clock=clock,
                             resume_path=str(ckpt), resume=True)
    out = capsys.readouterr().out
    assert 'time budget: after epoch 4' in out and t.run.schedule.max_epochs > 12, out
    assert len(lrs) == 3 * (t.run.schedule.max_epochs - 3)
    assert lrs[-1] == pytest.approx(1e-4)


def test_a_wavering_pace_leaves_the_plan_alone(name_data, monkeypatch, capsys):
    """Steps of 100 ms, 4% slower and faster by turns from epoch to epoch (a machine's ordinary
    noise), in a budget the measured pace fills: the plan is made once and kept (before: it was
    made again after most epochs, 40 <-> 43 on a real run), the run ends inside the budget with
    its schedule at the floor at the last step."""
    clock = slow_steps(monkeypatch, lambda n: 0.1 * (1.04 if (n // 3) % 2 else 0.96))
    monkeypatch.setattr(measure.StepTimer, 'times', lambda self, *a, **k: [0.1] * 3)
    start = clock()
    t, _, lrs = budgeted_run(name_data, 6, max_epochs=50, start_time=start, clock=clock)
    took = clock() - start
    out = capsys.readouterr().out
    assert 'time budget 0.1 min: 18 epochs' in out  # (6 - 0.3) // 0.3, in floats
    assert 'time budget: after epoch' not in out and 'stopping' not in out, out
    assert t.run.schedule.max_epochs == 18 and len(lrs) == 3 * 18
    assert took <= 6 and lrs[-1] == pytest.approx(1e-4)


def test_one_more_epoch_that_surely_fits_near_the_end_is_trained(name_data, monkeypatch, capsys):
    """Steps of 100 ms measured beforehand at 110 ms (a plan of 17 epochs of 0.33 s in a 6 s
    budget, where 18 of the true 0.3 s fit with the margin kept): the plan grows by the one epoch
    once the pace is sure (before, it kept 17, as a one-core run of main.sh kept 3 epochs' slack
    and ended at 18:56 of its 20 minutes: results/cpu-20min/README.md, run 17), and the run still
    ends inside the budget with its schedule at the floor at the last step."""
    clock = slow_steps(monkeypatch, 0.1)
    monkeypatch.setattr(measure.StepTimer, 'times', lambda self, *a, **k: [0.11] * 3)
    start = clock()
    t, _, lrs = budgeted_run(name_data, 6, max_epochs=50, start_time=start, clock=clock)
    took = clock() - start
    out = capsys.readouterr().out
    assert 'time budget 0.1 min: 17 epochs' in out, out
    assert t.run.schedule.max_epochs == 18 and last_printed_epochs(out) == 18, out
    assert out.count('time budget: after epoch') == 1 and 'stopping' not in out, out
    assert 6 - 0.3 - 0.3 <= took <= 6 and len(lrs) == 3 * 18, (took, out)
    assert lrs[-1] == pytest.approx(1e-4)


def test_a_stray_slow_epoch_among_short_ones_leaves_the_plan_alone(name_data, monkeypatch, capsys):
    """Short epochs with a slow one now and then, at random (a GPU's: 0.3 s epochs, one in four
    0.5 s; the first H100 run re-planned after ~96 of its 546 epochs, between 424 and 602): the
    plan is fitted to the mean pace once or twice, not after every slow epoch (in the last 5%
    of its epochs it may still take one more that surely fits, one at a time); the run trains the
    number it printed last, inside the budget, its schedule at the floor at the last step."""
    draw = random.Random(7)
    slow = [draw.random() < 0.25 for _ in range(400)]
    clock = slow_steps(monkeypatch, lambda n: 0.1 * (5 / 3 if slow[n // 3] else 1))
    monkeypatch.setattr(measure.StepTimer, 'times', lambda self, *a, **k: [0.1] * 3)
    start = clock()
    t, _, lrs = budgeted_run(name_data, 45, max_epochs=400, start_time=start, clock=clock)
    took = clock() - start
    out = capsys.readouterr().out
    replans = re.findall(r'after epoch (\d+) .*: (\d+) epochs instead of (\d+)', out)
    late = [r for r in replans if int(r[2]) - int(r[0]) <= max(2, 0.05 * int(r[2]))]
    assert len(replans) - len(late) <= 2, out
    assert all(int(new) == int(old) + 1 for _, new, old in late), out
    assert 'stopping' not in out and last_printed_epochs(out) == t.run.schedule.max_epochs, out
    assert 0.9 * 45 <= took <= 45 and lrs[-1] == pytest.approx(1e-4)


def test_the_first_step_s_one_off_cost_is_not_taken_for_the_pace(name_data, monkeypatch, capsys):
    """The run's first step takes 1 s more than the others (what a run sets up once: on an H100
    the first epoch took 0.7 s against 0.3 s for the rest, and the plan fell from the handout's
    650 epochs to 306); steps of 100 ms, 3 per epoch, as the timed steps said, and all 20 epochs
    asked for fit in the budget with that second to spare: the plan is made once and kept."""
    clock = slow_steps(monkeypatch, lambda n: 1.1 if n == 0 else 0.1)
    monkeypatch.setattr(measure.StepTimer, 'times', lambda self, *a, **k: [0.1] * 3)
    start = clock()
    t, _, lrs = budgeted_run(name_data, 8, max_epochs=20, start_time=start, clock=clock)
    took = clock() - start
    out = capsys.readouterr().out
    assert 'time budget 0.133333 min: 20 epochs' in out, out
    assert 'time budget: after epoch' not in out and 'stopping' not in out, out
    assert t.run.schedule.max_epochs == 20 and len(lrs) == 3 * 20
    assert took == pytest.approx(1 + 20 * 0.3) and lrs[-1] == pytest.approx(1e-4)


def test_each_epochs_wall_seconds_are_kept_for_the_record(name_data, monkeypatch, tmp_path):
    """Every run keeps its epochs' seconds on the clock as they were (the run's record: where a
    short GPU stage's time goes), the first step's one-off cost in the first epoch, where the
    budget's pace leaves it out; and a checkpoint in the epoch that wrote it."""
    clock = slow_steps(monkeypatch, lambda n: 1.1 if n == 0 else 0.1)
    t, _, _ = budgeted_run(name_data, None, max_epochs=3, clock=clock)
    assert t.run.epoch_walls == pytest.approx([1.3, 0.3, 0.3])
    assert not hasattr(t, 'epoch_seconds')  # (no budget, no pace)
    monkeypatch.setattr(measure.StepTimer, 'times', lambda self, *a, **k: [0.1] * 3)
    clock = slow_steps(monkeypatch, lambda n: 1.1 if n == 0 else 0.1)  # (a first step again)
    t, _, _ = budgeted_run(name_data, 60, max_epochs=3, clock=clock)
    assert t.run.epoch_walls == pytest.approx([1.3, 0.3, 0.3])
    assert t.run.epoch_seconds == pytest.approx([0.3, 0.3, 0.3])  # (the pace: its other steps')
    from engine.training import checkpoint
    real = checkpoint.Resumable.on_epoch_end

    def slow_checkpoint(self, trainer, epoch):
        clock.now += 5.0 if epoch == 1 else 0.0
        return real(self, trainer, epoch)
    monkeypatch.setattr(checkpoint.Resumable, 'on_epoch_end', slow_checkpoint)
    t, _, _ = budgeted_run(name_data, None, max_epochs=3, clock=clock,
                           resume_path=str(tmp_path / 'run.ckpt'), checkpoint_every=0)
    assert t.run.epoch_walls == pytest.approx([0.3, 5.3, 0.3])


@pytest.mark.parametrize('step, epochs', [(0.1, 17), (0.2, 7)])
def test_a_budget_that_holds_what_follows_keeps_its_time_at_the_run_s_pace(
        name_data, monkeypatch, capsys, step, epochs):
    """A 6 s budget that also holds 2 epochs after the training (main.sh's finetuning): the
    epochs that fit in it less those 2 at the pace here and a 1% margin, (6 - 0.06 - 0.6) //
    0.3 with 0.1 s steps, (6 - 0.06 - 1.2) // 0.6 with 0.2 s (a fixed 5% margin would train
    18 and 9: what follows would end past the budget); no whole epoch left unused."""
    clock = slow_steps(monkeypatch, step)
    monkeypatch.setattr(measure.StepTimer, 'times', lambda self, *a, **k: [step] * 3)
    start = clock()
    t, _, lrs = budgeted_run(name_data, 6, max_epochs=50, start_time=start, clock=clock,
                             budget_after=2)
    took = clock() - start
    out = capsys.readouterr().out
    assert f"time budget 0.1 min (2 epochs' time of it kept for what follows): {epochs} epochs" in out
    assert t.run.schedule.max_epochs == epochs and 'time budget: after epoch' not in out, out
    epoch = 3 * step
    assert 6 - 0.06 - epoch < took + 2 * epoch <= 6 - 0.06 and lrs[-1] == pytest.approx(1e-4)


def recorded_epochs():
    with open(os.path.join(REPO, 'results', 'cpu-20min', 'epoch_times.json')) as f:
        return {name: run['epoch_seconds'] for name, run in json.load(f)['runs'].items()}


@pytest.mark.parametrize('run', sorted(recorded_epochs()))
def test_recorded_paces_end_before_the_time_kept_for_what_follows(name_data, monkeypatch, capsys, run):
    """The epoch times of five main.sh runs (results/cpu-20min/epoch_times.json: idle, light
    and heavy loads, one core; a quarter slower, as a busier machine's), replayed in main.sh's
    pretraining budget of about 18.5 min that holds 1.2 epochs more: the training ends before
    that time, leaving at least half of its 1% margin (a plan allowed to run into half of the
    margin, as a budget of its own is, left 3 s of it with run 16's times), and leaves no more
    than an epoch unused."""
    times = [1.25 * s for s in recorded_epochs()[run]]
    clock = slow_steps(monkeypatch, lambda n: times[(n // 3) % len(times)] / 3)
    monkeypatch.setattr(measure.StepTimer, 'times', lambda self, *a, **k: [times[0] / 3] * 3)
    budget, after = 1112, 1.2
    start = clock()
    t, _, _ = budgeted_run(name_data, budget, max_epochs=650, start_time=start, clock=clock,
                           budget_after=after)
    took = clock() - start
    out = capsys.readouterr().out
    last = times[(t.run.schedule.max_epochs - 1) % len(times)]
    left = budget - took - after * last
    assert 0.005 * budget <= left <= last + 0.01 * budget, (left, out)


# cpu-20min's model for a slow machine (presets.slow_machine, cpu_recipe.fit_model)

def pretrain_args(*extra, preset='cpu-20min', **decided):
    """run.py pretrain's arguments; batches of 8: name_data's 650 epochs are 1,950 steps."""
    return command(['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path', 'p.params',
                    '--preset', preset, '--precision', 'fp32', '--batch_size', '8', *extra],
                   **decided)


def planned(args, data, clock):
    """run.py's model and plan for `args` on `data`: (plan, the model it trains)."""
    gpt, smaller = preset_model(args, len(data.stoi), data.block_size)
    tconf = stage_config(args, 'pretrain', len(data))
    return planning.make(gpt, data, tconf, loop.train_step, optim.make_optimizer,
                         clock=clock, smaller=smaller)


@pytest.mark.parametrize('step, epochs, layers', [(0.6, '650', 2), (0.4, '1000', 4), (0.6, '300', 4)])
def test_a_machine_too_slow_for_the_presets_model_pretrains_its_smaller_one(
        name_data, monkeypatch, capsys, step, epochs, layers):
    """cpu-20min pretrains its 4-layer model where the plan's timed steps say it fits at least
    2,200 steps into its 17 minutes (0.4 s a step: 2,422 of 1,000 epochs' 3,000), or every
    step asked for (300 epochs: 900 steps), else the 2-layer one, said in the plan's line. The
    timed steps are undone, and the 2-layer model starts from the weights it would have if
    built first: the choice changes the model, not the seed's draws."""
    from engine.command import params
    from engine import presets
    monkeypatch.setattr(measure.StepTimer, 'times', lambda self, *a, **k: [step] * 3)
    clock = FakeClock()
    torch.manual_seed(0)
    assert len(name_data) == 20  # 3 batches of 8
    args = pretrain_args('--max_epochs', epochs, started=clock.now)
    plan, gpt = planned(args, name_data, clock)
    out = capsys.readouterr().out
    assert params.layers_of(gpt.state_dict()) == layers
    # 17 min less the budget's 5% margin, at 0.6 s a step: 1,615 steps
    said = ("a 2-layer model: the preset's 4 layers fit 1,615 steps (0.600 s each) into the "
            "budget here, fewer than 2,200; time budget 17 min: ")
    assert (said in out) == (layers == 2) and out.count('plan: ') == 1, out
    assert (plan.record()['depth'] is not None) == (layers == 2)
    torch.manual_seed(0)
    want, _ = preset_model(pretrain_args(), len(name_data.stoi), name_data.block_size,
                           **(presets.slow_machine('cpu-20min')['model'] if layers == 2 else {}))
    assert gpt.state_dict().keys() == want.state_dict().keys()
    assert all(torch.equal(v, want.state_dict()[k]) for k, v in gpt.state_dict().items())


@pytest.mark.parametrize('epochs,may_grow,measured', [(1, True, False), (1, False, True),
                                                      (2, True, True)])
def test_a_presets_budget_over_one_epoch_measures_nothing(name_data, epochs, may_grow, measured):
    """cpu-20min's one-epoch finetuning: a preset's budget would train that epoch whatever the
    steps take, so no steps are timed for it; a flag's budget is (too small, it is an error)."""
    from engine.machine import budget
    conf = trainer.TrainerConfig(max_epochs=epochs, batch_size=8, time_budget=60.0,
                                 budget_may_grow=may_grow)
    t = trainer.Trainer(tiny_gpt(vocab=len(name_data.stoi), n_layer=1), name_data, None, conf)
    assert any(isinstance(c, budget.TimeBudget) for c in t.run.callbacks) is measured


def test_a_budgeted_pretraining_is_measured_once(name_data, monkeypatch, capsys):
    """cpu-20min's pretraining (precision auto, a budget, a slow model to offer): the plan
    chooses the precision and attention path, the depth and the epochs in one line; the run's
    Trainer then trains on it without timing a step, and its record holds the plan."""
    from engine import devices
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: False)
    monkeypatch.setattr(measure.StepTimer, 'times', lambda self, *a, **k: [0.4] * 3)
    clock = slow_steps(monkeypatch, 0.4)
    args = pretrain_args('--max_epochs', '2', '--precision', 'auto', started=clock.now)
    plan, gpt = planned(args, name_data, clock)
    assert plan.precision == 'fp32' and plan.kernel in (True, False) and plan.epochs == 2
    assert {m.cpu_kernel for m in gpt.modules() if hasattr(m, 'cpu_kernel')} == {plan.kernel}

    def timed(self, *a, **k):
        raise AssertionError('timed steps')
    monkeypatch.setattr(measure.StepTimer, 'times', timed)
    tconf = stage_config(args, 'pretrain', len(name_data))
    t = trainer.Trainer(gpt, name_data, None, tconf, plan, clock=clock)
    t.train()
    out = capsys.readouterr().out
    assert out.count('plan: ') == 1 and 'auto: ' not in out and 'time budget 17 min' in out, out
    assert t.run.precision == 'fp32' and t.run.schedule.max_epochs == 2 and t.run.epochs_trained == 2
    assert json.loads(json.dumps(plan.record()))['epochs'] == 2


def test_only_a_pretraining_of_a_preset_with_a_slow_model_offers_it(name_data):
    """The handout's preset never changes its model, nor does cpu-20min's finetuning (from
    scratch here): no smaller model is offered to their plans."""
    from engine.command import params
    scratch = command(['finetune', 'vanilla', 'corpus.txt', '--writing_params_path', 'f.params',
                       '--finetune_corpus_path', 'train.tsv', '--preset', 'cpu-20min',
                       '--precision', 'fp32'])
    for args in (pretrain_args('--time_budget', '1', preset='handout'), scratch):
        gpt, smaller = preset_model(args, len(name_data.stoi), name_data.block_size)
        assert params.layers_of(gpt.state_dict()) == 4 and smaller is None
    gpt, smaller = preset_model(pretrain_args(), len(name_data.stoi), name_data.block_size)
    assert smaller is not None and smaller[1] == 2200


def test_params_and_checkpoints_of_the_slow_model_are_read_into_it(name_data, monkeypatch, tmp_path):
    """Finetuning or evaluating cpu-20min's params, or resuming its pretraining, builds the
    depth the file holds when it is the preset's or its slow model's, without timing anything;
    any other depth gets the preset's model, which the load then refuses in one line."""
    from engine.command import params

    monkeypatch.chdir(tmp_path)
    vocab, block = len(name_data.stoi), name_data.block_size
    for layers in (2, 3, 4):
        state = preset_model(pretrain_args(), vocab, block, n_layer=layers)[0].state_dict()
        torch.save(state, f'{layers}.params')
        torch.save({'model': state, 'optimizer': {}, 'epoch': 1}, 'p.params.ckpt')
        want = layers if layers != 3 else 4
        evaluate = command(['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                            f'{layers}.params', '--eval_corpus_path', 'dev.tsv',
                            '--outputs_path', 'o', '--preset', 'cpu-20min'])
        for args in (evaluate, pretrain_args('--resume')):
            gpt, smaller = preset_model(args, vocab, block)
            assert params.layers_of(gpt.state_dict()) == want and smaller is None
        if layers == 3:
            with pytest.raises(common.UsageError, match=r'3\.params: params are a vanilla model of '
                               'other sizes'):
                params.load_params(gpt, '3.params', 'a vanilla model', 'cpu')


def test_the_layers_a_state_dict_holds():
    """params.layers_of: the n_layer a GPT was built with, from its keys alone (a perceiver's
    down and up blocks are two of its layers)."""
    from engine.command import params
    for kw in ({}, dict(perceiver=True, bottleneck_dim=8)):
        for layers in (2, 3, 4):
            assert params.layers_of(tiny_gpt(n_layer=layers, **kw).state_dict()) == layers
