"""The grader's sandboxes: a submission's dataset.py that looks around, reaches out or leaves
something running gets nowhere, under bubblewrap (spec_check.sandbox_command) and, where
namespaces are refused (Gradescope's Docker container), as an unprivileged user
(user_sandbox); a grader with neither refuses to run submission code unless told --no-sandbox.

Each hostile dataset.py acts when imported, then raises with what it saw: the probe reports the
error, and the test reads it there. The tests that need bubblewrap skip where it cannot run
(scripts/setup.sh installs it where it can); those of the user sandbox where the tests do not run
as root or the interpreter is closed to other users (.ci/run opens it)."""
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from support import REPO

import grade  # noqa: E402
import spec_check  # noqa: E402
import user_sandbox  # noqa: E402

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)

PROBLEM = spec_check.sandbox_problem()
needs_bwrap = pytest.mark.skipif(PROBLEM is not None, reason=f'no sandbox here: {PROBLEM}')
USER_PROBLEM = user_sandbox.problem(make=False)  # (the set-up makes the account: not a test)
# (marked user_sandbox too: .ci/run runs these again with the interpreter's folder opened)
USER_MARKS = [pytest.mark.skipif(USER_PROBLEM is not None, reason=f'no user sandbox: {USER_PROBLEM}'),
              pytest.mark.user_sandbox]
KINDS = [pytest.param('bubblewrap', marks=needs_bwrap), pytest.param('user', marks=USER_MARKS)]


def needs_user(test):
    for mark in USER_MARKS:
        test = mark(test)
    return test


def seen(tmp_path, code, isolate='bubblewrap', wall_seconds=60, hidden=()):
    """What a dataset.py running `code` on import reported (its exception's text)."""
    src = tmp_path / 'src'
    src.mkdir(exist_ok=True)
    (src / 'dataset.py').write_text(code + '\nraise RuntimeError("seen " + repr(SEEN))\n')
    request, _, _ = spec_check.request_for(draws=spec_check.MIN_DRAWS)
    report, why = spec_check.run_probe(str(src), str(tmp_path / 'sandbox'), request,
                                       wall_seconds, isolate=isolate, hidden=hidden)
    assert why is None and 'seen ' in report.get('error', ''), (why, report)
    return report['error'].split('seen ', 1)[1]


@needs_bwrap
def test_the_child_sees_its_own_processes_only(tmp_path):
    code = f'''import os
pids = [p for p in os.listdir('/proc') if p.isdigit()]
SEEN = (len(pids), os.path.exists('/proc/{os.getpid()}/cmdline'), os.getppid())'''
    count, grader_visible, parent = eval(seen(tmp_path, code))
    assert not grader_visible and count <= 3 and parent <= 2, (count, grader_visible, parent)


@pytest.mark.parametrize('kind', KINDS)
def test_the_child_has_no_network_not_even_loopback(tmp_path, kind):
    """Under bubblewrap, and in the user sandbox's namespace where one can be made."""
    if kind == 'user' and not user_sandbox.pid_namespace():
        pytest.skip('no namespace here: the user sandbox keeps the network')
    server = socket.socket()
    server.bind(('127.0.0.1', 0))
    server.listen(1)
    try:
        code = f'''import socket
try:
    socket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=5)
    SEEN = 'connected'
except OSError as e:
    SEEN = type(e).__name__'''
        assert seen(tmp_path, code, kind) != "'connected'"
    finally:
        server.close()


@pytest.mark.parametrize('kind', KINDS)
def test_the_child_writes_only_in_its_sandbox(tmp_path, kind):
    planted = [os.path.join(REPO, 'scripts', 'grading', 'planted.py'),
               os.path.join(sys.prefix, 'planted.pth'), os.path.join(REPO, 'planted.txt'),
               str(tmp_path / 'outside.txt')]
    code = f'''import os
SEEN = []
for path in {planted!r} + [os.path.join(os.getcwd(), 'inside.txt')]:
    try:
        with open(path, 'w') as f:
            f.write('x')
        SEEN.append('wrote')
    except OSError:
        SEEN.append('refused')'''
    assert eval(seen(tmp_path, code, kind)) == ['refused'] * len(planted) + ['wrote']
    assert not any(os.path.exists(p) for p in planted)


DOUBLE_FORK = '''import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # the grandchild, in a session of its own
        time.sleep(1.5)
        with open({marker!r}, 'w') as f:
            f.write('outlived the probe')
        os._exit(0)
    os._exit(0)
SEEN = 'forked'
'''


@pytest.mark.parametrize('kind', KINDS)
def test_nothing_the_child_starts_outlives_it(tmp_path, kind):
    if kind == 'bubblewrap':
        marker = str(tmp_path / 'sandbox' / 'survivor.txt')  # writable to the child
    else:  # a folder the user may write in, which outlives its run
        shared = tempfile.mkdtemp(prefix='a5-test-')
        os.chmod(shared, 0o777)
        marker = os.path.join(shared, 'survivor.txt')
    try:
        assert seen(tmp_path, DOUBLE_FORK.format(marker=marker), kind) == "'forked'"
        time.sleep(3)
        assert not os.path.exists(marker)
    finally:
        if kind == 'user':
            shutil.rmtree(shared)


def test_without_the_sandbox_a_double_fork_outlives_the_kill(tmp_path):
    """Why the sandbox: the plain child's process group is killed, but a grandchild in a session
    of its own goes on (what the test above rules out)."""
    marker = str(tmp_path / 'sandbox' / 'survivor.txt')
    assert seen(tmp_path, DOUBLE_FORK.format(marker=marker), isolate=False) == "'forked'"
    deadline = time.time() + 30
    while not os.path.exists(marker) and time.time() < deadline:
        time.sleep(0.2)
    assert os.path.exists(marker)


def test_without_bubblewrap_the_grader_refuses_unless_told(tmp_path, monkeypatch, capsys):
    """Neither sandbox (no bubblewrap; the user sandbox stood in as impossible): refused."""
    monkeypatch.setattr(spec_check.shutil, 'which', lambda name: None)
    monkeypatch.setattr(user_sandbox, 'problem', lambda: 'the grader is not root')
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'sub').mkdir()
    assert grade.main(['sub', '--data_dir', str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'bubblewrap (bwrap) is not installed' in err
    assert '--no-sandbox' in err and 'your files and network' in err
    args = grade.parse_args(['sub', '--data_dir', str(tmp_path), '--no-sandbox'])
    grade.check_args(args)  # told: no error
    args = grade.parse_args(['sub', '--data_dir', str(tmp_path), '--skip', 'dataset'])
    grade.check_args(args)  # no submission code runs: nothing to refuse


# ---- the report the child writes is checked, never trusted ---------------------------------------

def real_report(request):
    """What the probe reports for the project's own (correct) dataset.py, as the grader reads it
    (through JSON)."""
    import importlib.util
    import json
    import dataset_probe
    spec = importlib.util.spec_from_file_location('real_dataset', os.path.join(REPO, 'src', 'dataset.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return json.loads(json.dumps(dataset_probe.draw(request, module)))


FORGER = '''import json, os
os.write(3, json.dumps({report!r}).encode())  # the probe's report descriptor
os._exit(0)
'''


@pytest.mark.parametrize('forgery', ['two draws', 'reordered', 'another document'])
def test_a_report_the_submission_writes_itself_is_its_failure(tmp_path, forgery):
    """A dataset.py that cannot even build its class writes a report of correct draws (taken
    from a correct dataset) on the probe's descriptor and exits: every property fails, with the
    reason (before, two draws gave 10/10)."""
    request, _, _ = spec_check.request_for(draws=spec_check.MIN_DRAWS)
    report = real_report(request)
    assert spec_check.report_problem(report, request) is None  # the honest report passes
    if forgery == 'two draws':
        report['draws'] = report['draws'][:2]
    elif forgery == 'reordered':
        report['draws'] = report['draws'][::-1]
    else:
        first = request['draws'][0]
        report['draws'][0][0] = first + 1 if first + 1 < 300 else first - 1
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'dataset.py').write_text(FORGER.format(report=report))
    # (each sandbox once; under bubblewrap, or without one, for every forgery)
    kinds = ['bubblewrap' if PROBLEM is None else None] + \
        (['user'] if forgery == 'two draws' and USER_PROBLEM is None else [])
    for kind in kinds:
        got, why = spec_check.run_probe(str(src), str(tmp_path / f'sandbox-{kind}'), request,
                                        isolate=kind)
        assert got is None and 'not the probe\'s' in why, (kind, why)


def test_a_forged_report_nested_too_deep_is_its_failure_not_a_grader_error(tmp_path):
    """A dataset.py that writes, on the probe's descriptor, a JSON nested 100,000 deep: the
    grader's json.loads raised RecursionError, a grader error; it is the submission's row."""
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'dataset.py').write_text("import os\nos.write(3, b'[' * 100000 + b']' * 100000)\n"
                                    "os._exit(0)\n")
    request, _, _ = spec_check.request_for(draws=spec_check.MIN_DRAWS)
    got, why = spec_check.run_probe(str(src), str(tmp_path / 'sandbox'), request,
                                    isolate='bubblewrap' if PROBLEM is None else None)
    assert got is None and 'unreadable report' in why, why


@pytest.mark.parametrize('change', [
    lambda r: r.update(stoi='abc'),
    lambda r: r.update(vocab_size='10'),
    lambda r: r['draws'].__setitem__(5, [r['draws'][5][0], ['torch.int64', [127], ['a']], None]),
    lambda r: r['draws'].__setitem__(5, [10 ** 9, 'error']),
    lambda r: r['draws'].__setitem__(5, [r['draws'][5][0], True]),
    lambda r: r.update(names=[[7, None, None]]),
    lambda r: r.update(error=['not', 'text']),
], ids=['stoi', 'vocab_size', 'ids', 'index', 'draw', 'names', 'error'])
def test_a_malformed_report_is_named_not_a_grader_error(change):
    request, docs, pairs = spec_check.request_for(draws=spec_check.MIN_DRAWS)
    report = real_report(request)
    change(report)
    assert spec_check.report_problem(report, request) is not None


@pytest.fixture
def shared_folder():
    """(A folder open to other users, its data/ folder): 0755 both, under the system's temporary
    folder (pytest's own folders are closed to others, the probe's user among them); removed
    after the test."""
    shared = tempfile.mkdtemp(prefix='a5-test-')
    try:
        os.chmod(shared, 0o755)
        data = os.path.join(shared, 'data')
        os.mkdir(data, 0o755)
        yield shared, data
    finally:
        shutil.rmtree(shared)


# ---- the user sandbox: what another user may not do ---------------------------------------------

@needs_user
def test_the_user_cannot_read_what_the_grader_hides_and_the_modes_come_back(tmp_path, shared_folder):
    """The held-out answers and their folder, made unreadable by the grader itself for the run
    (whatever modes they were unpacked with: 0644 and 0755 here), back as they were after."""
    shared, data = shared_folder
    answers = os.path.join(data, 'birth_test_answers.tsv')
    with open(answers, 'w') as f:
        f.write('Who?\tParis\n')
    os.chmod(answers, 0o644)
    code = f'''import os
SEEN = []
for path in [{answers!r}, {data!r}]:
    try:
        open(path).read() if path.endswith('.tsv') else os.listdir(path)
        SEEN.append('read')
    except OSError as e:
        SEEN.append(type(e).__name__)'''
    assert eval(seen(tmp_path, code, 'user', hidden=[data, answers])) == \
        ['PermissionError', 'PermissionError']
    assert os.stat(answers).st_mode & 0o777 == 0o644
    assert os.stat(data).st_mode & 0o777 == 0o755
    # unhidden, the same user reads them: the test can fail
    (tmp_path / 'again').mkdir()
    assert eval(seen(tmp_path / 'again', code, 'user')) == ['read', 'read']


@needs_user
def test_a_fork_bomb_stops_at_the_users_process_cap(tmp_path):
    code = '''import os, time
children = 0
try:
    for _ in range(1000):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        children += 1
except OSError:
    pass
SEEN = children'''
    assert 0 < int(seen(tmp_path, code, 'user')) < user_sandbox.PROCESSES
    assert user_sandbox.started(user_sandbox.account().pw_uid) == []


def alive(pid):
    """Whether `pid` is a process that has not ended (a zombie has)."""
    try:
        with open(f'/proc/{pid}/status') as f:
            return next(x for x in f if x.startswith('State:')).split()[1] != 'Z'
    except (OSError, StopIteration):
        return False


def running(argument):
    """The pids of the live processes whose command line holds `argument`."""
    found = []
    for name in os.listdir('/proc'):
        if name.isdigit() and alive(name):
            try:
                with open(f'/proc/{name}/cmdline', 'rb') as f:
                    if argument.encode() in f.read().split(b'\0'):
                        found.append(int(name))
            except OSError:
                continue
    return found


# a dataset.py's start: a `sleep 120 MARK` detached from it (a new session, a double fork),
# waited for until it runs (MARK: how the test finds it in /proc)
DETACHED = '''import os, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, str(os.getpid()).encode())
        os.execvp('sleep', ['sleep', '120', '{mark}'])
    os._exit(0)
os.wait()
pid = os.read(r, 20).decode()
for _ in range(500):
    if open('/proc/' + pid + '/cmdline', 'rb').read().startswith(b'sleep'):
        break
    time.sleep(0.01)
'''


# the user sandbox in a PID namespace of its own (where the kernel allows one), and without (the
# fallback of Gradescope's container, which refuses namespaces)
NAMESPACES = [pytest.param(True, id='namespace'), pytest.param(False, id='no-namespace')]


@pytest.fixture
def namespace(request, monkeypatch):
    if request.param and not user_sandbox.pid_namespace():
        pytest.skip('no PID namespace can be made here')
    monkeypatch.setattr(user_sandbox, 'pid_namespace', lambda: request.param)
    return request.param


@needs_user
@pytest.mark.parametrize('namespace', NAMESPACES, indirect=True)
def test_the_user_sandbox_ends_what_the_probe_started_and_nothing_else(tmp_path, namespace):
    """A process of the sandbox's account that the grading did not start survives it; one that
    the submission started and detached (a new session, a double fork) does not. (Before, the
    sandbox ended every process of the account, and its account was `nobody` where a5probe was
    missing: other services' processes.)"""
    user = user_sandbox.account()
    mark = f'{os.getpid()}{time.monotonic_ns() % 10**6}'  # (sleep's argument: how it is found)
    # started as the account, detached so that it is nobody's child here (the intermediate exits)
    outside_pid = int(subprocess.run([sys.executable, '-I', '-c', f'''import subprocess
print(subprocess.Popen(["sleep", "120", "0.1{mark}"], start_new_session=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)'''],
                                     user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                                     check=True, cwd='/', capture_output=True, text=True).stdout)
    try:
        assert alive(outside_pid)
        code = DETACHED.format(mark=f'0.2{mark}') + 'SEEN = "started"'
        assert seen(tmp_path, code, 'user') == "'started'"
        assert running(f'0.2{mark}') == []
        assert alive(outside_pid)
    finally:
        os.kill(outside_pid, signal.SIGKILL)


def test_the_user_sandbox_runs_as_its_own_account_only(monkeypatch):
    """No account a5probe, and none can be made: the sandbox refuses, naming the command that
    makes it, rather than running as `nobody`."""
    monkeypatch.setattr(user_sandbox, 'USER', 'a5probe-missing-for-a-test')
    monkeypatch.setattr(user_sandbox, 'MAKE_USER', ['false'])
    monkeypatch.setattr(os, 'geteuid', lambda: 0)
    assert user_sandbox.account() is None
    why = user_sandbox.problem()
    assert 'no account a5probe-missing-for-a-test' in why and 'as root: false' in why, why


@needs_user
def test_many_files_together_end_the_run_and_what_was_left_in_tmp_goes(tmp_path, monkeypatch):
    """Each file under the per-file cap, together past the disk cap (4 MiB here): the watchdog
    ends the run with the reason; the files the user put in /tmp are removed after it."""
    monkeypatch.setattr(user_sandbox, 'DISK_CAP', 4 << 20)
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'dataset.py').write_text('''import os, time
for i in range(12):
    with open(f'/tmp/a5-left-{os.getpid()}-{i}', 'wb') as f:
        f.write(b'x' * (1 << 20))
time.sleep(60)
''')
    request, _, _ = spec_check.request_for(draws=spec_check.MIN_DRAWS)
    got, why = spec_check.run_probe(str(src), str(tmp_path / 'sandbox'), request, 120,
                                    isolate='user')
    assert got is None and 'wrote more than 4 MiB' in why, why
    assert not [n for n in os.listdir('/tmp') if n.startswith('a5-left-')]


@needs_user
def test_auto_falls_back_to_the_user_sandbox_and_says_so(monkeypatch):
    """Where bubblewrap cannot start (stood in for), auto takes the user sandbox, and the
    reports name it."""
    monkeypatch.setattr(spec_check, 'sandbox_problem', lambda: 'bubblewrap cannot start here')
    assert spec_check.sandbox_kind('auto') == ('user', None)
    assert spec_check.sandbox_kind('bubblewrap')[1] == 'bubblewrap cannot start here'
    assert spec_check.sandbox_kind('none') == (None, None)
    assert 'unprivileged user' in spec_check.sandbox_name('user')


@needs_bwrap
def test_many_processes_end_a_bubblewrap_run(tmp_path):
    """Processes that each wait, many of them: under bubblewrap, where the per-user cap does not
    hold (the grader is root), the watchdog counts the probe's descendants and ends the run (as
    another user the cap stops the forks: test_a_fork_bomb_stops_at_the_users_process_cap)."""
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'dataset.py').write_text('''import os, time
for _ in range(300):
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
    except OSError:
        break
time.sleep(60)
''')
    request, _, _ = spec_check.request_for(draws=spec_check.MIN_DRAWS)
    got, why = spec_check.run_probe(str(src), str(tmp_path / 'sandbox'), request, 120)
    assert got is None and f'started more than {user_sandbox.PROCESSES} processes' in why, why


@needs_bwrap
def test_many_files_together_end_a_bubblewrap_run(tmp_path, monkeypatch):
    monkeypatch.setattr(user_sandbox, 'DISK_CAP', 4 << 20)
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'dataset.py').write_text('''import time
for i in range(12):
    with open(f'many-{i}', 'wb') as f:
        f.write(b'x' * (1 << 20))
time.sleep(60)
''')
    request, _, _ = spec_check.request_for(draws=spec_check.MIN_DRAWS)
    got, why = spec_check.run_probe(str(src), str(tmp_path / 'sandbox'), request, 120)
    assert got is None and 'wrote more than 4 MiB' in why, why


@pytest.mark.parametrize('kind', KINDS)
@pytest.mark.parametrize('case', ['sleeps', 'huge file'])
def test_a_sleeping_dataset_and_a_huge_file_end_the_run_in_either_sandbox(tmp_path, kind, case):
    """A dataset.py that sleeps is ended at the wall-clock limit; one file past FILE_CAP is
    refused by the kernel (RLIMIT_FSIZE), under either sandbox."""
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'dataset.py').write_text(
        'import time\ntime.sleep(60)\n' if case == 'sleeps' else
        "with open('huge', 'wb') as f:\n    for _ in range(80):\n        f.write(b'x' * (1 << 20))\n")
    request, _, _ = spec_check.request_for(draws=spec_check.MIN_DRAWS)
    got, why = spec_check.run_probe(str(src), str(tmp_path / 'sandbox'), request,
                                    2 if case == 'sleeps' else 120, isolate=kind)
    if case == 'sleeps':
        assert got is None and 'did not finish within 2 s' in why, why
    else:  # (Python ignores SIGXFSZ: the write past the cap fails, and the dataset with it)
        assert why is None and 'File too large' in got['error'], got


NUMPY_DATASET = '''import random
import numpy as np
import torch


class CharCorruptionDataset:
    def __init__(self, data, block_size):
        chars = sorted(set(data))
        self.stoi = {c: i + 2 for i, c in enumerate(chars)}
        self.stoi.update({'\\u25a1': 0, '\\u2047': 1})
        self.itos = {i: c for c, i in self.stoi.items()}
        self.vocab_size, self.block_size = len(self.stoi), block_size
        self.data = data.split('\\n')
        self.bias = np.random.randint(0, 3)  # a draw in the constructor
        self.letters = list(set(data))  # an order that follows the strings' hashes

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        n = int(np.random.randint(4, 9)) + self.bias
        pick = self.letters[np.random.randint(len(self.letters))]
        s = (self.data[idx][:n] + pick + '\\u25a1' * self.block_size)[:self.block_size]
        ids = torch.tensor([self.stoi[c] for c in s])
        return ids[:-1], ids[1:]


class NameDataset:
    def __init__(self, pretraining_dataset, data):
        self.data = []
'''


@pytest.mark.parametrize('kind', KINDS)
def test_the_same_seed_draws_the_same_whatever_the_dataset_draws_with(tmp_path, kind):
    """A dataset that draws with numpy in its constructor, and from a set's order (which follows
    Python's per-process hash seed): two probes with the same seed report the same draws (the
    grader's figures repeat however a class is graded). Before, numpy was seeded only after the
    constructor and the probe's hashes were randomised per process."""
    reports = []
    for run in ('first', 'second'):
        src = tmp_path / run / 'src'
        src.mkdir(parents=True)
        (src / 'dataset.py').write_text(NUMPY_DATASET)
        request, _, _ = spec_check.request_for(draws=spec_check.MIN_DRAWS)
        report, why = spec_check.run_probe(str(src), str(tmp_path / run / 'sandbox'), request,
                                           120, isolate=kind)
        assert why is None and 'error' not in report, (why, report)
        reports.append(report['draws'])
    assert reports[0] == reports[1]


def test_the_grader_hides_the_reports_and_the_submissions_from_the_probe(tmp_path):
    """The probe's user could read --out's reports (not hidden) and the other students'
    submissions, which the grader's command line names (readable by every user). The reports
    are hidden as files (their folders may hold the Python the probe runs on)."""
    from types import SimpleNamespace
    args = SimpleNamespace(data_dir='d', test_answers='t.tsv', out=str(tmp_path / 'reports'),
                           gradescope=None, json=str(tmp_path / 'r' / 'grades.json'),
                           submissions=['class/a.zip', str(tmp_path / 'b.zip')])
    hidden = grade.Grader.hidden(SimpleNamespace(args=args))
    for name in ('reports/report.md', 'reports/report.csv', 'r/grades.json'):
        assert str(tmp_path / name) in hidden
    assert os.path.abspath('class/a.zip') in hidden and str(tmp_path / 'b.zip') in hidden


IPC_LEFT = '''import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
SEEN = [libc.shmget(0, {size}, 0o1600), libc.semget(0, 1, 0o1600), libc.msgget(0, 0o1600)]
with open('/run/lock/a5-left', 'w') as f:
    f.write('x')
'''


@needs_user
def test_what_the_probe_leaves_in_ipc_and_run_lock_goes_after_it(tmp_path):
    """System V shared memory, a semaphore and a message queue outlive the process that made
    them; /run/lock is a folder anyone may write in. After the probe, none of the account's is
    left."""
    uid = user_sandbox.account().pw_uid
    ids = eval(seen(tmp_path, IPC_LEFT.format(size=1 << 20), 'user'))
    assert all(i >= 0 for i in ids), ids
    assert user_sandbox.ipc_objects(uid) == []
    assert not os.path.exists('/run/lock/a5-left')


HELD = {  # each holds 12 MiB where no walk of its folders finds it, then waits
    'System V shared memory': """import ctypes
ctypes.CDLL(None).shmget(0, 12 << 20, 0o1600)""",
    'a removed file held open': """import os
f = open(PLACE, 'wb')
f.write(b'x' * (12 << 20))
f.flush()
os.remove(PLACE)""",
    'a memfd held by a child': """import os, time
fd = os.memfd_create('a5-held')
os.write(fd, b'x' * (12 << 20))
if os.fork() == 0:
    time.sleep(60)
os.close(fd)""",
    'a memfd mapped, its descriptor closed': """import mmap, os
fd = os.memfd_create('a5-mapped')
os.ftruncate(fd, 12 << 20)
held = mmap.mmap(fd, 12 << 20)
held.write(b'x' * (12 << 20))
os.close(fd)""",
    'files below a folder chain past the path-length limit': """import os
fd = os.open('.', os.O_RDONLY)
for _ in range(2200):  # 2,200 names of 200 characters: 440,000 characters of path
    os.mkdir('d' * 200, dir_fd=fd)
    fd, parent = os.open('d' * 200, os.O_RDONLY, dir_fd=fd), fd
    os.close(parent)
for i in range(12):
    f = os.open(f'f{i}', os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
    os.write(f, b'x' * (1 << 20))
    os.close(f)""",
}


@pytest.mark.parametrize('kind', KINDS)
@pytest.mark.parametrize('how', list(HELD))
def test_what_the_probe_holds_outside_its_files_counts_against_its_cap(tmp_path, monkeypatch,
                                                                       kind, how):
    """12 MiB against a cap of 4 MiB, held where a walk of the probe's folders by path finds
    nothing: System V shared memory (under bubblewrap, in its own IPC namespace), a file removed
    but held open (/dev/shm, or the probe's folder), a memfd file held by a child or only mapped,
    files below 2,200 folders. The watchdog ends the run; nothing of it is left in IPC."""
    monkeypatch.setattr(user_sandbox, 'DISK_CAP', 4 << 20)
    src = tmp_path / 'src'
    src.mkdir()
    # (bubblewrap's /dev/shm is a tmpfs of 4 MiB, and so is a user sandbox's namespace's)
    place = '/dev/shm/a5-held' if kind == 'user' and not user_sandbox.pid_namespace() \
        else 'a5-held'
    (src / 'dataset.py').write_text(f'PLACE = {place!r}\n' + HELD[how] + '\nimport time\n'
                                    'time.sleep(60)\n')
    request, _, _ = spec_check.request_for(draws=spec_check.MIN_DRAWS)
    try:
        got, why = spec_check.run_probe(str(src), str(tmp_path / 'sandbox'), request, 120,
                                        isolate=kind)
    finally:  # (rm -rf: the chain is past what pytest's clean-up can remove)
        user_sandbox.remove(str(tmp_path / 'sandbox'))
    assert got is None and 'wrote more than 4 MiB' in why, why
    if kind == 'user':
        assert user_sandbox.ipc_objects(user_sandbox.account().pw_uid) == []


@pytest.mark.parametrize('kind', KINDS)
def test_dev_shm_holds_no_more_than_the_disk_cap(tmp_path, monkeypatch, kind):
    """bubblewrap's own /dev put /dev/shm on a tmpfs of half the machine's memory, outside the
    watched folder, and a user-sandbox probe wrote 874 MiB to the machine's /dev/shm between two
    of the watchdog's looks: in either sandbox it is now a tmpfs of the disk cap's size (4 MiB
    here), full at the cap whatever the watchdog sees (it looks once an hour here: the write is
    stopped by the tmpfs alone). The user sandbox's needs a PID namespace."""
    if kind == 'user' and not user_sandbox.pid_namespace():
        pytest.skip('no namespace here: the machine\'s /dev/shm, its writes watched')
    monkeypatch.setattr(user_sandbox, 'DISK_CAP', 4 << 20)
    files_watch = user_sandbox.Watchdog.__init__

    def hourly(self, measure, kill, every=0.5):
        files_watch(self, measure, kill, 3600 if type(self) is user_sandbox.Watchdog else every)
    monkeypatch.setattr(user_sandbox.Watchdog, '__init__', hourly)
    code = '''import os
try:
    with open('/dev/shm/big', 'wb') as f:
        f.write(b'x' * (12 << 20))
    SEEN = 'written'
except OSError as e:
    SEEN = type(e).__name__'''
    assert seen(tmp_path, code, kind) == "'OSError'"


@needs_bwrap
def test_under_bubblewrap_dev_is_read_only_and_its_devices_work(tmp_path):
    """bubblewrap's own /dev is a tmpfs of no size cap (300 MiB were written there): read-only
    now, and /dev/null still takes what is written to it."""
    code = '''import errno
with open('/dev/null', 'wb') as f:
    f.write(b'x' * 100)
try:
    open('/dev/a5-big', 'wb')
    SEEN = 'written'
except OSError as e:
    SEEN = errno.errorcode[e.errno]'''
    assert seen(tmp_path, code) == "'EROFS'"


@pytest.mark.parametrize('kind', KINDS)
def test_the_probe_can_make_no_posix_message_queue(tmp_path, kind):
    """A POSIX message queue outlives its maker, and where /dev/mqueue is not mounted nothing
    lists it to remove it: the probe may make none (RLIMIT_MSGQUEUE 0), under either sandbox."""
    code = '''import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
made = libc.mq_open(b'/a5-left', 0o100 | 0o2, 0o600, None)  # O_CREAT | O_RDWR
SEEN = (made, ctypes.get_errno())'''
    made, err = eval(seen(tmp_path, code, kind))
    assert made == -1 and err in (errno.EMFILE, errno.ENOMEM), (made, err)


def test_the_grader_can_blank_its_command_line_for_other_users():
    """/proc/PID/cmdline is readable by every user: under the user sandbox the grader's names
    another student's submission and the results folder. Blanked, it shows none of it (the
    process's own sys.argv is kept)."""
    code = ('import sys; sys.path.insert(0, sys.argv[1]); import user_sandbox\n'
            'assert user_sandbox.hide_command_line()\n'
            "print(open('/proc/self/cmdline', 'rb').read().replace(b'\\0', b' ').strip(), sys.argv[2])")
    out = subprocess.run([sys.executable, '-c', code, os.path.join(REPO, 'scripts', 'grading'),
                          'another-students-submission.zip'], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "b'' another-students-submission.zip", out.stdout


def test_graders_meet_in_one_place_and_a_killed_graders_modes_come_back(tmp_path):
    """Graders on one machine take their turns at one lock whatever their TMPDIR, and Hidden
    writes the modes it changes down first: a grader killed while they are changed leaves them
    for the next Hidden, which puts them back before it hides anything (no sandbox needed)."""
    meeting = [subprocess.run([sys.executable, '-c', 'import user_sandbox; print(user_sandbox.state_folder())'],
                              cwd=os.path.join(REPO, 'scripts', 'grading'), capture_output=True,
                              text=True, env=dict(os.environ, TMPDIR=str(tmp_path / t))).stdout
               for t in ('a', 'b')]
    (tmp_path / 'a').mkdir(), (tmp_path / 'b').mkdir()
    assert meeting[0] == meeting[1] != '' and str(tmp_path) not in meeting[0]
    folder, answers = tmp_path / 'data', tmp_path / 'data' / 'answers.tsv'
    folder.mkdir()
    answers.write_text('Who?\tParis\n')
    os.chmod(folder, 0o755)
    os.chmod(answers, 0o644)
    journal = str(tmp_path / 'journal.json')
    killed = user_sandbox.Hidden([str(folder), str(answers)], journal)
    killed.__enter__()  # ... and its grader dies: no __exit__
    assert (os.stat(folder).st_mode & 0o777, os.stat(answers).st_mode & 0o777) == (0o700, 0o600)
    assert os.path.exists(journal)
    with user_sandbox.Hidden([str(answers)], journal) as later:
        assert later.modes == {str(answers): 0o644}  # what was there before the killed run
        assert os.stat(folder).st_mode & 0o777 == 0o755  # put back first
    assert (os.stat(folder).st_mode & 0o777, os.stat(answers).st_mode & 0o777) == (0o755, 0o644)
    assert not os.path.exists(journal)


@needs_user
def test_two_user_sandbox_graders_with_their_own_tmpdirs_take_turns(tmp_path, shared_folder):
    """Two graders started together, each with its own TMPDIR: each probe runs alone as the
    user (it looks for another probe's mark and sleeps, so that the two would overlap),
    and every mode is as it was afterwards. Before, the lock lived in TMPDIR: the probes met, one
    read the other's files and killed it, and the hidden folders stayed 0700."""
    # (each leaves a mark in /tmp, which the sandbox removes after its run: a probe that finds
    # another's mark ran beside it; /proc would not tell, in a namespace of its own)
    code = '''import os, time
mine = f'a5-turn-{os.getpid()}-{time.monotonic_ns()}'
open('/tmp/' + mine, 'w').close()
def others():
    return [n for n in os.listdir('/tmp') if n.startswith('a5-turn-') and n != mine]
SEEN = [others()]
time.sleep(3)
SEEN.append(others())'''
    shared, data = shared_folder
    runs = []
    for name in ('one', 'two'):
        work = os.path.join(shared, name)
        os.makedirs(os.path.join(work, 'tmp'))
        os.makedirs(os.path.join(work, 'src'))
        with open(os.path.join(work, 'src', 'dataset.py'), 'w') as f:
            f.write(code + '\nraise RuntimeError("seen " + repr(SEEN))\n')
        script = f'''import sys
sys.path.insert(0, {os.path.join(REPO, 'scripts', 'grading')!r})
import spec_check
request, _, _ = spec_check.request_for(draws=spec_check.MIN_DRAWS)
report, why = spec_check.run_probe({os.path.join(work, 'src')!r}, {os.path.join(work, 'sandbox')!r},
                               request, 60, isolate='user', hidden=[{data!r}])
print(why or report.get('error'))'''
        runs.append(subprocess.Popen([sys.executable, '-c', script], stdout=subprocess.PIPE,
                                     text=True, env=dict(os.environ, TMPDIR=os.path.join(work, 'tmp'))))
    said = [run.communicate(timeout=180)[0] for run in runs]
    for text in said:
        assert 'seen [[], []]' in text, said
    assert os.stat(data).st_mode & 0o777 == 0o755


def test_the_results_files_are_hidden_alone_and_a_folder_holding_this_python_is_refused(
        tmp_path, monkeypatch):
    """`--sandbox user --json grades.json` from the repository root hid the whole root, and with
    it .venv's Python, which the probe runs on: every submission a grader error. The results are
    now hidden as files; a --data_dir or SUBMISSION folder that holds the Python is one line
    before any grading."""
    import types
    sub = tmp_path / 'sub'
    sub.mkdir()
    args = grade.parse_args([str(sub), '--json', os.path.join(REPO, 'grades.json'), '--out', REPO,
                             '--gradescope', str(tmp_path / 'results.json')])
    hidden = grade.Grader.hidden(types.SimpleNamespace(args=args))
    assert REPO not in hidden and os.path.dirname(sys.prefix) not in hidden
    for path in ('grades.json', 'report.md', 'report.csv'):
        assert os.path.join(REPO, path) in hidden
    assert str(tmp_path / 'results.json') in hidden and str(tmp_path) not in hidden
    assert user_sandbox.needed_inside(sys.prefix) is not None
    assert user_sandbox.needed_inside(str(tmp_path)) is None
    monkeypatch.setattr(spec_check, 'sandbox_kind', lambda asked: ('user', None))
    monkeypatch.setattr(user_sandbox, 'hide_command_line', lambda: True)
    args = grade.parse_args([str(sub), '--data_dir', os.path.dirname(sys.prefix)])
    with pytest.raises(grade.UsageError, match=r'--data_dir .*: holds .*which the dataset check'):
        grade.check_args(args)


def test_looking_for_the_user_sandbox_makes_no_account(monkeypatch):
    """The tests ask problem(make=False) at import: where the account is missing they skip,
    saying that the set-up makes it, and run no useradd (a test run changed the machine)."""
    monkeypatch.setattr(user_sandbox, 'USER', 'a5probe-missing-for-a-test')
    monkeypatch.setattr(os, 'geteuid', lambda: 0)
    ran = []
    monkeypatch.setattr(user_sandbox.subprocess, 'run', lambda *a, **k: ran.append(a) or
                        subprocess.CompletedProcess(a, 1, '', ''))
    why = user_sandbox.problem(make=False)
    assert ran == [] and 'bash scripts/setup.sh --test makes it' in why, why
    user_sandbox.problem()  # the grader's own call: it makes the account where it can
    assert ran and ran[0][0][0] == 'useradd'


# ---- a probe against the grader itself: its journal, its lock, memory, /proc, a killed grader --

def planted(path, kind, record):
    """A journal at `path` that is not the grader's own: another user's, open to others, or a
    link to a file that says what the planter wants."""
    import json
    target = path if kind != 'a link' else path + '.real'
    with open(target, 'w') as f:
        json.dump(record, f)
    os.chmod(target, 0o600)
    if kind == 'another user':
        user = user_sandbox.account()
        os.chown(target, user.pw_uid if user else 65534, -1)
    elif kind == 'open to others':
        os.chmod(target, 0o666)
    else:
        os.symlink(target, path)


@pytest.mark.parametrize('kind', [
    pytest.param('another user', marks=pytest.mark.skipif(os.geteuid() != 0, reason='needs root')),
    'open to others', 'a link'])
def test_a_journal_that_is_not_the_graders_own_is_refused_and_applies_nothing(tmp_path, kind):
    """A journal planted by the probe's user made the next grader set a root-owned file to mode
    4777. Now the grader applies only a journal that is its own regular file, closed to others
    (the one it writes: 0600), and refuses any other in one line, naming it; the file keeps its
    mode. Its own journal is still applied (the test can fail)."""
    victim = tmp_path / 'victim'
    victim.write_text('root\n')
    os.chmod(victim, 0o600)
    journal = str(tmp_path / 'journal.json')
    planted(journal, kind, {'modes': {str(victim): 0o4777}})
    with pytest.raises(user_sandbox.Unsafe) as refused:
        user_sandbox.Hidden([], journal, run={}).__enter__()
    assert journal in str(refused.value) and '\n' not in str(refused.value)
    assert os.stat(victim).st_mode & 0o7777 == 0o600
    os.remove(journal)
    user_sandbox.write_journal(journal, {'modes': {str(victim): 0o640}})
    with user_sandbox.Hidden([], journal, run={}):
        assert os.stat(victim).st_mode & 0o7777 == 0o640
    user_sandbox.write_journal(journal, {str(victim): 0o644})  # (the graders' journal before)
    with user_sandbox.Hidden([], journal, run={}):
        assert os.stat(victim).st_mode & 0o7777 == 0o644


def test_the_grader_refuses_a_planted_journal_in_one_line(tmp_path, monkeypatch, capsys):
    """Before any grading: `error: ...` naming the journal, exit status 2."""
    journal = str(tmp_path / 'journal.json')
    planted(journal, 'open to others', {'modes': {}})
    monkeypatch.setattr(spec_check, 'sandbox_kind', lambda asked: ('user', None))
    monkeypatch.setattr(user_sandbox, 'hide_command_line', lambda: True)
    monkeypatch.setattr(user_sandbox, 'journal_path', lambda folder=None: journal)
    (tmp_path / 'sub' / 'src').mkdir(parents=True)
    assert grade.main([str(tmp_path / 'sub'), '--data_dir', str(tmp_path), '--seed', '1']) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith('error: ') and journal in err, err


def test_the_graders_state_folder_is_its_own_or_refused(tmp_path):
    """Where /run cannot be written the lock and journal went to the temporary folder, which
    the probe's user may write in. Now a candidate whose parent cannot be written is passed by;
    the folder is made 0700, and one that is not the grader's own (open to others, a link) is
    refused in one line."""
    fresh = str(tmp_path / 'fresh')
    assert user_sandbox.state_folder(['/proc/no-such/state', fresh]) == fresh
    assert os.stat(fresh).st_mode & 0o777 == 0o700
    opened = tmp_path / 'opened'
    opened.mkdir()
    os.chmod(opened, 0o777)
    linked = tmp_path / 'linked'
    os.symlink(fresh, linked)
    for bad in (opened, linked):
        with pytest.raises(user_sandbox.Unsafe, match=f'{bad} .*remove it'):
            user_sandbox.state_folder([str(bad)])


HOLDER = '''import fcntl, os, subprocess, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.set_inheritable(fd, True)
kw = dict(user=int(sys.argv[3]), group=int(sys.argv[4]), extra_groups=[]) if sys.argv[3] else {}
if sys.argv[2] == 'hold':
    print('held', flush=True)
    sys.stdin.readline()
else:  # its child holds it open; the holder itself ends
    child = subprocess.Popen(['sleep', sys.argv[2]], pass_fds=[fd], start_new_session=True, **kw)
    print(child.pid, flush=True)
'''


def hold_lock(path, how, user=None):
    """A process that takes the lock at `path`: it holds it until its stdin ends ('hold'), or
    passes it to a `sleep how` child (as `user`) and ends. (the Popen, its first line)"""
    ids = [str(user.pw_uid), str(user.pw_gid)] if user else ['', '']
    proc = subprocess.Popen([sys.executable, '-c', HOLDER, path, how, *ids],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def test_a_grader_that_waits_for_the_lock_says_for_whom(tmp_path):
    """A grader that finds the lock taken says once which process holds it, then waits; one whose
    holder has ended while a process it started holds the lock file open says that."""
    import types
    user = types.SimpleNamespace(pw_uid=54321)
    path = str(tmp_path / 'probe-54321.lock')
    holder, line = hold_lock(path, 'hold')
    assert line == 'held'
    said = []

    def say(line):  # (the holder lets go once the waiting grader has said for whom it waits)
        said.append(line)
        holder.stdin.close()
    with user_sandbox.one_at_a_time(user, str(tmp_path), say):
        pass
    holder.wait()
    assert len(said) == 1 and f'pid {holder.pid}' in said[0] and 'another grader' in said[0], said
    # the holder gone, its child keeping the file open
    ended, child = hold_lock(path, '2')
    ended.wait()
    said = []
    with user_sandbox.one_at_a_time(user, str(tmp_path), said.append):
        pass
    assert said and f'pid {ended.pid}' in said[0] and 'has ended' in said[0] and \
        f'pid {child}' in said[0], said


@needs_user
def test_a_lock_held_by_another_user_is_refused_not_waited_for(tmp_path):
    """A lock whose descriptor reached a process of another user (the probe's account) might
    never be let go: the grader names it in one line instead of waiting forever."""
    user = user_sandbox.account()
    path = str(tmp_path / f'probe-{user.pw_uid}.lock')
    ended, child = hold_lock(path, '60', user)
    ended.wait()
    try:
        with pytest.raises(user_sandbox.Unsafe, match=f'held by pid {child} .*user {user.pw_name}'
                                                      '.*not a grader'):
            with user_sandbox.one_at_a_time(user, str(tmp_path), lambda line: None):
                pass
    finally:
        os.kill(int(child), signal.SIGKILL)


GREEDY = '''import os, time
for _ in range(8):  # each child under the per-process cap, together far past the whole cap
    if os.fork() == 0:
        block = bytearray(120 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(120)
        os._exit(0)
time.sleep(120)
SEEN = 'held'
'''


@pytest.mark.parametrize('kind', KINDS)
@pytest.mark.parametrize('how', ['cgroup', 'sum over the tree'])
def test_the_memory_cap_holds_for_the_probes_whole_tree(tmp_path, monkeypatch, kind, how):
    """8 children of 180 MiB each ran under --dataset_memory_mb 256: the cap was per process.
    Now the tree is capped: by a cgroup where the grader can make one, else by the sum of its
    processes' memory, looked at every 0.05 s. 8 x 120 MiB under 128 MiB (plus the interpreter's
    512) ends the run, with the reason."""
    if how == 'cgroup':
        with user_sandbox.MemoryCap(1 << 30) as cap:
            if cap.path is None:
                pytest.skip('no cgroup can be made here')
            # inside the grader's own: the limits the grader runs under hold its probe too
            assert os.path.dirname(cap.path) in [user_sandbox.MemoryCap.own(root)
                                                 for root in user_sandbox.MemoryCap.ROOTS]
    else:
        monkeypatch.setattr(user_sandbox.MemoryCap, 'ROOTS', ())
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'dataset.py').write_text(GREEDY)
    request, _, _ = spec_check.request_for(draws=spec_check.MIN_DRAWS, memory_mb=128)
    report, why = spec_check.run_probe(str(src), str(tmp_path / 'sandbox'), request, 120,
                                       isolate=kind)
    assert report is None and 'used more than 128 MiB of memory' in why, (report, why)


@needs_user
@pytest.mark.parametrize('namespace', NAMESPACES, indirect=True)
def test_other_processes_command_lines_are_hidden_from_the_probe(tmp_path, namespace):
    """A user-sandbox probe read 35 of 37 paths in other processes' command lines, other graders'
    submissions among them. In a PID namespace of its own it sees none; without one (a container
    that refuses namespaces) it still can, and the report's sandbox line says so."""
    secret = f'/submissions/a5-secret-{os.getpid()}.zip'
    other = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', secret])
    try:
        code = f'''import os
SEEN = []
for p in os.listdir('/proc'):
    try:
        if p.isdigit() and {secret!r}.encode() in open('/proc/' + p + '/cmdline', 'rb').read():
            SEEN.append(p)
    except OSError:
        pass'''
        found = eval(seen(tmp_path, code, 'user'))
    finally:
        other.kill()
    assert (found == []) == namespace, found
    assert ('visible' in spec_check.sandbox_name('user')) != namespace


KILLED_GRADER = '''import sys
sys.path.insert(0, sys.argv[1])
import spec_check, user_sandbox
user_sandbox.pid_namespace = lambda: sys.argv[2] == 'True'
request, _, _ = spec_check.request_for(draws=spec_check.MIN_DRAWS)
spec_check.run_probe(sys.argv[3], sys.argv[4], request, 120, isolate='user', hidden=[sys.argv[5]])
'''


@needs_user
@pytest.mark.parametrize('namespace', NAMESPACES, indirect=True)
def test_a_killed_graders_probe_ends_and_the_next_grader_clears_what_it_left(tmp_path, shared_folder, namespace):
    """A grader killed mid-probe left the probe running as the probe's account, and its folders.
    In a namespace everything the probe started ends with the grader; without one a detached
    process outlives it, and the next grader ends it (the killed grader's journal says when its
    run began), removes its folder and its user's files, and puts the hidden modes back."""
    mark = f'{os.getpid()}{time.monotonic_ns() % 10**6}'
    shared, data = shared_folder
    try:
        src = os.path.join(shared, 'src')
        os.mkdir(src)
        with open(os.path.join(src, 'dataset.py'), 'w') as f:
            f.write(DETACHED.format(mark=f'0.{mark}') + f'''open('/tmp/a5-ready-{mark}', 'w').close()
time.sleep(120)
''')
        grader = subprocess.Popen([sys.executable, '-c', KILLED_GRADER,
                                   os.path.join(REPO, 'scripts', 'grading'), str(namespace), src,
                                   os.path.join(shared, 'sandbox'), data])
        for _ in range(1200):  # (it may wait for the lock: other tests' probes)
            if os.path.exists(f'/tmp/a5-ready-{mark}') or grader.poll() is not None:
                break
            time.sleep(0.1)
        assert os.path.exists(f'/tmp/a5-ready-{mark}')
        import json
        left = json.loads(user_sandbox.read_own(user_sandbox.journal_path()))['folder']
        assert os.path.isdir(left) and os.stat(data).st_mode & 0o777 == 0o700
        assert running(f'0.{mark}') != []
        grader.kill()
        grader.wait()
        for _ in range(100):  # (the kernel ends the namespace's processes: a moment)
            if not running(f'0.{mark}'):
                break
            time.sleep(0.1)
        if namespace:
            assert running(f'0.{mark}') == []
        assert seen(tmp_path, 'SEEN = 1', 'user') == '1'  # the next grader
        assert running(f'0.{mark}') == []
        assert not os.path.exists(left) and not os.path.exists(f'/tmp/a5-ready-{mark}')
        assert os.stat(data).st_mode & 0o777 == 0o755
    finally:
        for pid in running(f'0.{mark}'):
            os.kill(pid, signal.SIGKILL)
