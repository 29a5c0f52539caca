"""collect_submission.sh: zips a complete submission of either handout; refuses (non-zero exit,
the bad file named, no zip written) when a file is missing, empty or has the wrong line count.
Runs the script in a temporary folder with fake params/predictions and data files."""
import os
import subprocess
import sys
import zipfile

import pytest

from support import REPO
SCRIPT = os.path.join(REPO, 'collect_submission.sh')
ZIP = 'assignment5_submission.zip'
ZIP4 = 'assignment4_submission.zip'  # the 2024-25 (rope) handout's
DEV_LINES, TEST_LINES = 500, 437
DATA = ['wiki.txt', 'birth_places_train.tsv', 'birth_dev.tsv', 'birth_test_inputs.tsv']
# what the 2021-23 handouts' script zips of them: `zip -r ... src/ birth_dev.tsv
# birth_places_train.tsv wiki.txt ...` (birth_test_inputs.tsv only counts the test lines)
ZIPPED_DATA = ['birth_dev.tsv', 'birth_places_train.tsv', 'wiki.txt']
COMMON = ['vanilla.model.params', 'vanilla.nopretrain.dev.predictions',
          'vanilla.nopretrain.test.predictions', 'vanilla.finetune.params',
          'vanilla.pretrain.dev.predictions', 'vanilla.pretrain.test.predictions']


def handout_files(handout):
    return [f'{handout}.finetune.params', f'{handout}.pretrain.dev.predictions',
            f'{handout}.pretrain.test.predictions'] + (
        ['london_baseline_accuracy.txt'] if handout == 'rope' else [])


def zip_name(handout):
    return ZIP4 if handout == 'rope' else ZIP


def src_members():
    """src/ as the zip holds it: its files, and src/edition.txt, which the zip always carries
    (stamped with its edition) whether or not the checkout has one."""
    names = {'src/edition.txt'}
    for root, dirs, files in os.walk(os.path.join(REPO, 'src')):
        dirs[:] = [d for d in dirs if d != '__pycache__' and not d.startswith('.')]
        for f in files:
            if not f.endswith('.pyc') and not f.startswith('.'):
                rel = os.path.relpath(os.path.join(root, f), REPO)
                names.add(rel.replace(os.sep, '/'))
    return names


def write_lines(path, n, text='London'):
    with open(path, 'w', encoding='utf-8') as f:
        for i in range(n):
            f.write(f'{text}{i}\n')


def make_data(folder):
    with open(folder / 'wiki.txt', 'w', encoding='utf-8') as f:
        f.write('Ada Lovelace was born in London.\n')
    with open(folder / 'birth_places_train.tsv', 'w', encoding='utf-8') as f:
        f.write('Where was Ada Lovelace born?\tLondon\n')
    write_lines(folder / 'birth_dev.tsv', DEV_LINES, 'Where was X born?\tParis')
    write_lines(folder / 'birth_test_inputs.tsv', TEST_LINES, 'Where was Y born?')


def make_outputs(folder, handout):
    for name in COMMON + handout_files(handout):
        path = folder / name
        if name.endswith('.params'):
            path.write_bytes(b'PK\x03\x04 fake state_dict ' + name.encode())
        elif name.endswith('.txt'):
            path.write_text('5.0\n')
        elif '.dev.' in name:
            write_lines(path, DEV_LINES)
        else:
            write_lines(path, TEST_LINES)


def run(cwd, *args):
    env = dict(os.environ, PYTHON=sys.executable)
    return subprocess.run(['bash', SCRIPT, *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=60)


def zip_leftovers(folder):
    """A zip, or a temporary file of one, left in `folder`."""
    return [f for f in os.listdir(folder) if f.endswith('.tmp') or f.endswith('.zip')]


@pytest.fixture
def workdir(tmp_path):
    make_data(tmp_path)
    return tmp_path


@pytest.mark.parametrize('handout,explicit', [('synthesizer', False), ('synthesizer', True),
                                              ('perceiver', False), ('perceiver', True),
                                              ('rope', False), ('rope', True)])
def test_complete_submission_is_zipped(workdir, handout, explicit):
    """2021-23: assignment5_submission.zip with src/, the handout's three data files and the files;
    2024-25 (rope): assignment4_submission.zip with src/, the files and
    london_baseline_accuracy.txt, no data."""
    make_outputs(workdir, handout)
    r = run(workdir, *(['--handout', handout] if explicit else []))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f'handout: {handout}' in r.stdout
    zipped = zip_name(handout)
    assert zip_leftovers(workdir) == [zipped]
    data = ZIPPED_DATA if handout != 'rope' else []
    with zipfile.ZipFile(workdir / zipped) as z:
        assert z.testzip() is None
        names = set(z.namelist())
        expected = src_members() | set(data) | set(COMMON) | set(handout_files(handout))
        assert names == expected
        assert 'src/run.py' in names and 'src/model.py' in names and 'src/models.py' in names
        others = {'synthesizer', 'perceiver', 'rope'} - {handout}
        assert not any(n.startswith(tuple(others)) for n in names)
        for name in COMMON + handout_files(handout) + data:
            assert z.read(name) == (workdir / name).read_bytes(), name


def test_dir_and_output_flags(workdir, tmp_path_factory):
    outputs = workdir / 'runs'
    outputs.mkdir()
    make_outputs(outputs, 'perceiver')
    target = tmp_path_factory.mktemp('out') / 'a5.zip'
    r = run(workdir, '--dir', 'runs', '--output', str(target))
    assert r.returncode == 0, r.stdout + r.stderr
    with zipfile.ZipFile(target) as z:
        assert 'perceiver.finetune.params' in z.namelist()
        assert 'runs/perceiver.finetune.params' not in z.namelist()
    assert not (workdir / ZIP).exists()


@pytest.mark.parametrize('handout', ['synthesizer', 'perceiver', 'rope'])
@pytest.mark.parametrize('victim', ['vanilla.model.params', 'vanilla.pretrain.test.predictions',
                                    '{e}.finetune.params', '{e}.pretrain.dev.predictions'])
def test_missing_file_refused(workdir, handout, victim):
    make_outputs(workdir, handout)
    victim = victim.format(e=handout)
    os.remove(workdir / victim)
    r = run(workdir, '--handout', handout)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f'{victim}: missing' in r.stderr
    assert zip_leftovers(workdir) == []


@pytest.mark.parametrize('handout', ['synthesizer', 'perceiver', 'rope'])
@pytest.mark.parametrize('victim', ['vanilla.finetune.params', '{e}.pretrain.test.predictions'])
def test_empty_file_refused(workdir, handout, victim):
    make_outputs(workdir, handout)
    victim = victim.format(e=handout)
    (workdir / victim).write_bytes(b'')
    r = run(workdir, '--handout', handout)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f'{victim}: empty' in r.stderr
    assert zip_leftovers(workdir) == []


@pytest.mark.parametrize('handout', ['synthesizer', 'perceiver', 'rope'])
@pytest.mark.parametrize('victim,lines,want', [
    ('vanilla.nopretrain.dev.predictions', DEV_LINES - 1, DEV_LINES),
    ('{e}.pretrain.dev.predictions', DEV_LINES + 1, DEV_LINES),
    ('vanilla.pretrain.test.predictions', DEV_LINES, TEST_LINES),   # dev predictions as test
    ('{e}.pretrain.test.predictions', TEST_LINES - 1, TEST_LINES),
])
def test_wrong_line_count_refused(workdir, handout, victim, lines, want):
    make_outputs(workdir, handout)
    victim = victim.format(e=handout)
    write_lines(workdir / victim, lines)
    r = run(workdir)  # auto-detected handout
    assert r.returncode == 1, r.stdout + r.stderr
    assert f'{victim}: {lines} lines, expected {want}' in r.stderr
    assert zip_leftovers(workdir) == []


def test_last_line_without_newline_counts(workdir):
    make_outputs(workdir, 'perceiver')
    path = workdir / 'perceiver.pretrain.test.predictions'
    path.write_bytes(path.read_bytes().rstrip(b'\n'))
    assert run(workdir).returncode == 0


def test_every_problem_listed_and_old_zip_kept(workdir):
    make_outputs(workdir, 'synthesizer')
    (workdir / ZIP).write_bytes(b'PK\x03\x04 old zip')
    os.remove(workdir / 'vanilla.model.params')
    (workdir / 'synthesizer.finetune.params').write_bytes(b'')
    write_lines(workdir / 'vanilla.pretrain.dev.predictions', 3)
    r = run(workdir)
    assert r.returncode == 1
    assert 'vanilla.model.params: missing' in r.stderr
    assert 'synthesizer.finetune.params: empty' in r.stderr
    assert 'vanilla.pretrain.dev.predictions: 3 lines, expected 500' in r.stderr
    assert (workdir / ZIP).read_bytes() == b'PK\x03\x04 old zip'
    assert zip_leftovers(workdir) == [ZIP]


def test_line_counts_follow_the_tsv(workdir):
    # the expected count comes from the input TSV found, not a constant
    make_outputs(workdir, 'perceiver')
    write_lines(workdir / 'birth_test_inputs.tsv', 10, 'Where was Z born?')
    r = run(workdir)
    assert r.returncode == 1
    assert f'{TEST_LINES} lines, expected 10 (one per line of birth_test_inputs.tsv)' in r.stderr


def test_rope_handout_needs_the_london_baseline_file(workdir):
    make_outputs(workdir, 'rope')
    os.remove(workdir / 'london_baseline_accuracy.txt')
    r = run(workdir)
    assert r.returncode == 1 and 'london_baseline_accuracy.txt: missing' in r.stderr
    assert zip_leftovers(workdir) == []


def test_ambiguous_or_unknown_handout(workdir):
    r = run(workdir)
    assert r.returncode == 2 and 'cannot tell the handout' in r.stderr
    make_outputs(workdir, 'synthesizer')
    make_outputs(workdir, 'perceiver')
    r = run(workdir)
    assert r.returncode == 2 and 'ambiguous handout' in r.stderr and '--handout' in r.stderr
    assert zip_leftovers(workdir) == []
    r = run(workdir, '--handout', 'synthesizer')
    assert r.returncode == 0, r.stderr
    with zipfile.ZipFile(workdir / ZIP) as z:
        assert not any(n.startswith('perceiver') for n in z.namelist())


def test_an_unknown_handout_is_one_error_line(workdir):
    """argparse printed its usage (two lines) before the error line."""
    r = run(workdir, '--handout', 'bogus')
    assert r.returncode == 2 and r.stderr.count('\n') == 1, r.stderr
    assert r.stderr.startswith("error: argument --handout: invalid choice: 'bogus'"), r.stderr
    assert zip_leftovers(workdir) == []


def test_edition_flag_names_the_other_word(workdir):
    """--edition is run.py's starter-code setting (2021-23, 2024-25); here the handout is meant."""
    make_outputs(workdir, 'rope')
    r = run(workdir, '--edition', 'rope')
    assert r.returncode == 2 and r.stderr.count('\n') == 1
    assert '--edition rope:' in r.stderr and '(--handout rope)' in r.stderr
    assert zip_leftovers(workdir) == [] and not (workdir / ZIP4).exists()


def test_the_module_behind_the_script_is_importable(workdir):
    """A grader imports scripts/grading/submission.py for each handout's files and its checks, with what
    the script itself uses: the file lists above, the handout found from the files present, and
    every problem listed rather than the first."""
    import importlib.util
    spec = importlib.util.spec_from_file_location('submission', os.path.join(REPO, 'scripts', 'grading', 'submission.py'))
    submission = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(submission)
    for handout in ('synthesizer', 'perceiver', 'rope'):
        assert submission.required_files(handout) == COMMON + handout_files(handout)
        assert submission.ZIP_NAME[handout] == zip_name(handout)
    with pytest.raises(submission.SubmissionError, match='cannot tell the handout'):
        submission.detect_handout(str(workdir))
    make_outputs(workdir, 'rope')
    assert submission.detect_handout(str(workdir)) == 'rope'
    (workdir / 'rope.pretrain.dev.predictions').write_text('')
    (workdir / 'vanilla.model.params').unlink()
    problems, data = submission.check(str(workdir), 'rope')
    assert sorted(data) == sorted(DATA)
    assert len(problems) == 2 and any('vanilla.model.params: missing' in p for p in problems)
    assert any('rope.pretrain.dev.predictions: empty' in p for p in problems)


# ---- the edition travels with the zip (src/edition.txt) ---------------------------------------

CORPUS = ('Ada Lovelace was born in London and wrote the first program for a machine.\n'
          'Alan Turing was born in Maida Vale, London, and broke codes at Bletchley Park.\n')
LENGTHS = ("import dataset; d = dataset.CharCorruptionDataset(open('corpus.txt').read(), 128); "
           "print(*{len(t) for i in range(2) for t in d[i]})")


def checkout_copy(tmp_path, edition=None):
    """A copy of what collect_submission.sh needs (src/, scripts/grading/submission.py, the script), with
    src/edition.txt set to `edition` (None: no such file), so the tests never touch this
    checkout's setting."""
    import shutil
    repo = tmp_path / 'checkout'
    shutil.copytree(os.path.join(REPO, 'src'), repo / 'src',
                    ignore=shutil.ignore_patterns('__pycache__'))
    (repo / 'scripts' / 'grading').mkdir(parents=True)
    shutil.copy(os.path.join(REPO, 'scripts', 'grading', 'submission.py'), repo / 'scripts' / 'grading')
    shutil.copy(SCRIPT, repo)
    if edition is None:  # a checkout without the setting (the default edition)
        (repo / 'src' / 'edition.txt').unlink(missing_ok=True)
    else:
        (repo / 'src' / 'edition.txt').write_text(edition + '\n')
    return repo


def lengths_in_unzipped(zip_path, folder):
    """x and y lengths of CharCorruptionDataset(data, 128) from the unzipped submission's own
    dataset.py, imported in a fresh process as an autograder would: without CS224N_EDITION."""
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(folder)
    (folder / 'src' / 'corpus.txt').write_text(CORPUS)
    env = {k: v for k, v in os.environ.items() if k != 'CS224N_EDITION'}
    r = subprocess.run([sys.executable, '-c', LENGTHS], cwd=folder / 'src', env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()[-1].split()  # (after "data has N characters, V unique.")


@pytest.mark.parametrize('checkout', [None, '2021-23', '2024-25'])
@pytest.mark.parametrize('handout,length', [('synthesizer', '127'), ('perceiver', '127'),
                                            ('rope', '128')])
def test_an_unzipped_submission_follows_the_zips_edition(workdir, tmp_path, checkout, handout, length):
    """The zip's src/edition.txt names the zip's edition, whatever the checkout says: a bare
    CharCorruptionDataset(data, 128) from the unzipped rope zip gives x and y 128 long, from a
    synthesizer or perceiver zip 127."""
    repo = checkout_copy(tmp_path, checkout)
    make_outputs(workdir, handout)
    env = dict(os.environ, PYTHON=sys.executable)
    r = subprocess.run(['bash', str(repo / 'collect_submission.sh'), '--handout', handout],
                       cwd=workdir, env=env, text=True, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    stamp = '2024-25' if handout == 'rope' else '2021-23'
    assert f'its src/edition.txt says {stamp}' in r.stdout
    assert ('note: this checkout' in r.stdout) == (checkout not in (None, stamp))
    with zipfile.ZipFile(workdir / zip_name(handout)) as z:
        assert z.read('src/edition.txt') == (stamp + '\n').encode()
        assert z.namelist().count('src/edition.txt') == 1
    unzipped = tmp_path / 'unzipped'
    unzipped.mkdir()
    assert lengths_in_unzipped(workdir / zip_name(handout), unzipped) == [length]


@pytest.mark.parametrize('output,words', [('adir', 'is a directory'),
                                          ('nodir/a5.zip', 'does not exist'),
                                          ('vanilla.model.params', 'same file as vanilla.model.params'),
                                          ('./birth_dev.tsv', 'same file as birth_dev.tsv'),
                                          ('notes.txt', 'exists and is not a zip'),
                                          ('other.params', 'exists and is a params file')])
def test_an_output_that_cannot_be_the_zip_is_refused_before_anything(workdir, output, words):
    """--output onto a folder, into a missing folder, onto a file the zip would hold, or onto a
    file of another kind that it would not (a text, params): one error line, exit 2, every file
    as it was."""
    import torch
    make_outputs(workdir, 'perceiver')
    (workdir / 'adir').mkdir()
    (workdir / 'notes.txt').write_text('my notes\n')
    torch.save({'w': torch.zeros(1)}, workdir / 'other.params')
    before = {p.name: p.read_bytes() for p in workdir.iterdir() if p.is_file()}
    r = run(workdir, '--output', output)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f'error: --output {output}: ') and words in lines[0]
    assert {p.name: p.read_bytes() for p in workdir.iterdir() if p.is_file()} == before


def test_outputs_of_a_cpu_preset_are_refused_naming_it(workdir):
    """main.sh's CPU default trains the cpu-20min preset (another model, other data) under the
    handout's file names: completed with the other files, such a folder zipped into a
    submission the autograder cannot load. The run records beside the files say which preset
    made them; the script refuses them in one line, naming the preset and the handout's
    command, and writes nothing. Records of the handout's preset change nothing."""
    make_outputs(workdir, 'perceiver')
    (workdir / 'vanilla.finetune.params.run.json').write_text('{"preset": "handout"}')
    r = run(workdir)
    assert r.returncode == 0, r.stderr
    (workdir / ZIP).unlink()
    for name in ('vanilla.finetune.params', 'vanilla.pretrain.dev.predictions'):
        (workdir / (name + '.run.json')).write_text('{"preset": "cpu-20min", "variant": "vanilla"}')
    r = run(workdir)
    assert r.returncode == 2 and r.stderr.count('\n') == 1, r.stderr
    assert r.stderr.startswith('error: vanilla.finetune.params and 1 more came from the '
                               'cpu-20min preset'), r.stderr
    assert 'scripts/main.sh --full' in r.stderr
    assert zip_leftovers(workdir) == []
