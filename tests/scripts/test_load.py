"""scripts/load.py: the two loads a laptop has, run beside a command. The light load's bursts are
checked on a clock the test drives; beside a command, the command's exit status comes back and
the load is gone when it ends."""
import os
import subprocess
import sys

import pytest

from support import REPO

import load  # noqa: E402

SCRIPT = os.path.join(REPO, 'scripts', 'load.py')


class Clock:
    """A clock that advances `tick` seconds at every reading, and a sleep that moves it on."""

    def __init__(self, tick=0.0001):
        self.t, self.tick, self.slept = 0.0, tick, 0.0

    def __call__(self):
        self.t += self.tick
        return self.t

    def sleep(self, seconds):
        self.slept += seconds
        self.t += seconds


@pytest.mark.parametrize('name,share', [('light', 0.25), ('heavy', 1.0)])
def test_a_load_is_busy_its_share_of_the_time(name, share):
    clock = Clock()
    busy = load.work(name, until=10.0, clock=clock, sleep=clock.sleep)
    assert busy / 10.0 == pytest.approx(share, abs=0.02)
    assert clock.slept == pytest.approx(10.0 * (1 - share), abs=0.2)


def test_beside_a_command_its_status_comes_back_and_the_load_ends(tmp_path):
    pid_file = tmp_path / 'pid'
    # the command sees the load's worker running beside it, and names it
    command = ('import os, sys, subprocess; '
               'out = subprocess.run(["pgrep", "-f", "load.py light --worker"], capture_output=True, text=True).stdout; '
               f'open({str(pid_file)!r}, "w").write(out); sys.exit(3)')
    proc = subprocess.run([sys.executable, SCRIPT, 'light', '--', sys.executable, '-c', command],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert proc.stderr.startswith('load light: ') and 'of one core' in proc.stderr
    pids = pid_file.read_text().split()
    assert pids, 'no load worker ran beside the command'
    assert not any(os.path.exists(f'/proc/{pid}') for pid in pids)  # gone with the command


@pytest.mark.parametrize('argv,words', [
    (['light', '--seconds', '0'], '--seconds must be a positive number'),
    (['light', '--seconds', '5', '--', 'true'], '--seconds is for the load alone'),
    (['medium'], "invalid choice: 'medium'"),
])
def test_a_wrong_flag_is_one_error_line(argv, words):
    proc = subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and words in proc.stderr
