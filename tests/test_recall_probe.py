"""scripts/recall_probe.py: which wiki lines it asks a pretrained model to continue, and its
error line for a params file that does not fit."""
import os
import subprocess
import sys

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, 'scripts'))
import recall_probe  # noqa: E402

WIKI = '\n'.join([
    'Ada Brook. Ada Brook was born in London .',
    'John F. Kennedy. John F. Kennedy was born in Brookline, Massachusetts .',
    'Cleo Dunn. ' + 'Cleo Dunn was a painter. ' * 5 + 'She was born in Berlin .',  # past 112 chars
    'Dan Evans. Dan Evans moved to Rome .',  # the gold place is another one
])


def test_probes_are_the_line_up_to_the_place():
    questions = ['Where was Ada Brook born?\tLondon\n',
                 'Where was John F. Kennedy born?\tBrookline\r\n',
                 'Where was Cleo Dunn born?\tBerlin\n',
                 'Where was Dan Evans born?\tParis\n',
                 'Where was Nobody born?\tNowhere\n',
                 'Where was Ada Brook born?\n']  # no gold place
    assert recall_probe.probes(WIKI.split('\n'), questions) == [
        ('Ada Brook. Ada Brook was born in ', 'London'),
        ('John F. Kennedy. John F. Kennedy was born in ', 'Brookline')]


def test_params_of_another_model_are_one_error_line(tmp_path):
    import torch
    torch.save({'w': torch.zeros(2)}, tmp_path / 'x.params')
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'recall_probe.py'),
                           str(tmp_path / 'x.params')], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith('error: --reading_params_path')
    assert len(proc.stderr.strip().splitlines()) == 1
