"""scripts/dev/throughput.py: the training steps a second of several models at once, summed, as
threads of one process and as processes (on the CPU here, with a few lines and a small batch)."""
import os
import re
import subprocess
import sys

import pytest

from support import REPO

SCRIPT = os.path.join(REPO, 'scripts', 'dev', 'throughput.py')
sys.path.insert(0, os.path.dirname(SCRIPT))
import throughput  # noqa: E402

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)


def test_the_window_counts_the_steps_while_every_model_trains():
    """Two runs: steps end at these times, their warm-ups at 1 and 2. Every model is past its
    warm-up and still training from 2 to 4 (the first's last step): the steps in (2, 4]."""
    runs = [([0.5, 1.5, 2.5, 3.0, 4.0], 1.0), ([1.0, 2.0, 3.5, 5.0, 6.0], 2.0)]
    assert throughput.steps_a_second(runs) == (3 + 1) / 2.0
    assert throughput.steps_a_second([([1.0], 2.0)]) is None  # no step after the warm-up


def test_threads_and_processes_give_a_row_each(tmp_path):
    out = tmp_path / 'table.md'
    proc = subprocess.run([sys.executable, SCRIPT, '--device', 'cpu', '--models', '2',
                           '--way', 'threads', 'processes', '--seconds', '0.3', '--precision',
                           'fp32', '--lines', '24', '--batch', '8', '--out', str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in out.read_text().splitlines()[2:]]
    assert [row.split(' | ')[:2] for row in rows] == [['| threads', '2'], ['| processes', '2']]
    for row in rows:
        total, each = (float(v) for v in re.findall(r'\| ([\d.]+) ', row + ' ')[-2:])
        assert total > 0 and abs(total / int(row.split(' | ')[1]) - each) < 0.1
