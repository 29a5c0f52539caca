"""Under the handout preset a run computes what the starter computes whatever the machine does
beside it: fp32 on every device unless --precision asks otherwise (also on a CPU with bf16
arithmetic), and a thread count that does not follow the load, so the same seed gives the same
params and --resume continues exactly while other processes come and go. The load is injected:
a stand-in for the CPU counters (cpu_load.cpu_times) in which other processes take all of the
CPUs at one reading and none at the next. A preset that adapts to the machine (the CPU recipes)
does follow it: the control case shows the injected load reaches a run."""
import functools
import json

import pytest
import torch

from engine.training import checkpoint
from engine.machine import cpu_load
from engine.training import extras
from engine import devices
import run
from tiny_run import checked, stage_config, tsv, CORPUS, TRAIN

SHORT = '\n'.join(CORPUS.split('\n')[:16]) + '\n'  # 17 documents: 3 batches of 8 an epoch
ARGV = ['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path', 'pt.params',
        '--batch_size', '8', '--device', 'cpu', '--max_epochs', '2', '--checkpoint_every', '1']


class Load:
    """CPU counters (busy seconds of all processes, this process's) in which the others take
    `shares[i]` of the CPUs between reading i and i + 1, cycling."""

    def __init__(self, shares):
        self.shares, self.reads, self.busy, self.own = shares, 0, 0.0, 0.0

    def __call__(self):
        share = self.shares[self.reads % len(self.shares)]
        self.reads += 1
        self.busy += 1000.0
        self.own += 1000.0 * (1 - share)
        return self.busy, self.own


@pytest.fixture
def machine(monkeypatch):
    """The load meter injected and read at every step (no waiting windows), torch's thread
    changes recorded, the CPU said to have bf16 arithmetic, the user's thread settings unset."""
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    monkeypatch.delenv(cpu_load.FIXED, raising=False)
    monkeypatch.setattr(cpu_load.FollowLoad, 'FIRST', 0.0)
    monkeypatch.setattr(extras, 'FollowLoad', functools.partial(cpu_load.FollowLoad, every=0.0))
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: True)
    changes = []
    set_threads, threads = torch.set_num_threads, torch.get_num_threads()

    def record(n):
        changes.append(n)
        set_threads(n)
    monkeypatch.setattr(torch, 'set_num_threads', record)
    state = type('Machine', (), {'changes': changes})()

    def load(shares):
        meter = Load(shares)
        monkeypatch.setattr(cpu_load, 'cpu_times', meter)
        return meter
    state.load = load
    yield state
    set_threads(threads)


def pretrain(folder, monkeypatch, extra=(), stop_at=None):
    """run.py's pretraining in this process, in `folder`; stop_at: a Ctrl-C after that step
    (the stop request's flag, as the signal handler sets it)."""
    monkeypatch.chdir(folder)
    (folder / 'corpus.txt').write_text(SHORT, encoding='utf-8')
    with monkeypatch.context() as this_run:  # the stop request is this run's only
        if stop_at is not None:
            on_step_end = checkpoint.Resumable.on_step_end

            def stop_then(self, t, epoch, it):
                self.stop.requested = self.stop.requested or t.step == stop_at
                return on_step_end(self, t, epoch, it)
            this_run.setattr(checkpoint.Resumable, 'on_step_end', stop_then)
        run.main(ARGV + list(extra))
    return torch.load(folder / 'pt.params', weights_only=True)


def assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_handout_runs_give_the_same_params_under_any_load_and_resume_exactly(
        machine, tmp_path, monkeypatch):
    machine.load([0.0])
    (tmp_path / 'idle').mkdir()
    idle = pretrain(tmp_path / 'idle', monkeypatch)
    record = json.loads((tmp_path / 'idle' / 'pt.params.run.json').read_text())
    assert record['precision'] == 'fp32'  # bf16 arithmetic here, and still the starter's fp32

    meter = machine.load([1.0, 0.0, 1.0, 1.0, 0.0])
    (tmp_path / 'busy').mkdir()
    assert_same(pretrain(tmp_path / 'busy', monkeypatch), idle)

    (tmp_path / 'resumed').mkdir()
    with pytest.raises(SystemExit) as stopped:
        pretrain(tmp_path / 'resumed', monkeypatch, stop_at=4)
    assert stopped.value.code == 130 and (tmp_path / 'resumed' / 'pt.params.ckpt').exists()
    machine.load([0.0, 1.0])
    assert_same(pretrain(tmp_path / 'resumed', monkeypatch, ['--resume']), idle)
    assert machine.changes == []  # the thread count never moved
    assert meter.reads == 0  # nothing of the handout's run looked at the load


def test_a_preset_that_adapts_follows_the_injected_load(machine, tmp_path, monkeypatch):
    """The control: the CPU recipe's pretraining (cpu-rehearsal, fp32 asked for so that nothing
    is measured) gives torch fewer threads while the others hold the CPUs, and its run says so."""
    meter = machine.load([1.0])
    torch.set_num_threads(2)  # (the suite's workers start with one each) two to give up
    (tmp_path / 'rehearsal').mkdir()
    pretrain(tmp_path / 'rehearsal', monkeypatch, ['--preset', 'cpu-rehearsal', '--precision', 'fp32'])
    assert meter.reads > 0 and 1 in machine.changes


@pytest.mark.parametrize('preset,precision,follows', [
    ('handout', 'fp32', False), ('cpu-quick', 'fp32', False),
    ('cpu-20min', 'auto', True), ('cpu-45min', 'auto', True), ('cpu-rehearsal', 'auto', True)])
def test_only_a_preset_that_adapts_measures_precision_and_follows_the_load(
        preset, precision, follows, monkeypatch, tmp_path):
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: True)
    monkeypatch.delenv(cpu_load.FIXED, raising=False)
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    (tmp_path / 'train.tsv').write_text(tsv(TRAIN), encoding='utf-8')  # (a mix's questions)
    argv = ['pretrain', 'vanilla', 'wiki.txt', '--writing_params_path', 'x', '--preset', preset,
            '--device', 'cpu', '--finetune_corpus_path', 'train.tsv']
    args = checked(argv, tmp_path, monkeypatch)
    assert args.precision == precision  # (check_args decides it, once)
    for stage in ('pretrain', 'finetune_scratch', 'finetune_pretrained'):
        tconf = stage_config(args, stage, 100, 'cpu')
        assert (tconf.precision, tconf.follow_load) == (precision, follows), stage
        # only the pretraining of the preset whose runs were measured says what such runs answered
        assert (tconf.under_load is not None) == (preset == 'cpu-20min' and stage == 'pretrain'), stage
    args = checked(argv + ['--precision', 'bf16'], tmp_path, monkeypatch)  # asked: every preset
    assert stage_config(args, 'pretrain', 100, 'cpu').precision == 'bf16'
