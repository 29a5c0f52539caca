"""scripts/gpu_check.sh where there is no GPU (this project's machines): it says so in one line
and exits 2, and bad options are one line too. Its stages are checked with a stand-in python3
that claims a GPU and plays the stages' commands: each stage leaves summary.md and one archive
in --out and names the next command; nothing is installed; a missing data/ is one line."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time

import pytest
import torch

from support import REPO

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)

SCRIPT = os.path.join(REPO, 'scripts', 'gpu_check.sh')


def gpu_check(*args):
    env = dict(os.environ, PYTHON=sys.executable)
    return subprocess.run(['bash', SCRIPT, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.skipif(torch.cuda.is_available(), reason='this machine has a GPU: the check would run')
def test_without_a_gpu_it_says_so_and_exits_2(tmp_path):
    proc = gpu_check('--minutes', '1', '--out', str(tmp_path / 'out'))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith('error: no CUDA GPU is visible to torch')
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('args,words', [(['--minutes', 'soon'], '--minutes must be a number'),
                                        (['--minutes', '.5'], "whole minutes (1 or more), not '.5'"),
                                        (['--minutes', '1.2.3'], "not '1.2.3'"),
                                        (['--minutes', '0'], "not '0'"),
                                        (['--stage', 'train'], "--stage must be tests, bench, "
                                                               "assignment or all, not 'train'"),
                                        (['--stage'], '--stage needs'),
                                        (['--seed', '-1'], "--seed must be a whole number (0 or "
                                                           "more), not '-1'"),
                                        (['--seed', '07'], "not '07'"),
                                        (['--fast'], 'unknown option --fast')])
def test_bad_options_are_one_error_line(args, words):
    proc = gpu_check(*args)
    assert proc.returncode == 2
    assert proc.stderr.count('\n') == 1 and words in proc.stderr


# A stand-in for a GPU machine's python3: it says torch sees a GPU, records every call, and plays
# the stages' commands (run_all leaves params, predictions and a report; FAKE_RUN_ALL_RC is its exit
# status, 124 standing for a call that ran out of time). Anything else goes to the real Python.
FAKE_PYTHON = """#!/bin/bash
echo "$*" >> "$FAKE_CALLS"
case "$*" in
  *torch.cuda.is_available*) exit 0 ;;
  *get_device_name*) echo "NVIDIA Fake GPU 80GB"; exit 0 ;;
  *torch.__version__*) echo "2.11.0"; exit 0 ;;
  "-c import tqdm, tensorboard, pytest") exit 0 ;;
  "-m pytest"*) echo "fake: 7 passed"; exit 0 ;;
  *benchmark.py*) while [ "$1" != --out ]; do shift; done; echo "| fake benchmark |" > "$2"; exit 0 ;;
  *run_all.py*--report-only*) exit 0 ;;
  *run_all.py*) [ -n "$FAKE_REAL_RUN_ALL" ] && exec "$REAL_PYTHON" "$@"
                mkdir -p "$3"; echo Paris > "$3/vanilla.pretrain.dev.predictions"
                echo params > "$3/vanilla.pretrain.params"; echo ckpt > "$3/rope.pretrain.params.ckpt"
                echo "# report of commit $A5_COMMIT" > "$3/report.md"; sleep ${FAKE_RUN_ALL_SLEEP:-0}
                exit ${FAKE_RUN_ALL_RC:-0} ;;
esac
exec "$REAL_PYTHON" "$@"
"""


def fake_env(tmp_path, rc=0, **extra):
    fake = tmp_path / 'python3'
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return dict(os.environ, PYTHON=str(fake), REAL_PYTHON=sys.executable,
                FAKE_CALLS=str(tmp_path / 'calls'), FAKE_RUN_ALL_RC=str(rc), **extra)


def fake_gpu(tmp_path, *args, rc=0, cwd=REPO, **extra):
    return subprocess.run(['bash', os.path.join(cwd, 'scripts', 'gpu_check.sh'), *args], cwd=cwd,
                          env=fake_env(tmp_path, rc, **extra), capture_output=True, text=True,
                          timeout=300)


def archive(path):
    with tarfile.open(path) as t:
        return sorted(os.path.normpath(n) for n in t.getnames() if not t.getmember(n).isdir())


def test_each_stage_fits_one_call_and_names_the_next(tmp_path):
    out, work = tmp_path / 'out', tmp_path / 'work'
    common = ['--out', str(out), '--work', str(work)]
    proc = fake_gpu(tmp_path, '--stage', 'tests', *common)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == \
        f'next: bash scripts/gpu_check.sh --stage assignment --minutes 9 --out {out}'
    assert sorted(os.listdir(out)) == ['results.tgz', 'summary.md']  # what comes back, at most
    assert archive(out / 'results.tgz') == ['cuda_tests.log', 'stages.log']
    assert 'fake: 7 passed' in (work / 'cuda_tests.log').read_text()
    # the assignment runs out of time: the same command continues it
    proc = fake_gpu(tmp_path, '--stage', 'assignment', '--models', 'vanilla', *common, rc=124)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == (
        f'next: bash scripts/gpu_check.sh --stage assignment --models vanilla --minutes 9 --out '
        f'{out}   (continues where this one stopped)')
    assert 'assignment: NOT done (exit 124: out of time)' in (out / 'summary.md').read_text()
    proc = fake_gpu(tmp_path, '--stage', 'assignment', *common)
    assert proc.returncode == 0
    assert 'next: bash scripts/gpu_check.sh --stage bench --minutes 4' in proc.stdout
    proc = fake_gpu(tmp_path, '--stage', 'bench', '--variants', 'vanilla,rope', *common)
    assert proc.returncode == 0
    assert proc.stdout.strip().endswith('into results/fake-gpu-80gb/ and commit it')
    summary = (out / 'summary.md').read_text()
    assert '# gpu_check on NVIDIA Fake GPU 80GB' in summary and 'tests: done' in summary
    # predictions and reports come back; params and checkpoints never
    assert archive(out / 'results.tgz') == [
        'assignment/report.md', 'assignment/vanilla.pretrain.dev.predictions', 'benchmarks.md',
        'cuda_tests.log', 'stages.log']
    assert sorted(os.listdir(out)) == ['results.tgz', 'summary.md']
    calls = (tmp_path / 'calls').read_text()
    assert 'pip' not in calls and 'setup.sh' not in calls  # installs nothing
    assert f'scripts/run_all.py --out {work}/assignment --models vanilla --time_budget ' in calls
    assert f'scripts/run_all.py --out {work}/assignment --time_budget ' in calls
    assert '-- --device cuda' in calls
    assert '--compile --out ' + str(work / 'benchmarks.md') + ' --variants vanilla rope' in calls


def test_without_the_data_it_says_so_and_exits_2(tmp_path):
    """A working tree copied without data/ (git does not hold the data files)."""
    copy = tmp_path / 'copy'
    (copy / 'scripts').mkdir(parents=True)
    (copy / 'data').mkdir()
    shutil.copy(SCRIPT, copy / 'scripts')
    shutil.copy(os.path.join(REPO, 'data', 'SHA256SUMS'), copy / 'data')
    proc = fake_gpu(tmp_path, '--stage', 'tests', cwd=str(copy))
    assert proc.returncode == 2
    assert proc.stderr.count('\n') == 1
    assert proc.stderr.startswith("error: data/ lacks the assignment's data files")
    assert not (copy / 'results').exists()


def test_a_call_killed_at_any_moment_leaves_a_readable_summary(tmp_path):
    """SIGKILL to the whole call (the device's limit, a lost machine) right after it started,
    and again while its stage runs: summary.md and results.tgz are there, whole, each time."""
    out = tmp_path / 'out'
    env = fake_env(tmp_path, FAKE_RUN_ALL_SLEEP='60', GPU_CHECK_TICK='1')
    for wait_for in ('summary', 'under way'):
        work = tmp_path / wait_for.replace(' ', '-')
        proc = subprocess.Popen(['bash', SCRIPT, '--stage', 'assignment', '--models', 'vanilla',
                                 '--commit', 'abc1234', '--out', str(out), '--work', str(work)],
                                cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            text = (out / 'summary.md').read_text() if (out / 'summary.md').exists() else ''
            if text and (wait_for == 'summary' or 'under way at' in text):
                break
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        summary = (out / 'summary.md').read_text()
        assert summary.startswith('# gpu_check on NVIDIA Fake GPU 80GB\n')
        assert 'commit abc1234' in summary and summary.rstrip().splitlines()[-1].startswith('next: ')
        # the archive follows the summary in each pack: a kill between the two leaves the last
        # one (none yet, right at the start); one that is there is whole (written, then renamed)
        if wait_for != 'summary' or (out / 'results.tgz').exists():
            archive(out / 'results.tgz')
        assert not [f for f in os.listdir(out) if f not in ('summary.md', 'results.tgz')
                    and not f.startswith('.')]
        (out / 'summary.md').unlink()
    # the second kill came while run_all ran: the summary said so, with run_all's report so far
    assert 'under way at' in text and '# report of commit abc1234' in text
    assert 'assignment since' in text


def test_models_whose_predictions_are_there_are_not_trained_again(tmp_path):
    """Predictions brought back by an earlier call and carried to a fresh machine: the real
    run_all skips the model (no params there: training would have to start over)."""
    out, work = tmp_path / 'out', tmp_path / 'work'
    (work / 'assignment').mkdir(parents=True)
    for split in ('dev', 'test'):
        (work / 'assignment' / f'vanilla.pretrain.{split}.predictions').write_text('London\n')
    proc = fake_gpu(tmp_path, '--stage', 'assignment', '--models', 'vanilla', '--out', str(out),
                    '--work', str(work), FAKE_REAL_RUN_ALL='1')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'skip vanilla: its dev and test predictions exist' in proc.stdout
    assert '+ python src/run.py' not in proc.stdout
    assert not (work / 'assignment' / 'vanilla.pretrain.params').exists()
    assert 'assignment/london_baseline_accuracy.txt' in archive(out / 'results.tgz')


@pytest.mark.parametrize('args,words', [(['--models', 'vanilla,gpt4'], "--models: no model 'gpt4'"),
                                        (['--variants', 'mamba'], "--variants: no variant 'mamba'"),
                                        (['--commit', 'a;b'], "--commit 'a;b': not a commit")])
def test_bad_names_are_one_error_line(args, words):
    proc = gpu_check(*args)
    assert proc.returncode == 2
    assert proc.stderr.count('\n') == 1 and words in proc.stderr


def test_a_seed_runs_the_assignment_again_in_its_own_folder(tmp_path):
    """--seed N: run.py's seed through run_all, in assignment-seedN/ (the seed-0 folder's
    predictions would have the models skipped), and the next command keeps the seed."""
    out, work = tmp_path / 'out', tmp_path / 'work'
    proc = fake_gpu(tmp_path, '--stage', 'assignment', '--models', 'vanilla', '--seed', '2',
                    '--out', str(out), '--work', str(work), rc=124)
    assert proc.returncode == 1, proc.stderr
    calls = (tmp_path / 'calls').read_text()
    assert (f'scripts/run_all.py --out {work}/assignment-seed2 --models vanilla --time_budget '
            in calls) and '-- --device cuda --seed 2' in calls
    assert proc.stdout.splitlines()[-1].startswith(
        'next: bash scripts/gpu_check.sh --stage assignment --models vanilla --seed 2 --minutes 9')
    assert 'assignment-seed2/report.md' in archive(out / 'results.tgz')
    assert '--seed 2' in (out / 'summary.md').read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason='this machine has a GPU: the calls would run')
def test_the_next_gpu_calls_refuse_a_machine_without_a_gpu(tmp_path):
    """scripts/dev/gpu_speed.sh (docs/gpu.md's plan) on a CPU: one line, exit 2, nothing run."""
    env = dict(os.environ, PYTHON=sys.executable, OUT=str(tmp_path / 'out'))
    proc = subprocess.run(['bash', os.path.join(REPO, 'scripts', 'dev', 'gpu_speed.sh'), '1', 'abc1234'],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {sys.executable}'s torch sees no GPU (gpu_speed.sh measures on a GPU machine)"]
    assert not (tmp_path / 'out').exists() and not (tmp_path / 'runs').exists()


def test_the_next_calls_are_1_and_2(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, OUT=str(tmp_path / 'out'))
    proc = subprocess.run(['bash', os.path.join(REPO, 'scripts', 'dev', 'gpu_speed.sh'), '7', 'abc1234'],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == ["error: the call is 1 or 2, not '7'"]
    assert not (tmp_path / 'out').exists()


def stand_in_python(tmp_path):
    """A python that says it sees a GPU and records its command lines in calls.log."""
    log = tmp_path / 'calls.log'
    fake = tmp_path / 'python'
    fake.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    fake.chmod(0o755)
    return fake, log


def limits(script_text, call):
    """The `timeout -k K SECONDS` limits the call's branch of gpu_speed.sh sets, as its lines
    read: every limit is a limited() or throughput() call, each holding its seconds first."""
    branch = script_text.split('if [ "$call" = 1 ]; then')[1].split('\nelse\n')[call - 1]
    return [int(m) for m in re.findall(r'^\s*(?:limited|throughput) (\d+) ', branch, re.M)]


def test_the_next_gpu_loans_two_calls_run_what_docs_gpu_md_says(tmp_path):
    """gpu_speed.sh 1 and 2 (docs/gpu.md's plan) with a stand-in Python: 1, the CUDA tests, then
    the throughput of 1, 2, 3 and 5 models as threads and as processes in bf16, tf32 against
    fp32, one recorded step's rows in 1 group against 4; 2, the whole assignment in one run_all with the flags given, split at --. Every limit
    is timeout -k; call 1's add up to at most 240 s, call 2's to at most 540 s."""
    fake, log = stand_in_python(tmp_path)
    env = dict(os.environ, PYTHON=str(fake), OUT=str(tmp_path / 'out'))
    script = os.path.join(REPO, 'scripts', 'dev', 'gpu_speed.sh')
    text = open(script, encoding='utf-8').read()
    assert re.findall(r'\btimeout\b(?! -k)', text.split('set -u', 1)[1]) == []  # every one -k
    assert 0 < sum(limits(text, 1)) <= 240 and 0 < sum(limits(text, 2)) <= 540
    lines = {}
    for call, extra in (('1', []), ('2', ['--side_by_side', '3', '--one_process', '--',
                                          '--precision', 'bf16'])):
        log.write_text('')
        proc = subprocess.run(['bash', script, call, 'abc1234', *extra], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        lines[call] = [line.split() for line in log.read_text().splitlines()[1:]]  # (its check)
    tests, *measured = lines['1']
    assert tests[:2] == ['-m', 'pytest'] and 'tests/engine/test_turns.py' in tests and \
        'cuda and (members or graph or groups)' in ' '.join(tests)
    bf16 = measured[0]
    assert bf16[0] == 'scripts/dev/throughput.py' and \
        bf16[bf16.index('--models') + 1:bf16.index('--way')] == ['1', '2', '3', '5'] and \
        bf16[bf16.index('--way') + 1:bf16.index('--way') + 3] == ['threads', 'processes'] and \
        bf16[bf16.index('--precision') + 1] == 'bf16'
    assert [argv[argv.index('--precision') + 1] for argv in measured[-4:-2]] == ['tf32', 'fp32']
    groups = measured[-2:]  # one model's recorded step, its rows in 1 group, then in 4
    assert [argv[argv.index('--row_groups') + 1] for argv in groups] == ['1', '4'] and \
        all(argv[argv.index('--compile') + 1] == 'graphs' for argv in groups)
    (run_all,) = lines['2']
    assert run_all[0] == 'scripts/run_all.py' and '--out' in run_all
    at = run_all.index('--')
    assert run_all[at - 3:at] == ['--side_by_side', '3', '--one_process']
    assert run_all[at + 1:] == ['--device', 'cuda', '--precision', 'bf16']


def test_a_gpu_call_without_the_data_is_one_line(tmp_path):
    fake, log = stand_in_python(tmp_path)
    copy = tmp_path / 'repo' / 'scripts' / 'dev'
    copy.mkdir(parents=True)
    shutil.copy(os.path.join(REPO, 'scripts', 'dev', 'gpu_speed.sh'), copy)
    env = dict(os.environ, PYTHON=str(fake), OUT=str(tmp_path / 'out'))
    proc = subprocess.run(['bash', str(copy / 'gpu_speed.sh'), '1', 'abc1234'], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        'error: data/wiki.txt is not there (carry data to the GPU machine)']
    assert not (tmp_path / 'out').exists()
