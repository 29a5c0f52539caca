"""Runs on flaky machines (the issue "never hours lost"), as real subprocesses:

- an interrupted run (SIGTERM, or SIGKILL after an epoch checkpoint) resumes to exactly the
  params of the uninterrupted run;
- torchrun with two CPU processes trains like one process with the same global batch;
- the same --seed gives the same params file, byte for byte; and the same params tensors for
  every variant and precision on batches of real wiki.txt lines with the machine busy.

All runs are tiny (tiny_run.py): one to a few epochs, fp32 on the CPU.
"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import dataset
import model
import trainer
from engine.training import loop, optim
import utils

from support import REPO, RUN
from tiny_run import command, stage_config, FAST, ENV, CORPUS, DOCUMENTS, TRAIN, DEV, OLD_PARAMS, tsv

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)


# ---- subprocess runs: resume, torchrun, determinism ------------------------------------------

def write_crlf_inputs(folder):
    """CORPUS, and the training questions with blank lines, CRLF ends and no final newline."""
    (folder / 'corpus.txt').write_text(CORPUS, encoding='utf-8')
    # finetuning data with blank lines, CRLF ends and no final newline: read as the clean file
    (folder / 'train.tsv').write_text(tsv(TRAIN[:8], end='\r\n') + '\n' + tsv(TRAIN[8:]).rstrip('\n'),
                                      encoding='utf-8', newline='')


# two CPU processes under torchrun (gloo), one thread each
TORCHRUN = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2']
TORCHRUN_ENV = dict(ENV, OMP_NUM_THREADS='1')


def cmd(argv, launcher=None):
    return (launcher or [sys.executable]) + [RUN] + [str(a) for a in argv]


def run_ok(argv, cwd, launcher=None):
    proc = subprocess.run(cmd(argv, launcher), cwd=cwd, env=TORCHRUN_ENV if launcher else ENV,
                          capture_output=True, text=True, encoding='utf-8', timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    return proc


def start(argv, cwd, launcher=None):
    """A run in the background, its stderr (tqdm's progress) going to a file; in a process group
    of its own (torchrun's ranks are its children)."""
    err = open(cwd / 'stderr.log', 'w', encoding='utf-8')
    proc = subprocess.Popen(cmd(argv, launcher), cwd=cwd, env=TORCHRUN_ENV if launcher else ENV,
                            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    err.close()
    return proc


def read_log(folder):
    # the run may be halfway through writing one of tqdm's multi-byte bar characters
    return (folder / 'stderr.log').read_text(encoding='utf-8', errors='replace')


def wait_until(proc, ready, timeout=240):
    """Poll until ready() or the process ends; True if ready() while it still ran."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        if ready():
            return True
        time.sleep(0.02)
    proc.kill()
    raise AssertionError('no progress from the run')


def load(path):
    return torch.load(path, map_location='cpu', weights_only=True)


def assert_same_params(a, b):
    sa, sb = load(a), load(b)
    assert sa.keys() == sb.keys()
    different = [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert not different, different


def interrupted_then_resumed(tmp_path, argv, params, stop, epochs_tried, launcher=None):
    """Train `argv + --max_epochs E` three ways: uninterrupted; stopped by stop(proc, folder)
    (which returns once the process has a checkpoint and has been stopped) and then resumed with
    --resume. Returns (folder of the uninterrupted run, folder of the interrupted one, the
    interrupted run's stderr, the checkpoint as it was). A run that ends before it could be
    stopped is tried again with more epochs."""
    for epochs in epochs_tried:
        full = argv + ['--max_epochs', epochs]
        d = tmp_path / f'interrupted_{epochs}'
        d.mkdir()
        write_crlf_inputs(d)
        (d / params).write_bytes(OLD_PARAMS)
        proc = start(full, d, launcher)
        if not stop(proc, d):
            proc.wait(timeout=60)
            continue
        ckpt = load(d / f'{params}.ckpt')
        log = read_log(d)
        # the interrupted run left the old params alone
        assert (d / params).read_bytes() == OLD_PARAMS
        run_ok(full + ['--resume'], d, launcher)
        assert not (d / f'{params}.ckpt').exists()
        ref = tmp_path / f'uninterrupted_{epochs}'
        ref.mkdir()
        write_crlf_inputs(ref)
        run_ok(full, ref, launcher)
        assert not (ref / f'{params}.ckpt').exists()
        return ref, d, log, ckpt
    pytest.fail(f'every run finished before it could be interrupted ({epochs_tried} epochs)')


PRETRAIN = ['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path', 'pt.params'] + FAST
FINETUNE = ['finetune', 'vanilla', 'corpus.txt', '--finetune_corpus_path', 'train.tsv',
            '--writing_params_path', 'ft.params'] + FAST


def test_sigterm_then_resume_matches_the_uninterrupted_run(tmp_path):
    def sigterm(proc, d):
        # progress shows once the first step is done, inside the loop that handles SIGTERM
        if not wait_until(proc, lambda: 'epoch 1 iter' in read_log(d)):
            return False
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        if code == 0:
            return False
        assert code == 130, read_log(d)[-2000:]
        return True

    ref, d, log, ckpt = interrupted_then_resumed(tmp_path, PRETRAIN, 'pt.params', sigterm,
                                                 ['3', '8'])
    last = [line for line in log.splitlines() if line.strip()][-1]
    assert last.startswith('interrupted: checkpoint written to') and 'pt.params.ckpt' in last
    assert 'Traceback' not in log
    # a mid-run checkpoint: model, optimizer, schedule position, RNG states
    assert {'model', 'optimizer', 'tokens', 'step', 'epoch', 'it', 'generator', 'random'} <= set(ckpt)
    assert len(ckpt['random']) == 1 and ckpt['random'][0]['cuda'] is None  # one CPU process
    assert ckpt['step'] >= 1 and ckpt['step'] == ckpt['epoch'] * 5 + ckpt['it']
    assert ckpt['tokens'] == 127 * (ckpt['epoch'] * DOCUMENTS + ckpt['it'] * 8)
    assert_same_params(ref / 'pt.params', d / 'pt.params')
    # the resumed run's record counts the interrupted call's time too: its tokens are the
    # whole run's, and dividing them by the last call's seconds alone overstated its pace
    spent = ckpt['spent']
    assert spent['calls'] == 1 and 0 < spent['training'] < spent['seconds']
    resumed = json.loads((d / 'pt.params.run.json').read_text())
    whole = json.loads((ref / 'pt.params.run.json').read_text())
    assert resumed['calls'] == 2 and whole['calls'] is None
    assert resumed['tokens'] == whole['tokens']
    assert resumed['seconds'] > spent['seconds']
    assert resumed['phases']['training'] > spent['training']


def test_a_sigterm_to_the_whole_process_group_with_workers_still_writes_the_checkpoint(tmp_path):
    """GNU timeout and torchrun signal the whole process group, DataLoader workers included
    (the GPU default is 4 workers): the run still writes its checkpoint and exits 130, and
    --resume finishes it."""
    write_crlf_inputs(tmp_path)
    argv = PRETRAIN + ['--num_workers', '2', '--max_epochs', '3']
    err = open(tmp_path / 'stderr.log', 'w', encoding='utf-8')
    proc = subprocess.Popen(cmd(argv), cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=err, start_new_session=True)  # its own group, as under timeout
    err.close()
    assert wait_until(proc, lambda: 'epoch 1 iter' in read_log(tmp_path)), read_log(tmp_path)
    os.killpg(proc.pid, signal.SIGTERM)
    code = proc.wait(timeout=120)
    log = read_log(tmp_path)
    if code == 0:
        pytest.skip('the run ended before the signal reached it')
    assert code == 130, log[-2000:]
    last = [line for line in log.splitlines() if line.strip()][-1]
    assert last.startswith('interrupted: checkpoint written to') and 'Traceback' not in log, log[-2000:]
    assert (tmp_path / 'pt.params.ckpt').exists()
    run_ok(argv + ['--resume'], tmp_path)
    assert (tmp_path / 'pt.params').exists() and not (tmp_path / 'pt.params.ckpt').exists()


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason='no CUDA device here (on a GPU machine: bash scripts/gpu_check.sh)')
def test_run_py_end_to_end_on_cuda(tmp_path):
    """The handout's commands on the GPU as run_all gives them, before the assignment stage meets
    them: pretraining in the defaults on one GPU (fp32, the step recorded as CUDA graphs, the
    positions packed) and the GPU's 4 DataLoader workers,
    stopped by a SIGTERM to its whole process group (as timeout sends it), resumed to the end;
    finetuning; evaluation of the dev questions (one prediction per question, the accuracy
    line)."""
    write_crlf_inputs(tmp_path)
    (tmp_path / 'dev.tsv').write_text(tsv(DEV), encoding='utf-8')
    gpu = ['--batch_size', '8', '--device', 'cuda', '--num_workers', '4']
    pretrain = ['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path', 'pt.params',
                '--max_epochs', '400'] + gpu
    err = open(tmp_path / 'stderr.log', 'w', encoding='utf-8')
    proc = subprocess.Popen(cmd(pretrain), cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=err, start_new_session=True)
    err.close()
    assert wait_until(proc, lambda: 'epoch 2 iter' in read_log(tmp_path)), read_log(tmp_path)
    os.killpg(proc.pid, signal.SIGTERM)
    code = proc.wait(timeout=120)
    log = read_log(tmp_path)
    assert code == 130, log[-2000:]  # 400 epochs of 5 steps: far from done at epoch 2
    assert 'Traceback' not in log and (tmp_path / 'pt.params.ckpt').exists(), log[-2000:]
    run_ok(pretrain + ['--resume'], tmp_path)
    assert (tmp_path / 'pt.params').exists() and not (tmp_path / 'pt.params.ckpt').exists()
    run_ok(['finetune', 'vanilla', 'corpus.txt', '--reading_params_path', 'pt.params',
            '--writing_params_path', 'ft.params', '--finetune_corpus_path', 'train.tsv',
            '--max_epochs', '2'] + gpu, tmp_path)
    proc = run_ok(['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path', 'ft.params',
                   '--eval_corpus_path', 'dev.tsv', '--outputs_path', 'dev.predictions',
                   '--device', 'cuda'], tmp_path)
    assert len((tmp_path / 'dev.predictions').read_text(encoding='utf-8').splitlines()) == len(DEV)
    assert f'out of {len(DEV)}.0' in proc.stdout or f'out of {len(DEV)}' in proc.stdout


def test_kill_after_epoch_checkpoint_then_resume(tmp_path):
    """SIGKILL (a lost machine: no handler runs) after a --checkpoint_every checkpoint; the run
    resumes from that epoch boundary to the uninterrupted run's params. Finetuning, on a TSV with
    blank and CRLF lines."""
    def kill_after_checkpoint(proc, d):
        if not wait_until(proc, lambda: (d / 'ft.params.ckpt').exists()):
            return False
        proc.kill()
        proc.wait(timeout=60)
        return (d / 'ft.params.ckpt').exists()

    ref, d, log, ckpt = interrupted_then_resumed(
        tmp_path, FINETUNE + ['--checkpoint_every', '1'], 'ft.params', kill_after_checkpoint,
        ['5', '12'])
    assert ckpt['epoch'] >= 1 and ckpt['it'] == 0  # an epoch boundary
    assert ckpt['step'] == ckpt['epoch'] * 2  # 16 examples, batch 8
    assert_same_params(ref / 'ft.params', d / 'ft.params')


def parent_of(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            return int(f.read().rsplit(')', 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def state_of(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0]
    except (OSError, IndexError):
        return 'Z'


@pytest.mark.skipif(not os.path.isdir('/proc/self'), reason='finds the ranks in /proc (Linux)')
def test_torchrun_resume_gives_each_rank_its_own_random_states(tmp_path):
    """Two CPU processes (gloo), dropout on: the last batch of each epoch (1 example) leaves rank 1
    a dummy row, so the ranks' torch generators differ after it. Killed (the whole group) after
    an epoch's checkpoint and resumed, each rank must go on with its own states to give the
    uninterrupted run's params (rank 0's states for both gave other dropout masks on rank 1)."""
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip('torch.distributed with gloo is needed')

    def kill_after_checkpoint(proc, d):
        if not wait_until(proc, lambda: (d / 'pt.params.ckpt').exists()):
            return False
        # torchrun starts its ranks in sessions of their own: kill them, then torchrun
        ranks = [int(p) for p in os.listdir('/proc') if p.isdigit() and
                 parent_of(int(p)) == proc.pid]
        for pid in ranks + [proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=60)
        for pid in ranks:
            while os.path.exists(f'/proc/{pid}') and 'Z' not in state_of(pid):
                time.sleep(0.05)
        return (d / 'pt.params.ckpt').exists()

    ref, d, _, ckpt = interrupted_then_resumed(
        tmp_path, PRETRAIN + ['--checkpoint_every', '1'], 'pt.params', kill_after_checkpoint,
        ['4', '10'], launcher=TORCHRUN)
    assert len(ckpt['random']) == 2  # one entry per rank
    assert not torch.equal(ckpt['random'][0]['torch'], ckpt['random'][1]['torch'])
    assert_same_params(ref / 'pt.params', d / 'pt.params')


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope='module')
def one_epoch_runs(tmp_path_factory):
    """Pretraining runs of one epoch without dropout: the default seeds (the edition's
    starter's: torch's 1 in 2021-23) twice, --seed 0."""
    runs = {}
    for name, extra in (('default', []), ('again', []), ('seed0', ['--seed', '0'])):
        d = tmp_path_factory.mktemp(name)
        write_crlf_inputs(d)
        run_ok(PRETRAIN + ['--max_epochs', '1', '--dropout', '0'] + extra, d)
        runs[name] = d
    return runs


def test_same_seed_same_params_file(one_epoch_runs):
    default, again, seed0 = (sha256(one_epoch_runs[k] / 'pt.params')
                             for k in ('default', 'again', 'seed0'))
    assert default == again
    assert seed0 != default


@pytest.fixture
def busy_machine():
    """Two processes spinning beside the test (the CI machine has two cores): threads of the run
    are scheduled differently than on an idle machine."""
    spin = 'import os, time\nos.nice(19)\nend = time.time() + 120\nwhile time.time() < end: pass\n'
    # at the lowest priority: busy enough to move the run's threads around, not so busy that the
    # run's two threads wait for each other's time slices (that is minutes, not seconds)
    procs = [subprocess.Popen([sys.executable, '-c', spin]) for _ in range(2)]
    yield
    for p in procs:
        p.kill()
        p.wait()


def one_step_on_wiki(variant, precision):
    """The default fast path (dropout 0.1) for one step on 128 real wiki.txt lines; the params."""
    text = open(os.path.join(REPO, 'data', 'wiki.txt'), encoding='utf-8').read()
    lines = '\n'.join(text.split('\n')[:128])
    utils.set_seed(0)
    data = dataset.CharCorruptionDataset(lines, 128)
    extra = {'synthesizer': dict(synthesizer=True), 'rope': dict(rope=True),
             'perceiver': dict(perceiver=True, bottleneck_dim=16)}.get(variant, {})
    gpt = model.GPT(model.GPTConfig(data.vocab_size, 128, n_layer=3, n_head=4, n_embd=64, **extra))
    conf = trainer.TrainerConfig(max_epochs=1, batch_size=128, learning_rate=6e-3, lr_decay=True,
                                 warmup_tokens=1000, final_tokens=10 ** 6, precision=precision)
    trainer.Trainer(gpt, data, None, conf).train()
    return gpt.state_dict()


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
@pytest.mark.parametrize('variant', ['vanilla', 'synthesizer', 'perceiver', 'rope'])
def test_same_seed_same_params_on_wiki_batches_under_load(variant, precision, busy_machine):
    """Every variant, both precisions, dropout on, batches of 128 real lines (packed positions in
    the thousands, where a thread-order-dependent sum shows), two threads, the machine busy:
    the same seed gives the same params, tensor for tensor."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        first, second = one_step_on_wiki(variant, precision), one_step_on_wiki(variant, precision)
    finally:
        torch.set_num_threads(threads)
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), key


def tb_scalars(folder, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = list((folder / 'expt').rglob('events.out.tfevents*'))
    assert len(events) == 1, events
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


# Under torchrun each rank runs run.main, as `python src/run.py` does, and reports the gloo threads
# it has after training and at exit (an atexit hook registered before run.main's, so it runs after
# it). Linux names the threads in /proc/self/task; elsewhere the list stays empty.
TORCHRUN_DRIVER = """
import atexit, os
import run

def gloo_threads():
    tasks = '/proc/self/task'
    names = []
    for t in (os.listdir(tasks) if os.path.isdir(tasks) else []):
        try:  # a thread may end between the listing and the reading
            names.append(open(os.path.join(tasks, t, 'comm')).read().strip())
        except FileNotFoundError:
            pass
    return sorted(name for name in names if 'gloo' in name)

atexit.register(lambda: print('gloo threads at exit:', gloo_threads(), flush=True))
run.main()
print('gloo threads after training:', gloo_threads(), flush=True)
"""


@pytest.fixture(scope='module')
def torchrun_run(tmp_path_factory):
    """One epoch without dropout, two CPU processes under torchrun."""
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip('torch.distributed with gloo is needed')
    d = tmp_path_factory.mktemp('ddp')
    write_crlf_inputs(d)
    driver = tmp_path_factory.mktemp('driver') / 'rank.py'
    driver.write_text(TORCHRUN_DRIVER, encoding='utf-8')
    before = set(os.listdir(d))
    env = dict(ENV, OMP_NUM_THREADS='1', PYTHONPATH=os.path.dirname(RUN))
    proc = subprocess.run(
        [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
         str(driver)] + PRETRAIN + ['--max_epochs', '1', '--dropout', '0'],
        cwd=d, env=env, capture_output=True, text=True, encoding='utf-8', timeout=300)
    return d, before, proc


def test_torchrun_two_cpu_processes_match_one(one_epoch_runs, torchrun_run):
    """Same global batch (8, 4 rows per rank; the last batch has 1 example, which leaves rank 1
    a dummy row of weight 0): the per-step losses and learning rates are the one-process run's,
    and only rank 0 writes files."""
    single = one_epoch_runs['default']
    d, before, proc = torchrun_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(os.listdir(d)) - before == {'pt.params', 'pt.params.run.json', 'expt'}
    for tag in ('train/loss', 'train/lr'):
        one, two = tb_scalars(single, tag), tb_scalars(d, tag)
        assert [s for s, _ in one] == [s for s, _ in two] == list(range(5))
        for (_, a), (_, b) in zip(one, two):
            assert b == pytest.approx(a, rel=1e-4)
    # params: equal up to float noise (AdamW's first steps amplify it in near-zero gradients)
    a, b = load(single / 'pt.params'), load(d / 'pt.params')
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-2


@pytest.mark.skipif(not os.path.isdir('/proc/self/task'), reason="Linux's thread names are needed")
def test_torchrun_ranks_end_gloos_threads_before_the_interpreter_shuts_down(torchrun_run):
    """A gloo thread still running when the interpreter shuts down can abort a finished rank
    (see distributed.init); the group's destruction at exit must end them all."""
    _, _, proc = torchrun_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if 'gloo threads' in line]
    assert sorted(lines) == ["gloo threads after training: ['gloo_tcp_loop', 'pt_gloo_runloop', "
                             "'pt_gloo_runloop']"] * 2 + ['gloo threads at exit: []'] * 2, lines


def test_under_torchrun_ranks_agree_on_a_stop_only_where_losses_are_read_back(monkeypatch):
    """Agreeing on a stop request is an all_reduce read back by the host: on a GPU at every step
    it would stall the pipeline, so the ranks agree every log_every steps (where the losses are
    read back anyway); a request between waits for the next such step, on every rank alike."""
    from engine.training import checkpoint
    agreed, saved = [], []

    class Run:  # what Resumable reads of the run
        distributed, device, rank, epoch_start_state = True, 'cpu', 0, None
        config = type('Config', (), {'log_every': 25, 'resume_path': 'x.ckpt'})()
        step = 0
    t = Run()

    def agree(value, device, op):
        agreed.append(t.step)
        return value
    monkeypatch.setattr(checkpoint.distributed, 'agree', agree)
    monkeypatch.setattr(checkpoint.Resumable, 'save', lambda self, *a: saved.append(t.step))
    extra = checkpoint.Resumable()
    extra.stop = checkpoint.StopRequest()
    for step in range(1, 51):
        t.step = step
        if step == 30:
            extra.stop.requested = True  # SIGTERM arrives during step 30
        try:
            extra.on_step_end(t, 0, step - 1)
        except checkpoint.TrainingInterrupted:
            break
    assert agreed == [25, 50]
    assert saved == [50]


@pytest.mark.parametrize('seconds,epochs', [(0, [1, 2, 3, 4, 5, 6, 7]), (30, [2, 4, 6])])
def test_periodic_checkpoints_come_checkpoint_seconds_apart(tmp_path, monkeypatch, seconds,
                                                            epochs):
    """checkpoint_seconds (run.py's on a GPU, whose epochs take a fraction of a second): an
    epoch that checkpoint_every names writes the checkpoint only once that many seconds have
    passed since the last one (or the start). A clock the test drives: 10 s a step, two steps
    an epoch, eight epochs (the last one writes none: the params follow)."""
    from engine.training import checkpoint
    now, saved = [0.0], []
    save = checkpoint.Resumable.save

    def spied(self, trainer, epoch, it, state):
        saved.append(epoch)
        return save(self, trainer, epoch, it, state)
    monkeypatch.setattr(checkpoint.Resumable, 'save', spied)

    class Ticks:
        def on_step_end(self, trainer, epoch, it):
            now[0] += 10.0
    utils.set_seed(0)
    data = dataset.CharCorruptionDataset(CORPUS, 32)
    gpt = model.GPT(model.GPTConfig(data.vocab_size, 32, n_layer=1, n_head=2, n_embd=16))
    conf = trainer.TrainerConfig(max_epochs=8, batch_size=len(data) // 2 + 1,
                                 resume_path=str(tmp_path / 'run.ckpt'), checkpoint_every=1,
                                 checkpoint_seconds=seconds)
    t = trainer.Trainer(gpt, data, None, conf, clock=lambda: now[0])
    t.run.callbacks.append(Ticks())
    t.train()
    assert now[0] == 160.0 and saved == epochs
    assert (tmp_path / 'run.ckpt').exists()


def test_a_resumed_run_takes_the_interrupted_runs_plan(tmp_path, monkeypatch):
    """precision 'auto': the first run chose its path (a stand-in choice, the attention math);
    resumed from its checkpoint, the run takes that choice, measuring nothing (before, it
    measured again and could have chosen another)."""
    from engine.machine import cpu_paths, plan as planning
    chosen = ('fp32', False)
    monkeypatch.setattr(cpu_paths, 'choose', lambda *a, **k: (chosen, 'stand-in'))
    utils.set_seed(0)
    data = dataset.CharCorruptionDataset(CORPUS, 32)
    make = lambda: model.GPT(model.GPTConfig(data.vocab_size, 32, n_layer=1, n_head=2,
                                             n_embd=16, embd_pdrop=0, resid_pdrop=0, attn_pdrop=0))
    values = dict(max_epochs=2, batch_size=len(data) // 2 + 1, precision='auto',
                  resume_path=str(tmp_path / 'run.ckpt'), checkpoint_every=1)
    t = trainer.Trainer(make(), data, None, trainer.TrainerConfig(**values))
    t.train()
    assert (t.run.plan.precision, t.run.plan.kernel) == chosen

    def measured(*a, **k):
        raise AssertionError('a resumed run measured its path again')
    monkeypatch.setattr(cpu_paths, 'choose', measured)
    gpt = make()
    plan, _ = planning.make(gpt, data, trainer.TrainerConfig(**values, resume=True),
                            loop.train_step, optim.make_optimizer, say=lambda *a, **k: None)
    assert (plan.precision, plan.kernel) == chosen and 'checkpoint' in plan.how
    assert all(m.cpu_kernel is False for m in gpt.modules() if hasattr(m, 'cpu_kernel'))


def test_a_resumed_run_counts_the_interrupted_calls_and_ignores_a_forged_count(tmp_path):
    """The checkpoint carries the calls and seconds spent so far into the resumed run (its record
    adds them); a checkpoint whose count is not numbers (forged, or from another program) is
    resumed all the same, its earlier calls uncounted, instead of failing once the run is over."""
    utils.set_seed(0)
    data = dataset.CharCorruptionDataset(CORPUS, 32)
    make = lambda: model.GPT(model.GPTConfig(data.vocab_size, 32, n_layer=1, n_head=2,
                                             n_embd=16))
    path = tmp_path / 'run.ckpt'
    values = dict(max_epochs=2, batch_size=len(data) // 2 + 1, resume_path=str(path),
                  checkpoint_every=1)
    trainer.Trainer(make(), data, None, trainer.TrainerConfig(**values)).train()
    state = torch.load(path, map_location='cpu', weights_only=True)
    spent = state['spent']
    assert spent['calls'] == 1 and 0 < spent['training'] <= spent['seconds']
    resumed = trainer.Trainer(make(), data, None, trainer.TrainerConfig(**values, resume=True))
    resumed.train()
    assert resumed.run.before == spent
    for forged in ('a day', {'calls': '1', 'seconds': 0.0, 'training': 0.0}, None,
                   {'calls': 10 ** 400, 'seconds': 1.0, 'training': 1.0},
                   {'calls': 1, 'seconds': float('inf'), 'training': 1.0},
                   {'calls': 1, 'seconds': 1.0, 'training': float('nan')},
                   {'calls': True, 'seconds': 1.0, 'training': 1.0}):
        state['spent'] = forged
        torch.save(state, path)
        resumed = trainer.Trainer(make(), data, None, trainer.TrainerConfig(**values, resume=True))
        resumed.train()
        assert resumed.run.before == dict(calls=0, seconds=0.0, training=0.0), forged


def test_run_py_spaces_a_gpus_periodic_checkpoints_only():
    from engine import presets
    args = command(['pretrain', 'vanilla', 'wiki.txt', '--writing_params_path', 'x'])
    assert stage_config(args, 'pretrain', 100, 'cpu').checkpoint_seconds == 0
    assert stage_config(args, 'pretrain', 100, 'cuda').checkpoint_seconds == \
        presets.GPU['checkpoint_seconds'] == 30


def test_under_torchrun_rank_0s_clock_decides_whether_a_checkpoint_is_due(monkeypatch):
    """Every rank takes part in a save (its random states are gathered): the ranks must agree
    on the epochs that write one, so rank 0's clock decides, sent to all (an all_reduce max
    where only rank 0 puts in its answer)."""
    from engine.training import checkpoint
    asked = []

    class Trainer:
        device, rank = 'cpu', 1
        config = type('Config', (), {'checkpoint_seconds': 30})()

        def clock(self):
            return 100.0

    def agree(value, device, op):
        asked.append((value, op))
        return 1.0  # rank 0's answer: due
    monkeypatch.setattr(checkpoint.distributed, 'agree', agree)
    extra = checkpoint.Resumable()
    extra.saved_at = 0.0
    assert extra.due(Trainer()) and asked == [(0, 'max')]  # rank 1 puts in nothing of its own


@pytest.mark.skipif(torch.cuda.device_count() < 2,
                    reason='two CUDA GPUs are needed (NCCL takes one GPU per rank)')
def test_torchrun_two_cuda_ranks_train_like_one_cuda_process(tmp_path):
    """The DDP step on GPUs (NCCL): losses and learning rates of the one-process run."""
    argv = [a if a != 'cpu' else 'cuda' for a in PRETRAIN] + ['--max_epochs', '1', '--dropout', '0']
    one, two = tmp_path / 'one', tmp_path / 'two'
    for d in (one, two):
        d.mkdir()
        write_crlf_inputs(d)
    run_ok(argv, one)
    run_ok(argv, two, launcher=TORCHRUN)
    for tag in ('train/loss', 'train/lr'):
        a, b = tb_scalars(one, tag), tb_scalars(two, tag)
        assert [s for s, _ in a] == [s for s, _ in b]
        assert all(y == pytest.approx(x, rel=1e-3) for (_, x), (_, y) in zip(a, b))
