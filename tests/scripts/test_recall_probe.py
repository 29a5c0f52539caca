"""scripts/dev/recall_probe.py: which wiki lines it asks a pretrained model to continue, and its
error line for a params file that does not fit."""
import os
import subprocess
import sys

from support import REPO

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
        ('Ada Brook', 'Ada Brook. Ada Brook was born in ', 'London'),
        ('John F. Kennedy', 'John F. Kennedy. John F. Kennedy was born in ', 'Brookline')]


def test_the_three_prompts():
    name, before = 'John F. Kennedy', 'John F. Kennedy. John F. Kennedy was born in '
    assert recall_probe.prompt_of('line', name, before) == before
    assert recall_probe.prompt_of('name', name, before) == 'John F. Kennedy.'
    assert recall_probe.prompt_of('shifted', name, before) == 'Where was John F. Kennedy.'
    # a shifted prompt and its continuation fit in the block for names up to 37 characters
    assert len('Where was .') + 37 + recall_probe.CONTINUE <= 128


def test_params_of_another_model_are_one_error_line(tmp_path):
    import torch
    torch.save({'w': torch.zeros(2)}, tmp_path / 'x.params')
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'dev', 'recall_probe.py'),
                           str(tmp_path / 'x.params')], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith('error: --reading_params_path')
    assert len(proc.stderr.strip().splitlines()) == 1


def test_eval_file_not_utf8_is_one_error_line(tmp_path):
    bad = tmp_path / 'dev.tsv'
    bad.write_bytes(b'Where was Ada Brook born?\tL\xf6ndon\n')
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'dev', 'recall_probe.py'),
                           str(tmp_path / 'none.params'), '--eval_corpus_path', str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f'error: --eval_corpus_path {bad}: not UTF-8 text (invalid start byte at byte 27)']
