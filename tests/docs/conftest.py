"""The pages' tests (README.md, docs/, results/, the grader's README) and the setup files they
name: each command as typed, each path named, each environment file."""
import subprocess

import pytest

from support import REPO


@pytest.fixture
def tracked():
    """The repository's tracked files (git ls-files); the test is skipped outside a checkout."""
    out = subprocess.run(['git', 'ls-files'], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip('not a git checkout')
    return out.stdout.split()
