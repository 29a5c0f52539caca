"""scripts/dev/grouped_work.py: what a GPU's recorded step in groups of rows computes, counted on
the handout's data."""
import os
import re
import subprocess
import sys

from support import REPO

SCRIPT = os.path.join(REPO, 'scripts', 'dev', 'grouped_work.py')
sys.path.insert(0, os.path.dirname(SCRIPT))
import grouped_work  # noqa: E402


def test_the_batches_are_the_trainers_shaped_as_a_recording_shapes_them():
    """wiki.txt's 2,938 lines: 23 batches an epoch, the last of 122 rows padded with PAD rows
    to 128; every batch 127 columns (the handout's documents reach the block's end)."""
    shaped = list(grouped_work.stage_batches('pretrain', 1))
    assert len(shaped) == 23
    assert all(x.shape == y.shape == (128, 127) for x, y in shaped)
    assert int((shaped[-1][1] != 0).any(dim=1).sum()) == 122


def test_more_groups_compute_less():
    proc = subprocess.run([sys.executable, SCRIPT, '--groups', '1', '4', '--epochs', '1'],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith('--row_groups')]
    shares = [[float(v) for v in re.findall(r'([\d.]+)% of the', line)] for line in lines]
    assert len(lines) == 2 and shares[0] == [100.0, 100.0], lines  # one group: the batch whole
    assert 50 < shares[1][0] < 100 and 25 < shares[1][1] < 100, lines
    assert int(re.search(r'(\d+) recordings', lines[0])[1]) == 1
