"""The developers' scripts (scripts/dev/) are run by hand, rarely and long after their last change:
each must at least get as far as its usage line (an import or a name gone missing in a refactor
shows up here, not an hour into an experiment)."""
import os
import subprocess
import sys

import pytest

from support import REPO
DEV = os.path.join(REPO, 'scripts', 'dev')


@pytest.mark.parametrize('script', sorted(f for f in os.listdir(DEV) if f.endswith('.py')))
def test_a_dev_script_reads_its_arguments(script):
    proc = subprocess.run([sys.executable, os.path.join(DEV, script), '--help'],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith('usage:') and '--' in proc.stdout
