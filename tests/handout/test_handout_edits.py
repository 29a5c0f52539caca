"""A student's edit to the handout's forwards counts: the code a student reads is the code that
trains by default.

In a copy of src/, one line of one forward is changed (a value scaled by 0.5); the default
`run.py pretrain` and `run.py finetune` (from scratch) then write params that differ from the
unedited copy's, on the CPU. The unedited copy, run twice, writes the same params both times, so
a difference is the edit's. The copies of one variant run in one process, each importing the
handout's modules anew from its own folder (a bare `import model` there is the copy's).
"""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from support import SRC
from tiny_run import CORPUS, ENV, FAST, TRAIN, tsv

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)

# (file, class or function whose body is edited, its line, the line edited)
EDITS = {
    'GPT.forward': ('model.py', 'class GPT(', 'logits = self.head(x)',
                    'logits = self.head(x) * 0.5'),
    'Block.forward': ('model.py', 'class Block(', 'x = x + self.attn(self.ln1(x))',
                      'x = x + 0.5 * self.attn(self.ln1(x))'),
    'CausalSelfAttention.forward': ('attention.py', 'class CausalSelfAttention(',
                                    'y = self.resid_drop(self.proj(y))',
                                    'y = self.resid_drop(self.proj(y)) * 0.5'),
    'SynthesizerAttention.forward': ('attention.py', 'class SynthesizerAttention(',
                                     'y = self.resid_drop(self.proj(y))',
                                     'y = self.resid_drop(self.proj(y)) * 0.5'),
    'CausalCrossAttention.forward': ('attention.py', 'class CausalCrossAttention(',
                                     'y = self.resid_drop(self.proj(y))',
                                     'y = self.resid_drop(self.proj(y)) * 0.5'),
    'DownProjectBlock.forward': ('model.py', 'class DownProjectBlock(',
                                 'x = self.C + self.attn(x_input, self.ln1(self.C))',
                                 'x = self.C + 0.5 * self.attn(x_input, self.ln1(self.C))'),
    'UpProjectBlock.forward': ('model.py', 'class UpProjectBlock(',
                               'x = x_input + self.attn(self.ln1(y), x_input)',
                               'x = x_input + 0.5 * self.attn(self.ln1(y), x_input)'),
    'apply_rotary_emb': ('attention.py', 'def apply_rotary_emb(',
                         'rotated_x = rotated.flatten(-2).to(x.dtype)',
                         'rotated_x = rotated.flatten(-2).to(x.dtype) * 0.5'),
}
# the variant whose default run reaches each edited body
VARIANT = {'GPT.forward': 'vanilla', 'Block.forward': 'vanilla',
           'CausalSelfAttention.forward': 'vanilla', 'SynthesizerAttention.forward': 'synthesizer',
           'CausalCrossAttention.forward': 'perceiver', 'DownProjectBlock.forward': 'perceiver',
           'UpProjectBlock.forward': 'perceiver', 'apply_rotary_emb': 'rope'}


def edited_copy(folder, edit=None):
    """src/ copied into `folder` (without this checkout's edition setting), with one edit."""
    shutil.copytree(SRC, folder, ignore=shutil.ignore_patterns('__pycache__', 'edition.txt'))
    if edit is None:
        return
    name, owner, line, new = EDITS[edit]
    path = os.path.join(folder, name)
    with open(path, encoding='utf-8') as f:
        text = f.read()
    start = text.index(owner)
    at = text.index(line, start)
    end = text.find('\nclass ', start + 1)
    assert end == -1 or at < end, f'{line!r} is not in {owner}'
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text[:at] + new + text[at + len(line):])


# a process that runs each copy's default pretrain and finetune in turn: the handout's modules are
# imported anew from each copy (the engine, which imports none of them, is the same in every copy)
DRIVER = """
import json, os, sys
HANDOUT = ('dataset', 'attention', 'model', 'models', 'trainer', 'run', 'utils', 'london_baseline')
for copy, work, argvs in json.loads(sys.argv[1]):
    for name in HANDOUT:
        sys.modules.pop(name, None)
    sys.path[:] = [copy] + [p for p in sys.path if not p.endswith('src')]
    os.chdir(work)
    import run
    for argv in argvs:
        run.main(argv)
"""


def trained(tmp_path, variant, edits):
    """{edit: {stage: state_dict}} of the default pretraining and finetuning (from scratch) of
    `variant` by a copy of src/ with each edit (None: unedited), one epoch each on the tiny
    corpus, all in one process."""
    extra = ['--bottleneck_dim', '8'] if variant == 'perceiver' else []
    commands = [
        ['pretrain', variant, 'corpus.txt', '--writing_params_path', 'pretrain.params'],
        ['finetune', variant, 'corpus.txt', '--finetune_corpus_path', 'train.tsv',
         '--writing_params_path', 'finetune.params'],
    ]
    jobs, works = [], []
    for i, edit in enumerate(edits):
        copy, work = tmp_path / f'src-{i}', tmp_path / f'run-{i}'
        edited_copy(copy, edit)
        work.mkdir()
        (work / 'corpus.txt').write_text(CORPUS, encoding='utf-8')
        (work / 'train.tsv').write_text(tsv(TRAIN), encoding='utf-8')
        jobs.append([str(copy), str(work), [c + ['--max_epochs', '1'] + extra + FAST
                                             for c in commands]])
        works.append(work)
    done = subprocess.run([sys.executable, '-c', DRIVER, json.dumps(jobs)], env=ENV,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return [{stage: torch.load(work / f'{stage}.params', weights_only=True)
             for stage in ('pretrain', 'finetune')} for work in works]


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize('variant', sorted(set(VARIANT.values())))
def test_an_edit_to_a_handout_forward_changes_the_default_training(variant, tmp_path):
    """For each edit of a body the variant's default run reaches: the params differ from the
    unedited copy's, in pretraining and in finetuning. The unedited copy runs twice (first and
    last) and writes the same params both times."""
    edits = [e for e, v in VARIANT.items() if v == variant]
    unedited, *edited, again = trained(tmp_path, variant, [None, *edits, None])
    assert all(same(again[stage], unedited[stage]) for stage in unedited)
    for edit, got in zip(edits, edited):
        for stage in ('pretrain', 'finetune'):
            assert not same(got[stage], unedited[stage]), \
                f'{edit}: edited, the default {stage} wrote the same params'
