"""scripts/gpu_check.sh where there is no GPU (this project's machines): it says so in one line
and exits 2, and bad options are one line too. (On a GPU machine it is the first run itself.)"""
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO

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
                                        (['--fast'], 'unknown option --fast')])
def test_bad_options_are_one_error_line(args, words):
    proc = gpu_check(*args)
    assert proc.returncode == 2
    assert proc.stderr.count('\n') == 1 and words in proc.stderr
