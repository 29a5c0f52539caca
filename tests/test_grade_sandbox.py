"""The grader's sandbox (spec_check.sandbox_command, bubblewrap): a submission's dataset.py that
looks around, reaches out or leaves something running gets nowhere, and a grader without
bubblewrap refuses to run submission code unless told --no-sandbox.

Each hostile dataset.py acts when imported, then raises with what it saw: the probe reports the
error, and the test reads it there. The tests that need bubblewrap skip where it cannot run
(scripts/setup.sh installs it where it can)."""
import os
import socket
import sys
import time

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, 'scripts', 'grading'))
import grade  # noqa: E402
import spec_check  # noqa: E402

PROBLEM = spec_check.sandbox_problem()
needs_bwrap = pytest.mark.skipif(PROBLEM is not None, reason=f'no sandbox here: {PROBLEM}')


def seen(tmp_path, code, isolate=True, wall_seconds=60):
    """What a dataset.py running `code` on import reported (its exception's text)."""
    src = tmp_path / 'src'
    src.mkdir(exist_ok=True)
    (src / 'dataset.py').write_text(code + '\nraise RuntimeError("seen " + repr(SEEN))\n')
    request, _, _ = spec_check.request_for(draws=spec_check.MIN_DRAWS)
    report, why = spec_check.run_probe(str(src), str(tmp_path / 'sandbox'), request,
                                       wall_seconds, isolate=isolate)
    assert why is None and 'seen ' in report.get('error', ''), (why, report)
    return report['error'].split('seen ', 1)[1]


@needs_bwrap
def test_the_child_sees_its_own_processes_only(tmp_path):
    code = f'''import os
pids = [p for p in os.listdir('/proc') if p.isdigit()]
SEEN = (len(pids), os.path.exists('/proc/{os.getpid()}/cmdline'), os.getppid())'''
    count, grader_visible, parent = eval(seen(tmp_path, code))
    assert not grader_visible and count <= 3 and parent <= 2, (count, grader_visible, parent)


@needs_bwrap
def test_the_child_has_no_network_not_even_loopback(tmp_path):
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
        assert seen(tmp_path, code) != "'connected'"
    finally:
        server.close()


@needs_bwrap
def test_the_child_writes_only_in_its_sandbox(tmp_path):
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
    assert eval(seen(tmp_path, code)) == ['refused'] * len(planted) + ['wrote']
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


@needs_bwrap
def test_nothing_the_child_starts_outlives_it(tmp_path):
    marker = str(tmp_path / 'sandbox' / 'survivor.txt')  # writable to the child
    assert seen(tmp_path, DOUBLE_FORK.format(marker=marker)) == "'forked'"
    time.sleep(3)
    assert not os.path.exists(marker)


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
    monkeypatch.setattr(spec_check.shutil, 'which', lambda name: None)
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
    import json
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
    got, why = spec_check.run_probe(str(src), str(tmp_path / 'sandbox'), request,
                                    isolate=PROBLEM is None)
    assert got is None and 'not the probe\'s' in why, why


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
