"""scripts/dev/packed_sizes.py: the sizes a packed GPU step takes, counted on the handout's data."""
import os
import subprocess
import sys

from conftest import REPO

SCRIPT = os.path.join(REPO, 'scripts', 'dev', 'packed_sizes.py')
sys.path.insert(0, os.path.dirname(SCRIPT))
import packed_sizes  # noqa: E402


def test_the_batches_are_the_trainers_shaped_as_a_recording_shapes_them():
    """wiki.txt's 2,938 lines: 23 batches an epoch, the last of 122 rows padded with PAD rows
    to 128; every batch 127 columns (the handout's documents reach the block's end)."""
    shaped = list(packed_sizes.stage_batches('pretrain', 1))
    assert len(shaped) == 23
    assert all(x.shape == y.shape == (128, 127) for x, y in shaped)
    assert int((shaped[-1][1] != 0).any(dim=1).sum()) == 122


def test_every_batch_is_counted_once_for_each_multiple():
    proc = subprocess.run([sys.executable, SCRIPT, '--multiple', '512', '4096', '--epochs', '1'],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith('--pack_multiple')]
    assert len(lines) == 2
    for line in lines:  # "... sizes, 7,168 in 4, 7,680 in 14, ...; 47.1% of the positions computed"
        counts = [int(part.split(' in ')[1]) for part in line.split(': ', 1)[1].split(';')[0]
                  .split(', ')[1:]]
        assert sum(counts) == 23, line
    assert lines[1].startswith('--pack_multiple 4096: 1 size, 8,192 in 23;'), lines[1]
    groups = [line for line in proc.stdout.splitlines() if line.startswith('--pack_groups')]
    shares = [float(line.split(': ')[1].split('%')[0]) for line in groups]
    assert len(groups) == 3 and 100 > shares[0] > shares[1] > shares[2] > 25, groups
