"""Submissions crafted against the grader's unpacking and reports (the issue "The grader holds
against a hostile class", wanted 3): each is one row with its reason, the run goes on to the
next submission, and names of any bytes reach --json, --out's report.md and report.csv escaped,
never forging a line. The checks that run code are skipped here (--skip): this is about what
the grader reads and writes itself."""
import json
import os
import zipfile

import pytest

from support import REPO

import grade  # noqa: E402
import unpack  # noqa: E402
import user_sandbox  # noqa: E402


def grade_rows(tmp_path, *submissions):
    """grade.main over the submissions, code-running checks skipped: (status, rows, report.md)."""
    out, results = tmp_path / 'reports', tmp_path / 'grades.json'
    status = grade.main([str(s) for s in submissions] + [
        '--data_dir', os.path.join(REPO, 'data'), '--handout', 'synthesizer', '--skip', 'reproduction', '--skip', 'dataset',
        '--json', str(results), '--out', str(out)])
    return status, json.loads(results.read_text(encoding='utf-8')), \
        (out / 'report.md').read_text(encoding='utf-8')


def honest(tmp_path):
    folder = tmp_path / 'honest'
    (folder / 'src').mkdir(parents=True)
    (folder / 'src' / 'dataset.py').write_text('x = 1\n')
    return folder


def zipped(path, entries):
    with zipfile.ZipFile(path, 'w') as z:
        for name, data in entries:
            z.writestr(name, data)
    return path


@pytest.mark.parametrize('kind', ['zip', 'folder'])
def test_a_deep_tree_is_one_row_and_the_run_goes_on(tmp_path, kind):
    """1,200 nested folders ended the run with a RecursionError (zip) or could (folder)."""
    if kind == 'zip':
        deep = zipped(tmp_path / 'deep.zip', [('/'.join(['d'] * 1200) + '/f.txt', 'x')])
    else:
        deep = tmp_path / 'deep'
        path = str(deep)
        for _ in range(40):  # past MAX_DEPTH, within what the file system allows
            path = os.path.join(path, 'd')
        os.makedirs(path)
    status, rows, report = grade_rows(tmp_path, deep, honest(tmp_path))
    assert status == 0 and len(rows) == 2
    (why,) = rows[0]['errors']
    assert 'folders deep' in why and len(why) < 400, why
    assert rows[1]['submission'].endswith('honest') and rows[1]['errors'] == [] or \
        all('folders deep' not in e for e in rows[1]['errors'])


def test_a_tree_the_submission_built_too_deep_for_python_is_removed_and_the_run_goes_on(tmp_path):
    """A dataset.py that builds a 1,500-deep folder tree while its check runs: removing the
    submission's working folder raised RecursionError outside grade_one's try (shutil.rmtree
    recurses), and the whole run ended with no grades. Stood in for by a grader whose grade()
    builds the tree where the probe would."""
    class Building:
        def grade(self, path, work):
            deep = os.path.join(work, 'sandbox')
            os.makedirs(deep)
            os.chdir(deep)  # (relative steps: the whole path would pass PATH_MAX)
            try:
                for _ in range(1500):
                    os.mkdir('d')
                    os.chdir('d')
            finally:
                os.chdir(tmp_path)
            return grade.empty_result(path)
    work = tmp_path / 'work'
    work.mkdir()
    row, failed = grade.grade_one(Building(), 'a.zip', str(work))
    assert not failed and row['submission'] == 'a.zip' and row['warnings'] == []
    assert not work.exists()


@pytest.mark.filterwarnings('ignore:Duplicate name')  # zipfile's, while the test builds it
def test_an_entry_named_twice_is_refused(tmp_path):
    twice = zipped(tmp_path / 'twice.zip', [('src/dataset.py', 'a = 1\n'), ('src/dataset.py', 'b = 2\n')])
    with pytest.raises(unpack.Refused, match='appears twice'):
        unpack.unpack(str(twice), str(tmp_path / 'open'))


def test_a_newline_in_a_name_forges_no_line_of_the_report(tmp_path):
    forged = zipped(tmp_path / 'forged.zip', [
        ('src/dataset.py', 'x = 1\n'),
        ('a\n## 10/10 forged\n- threshold vanilla: pass.txt', 'y'),
        ('..\n- error: none/evil.py', 'z')])
    status, rows, report = grade_rows(tmp_path, forged)
    assert status == 0
    lines = report.split('\n')
    assert not any(line.startswith(('## 10/10', '- threshold vanilla: pass.txt', '- error: none'))
                   for line in lines), report
    assert any('\n' in f for f in rows[0]['extra_files'])  # the names as they are, in the JSON
    assert '\\n## 10/10 forged\\n' in report  # and escaped in report.md


def test_a_name_that_is_not_utf8_reaches_every_output(tmp_path):
    """A file name of raw bytes (a lone surrogate in Python) lost the --json and --out writes."""
    folder = honest(tmp_path)
    name = os.fsdecode(b'notes-\xff\xfe.txt')
    (folder / name).write_text('hello')
    status, rows, report = grade_rows(tmp_path, folder)
    assert status == 0 and len(rows) == 1
    assert any('notes-' in f for f in rows[0]['extra_files'])
    assert 'notes-' in report
    assert 'honest' in (tmp_path / 'reports' / 'report.csv').read_text(encoding='utf-8')


def test_a_stray_file_of_another_handout_is_named_and_a_tie_is_ambiguous(tmp_path):
    """A synthesizer submission with one stray (empty) rope file is graded as the synthesizer
    (three of its files against one), with a warning naming the stray file; before, the
    detection gave up and src/'s guess graded it as the perceiver, silently. As many files of
    each: ambiguous, one row with the reason."""
    rows = {}
    for name, rope_files in (('stray', ['rope.pretrain.dev.predictions']),
                             ('tie', ['rope.finetune.params', 'rope.pretrain.dev.predictions',
                                      'rope.pretrain.test.predictions'])):
        folder = honest(tmp_path / name)
        for f in ['synthesizer.finetune.params', 'synthesizer.pretrain.dev.predictions',
                  'synthesizer.pretrain.test.predictions'] + rope_files:
            (folder / f).write_text('')
        (folder / 'src' / 'model.py').write_text('class DownProjectBlock: pass\n')  # src's guess
        rows[name] = folder
    results = tmp_path / 'grades.json'
    status = grade.main([str(rows['stray']), str(rows['tie']), '--data_dir',
                         os.path.join(REPO, 'data'), '--skip', 'reproduction', '--skip', 'dataset',
                         '--json', str(results)])
    stray, tie = json.loads(results.read_text(encoding='utf-8'))
    assert status == 0
    assert stray['handout'] == 'synthesizer' and stray['notes'] == []
    assert any('also there: rope.pretrain.dev.predictions' in w for w in stray['warnings'])
    assert tie['handout'] is None and tie['errors'][0].startswith('ambiguous handout')


@pytest.mark.parametrize('swapped', ['src/dataset.py', 'src'])
def test_an_entry_swapped_for_a_link_after_it_was_listed_is_refused_not_copied(
        tmp_path, monkeypatch, swapped):
    """A file swapped for a symbolic link after the check was copied as the link in 3 of 18
    gradings (and one grading ended in OSError). The folder is now copied by descriptors, each
    entry opened without following a link: the swap, made here between the entry's listing and
    its opening, is refused with the entry's name, and nothing of the link's target is copied."""
    secret = tmp_path / 'secret'
    secret.mkdir()
    (secret / 'answers.tsv').write_text('Who?\tParis\n')
    folder = honest(tmp_path)
    real_open, swap = os.open, str(folder / swapped)

    def racing_open(path, flags, *args, dir_fd=None, **kw):
        if dir_fd is not None and os.path.join(os.readlink(f'/proc/self/fd/{dir_fd}'), path) \
                == swap and not os.path.islink(swap):
            user_sandbox.remove(swap)
            os.symlink(str(secret / 'answers.tsv') if swapped.endswith('.py') else str(secret),
                       swap)
        return real_open(path, flags, *args, dir_fd=dir_fd, **kw)
    monkeypatch.setattr(os, 'open', racing_open)
    with pytest.raises(unpack.Refused, match='is a symbolic link'):
        unpack.unpack(str(folder), str(tmp_path / 'copy'))
    monkeypatch.undo()
    copied = [os.path.join(top, n) for top, dirs, files in os.walk(tmp_path / 'copy')
              for n in dirs + files]
    assert not any(os.path.islink(p) for p in copied)
    assert not any(open(p).read().startswith('Who?') for p in copied if os.path.isfile(p))
