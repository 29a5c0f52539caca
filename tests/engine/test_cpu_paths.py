"""precision 'auto' in training on a CPU (the run's plan, plan.py, with cpu_paths): the candidates that
compute the same function (fp32 / bf16 autocast where the CPU has bf16; attention through the
fused kernel / the written-out math where attention has no dropout) are timed on this run's
model and batch, the fastest is kept and printed with the figures, and the choice is remembered
per machine and run shape with its figures; measuring changes nothing else; a bad cache file is
a warning. A choice measured on a busy machine is not remembered, and a remembered one is checked
against the run's own steps (measured again when they disagree): a stand-in clock and stand-in
CPU counters drive those cases. A run of one epoch times nothing. The same counters drive
torch's thread count on a busy machine (the plan's, then cpu_load.FollowLoad's)."""
import json
import types

import pytest
import torch

from engine.machine import cpu_load
from engine.machine import cpu_paths
import dataset
from engine import devices
from engine.machine import measure
import model
from engine.machine import plan
import trainer
import utils

CORPUS = '\n'.join(f'Person {i} was born in Town {i % 7} and wrote {i} books.' for i in range(24))


class Machine:
    """A stand-in clock and CPU counters (cpu_paths.cpu_times): each reading of the clock moves
    time on by `tick` seconds, during which this process uses all the cores and other processes
    `others` of them."""

    def __init__(self, tick=0.1, others=0.0):
        self.now, self.tick, self.others = 0.0, tick, others
        self.busy = self.own = 0.0

    def advance(self, seconds):
        cores = cpu_paths.os.cpu_count()
        self.now += seconds
        self.own += seconds * cores * (1 - self.others)
        self.busy += seconds * cores

    def clock(self):
        self.advance(self.tick)
        return self.now

    def cpu_times(self):
        return self.busy, self.own


def run(cache, precision='auto', dropout=0.0, kernel='unset', machine=None, epochs=2, **config):
    utils.set_seed(0)
    machine = machine or Machine()
    data = dataset.CharCorruptionDataset(CORPUS, 64)
    conf = model.GPTConfig(data.vocab_size, 64, n_layer=2, n_head=2, n_embd=32)
    conf.embd_pdrop = conf.resid_pdrop = conf.attn_pdrop = dropout
    gpt = model.GPT(conf)
    if kernel != 'unset':
        cpu_paths.set_attention_path(gpt, kernel)
    tconf = trainer.TrainerConfig(max_epochs=epochs, batch_size=8, learning_rate=3e-3,
                                  precision=precision, path_cache=str(cache), **config)
    t = trainer.Trainer(gpt, data, None, tconf, clock=machine.clock, cpu_times=machine.cpu_times)
    t.train()
    return t, gpt


def kernels(gpt):
    return {m.cpu_kernel for m in gpt.modules() if hasattr(m, 'cpu_kernel')}


def test_measured_choice_is_printed_remembered_and_changes_nothing_else(tmp_path, capsys):
    cache = tmp_path / 'paths.json'
    t, gpt = run(cache)
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith('plan: '))
    assert 'measured, median of 3 steps' in line and 'attention kernel' in line and 'attention math' in line
    (kernel,) = kernels(gpt)
    assert kernel in (True, False) and t.run.precision in ('fp32', 'bf16')
    saved = json.loads(cache.read_text())
    [entry] = saved['choices'].values()
    assert entry['choice'] == [t.run.precision, kernel]
    assert set(entry['seconds']) == {cpu_paths.path_name(c) for c in cpu_paths.cpu_candidates(gpt)}
    # the next run of the same shape takes it from the cache, and trains exactly as a run that
    # was told that precision and path: the measuring steps were undone
    t2, gpt2 = run(cache)
    assert 'cached for this machine' in capsys.readouterr().out
    _, told = run(cache, precision=t.run.precision, kernel=kernel)
    for k, v in told.state_dict().items():
        assert torch.equal(gpt.state_dict()[k], v) and torch.equal(gpt2.state_dict()[k], v), k


def test_the_fastest_candidate_is_kept(tmp_path, monkeypatch, capsys):
    """Four candidates (a CPU with bf16 arithmetic), timed by a stand-in clock: bf16 with the
    written-out math is the fastest here, fp32 with the kernel the slowest."""
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: True)
    fake = {('fp32', True): 0.9, ('fp32', False): 0.8, ('bf16', True): 0.7, ('bf16', False): 0.5}

    def timed(self, precision, warm, timed, ahead=False, stop=None):
        kernel, = kernels(self.model)
        return [fake[precision, kernel]] * timed
    monkeypatch.setattr(measure.StepTimer, 'times', timed)
    t, gpt = run(tmp_path / 'paths.json')
    assert t.run.precision == 'bf16' and kernels(gpt) == {False}
    assert 'plan: bf16 + attention math (measured' in capsys.readouterr().out


def test_attention_dropout_leaves_only_the_precision_to_choose(tmp_path, capsys):
    """With attention dropout the CPU path is the written-out math (attention.CausalSelfAttention.cpu_math): on a CPU
    without bf16 nothing is left to measure."""
    t, gpt = run(tmp_path / 'paths.json', dropout=0.1)
    if not devices.cpu_has_bf16():
        assert t.run.precision == 'fp32' and 'plan: ' not in capsys.readouterr().out
        assert not (tmp_path / 'paths.json').exists()
    assert kernels(gpt) == {None}


@pytest.mark.parametrize('content', ['{not json', '[1, 2, 3]', '{"format": "someone else"}'])
def test_a_corrupt_or_foreign_cache_is_a_warning(tmp_path, capsys, content):
    cache = tmp_path / 'paths.json'
    cache.write_text(content)
    t, _ = run(cache)
    err = capsys.readouterr().err
    assert f'warning: ignoring the cache of measured choices {cache}' in err
    assert json.loads(cache.read_text())['format'] == cpu_paths.PATH_CACHE_FORMAT  # measured anew


def fake_timings(monkeypatch, machine, seconds):
    """StepTimer.times stood in for: each candidate's steps take seconds[(precision, kernel)] on the
    stand-in clock; returns the list of the candidates timed, in order."""
    timed_paths = []

    def timed(self, precision, warm, timed, ahead=False, stop=None):
        kernel, = kernels(self.model)  # (None: the plan's first steps, before a path is set)
        if timed:
            timed_paths.append((precision, kernel))
        machine.advance((warm + timed) * seconds.get((precision, kernel), 0.5))
        return [seconds.get((precision, kernel), 0.5)] * timed
    monkeypatch.setattr(measure.StepTimer, 'times', timed)
    return timed_paths


KERNEL_FASTER = {('fp32', True): 0.4, ('fp32', False): 0.6}
MATH_FASTER = {('fp32', True): 0.9, ('fp32', False): 0.5}


def test_a_choice_measured_on_a_busy_machine_is_used_but_not_remembered(tmp_path, monkeypatch,
                                                                        capsys):
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: False)
    busy = Machine(others=0.5)  # another process held half the CPUs while the steps were timed
    fake_timings(monkeypatch, busy, KERNEL_FASTER)
    t, gpt = run(tmp_path / 'paths.json', machine=busy)
    assert (t.run.precision, kernels(gpt)) == ('fp32', {True})
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith('plan: '))
    assert 'not remembered: other processes used 50% of the CPUs' in line
    assert not (tmp_path / 'paths.json').exists()
    # idle, the same measurement is remembered, with its figures
    fake_timings(monkeypatch, Machine(), KERNEL_FASTER)
    run(tmp_path / 'paths.json')
    [entry] = json.loads((tmp_path / 'paths.json').read_text())['choices'].values()
    assert entry == {'choice': ['fp32', True],
                     'seconds': {'fp32 + attention kernel': 0.4, 'fp32 + attention math': 0.6}}


def test_a_remembered_choice_is_checked_against_the_runs_steps(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: False)
    cache = tmp_path / 'paths.json'
    fake_timings(monkeypatch, Machine(), KERNEL_FASTER)
    run(cache)
    capsys.readouterr()
    # the same pace: the cached choice is taken, after timing it alone
    timed = fake_timings(monkeypatch, Machine(), {('fp32', True): 0.5, ('fp32', False): 0.6})
    t, gpt = run(cache)
    assert timed == [('fp32', True)] and kernels(gpt) == {True}
    assert 'cached for this machine' in capsys.readouterr().out
    # the kernel now takes 2.25 times its figure (it was measured at a bad moment, or the machine
    # changed): every candidate is measured again, and the faster one now is remembered
    timed = fake_timings(monkeypatch, Machine(), MATH_FASTER)
    t, gpt = run(cache)
    assert timed == [('fp32', True), ('fp32', True), ('fp32', False)]
    assert kernels(gpt) == {False}
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith('plan: '))
    assert line.startswith('plan: fp32 + attention math (measured') and \
        'the cached fp32 + attention kernel took 0.400 s per step then, 0.900 s now' in line
    [entry] = json.loads(cache.read_text())['choices'].values()
    assert entry['choice'] == ['fp32', False]


def test_a_cache_of_the_older_format_is_measured_anew_quietly(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: False)
    cache = tmp_path / 'paths.json'
    cache.write_text(json.dumps({'format': cpu_paths.OLD_FORMATS[0], 'choices': {'k': ['fp32', True]}}))
    timed = fake_timings(monkeypatch, Machine(), MATH_FASTER)
    run(cache)
    assert timed == [('fp32', True), ('fp32', False)]
    assert 'warning' not in capsys.readouterr().err
    assert json.loads(cache.read_text())['format'] == cpu_paths.PATH_CACHE_FORMAT


def test_a_run_of_one_epoch_times_nothing(tmp_path, monkeypatch, capsys):
    """Nothing a one-epoch run could gain is worth timing: it takes the remembered choice
    unchecked, and with none remembered the first candidate (fp32, the kernel), silently."""
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: False)
    cache = tmp_path / 'paths.json'
    timed = fake_timings(monkeypatch, Machine(), KERNEL_FASTER)
    t, gpt = run(cache, epochs=1)
    assert timed == [] and (t.run.precision, kernels(gpt)) == ('fp32', {True})
    assert 'plan: ' not in capsys.readouterr().out and not cache.exists()
    fake_timings(monkeypatch, Machine(), MATH_FASTER)
    run(cache)  # two epochs: measured, the math remembered
    capsys.readouterr()
    timed = fake_timings(monkeypatch, Machine(), MATH_FASTER)
    t, gpt = run(cache, epochs=1)
    assert timed == [] and (t.run.precision, kernels(gpt)) == ('fp32', {False})
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith('plan: '))
    assert 'cached for this machine' in line and 'not timed for one epoch' in line


def test_a_busy_machine_starts_training_on_the_threads_it_leaves(tmp_path, monkeypatch, capsys):
    """The plan reads the load over its first steps: with others holding half of 4 cores the
    run starts on 2 threads (said in the plan line), FollowLoad carries on from there, counts
    the steps on fewer threads and gives all 4 back at the end."""
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: False)
    threads = [4]
    monkeypatch.setattr(torch, 'get_num_threads', lambda: threads[-1])
    monkeypatch.setattr(torch, 'set_num_threads', threads.append)
    monkeypatch.setattr(cpu_load.os, 'cpu_count', lambda: 4)
    busy = Machine(others=0.5)
    timed = fake_timings(monkeypatch, busy, KERNEL_FASTER)
    t, gpt = run(tmp_path / 'paths.json', machine=busy, follow_load=True)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith('plan: '))
    assert '2 of 4 threads (other processes used 50% of the CPUs' in line
    assert timed == [('fp32', True), ('fp32', False)]  # the paths timed on the 2 threads
    assert threads[:2] == [4, 2] and threads[-1] == 4
    assert t.run.plan.record()['threads'] == 2 and t.run.plan.record()['most_threads'] == 4
    assert 'steps ran on fewer threads than 4' in out


def test_the_load_meter_reads_other_processes_share():
    cores = cpu_load.os.cpu_count()
    readings = iter([(100.0, 10.0), (100.0 + 4 * cores, 10.0 + 3 * cores)])
    clock = iter([0.0, 4.0])
    meter = cpu_load.LoadMeter(lambda: next(clock), lambda: next(readings))
    assert meter.others() == pytest.approx(0.25)  # 4 s busy, 3 s ours, on every core
    assert cpu_load.LoadMeter(lambda: 0.0, lambda: None).others() is None
    real = cpu_load.cpu_times()
    assert real is None or (real[0] >= 0 and real[1] >= 0)


def test_one_rule_for_a_busy_machine():
    """cpu_load.busy: a quarter of the CPUs or more held by other processes. A choice measured
    then is not remembered (cpu_paths), and on two cores it is where FollowLoad gives up one of
    its two threads."""
    assert not cpu_load.busy(None) and not cpu_load.busy(0.24)
    assert cpu_load.busy(0.25) and cpu_load.busy(0.9)
    assert cpu_load.threads_for(0.24, 2, 2) == 2 and cpu_load.threads_for(0.25, 2, 2) == 1


@pytest.mark.parametrize('others,cores,most,threads', [
    (0.0, 2, 2, 2), (0.1, 2, 2, 2),  # idle enough: every core
    (0.33, 2, 2, 1),  # one CPU-bound process beside our two spinning threads gets 2/3 of a core
    (0.5, 2, 2, 1), (1.0, 2, 2, 1),  # never fewer than one
    (0.2, 4, 4, 3), (0.1, 4, 4, 4), (0.0, 8, 4, 4),  # never more than torch had
    (None, 2, 2, 2),  # no /proc: not known, left alone
])
def test_threads_are_the_cores_other_processes_leave(others, cores, most, threads):
    assert cpu_load.threads_for(others, cores, most) == threads


@pytest.mark.parametrize('environ,follows', [
    ({}, True), ({'OMP_NUM_THREADS': '2'}, False), ({cpu_load.FIXED: 'fixed'}, False),
    ({'OMP_WAIT_POLICY': 'PASSIVE'}, True)])
def test_a_thread_count_the_user_set_stands(environ, follows):
    assert cpu_load.follows(environ) is follows


class LoadedMachine:
    """A 2-core machine's /proc readings, with the other processes' share of each second given,
    and the clock the trainer reads (it advances 1 s a step)."""

    def __init__(self, shares):
        self.shares, self.t, self.busy = shares, 0.0, 0.0

    def clock(self):
        return self.t

    def times(self):
        return self.busy, 0.0  # (all processes' busy seconds, ours): ours idle, for simplicity

    def step(self):
        self.busy += 2 * self.shares[int(self.t)]
        self.t += 1.0


def test_the_thread_count_follows_a_load_that_comes_and_goes():
    shares = [0.5] * 3 + [0.0] * 12 + [0.5] * 8 + [0.0] * 8  # busy at the start, gone, back
    machine, threads, said = LoadedMachine(shares), [2], []
    follow = cpu_load.FollowLoad(every=5.0, times=machine.times, cores=2,
                                 threads=(lambda: threads[-1], threads.append),
                                 say=lambda line, **kw: said.append(line))
    trainer = types.SimpleNamespace(clock=machine.clock, plan=plan.Plan('fp32'))
    follow.on_train_start(trainer)
    seen = []
    for it in range(len(shares) - 1):
        machine.step()
        follow.on_step_end(trainer, 0, it)
        seen.append(threads[-1])
    follow.on_train_end(trainer)
    # one thread from the first measurement (after 1 s); two once a 5-s window holds less than
    # half a core of others' work; one when a window holds it again
    # (windows [0,1) [1,6) [6,11) [11,16) [16,21) [21,26): others 0.5 0.2 0 0.1 0.5 0.2)
    assert seen == [1] * 5 + [2] * 15 + [1] * 5 + [2] * 5
    assert threads[-1] == 2  # given back at the end
    assert said == ['\ncpu: other processes are using 50% of the CPUs: torch uses 1 of 2 threads '
                    'while they do (measured every 5 s; CS224N_THREADS=fixed keeps 2)',
                    'cpu: 10 of 30 steps ran on fewer threads than 2 (4 changes with the load)']


def test_an_idle_machine_keeps_every_thread_and_says_nothing():
    machine, threads, said = LoadedMachine([0.05] * 30), [2], []
    follow = cpu_load.FollowLoad(times=machine.times, cores=2,
                                 threads=(lambda: threads[-1], threads.append),
                                 say=lambda line, **kw: said.append(line))
    trainer = types.SimpleNamespace(clock=machine.clock, plan=plan.Plan('fp32'))
    follow.on_train_start(trainer)
    for it in range(29):
        machine.step()
        follow.on_step_end(trainer, 0, it)
    follow.on_train_end(trainer)
    assert threads == [2] and said == []


@pytest.mark.parametrize('changes,follows', [
    ({'follow_load': True}, True), ({}, False),  # run.py asks (cpu_load.follows); others do not
    ({'follow_load': True, 'cpu_workers': 1}, False),  # workers' CPU time would read as a load
])
def test_the_trainer_follows_the_load_when_asked(changes, follows):
    t = trainer.Trainer(torch.nn.Linear(2, 2), None, None, trainer.TrainerConfig(**changes))
    assert any(isinstance(c, cpu_load.FollowLoad) for c in t.run.callbacks) is follows


MEASURED = dict(source='results/x.md', runs={
    'idle': dict(layers=4, steps=(2500, 3000), dev='18-23%'),
    'beside a light load': dict(layers=4, steps=(2300, 2400), dev='10%'),
    'on one core': dict(layers=2, steps=(3400, 3500), dev='6-8%')})


def saw(shares, steps_before=0, layers=4, usable=2, measured=MEASURED):
    """What SawLoad says at the end of a run of len(shares) 1-s steps on LoadedMachine, after
    `steps_before` steps of an earlier call (resumed)."""
    machine, said = LoadedMachine(shares), []
    extra = cpu_load.SawLoad(measured, times=machine.times, cores=2, usable=usable,
                             say=lambda line, **kw: said.append(line))
    model = types.SimpleNamespace(blocks=[None] * layers)
    run = types.SimpleNamespace(clock=machine.clock, step=steps_before, rank=0, model=model)
    extra.on_train_start(run)
    for _ in shares:
        machine.step()
        run.step += 1
    extra.on_train_end(run)
    return run.others_share, said


def test_a_starved_run_says_its_load_and_what_runs_with_as_many_steps_answered():
    others, said = saw([0.5] * 60, steps_before=2290)
    assert others == 0.5
    assert said == ['cpu: other processes used 50% of the machine\'s CPUs while this trained (it '
                    'could use 2); 60 steps of 4 layers in 1.0 min. Idle runs of this preset '
                    'trained 2,500-3,000 steps of 4 layers and answered 18-23% of dev; runs beside '
                    'a light load (2,300-2,400 of 4) answered 10% (results/x.md)']
    # fewer steps than any measured: the nearest; a shallower model: the runs of its depth
    assert 'runs beside a light load' in saw([0.0] * 10, steps_before=1000)[1][0]
    _, said = saw([0.0] * 30, steps_before=3000, layers=2, usable=1)
    assert 'it could use 1 of its 2' in said[0] and 'runs on one core (3,400-3,500 of 2) answered 6-8%' in said[0]


def test_a_run_with_the_idle_runs_steps_says_its_load_without_a_cost():
    others, said = saw([0.05] * 30, steps_before=2800)
    assert others == pytest.approx(0.05)
    assert said == ['cpu: other processes used 5% of the machine\'s CPUs while this trained (it '
                    'could use 2); 30 steps of 4 layers in 0.5 min']
    assert saw([0.5] * 30, measured=None)[1][0].endswith('30 steps of 4 layers in 0.5 min')
def test_the_end_line_is_for_cpu_runs_of_a_preset_that_measured_its_load():
    config = trainer.TrainerConfig(under_load=MEASURED)
    assert any(isinstance(c, cpu_load.SawLoad) for c in trainer.Trainer(
        torch.nn.Linear(2, 2), None, None, config).run.callbacks)
    assert not any(isinstance(c, cpu_load.SawLoad) for c in trainer.Trainer(
        torch.nn.Linear(2, 2), None, None, trainer.TrainerConfig()).run.callbacks)
