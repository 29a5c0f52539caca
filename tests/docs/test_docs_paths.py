"""Every path a document of the project names exists: a `*.md` tracked by git that names a file
or folder of the checkout (in backticks or as a link, with a '/' in it), relative to the
repository or to the document, names one that is there. What a run makes (runs/, expt/) and the
few path-like names that are no path of this checkout (the starters' own files, tensorboard tags)
are named below, each with its reason."""
import glob
import os
import re
import subprocess

import pytest

from support import REPO
from engine import datafiles

NOT_OURS = {
    'scripts/run_perceiver.sh': "the 2022-23 starter's script, not this checkout's",
    'scripts/run_rope.sh': "the 2024-25 starter's script",
    'a5/src/trainer.py': "a file of the public starter copies named beside it",
    'train/loss': 'a tensorboard tag', 'train/lr': 'a tensorboard tag',
    'src/edition.txt': 'written by `python src/engine/presets.py --edition NAME`; git ignores it',
}
MADE_BY_RUNS = ('runs/', 'expt/')
TOKEN = re.compile(r'`([^`\s]+)`|\]\(([^)\s]+)\)')
PATHLIKE = re.compile(r'[\w.\-/*+]+')


def named_paths(text):
    """(line, path) for each path-like name in a document's text."""
    for m in TOKEN.finditer(text):
        name = (m.group(1) or m.group(2)).split('#')[0]
        if '/' not in name or '://' in name or not PATHLIKE.fullmatch(name) \
                or name.startswith(('/', '-')) or name.startswith(MADE_BY_RUNS) or name in NOT_OURS:
            continue
        yield text.count('\n', 0, m.start()) + 1, name


def test_every_path_a_document_names_exists(tracked):
    missing = []
    for doc in (name for name in tracked if name.endswith('.md')):
        with open(os.path.join(REPO, doc), encoding='utf-8') as f:
            text = f.read()
        here = os.path.dirname(os.path.join(REPO, doc))
        for line, name in named_paths(text):
            if name.startswith('data/') and name[5:] in datafiles.checksums():
                continue  # a data file: set-up's to bring (the demo's input.txt is optional)
            if not any(glob.glob(os.path.join(base, name)) for base in (here, REPO)):
                missing.append(f'{doc}:{line}: {name}')
    assert not missing, 'paths named that do not exist:\n' + '\n'.join(missing)


def test_the_check_finds_a_path_that_is_not_there():
    text = 'see `scripts/grade.py` and [the index](results/README.md), `src/`, `train/loss`\n'
    names = [name for _, name in named_paths(text)]
    assert names == ['scripts/grade.py', 'results/README.md', 'src/']
    assert not os.path.exists(os.path.join(REPO, 'scripts', 'grade.py'))


def test_results_readme_indexes_every_folder_and_report_of_results():
    results = os.path.join(REPO, 'results')
    with open(os.path.join(results, 'README.md'), encoding='utf-8') as f:
        index = f.read()
    for name in sorted(os.listdir(results)):
        if name == 'README.md':
            continue
        shown = name + '/' if os.path.isdir(os.path.join(results, name)) else name
        assert f'`{shown}' in index, f'results/README.md does not name {shown}'


def test_no_tracked_file_outside_ci_names_the_workplaces_own_folder():
    """A newcomer's clone has nothing beside it: only .ci/run may name the folder that lies
    beside this project's own checkouts (CI's data comes from there)."""
    beside = '..' + '/shared'  # (spelt apart, so that this file does not name it)
    out = subprocess.run(['git', 'grep', '-l', '-F', beside, '--', '.', ':!.ci'], cwd=REPO,
                         capture_output=True, text=True)
    if out.returncode not in (0, 1):
        pytest.skip('not a git checkout')
    assert out.stdout.split() == []
