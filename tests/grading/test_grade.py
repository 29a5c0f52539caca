"""scripts/grading/grade.py on submissions this suite builds itself: tiny run.py runs (one finetuning step
of the handout's model on 64 questions, evaluation on the first 40 dev and 30 test questions),
then collect_submission.sh. A complete submission passes layout and loading and reproduces 100%;
one changed predictions line is caught at that line; a dataset.py that breaks one property fails
exactly that one; a stranger's hostile files are each one row with its reason."""
import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile

import pytest
import torch

from support import REPO
SCRIPTS = os.path.join(REPO, 'scripts', 'grading')
DATA = os.path.join(REPO, 'data')
import grade  # noqa: E402
import sample_submission  # noqa: E402
import spec_check  # noqa: E402
import submission  # noqa: E402
import unpack  # noqa: E402
import student_datasets  # noqa: E402
import gradescope_like  # noqa: E402
import user_sandbox  # noqa: E402

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)

DEV, TEST = 40, 30
SANDBOX = spec_check.sandbox_problem() is None  # bubblewrap runs here (setup installs it)
PROPERTIES = list(spec_check.PROPERTIES)


@pytest.fixture(scope='module')
def built(tmp_path_factory, worker_id):
    """data: the grader's data folder (40 dev, 30 test questions); synthesizer/perceiver/rope:
    complete submissions (sample_submission.py: run.py's files, zipped by
    collect_submission.sh), unzipped, and their zips; HANDOUT_run: the folder of run.py's files.
    Built once per test run (half a minute), also under pytest-xdist: the first worker builds,
    the others wait for it and read them (the tests only read them)."""
    if worker_id == 'master':
        return build_samples(tmp_path_factory.mktemp('grade'))
    root = tmp_path_factory.getbasetemp().parent / 'grade-samples'  # the run's, every worker's
    with open(str(root) + '.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / 'built').exists():
            build_samples(root)
            (root / 'built').write_text('')
    return samples_in(root)


def build_samples(root):
    data = sample_submission.make_data(str(root / 'data'), DEV, TEST)
    sample_submission.head(os.path.join(DATA, 'birth_test_inputs.tsv'), root / 'test_answers.tsv',
                           TEST, '\tLondon')
    for handout in ('synthesizer', 'perceiver', 'rope'):
        sample_submission.build(str(root / handout), handout, data)
    return samples_in(root)


def samples_in(root):
    out = {'data': root / 'data', 'root': root}
    for handout in ('synthesizer', 'perceiver', 'rope'):
        [zipped] = (root / handout).glob('*.zip')
        out[handout], out[handout + '_zip'] = root / handout / 'unzipped', zipped
        out[handout + '_run'] = root / handout / 'run'
    return out


def grade_all(built, tmp_path, *submissions, extra=()):
    """grade.main in this process; returns (exit status, the --json results)."""
    results = tmp_path / 'results.json'
    status = grade.main([str(s) for s in submissions] + [
        '--data_dir', str(built['data']), '--json', str(results), '--draws', '2000',
        *([] if SANDBOX else ['--no-sandbox']), *extra])
    return status, json.loads(results.read_text()) if results.exists() else None


def test_a_complete_submission_passes_and_reproduces(built, tmp_path):
    status, [r] = grade_all(built, tmp_path, built['synthesizer_zip'], extra=[
        '--test_answers', str(built['root'] / 'test_answers.tsv'), '--out', str(tmp_path / 'rep')])
    assert status == 0
    assert r['handout'] == 'synthesizer' and r['year'] == '2021-22'
    assert r['layout_ok'] and r['errors'] == [], r['errors']
    assert set(r['params']) == {'vanilla.model.params', 'vanilla.finetune.params',
                                'synthesizer.finetune.params'}
    assert set(r['params'].values()) == {'ok'}
    assert len(r['reproduced']) == 6 and set(r['reproduced'].values()) == {1.0}
    assert set(r['accuracy']) == set(r['reproduced'])  # dev and test: answers given
    assert set(r['thresholds']) == {'vanilla.pretrain.dev >= 10%', 'synthesizer.pretrain.test >= 5%'}
    assert all(isinstance(v, bool) for v in r['thresholds'].values())
    assert r['dataset'] == {p: True for p in PROPERTIES}, r['dataset_details']
    # the reports name the same
    md = (tmp_path / 'rep' / 'report.md').read_text()
    assert 'synthesizer.pretrain.dev.predictions reproduced: 100.00%' in md
    figure = r['accuracy']['synthesizer.pretrain.test.predictions']
    assert f'- threshold synthesizer.pretrain.test >= 5%: ' \
           f'{"pass" if figure >= 5 else "FAIL"} ({figure:g}%)' in md
    csv_text = (tmp_path / 'rep' / 'report.csv').read_text()
    assert csv_text.splitlines()[0].startswith('submission,handout,layout_ok,errors,warnings,accuracy:')


def test_dev_accuracy_is_the_handouts_count(built, tmp_path):
    folder = tmp_path / 'sub'
    shutil.copytree(built['synthesizer'], folder)
    gold = [line.split('\t')[1].strip() for line in
            (built['data'] / 'birth_dev.tsv').read_text().splitlines()]
    right = gold[:10] + ['London'] * (DEV - 10)
    (folder / 'vanilla.pretrain.dev.predictions').write_text(''.join(p + '\n' for p in right))
    _, [r] = grade_all(built, tmp_path, folder, extra=['--skip', 'dataset'])
    want = 100 * sum(a == b for a, b in zip(right, gold)) / DEV
    assert r['accuracy']['vanilla.pretrain.dev.predictions'] == round(want, 2)
    verified = r['verified']['vanilla.pretrain.dev.predictions']
    assert verified < want and r['thresholds']['vanilla.pretrain.dev >= 10%'] is (verified >= 10)
    assert r['thresholds']['synthesizer.pretrain.test >= 5%'] is None  # no test answers
    assert r['reproduced']['vanilla.pretrain.dev.predictions'] < 1


@pytest.mark.parametrize('skip', [False, True])
def test_thresholds_count_only_what_the_params_regenerate(built, tmp_path, skip):
    """Dev predictions copied from the answers score 100% but pass nothing: their params
    regenerate only the lines they would have answered anyway."""
    folder = tmp_path / 'sub'
    shutil.copytree(built['synthesizer'], folder)
    gold = [line.split('\t')[1].strip() for line in
            (built['data'] / 'birth_dev.tsv').read_text().splitlines()]
    name = 'vanilla.pretrain.dev.predictions'
    ours = (folder / name).read_text().splitlines()
    (folder / name).write_text(''.join(p + '\n' for p in gold))
    _, [r] = grade_all(built, tmp_path, folder, extra=['--skip', 'dataset']
                       + (['--skip', 'reproduction'] if skip else []))
    assert r['accuracy'][name] == 100
    if skip:  # nothing to check the file against: judged as submitted
        assert r['thresholds']['vanilla.pretrain.dev >= 10%'] is True and r['verified'] == {}
        return
    honest = round(100 * sum(a == b for a, b in zip(ours, gold)) / DEV, 2)
    assert r['verified'][name] == honest < 10
    assert r['thresholds']['vanilla.pretrain.dev >= 10%'] is False
    assert f'vanilla.pretrain.dev >= 10%: 100% submitted, {honest:g}% from the predictions its ' \
           'params regenerate' in r['errors']


def test_one_changed_line_is_caught_at_that_line(built, tmp_path):
    folder = tmp_path / 'sub'
    shutil.copytree(built['synthesizer'], folder)
    path = folder / 'synthesizer.pretrain.dev.predictions'
    lines = path.read_text().split('\n')
    lines[6] = lines[6] + 'x'
    path.write_text('\n'.join(lines))
    _, [r] = grade_all(built, tmp_path, folder, extra=['--skip', 'dataset'])
    assert r['reproduced']['synthesizer.pretrain.dev.predictions'] == round(1 - 1 / DEV, 4)
    assert r['differences']['synthesizer.pretrain.dev.predictions'][0].startswith('line 7: ')
    assert r['reproduced']['synthesizer.pretrain.test.predictions'] == 1.0


BROKEN = {
    # the masked span is always half the truncated document
    'masked_length_mean': ('hi = n / 2 - 1', 'hi = -1'),
    # the second ⁇ left out
    'two_masks': ('suffix + self.MASK_CHAR + masked_content', 'suffix + masked_content'),
}


@pytest.mark.parametrize('prop', sorted(BROKEN))
def test_a_broken_dataset_fails_exactly_that_property(built, tmp_path, prop):
    folder = tmp_path / 'sub'
    shutil.copytree(built['synthesizer'], folder)
    path = folder / 'src' / 'dataset.py'
    text = path.read_text(encoding='utf-8')
    old, new = BROKEN[prop]
    assert old in text
    text = text.replace(old, new)
    if prop == 'masked_length_mean':
        text = text.replace('masked_len = min(n, 1)', 'masked_len = n // 2')
    path.write_text(text, encoding='utf-8')
    _, [r] = grade_all(built, tmp_path, folder, extra=['--skip', 'reproduction'])
    failed = sorted(p for p, ok in r['dataset'].items() if ok is False)
    assert failed == [prop], r['dataset_details']
    unjudged = sorted(p for p, ok in r['dataset'].items() if ok is None)
    assert unjudged == (['masked_length_mean', 'rearranged'] if prop == 'two_masks' else [])
    assert 'document' in r['dataset_details'][prop] or 'mean gap' in r['dataset_details'][prop]


def test_the_file_src_dataset_py_is_judged_not_a_package_beside_it(built, tmp_path):
    """Python's `import dataset` prefers a package src/dataset/ to src/dataset.py: the probe
    imports the file the spec names, and the row says the package is there."""
    folder = tmp_path / 'sub'
    shutil.copytree(built['synthesizer'], folder)
    (folder / 'src' / 'dataset').mkdir()
    (folder / 'src' / 'dataset' / '__init__.py').write_text('raise SystemExit("the package")\n')
    _, [r] = grade_all(built, tmp_path, folder, extra=['--skip', 'reproduction'])
    assert r['dataset'] == {p: True for p in PROPERTIES}, r['dataset_details']
    assert any(w.startswith('src/dataset/ (a package) is beside src/dataset.py') for w in r['warnings'])


def test_a_rope_submission_graded_as_2021_23_is_named_as_such(built, tmp_path):
    status, [r] = grade_all(built, tmp_path, built['rope_zip'],
                            extra=['--handout', 'synthesizer', '--skip', 'reproduction'])
    assert status == 0
    assert r['handout'] == 'synthesizer'
    assert any('files are those of the rope handout (2024-25), graded as synthesizer (2021-22)'
               in e for e in r['errors'])
    assert not r['layout_ok']
    assert r['dataset']['lengths'] is False  # its dataset gives 128, the 2021-23 spec 127
    # graded as its own handout it is complete
    wrong = tmp_path / 'wrong-london'
    shutil.copytree(built['rope'], wrong)
    (wrong / 'london_baseline_accuracy.txt').write_text('7.5\n')
    _, [own, other] = grade_all(built, tmp_path, built['rope_zip'], wrong)
    assert own['handout'] == 'rope' and own['layout_ok'] and own['errors'] == []
    assert own['dataset'] == {p: True for p in PROPERTIES}
    assert set(own['reproduced'].values()) == {1.0}
    assert len(other['errors']) == 1
    assert other['errors'][0].startswith('london_baseline_accuracy.txt says 7.5; predicting '
                                         'London for every question of birth_dev.tsv gives')


# ---- a stranger's files ---------------------------------------------------------------------

def zip_of(folder, out, extra=()):
    """Zip `folder` into `out`, plus extra (ZipInfo or name, bytes) entries."""
    with zipfile.ZipFile(out, 'w', zipfile.ZIP_DEFLATED) as z:
        for root, _, files in os.walk(folder):
            for f in files:
                full = os.path.join(root, f)
                z.write(full, os.path.relpath(full, folder))
        for info, data in extra:
            z.writestr(info, data)
    return out


def symlink_entry(name, target):
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target


def dataset_with(built, tmp_path, name, code):
    """A copy of the complete submission whose dataset.py runs `code` when imported."""
    folder = tmp_path / name
    shutil.copytree(built['synthesizer'], folder)
    path = folder / 'src' / 'dataset.py'
    path.write_text(code + '\n' + path.read_text(encoding='utf-8'), encoding='utf-8')
    return folder


def test_hostile_submissions_are_rows_with_reasons(built, tmp_path, monkeypatch):
    home = tmp_path / 'home'
    home.mkdir()
    cwd = tmp_path / 'cwd'
    cwd.mkdir()
    monkeypatch.setenv('HOME', str(home))
    monkeypatch.chdir(cwd)
    good = built['synthesizer']
    subs = tmp_path / 'subs'
    subs.mkdir()
    cases = {
        'slip': zip_of(good, subs / 'slip.zip', [('../../escaped.txt', b'x')]),
        'absolute': zip_of(good, subs / 'absolute.zip', [('/tmp/escaped-abs.txt', b'x')]),
        'symlink': zip_of(good, subs / 'symlink.zip', [symlink_entry('link', '/etc/passwd')]),
        'corrupt': subs / 'corrupt.zip',
        'bomb': subs / 'bomb.zip',
        'million': subs / 'million',
        'pickle': subs / 'pickle',
    }
    data = built['synthesizer_zip'].read_bytes()
    cases['corrupt'].write_bytes(data[:len(data) // 2])
    # the limit made smaller (the good submission, about 40 MB, stays under it), so that the
    # bomb takes less time to make; the code that judges it is the same
    monkeypatch.setattr(unpack, 'MAX_BYTES', 64 << 20)
    with zipfile.ZipFile(cases['bomb'], 'w', zipfile.ZIP_DEFLATED) as z:
        with z.open('src/zeros.bin', 'w', force_zip64=True) as f:
            block = bytes(1 << 20)
            for _ in range(unpack.MAX_BYTES // len(block) + 64):
                f.write(block)
    shutil.copytree(good, cases['million'])
    (cases['million'] / 'vanilla.pretrain.dev.predictions').write_text('London\n' * 1_000_000)
    shutil.copytree(good, cases['pickle'])
    marker = tmp_path / 'pickle-ran'

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), 'w'))
    import torch
    torch.save({'tok_emb.weight': Evil()}, cases['pickle'] / 'vanilla.model.params')
    cases['loop'] = dataset_with(built, tmp_path, 'loop', 'while True:\n    pass')
    # SIGXCPU ignored: the hard limit's SIGKILL follows a second later (read as "out of memory?")
    cases['xcpu'] = dataset_with(built, tmp_path, 'xcpu', 'import signal\n'
                                 'signal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass')
    cases['alloc'] = dataset_with(built, tmp_path, 'alloc',
                                  'blocks = []\nwhile True:\n    blocks.append(bytearray(1 << 26))')
    cases['prints'] = dataset_with(built, tmp_path, 'prints', 'print("x" * (8 << 20))')
    cases['writes'] = dataset_with(
        built, tmp_path, 'writes',
        'import os\nopen("written-by-dataset.txt", "w").write("x")\n'
        'open(os.path.expanduser("~/written-by-dataset.txt"), "w").write("x")')
    # the files first (no dataset check), then the dataset.py cases (no reproduction)
    files = [c for c in cases if c not in ('loop', 'xcpu', 'alloc', 'prints', 'writes')]
    status, results = grade_all(built, tmp_path, *[cases[c] for c in files], good,
                                extra=['--skip', 'dataset'])
    assert status == 0
    rows = dict(zip(files + ['good'], results))
    assert rows['good']['errors'] == [] and set(rows['good']['reproduced'].values()) == {1.0}
    code = [c for c in cases if c not in files]
    status, results = grade_all(built, tmp_path, *[cases[c] for c in code], extra=[
        '--skip', 'reproduction', '--dataset_cpu_seconds', '3', '--dataset_memory_mb', '512'])
    assert status == 0
    rows.update(zip(code, results))
    assert 'outside the submission' in rows['slip']['errors'][0]
    assert 'outside the submission' in rows['absolute']['errors'][0]
    assert 'symbolic link' in rows['symlink']['errors'][0]
    assert 'not a readable zip' in rows['corrupt']['errors'][0]
    assert 'far beyond a submission' in rows['bomb']['errors'][0]
    assert any('1,000,000 lines' in e or 'bytes, far more' in e for e in rows['million']['errors'])
    assert any(e.startswith('vanilla.model.params: holds Python objects, not only tensors')
               for e in rows['pickle']['errors'])
    assert not marker.exists()  # nothing of the pickle ran
    assert 'CPU time' in rows['loop']['dataset_details']['vocab']
    assert 'CPU time' in rows['xcpu']['dataset_details']['vocab'], rows['xcpu']['dataset_details']
    assert 'MemoryError' in rows['alloc']['dataset_details']['vocab']
    assert rows['prints']['dataset'] == {p: True for p in PROPERTIES}  # prints cost nothing
    assert rows['writes']['dataset'] == {p: True for p in PROPERTIES}
    assert rows['writes']['reproduced'] == {}  # skipped
    # nothing escaped: not beside the zips, not in the working directory, not in HOME
    assert not os.path.exists('/tmp/escaped-abs.txt')
    assert not (tmp_path / 'escaped.txt').exists() and not (tmp_path.parent / 'escaped.txt').exists()
    assert os.listdir(cwd) == [] and os.listdir(home) == []
    assert not (cases['writes'] / 'src' / 'written-by-dataset.txt').exists()


def test_a_folder_of_zips_is_its_zips(built, tmp_path):
    folder = tmp_path / 'class'
    folder.mkdir()
    shutil.copyfile(built['synthesizer_zip'], folder / 'alice.zip')
    shutil.copyfile(built['rope_zip'], folder / 'bob.zip')
    found = grade.find_submissions([str(folder), str(built['synthesizer'])])
    assert found == [str(folder / 'alice.zip'), str(folder / 'bob.zip'), str(built['synthesizer'])]


@pytest.mark.parametrize('args, message', [
    (['missing.zip'], 'missing.zip: no such file or folder'),
    (['{zip}', '--data_dir', 'nowhere'], '--data_dir nowhere: no such folder'),
    (['{zip}', '--test_answers', 'nowhere.tsv'], '--test_answers nowhere.tsv: file not found'),
    (['{zip}', '--json', '{zip}'], '--json'),
    (['{zip}', '--draws', '1999'], '--draws must be at least 2,000'),
    (['{zip}', '--masked_band', 'nan'], '--masked_band must be a number of characters'),
    (['{zip}', '--handout', 'transformer'], "invalid choice: 'transformer'"),
    (['{zip}', '--edition', 'perceiver'], '--edition perceiver: the handout is named by --handout'),
])
def test_bad_usage_is_one_line_and_exit_2(built, tmp_path, monkeypatch, capsys, args, message):
    before = built['synthesizer_zip'].read_bytes()
    args = [a.replace('{zip}', str(built['synthesizer_zip'])) for a in args]
    monkeypatch.chdir(tmp_path)
    try:
        status = grade.main(args)
    except SystemExit as e:  # argparse's own errors
        status = e.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count('\n') == 1 and err.startswith('error: ') and message in err
    assert built['synthesizer_zip'].read_bytes() == before
    assert os.listdir(tmp_path) == []


def test_the_command_line_grades_and_exits_0(built, tmp_path):
    """As a TA types it: a failing submission is a result, not an error."""
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, 'grade.py'), str(built['rope_zip']),
                        '--data_dir', str(built['data']), '--skip', 'dataset', '--out', 'reports'],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert 'rope (2024-25), layout ok' in r.stdout
    assert sorted(os.listdir(tmp_path / 'reports')) == ['report.csv', 'report.md']


def test_params_that_do_not_load_say_why(built, tmp_path):
    folder = tmp_path / 'sub'
    shutil.copytree(built['synthesizer'], folder)
    shutil.copyfile(folder / 'synthesizer.finetune.params', folder / 'vanilla.model.params')
    data = (folder / 'vanilla.finetune.params').read_bytes()
    (folder / 'vanilla.finetune.params').write_bytes(data[:len(data) // 3])
    _, [r] = grade_all(built, tmp_path, folder, extra=['--skip', 'dataset'])
    assert r['params']['vanilla.model.params'] == \
        'params are a synthesizer model, you asked for a vanilla model'
    assert r['params']['vanilla.finetune.params'].startswith('not a readable params file')
    assert r['params']['synthesizer.finetune.params'] == 'ok'
    # nothing to reproduce from params that do not load, and no threshold passes on it
    assert {k for k, v in r['reproduced'].items() if v is not None} == {
        'synthesizer.pretrain.dev.predictions', 'synthesizer.pretrain.test.predictions'}
    assert r['reproduced']['vanilla.pretrain.dev.predictions'] is None
    assert r['thresholds']['vanilla.pretrain.dev >= 10%'] == 'not reproduced'
    assert 'reproduced 100% (lowest), 4 file(s) not regenerable' in grade.summary(r)
    assert r['layout_ok']  # the files are there; what is wrong with them is in errors
    assert len(r['errors']) == 3 and r['errors'][2].startswith(
        'vanilla.pretrain.dev >= 10%: fails, vanilla.finetune.params cannot regenerate'), r['errors']


def deflated_bomb(params, out, size):
    """`params` rewritten with its first tensor's record `size` bytes of zeros, deflated: a few
    kilobytes on disk that torch.load would allocate in full before finding them wrong."""
    with zipfile.ZipFile(params) as src, zipfile.ZipFile(out, 'w') as z:
        for info in src.infolist():
            if info.filename.endswith('/data/0'):
                z.writestr(info.filename, bytes(size), compress_type=zipfile.ZIP_DEFLATED)
            else:
                z.writestr(info, src.read(info))


def test_params_whose_records_unpack_past_the_model_are_refused_unread(built, tmp_path, monkeypatch):
    """A 2.4 KB params file made torch.load allocate 1 GiB: the inner records count, unread."""
    folder = tmp_path / 'sub'
    shutil.copytree(built['synthesizer'], folder)
    deflated_bomb(built['synthesizer'] / 'vanilla.model.params', folder / 'vanilla.model.params',
                  64 << 20)
    on_disk = (folder / 'vanilla.model.params').stat().st_size
    assert on_disk < (built['synthesizer'] / 'vanilla.model.params').stat().st_size + 200_000
    legacy = torch.load(built['synthesizer'] / 'vanilla.finetune.params', weights_only=True)
    torch.save(legacy, folder / 'vanilla.finetune.params', _use_new_zipfile_serialization=False)
    loaded = []
    real_load = torch.load
    monkeypatch.setattr(torch, 'load', lambda f, *a, **k: loaded.append(str(f)) or real_load(f, *a, **k))
    _, [r] = grade_all(built, tmp_path, folder, extra=['--skip', 'dataset', '--skip', 'reproduction'])
    why = r['params']['vanilla.model.params']
    assert why.startswith('its records unpack to ') and why.endswith('allowed for this model: refused unread'), why
    assert r['params']['vanilla.finetune.params'].startswith("in torch.save's legacy format")
    assert r['params']['synthesizer.finetune.params'] == 'ok'
    assert not any(name.endswith(('vanilla.model.params', 'vanilla.finetune.params'))
                   for name in loaded), loaded


def test_unpack_refuses_links_and_special_files_in_a_folder(tmp_path):
    for kind in ('link', 'fifo'):
        folder = tmp_path / kind
        (folder / 'src').mkdir(parents=True)
        (folder / 'src' / 'dataset.py').write_text('')
        if kind == 'link':
            os.symlink('/etc/passwd', folder / 'src' / 'model.py')
        else:
            os.mkfifo(folder / 'vanilla.model.params')
        with pytest.raises(unpack.Refused, match='symbolic link' if kind == 'link'
                           else 'not a regular file'):
            unpack.unpack(str(folder), str(tmp_path / f'{kind}-copy'))


def test_unpack_finds_a_submission_zipped_with_its_folder(tmp_path):
    out = tmp_path / 'nested.zip'
    with zipfile.ZipFile(out, 'w') as z:
        z.writestr('assignment5_submission/src/dataset.py', 'x = 1\n')
        z.writestr('assignment5_submission/vanilla.model.params', 'p')
        z.writestr('__MACOSX/._junk', 'j')
    root = unpack.unpack(str(out), str(tmp_path / 'open'))
    assert sorted(os.listdir(root)) == ['src', 'vanilla.model.params']


def test_one_over_long_name_in_a_zip_costs_that_entry_only(tmp_path):
    """A member whose name no file system takes (300 bytes in one part) refused the whole
    submission as a corrupt zip; now it alone is left out, with a warning."""
    out = tmp_path / 'long.zip'
    with zipfile.ZipFile(out, 'w') as z:
        z.writestr('src/dataset.py', 'x = 1\n')
        z.writestr('src/' + 'n' * 300 + '.py', 'y = 2\n')
        z.writestr('notes/' + 'é' * 200 + '.txt', 'z')  # 400 bytes, 200 characters
    skipped = []
    root = unpack.unpack(str(out), str(tmp_path / 'open'), skipped)
    assert os.listdir(os.path.join(root, 'src')) == ['dataset.py']
    assert len(skipped) == 2 and all('left out: its name is longer' in w for w in skipped)
    assert all(len(w) < 300 for w in skipped)


def test_a_folder_holding_a_hard_link_to_the_held_out_answers_is_refused(tmp_path):
    """A folder submission on the grading machine whose file is a hard link to the held-out
    answers was copied and read with no word; it is refused, naming the file."""
    answers = tmp_path / 'birth_test_answers.tsv'
    answers.write_text('Who?\tParis\n')
    sub = tmp_path / 'sub'
    sub.mkdir()
    os.link(answers, sub / 'vanilla.pretrain.test.predictions')
    (sub / 'notes.txt').write_text('mine\n')
    with pytest.raises(unpack.Refused, match='hard link to a file the grader keeps'):
        unpack.unpack(str(sub), str(tmp_path / 'open'), [], unpack.identities([str(answers)]))
    os.remove(sub / 'vanilla.pretrain.test.predictions')
    os.link(sub / 'notes.txt', sub / 'notes-again.txt')  # a link among its own files: fine
    root = unpack.unpack(str(sub), str(tmp_path / 'open2'), [], unpack.identities([str(answers)]))
    assert sorted(os.listdir(root)) == ['notes-again.txt', 'notes.txt']


def test_a_zip_declaring_more_than_the_limit_is_refused_unopened(tmp_path, monkeypatch):
    out = tmp_path / 'liar.zip'
    with zipfile.ZipFile(out, 'w', zipfile.ZIP_DEFLATED) as z:
        z.writestr('src/big.bin', bytes(4 << 20))
    monkeypatch.setattr(unpack, 'MAX_BYTES', 1 << 20)
    with pytest.raises(unpack.Refused, match='far beyond a submission'):
        unpack.unpack(str(out), str(tmp_path / 'open'))


# ---- what students really hand in -------------------------------------------------------------

# a student's src/ as each handout's starter names it, with what tells the handouts apart: the
# 2021-22 attention.py has SynthesizerAttention, the 2022-23 model.py the perceiver's blocks, the
# RoPE starter renamed model.py to models.py
STUDENT_CODE = {
    'synthesizer': {'attention.py': 'class CausalSelfAttention:\n    pass\n\n\n'
                                    'class SynthesizerAttention:\n    pass\n',
                    'model.py': 'class GPT:\n    pass\n'},
    'perceiver': {'attention.py': 'class CausalSelfAttention:\n    pass\n\n\n'
                                  'class CausalCrossAttention:\n    pass\n',
                  'model.py': 'class DownProjectBlock:\n    pass\n\n\nclass GPT:\n    pass\n'},
    'rope': {'attention.py': 'def precompute_rotary_emb(dim, max_positions):\n    pass\n',
             'models.py': 'class GPT:\n    pass\n'},
}
# the dataset each one's student wrote: the perceiver one follows the comment (x and y 128 long)
# and the examples (a third ⁇), the others the slicing
STUDENT_DATASET = {'synthesizer': dict(length=127), 'perceiver': dict(length=128, third_mask=True),
                   'rope': dict(length=128)}


def student_src(folder, handout):
    src = folder / 'src'
    src.mkdir(parents=True)
    for name in submission.starter_src(handout):
        name = os.path.basename(name)
        text = STUDENT_CODE[handout].get(name, f'# {name}, as the student left it\n')
        if name == 'dataset.py':
            text = student_datasets.source(**STUDENT_DATASET[handout])
        (src / name).write_text(text, encoding='utf-8')
    return src


def handout_zip(built, handout, out):
    """The zip the handout's collect_submission.sh makes (rm -f zip; zip -r zip src/
    DATA FILES): a student's src/, 2021-23's three data files, the params, predictions and
    (rope) london_baseline_accuracy.txt of a run."""
    run_dir = built[handout + '_run']
    src = student_src(out.parent / f'{handout}-student', handout)
    names = submission.zipped_data(handout) + submission.required_files(handout)
    with zipfile.ZipFile(out, 'w', zipfile.ZIP_DEFLATED) as z:
        for path in sorted(src.iterdir()):
            z.write(path, f'src/{path.name}')
        for name in names:
            z.write(run_dir / name, name)
    return out


@pytest.mark.parametrize('handout', ['synthesizer', 'perceiver', 'rope'])
def test_each_handouts_zip_grades_complete(built, tmp_path, handout):
    zipped = handout_zip(built, handout, tmp_path / submission.ZIP_NAME[handout])
    with zipfile.ZipFile(zipped) as z:
        names = z.namelist()
    assert 'src/edition.txt' not in names and 'birth_test_inputs.tsv' not in names
    assert ('src/models.py' in names) is (handout == 'rope')
    status, [r] = grade_all(built, tmp_path, zipped)  # no --handout
    assert status == 0
    assert r['handout'] == handout and r['layout_ok'], r['errors']
    assert r['errors'] == [] and r['warnings'] == [] and r['extra_files'] == []
    assert set(r['params'].values()) == {'ok'} and set(r['reproduced'].values()) == {1.0}
    assert r['dataset'] == {p: True for p in PROPERTIES}, r['dataset_details']
    if handout == 'perceiver':  # the readings it follows are named
        assert r['dataset_details']['lengths'].startswith('128 (block_size, as its comment says')
        assert 'third \u2047' in r['dataset_details']['two_masks']


@pytest.mark.parametrize('handout', ['synthesizer', 'perceiver', 'rope'])
def test_the_handout_is_read_from_src_and_the_dataset_judged_whatever_is_missing(
        built, tmp_path, handout):
    folder = tmp_path / 'only-src'
    student_src(folder, handout)
    _, [r] = grade_all(built, tmp_path, folder, extra=['--skip', 'reproduction'])
    assert r['handout'] == handout
    assert r['notes'] == [f'handout {handout} ({submission.HANDOUT_YEAR[handout]}) read from src/: '
                          + dict((e, sign) for e, sign, _ in submission.SRC_SIGNS[::-1])[handout]]
    assert not r['layout_ok'] and f'{handout}.finetune.params: missing' in r['errors']
    assert set(r['thresholds'].values()) == {'missing'}
    assert r['dataset'] == {p: True for p in PROPERTIES}, r['dataset_details']


def test_a_submission_of_no_known_handout_still_has_its_dataset_judged(built, tmp_path):
    folder = tmp_path / 'bare'
    (folder / 'src').mkdir(parents=True)
    (folder / 'src' / 'dataset.py').write_text(student_datasets.source(length=128))
    _, [r] = grade_all(built, tmp_path, folder)
    assert r['handout'] is None and r['errors'][0].startswith('cannot tell the handout')
    assert r['dataset'] == {p: True for p in PROPERTIES}, r['dataset_details']  # 127 or 128


def test_a_misplaced_or_fractional_london_file_is_named_and_read(built, tmp_path):
    folder = tmp_path / 'sub'
    shutil.copytree(built['rope'], folder)
    (folder / 'london_baseline_accuracy.txt').unlink()
    # London answers 1 of the 40 dev questions here: 2.5%, a fraction 0.025
    (folder / 'src' / 'london_baseline_accuracy.txt').write_text('0.025\n')
    _, [r] = grade_all(built, tmp_path, folder, extra=['--skip', 'dataset', '--skip', 'reproduction'])
    assert r['layout_ok']
    assert r['warnings'] == ['london_baseline_accuracy.txt is misplaced: found in src/, the '
                             'handout\'s collect_submission.sh zips it from the top folder; read '
                             'from there']
    assert r['errors'] == ['src/london_baseline_accuracy.txt says 0.025; predicting London for every '
                           'question of birth_dev.tsv gives 2.5 (percent): it holds a fraction where '
                           'the handout writes a percentage']


def test_a_missing_predictions_file_reads_missing_in_thresholds(built, tmp_path):
    folder = tmp_path / 'sub'
    shutil.copytree(built['synthesizer'], folder)
    (folder / 'synthesizer.pretrain.test.predictions').unlink()
    (folder / 'vanilla.pretrain.dev.predictions').write_text('London\n')  # one line of 40
    _, [r] = grade_all(built, tmp_path, folder, extra=[
        '--skip', 'dataset', '--skip', 'reproduction', '--out', str(tmp_path / 'rep'),
        '--test_answers', str(built['root'] / 'test_answers.tsv')])
    assert r['thresholds'] == {'vanilla.pretrain.dev >= 10%': 'unreadable',
                               'synthesizer.pretrain.test >= 5%': 'missing'}
    md = (tmp_path / 'rep' / 'report.md').read_text()
    assert '- threshold synthesizer.pretrain.test >= 5%: missing' in md


@pytest.mark.parametrize('value', ['nan', 'inf', '-inf'])
def test_a_london_file_that_is_not_a_finite_number_is_an_error(built, tmp_path, value):
    folder = tmp_path / 'sub'
    shutil.copytree(built['rope'], folder)
    (folder / 'london_baseline_accuracy.txt').write_text(value + '\n')  # float() reads these
    _, [r] = grade_all(built, tmp_path, folder, extra=['--skip', 'dataset', '--skip', 'reproduction'])
    assert r['errors'] == ['london_baseline_accuracy.txt: not one number']


def test_each_run_draws_a_fresh_corpus_recorded_and_repeatable(built, tmp_path, capsys):
    """No --seed: a fresh seed per run (a dataset keyed on a known corpus gains nothing),
    printed and in every row; --seed with it repeats the run's figures."""
    folder = tmp_path / 'bare'
    (folder / 'src').mkdir(parents=True)
    (folder / 'src' / 'dataset.py').write_text(student_datasets.source(length=128))
    rows = []
    for extra in ([], [], None):
        if extra is None:
            extra = ['--seed', str(rows[0]['dataset_seed'])]
        _, [r] = grade_all(built, tmp_path, folder, extra=extra)
        rows.append(r)
    seeds = [r['dataset_seed'] for r in rows]
    assert seeds[0] != seeds[1] and seeds[2] == seeds[0]
    err = capsys.readouterr().err
    assert f'dataset check: corpus and draws from seed {seeds[0]} (--seed {seeds[0]} repeats them)' in err
    assert rows[2]['dataset_details'] == rows[0]['dataset_details']
    assert rows[0]['dataset_details'] != rows[1]['dataset_details']


# ---- Gradescope: the autograder zip, run against a stand-in /autograder ------------------------

def build_autograder(built, zipped):
    """gradescope.py build from the command line, with the test answers: the zip's path."""
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, 'gradescope.py'), 'build', '--out',
                        str(zipped), '--data_dir', str(built['data']), '--test_answers',
                        str(built['root'] / 'test_answers.tsv')],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return zipped


def test_run_autograder_grades_a_submission_into_results_json(built, tmp_path):
    """gradescope.py build, unzipped as Gradescope does into ROOT/source, the student's files in
    ROOT/submission, run_autograder run as Gradescope runs it (ROOT standing in for /autograder):
    results.json holds the rubric's points for each check, every one passed."""
    import gradescope
    zipped = build_autograder(built, tmp_path / 'autograder.zip')
    root = tmp_path / 'autograder'
    with zipfile.ZipFile(zipped) as z:
        names = z.namelist()
        assert {'setup.sh', 'run_autograder', 'rubric.json', 'data/birth_test_answers.tsv',
                'scripts/grading/grade.py', 'src/run.py'} <= set(names)
        assert z.getinfo('run_autograder').external_attr >> 16 & 0o111  # executable
        z.extractall(root / 'source')
    shutil.copytree(built['rope'], root / 'submission')  # Gradescope unzips the upload
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), PYTHON=sys.executable)
    extra = ['--draws', '2000'] + ([] if SANDBOX else ['--no-sandbox'])
    r = subprocess.run(['bash', str(root / 'source' / 'run_autograder'), *extra], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    results = json.loads((root / 'results' / 'results.json').read_text())
    rubric = gradescope.load_rubric(os.path.join(SCRIPTS, 'rubric.json'))
    tests = {t['name']: t for t in results['tests']}
    assert tests['threshold: rope.pretrain.test >= 30%']['visibility'] == 'after_published'
    assert tests['threshold: rope.pretrain.test >= 30%']['max_score'] == 10
    assert {n.split(':')[0] for n in tests} == {'layout', 'london', 'threshold', 'params',
                                               'reproduction', 'dataset'}
    assert len([n for n in tests if n.startswith('dataset:')]) == len(PROPERTIES)
    for t in results['tests']:  # every field Gradescope reads, and the points the rubric gives
        assert set(t) == {'name', 'score', 'max_score', 'status', 'output', 'visibility'}
        points = rubric.get(t['name'], rubric[t['name'].split(':')[0]])[0]
        assert t['max_score'] == points
        assert t['score'] == (points if t['status'] == 'passed' else 0)
    # the tiny sample models answer London: the thresholds fail, everything else passes
    failed = sorted(n for n, t in tests.items() if t['status'] != 'passed')
    assert all(n.startswith('threshold: ') for n in failed), failed
    assert results['score'] == sum(t['score'] for t in results['tests'])


def test_gradescope_results_are_rewritten_as_each_group_of_checks_ends(built, tmp_path,
                                                                       monkeypatch):
    """A run stopped by Gradescope's time limit leaves what was judged: results.json is written
    after the layout, after the params and thresholds, and at the end, each time whole."""
    import gradescope
    written = []
    real = gradescope.write_results

    def write(path, results):
        real(path, results)
        written.append(json.loads(open(path).read()))
    monkeypatch.setattr(gradescope, 'write_results', write)
    out = tmp_path / 'results.json'
    status = grade.main([str(built['perceiver_zip']), '--data_dir', str(built['data']),
                         '--gradescope', str(out), '--draws', '2000',
                         *([] if SANDBOX else ['--no-sandbox'])])
    assert status == 0 and len(written) == 3, [w['output'] for w in written]
    first, second, last = written
    assert 'Still grading (threshold, params, reproduction, dataset)' in first['output']
    assert {t['name'].split(':')[0] for t in first['tests']} == {'layout'}
    assert 'Still grading (dataset)' in second['output']
    assert not any(t['name'].startswith('dataset:') for t in second['tests'])
    assert 'Still grading' not in last['output'] and last == json.loads(out.read_text())
    assert any(t['name'].startswith('dataset:') for t in last['tests'])


def test_gradescope_results_say_why_when_nothing_can_be_graded(built, tmp_path):
    """A setup the grader refuses still leaves a results.json (zero, and the reason) for the
    student to read, instead of Gradescope's bare 'autograder failed'."""
    out = tmp_path / 'results.json'
    status = grade.main([str(built['synthesizer_zip']), '--data_dir', str(tmp_path / 'none'),
                         '--gradescope', str(out)])
    assert status == 2
    results = json.loads(out.read_text())
    assert results['score'] == 0 and results['tests'] == []
    assert 'could not grade this submission: --data_dir' in results['output']


def test_jobs_grade_in_parallel_with_the_rows_of_one_at_a_time(built, tmp_path):
    """--jobs 2: each process builds its own grader from the same seed; the rows, and their
    order, are those of grading one at a time (the dataset check's draws included)."""
    subs = [built['rope_zip'], tmp_path / 'missing-params']
    shutil.copytree(built['perceiver'], subs[1])
    (subs[1] / 'perceiver.finetune.params').unlink()
    rows = {}
    for jobs in (1, 2):  # (reproduction is deterministic and tested one at a time above)
        (tmp_path / str(jobs)).mkdir()
        status, rows[jobs] = grade_all(built, tmp_path / str(jobs), *subs, extra=[
            '--seed', '7', '--jobs', str(jobs), '--skip', 'reproduction'])
        assert status == 0
    assert rows[2] == rows[1]
    assert [r['handout'] for r in rows[2]] == ['rope', 'perceiver']
    assert not rows[2][1]['layout_ok'] and rows[2][0]['dataset'] == {p: True for p in PROPERTIES}


# ---- under Gradescope's conditions (gradescope_like.py) -------------------------------------------

HOSTILE = '''import os
SEEN = []
for path, mode in [({answers!r}, 'r'), ({results!r}, 'w')]:
    try:
        open(path, mode).close()
        SEEN.append('opened')
    except OSError as e:
        SEEN.append(type(e).__name__)
raise RuntimeError('seen ' + repr(SEEN))
'''


# (the user sandbox: the grader's second one, which runs the probe as another user, must reach
# this Python: a Python under a folder closed to other users, a root account's pyenv, cannot)
@pytest.mark.user_sandbox
@pytest.mark.skipif(gradescope_like.problem() is not None or not SANDBOX
                    or user_sandbox.problem(make=False) is not None,
                    reason=f'no Gradescope-like conditions here: {gradescope_like.problem()}; '
                           f'the user sandbox: {user_sandbox.problem(make=False)}')
# rope's submission (and a hostile copy of it) stands for the three: what the conditions change
# (the sandbox, the user, the memory) is the same for every handout, whose grading is tested
# with every privilege above; each handout costs half a minute here
@pytest.mark.parametrize('handout', ['rope'])
def test_under_gradescopes_conditions_the_autograder_grades_as_with_every_privilege(
        built, tmp_path, handout):
    """768 MB, half a CPU, namespaces refused (bubblewrap cannot start) and Docker's
    capabilities: each handout's sample submission gets the score it gets with every
    privilege, the dataset check run as an unprivileged user; a dataset.py that reaches for
    the held-out answers and results.json gets neither (rope's)."""
    zipped = build_autograder(built, tmp_path / 'autograder.zip')
    shared = tempfile.mkdtemp(prefix='a5-gradescope-like-test-')  # reachable by other users,
    os.chmod(shared, 0o755)  # as /autograder is: what keeps them out is the grader's doing
    try:
        scores = {}
        for how in ('privileged', 'conditions') + (('hostile',) if handout == 'rope' else ()):
            root = os.path.join(shared, how)
            upload = built[handout]
            if how == 'hostile':
                upload = tmp_path / 'hostile'
                shutil.copytree(built[handout], upload)
                (upload / 'src' / 'dataset.py').write_text(HOSTILE.format(
                    answers=os.path.join(root, 'source', 'data', 'birth_test_answers.tsv'),
                    results=os.path.join(root, 'results', 'results.json')))
            if how == 'privileged':
                gradescope_like.lay_out(root, str(zipped), str(upload))
                env = dict(os.environ, AUTOGRADER_ROOT=root, PYTHON=sys.executable)
                r = subprocess.run(['bash', os.path.join(root, 'source', 'run_autograder'),
                                    '--draws', '2000', '--seed', '3'], env=env,
                                   capture_output=True, text=True, timeout=600)
                assert r.returncode == 0, r.stderr
            else:
                code = gradescope_like.main([str(upload), '--autograder', str(zipped), '--keep',
                                             root, '--', '--draws', '2000', '--seed', '3'])
                assert code == 0
            with open(os.path.join(root, 'results', 'results.json')) as f:
                scores[how] = json.load(f)
        assert scores['conditions']['score'] == scores['privileged']['score']
        assert 'sandbox: bubblewrap' in scores['privileged']['output']
        assert 'sandbox: unprivileged user' in scores['conditions']['output']
        if handout == 'rope':
            hostile = {t['name']: t for t in scores['hostile']['tests']}
            assert "seen ['PermissionError', 'PermissionError']" in \
                hostile['dataset: vocab']['output']
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_the_summary_says_a_skipped_check_is_skipped():
    """A check left out with --skip is said so, not shown as '-' or 0/0."""
    r = grade.empty_result('sub.zip')
    r.update(handout='rope', year='2024-25', layout_ok=True,
             accuracy={'rope.pretrain.dev.predictions': 31.0})
    line = grade.summary(r, ['reproduction', 'dataset'])
    assert 'reproduction skipped' in line and 'dataset skipped' in line
    assert '(lowest)' not in line and '0/0' not in line
    assert 'no predictions to reproduce' in grade.summary(r)
    r['reproduced'] = {'rope.pretrain.dev.predictions': None}
    assert 'reproduced none, 1 file(s) not regenerable' in grade.summary(r)
    r['reproduced'] = {'rope.pretrain.dev.predictions': 0.98}
    assert 'reproduced 98% (lowest);' in grade.summary(r)


def test_the_grader_takes_the_engine_through_one_entry_point():
    """grade.py imported eight of the engine's modules; it names engine.command.grader_api alone,
    which
    gathers what the grader takes (the engine may move its rooms without the grader knowing)."""
    import ast
    with open(os.path.join(REPO, 'scripts', 'grading', 'grade.py'), encoding='utf-8') as f:
        tree = ast.parse(f.read())
    def module(name):  # `name` where it is a module of src/, else None
        return name if os.path.isfile(os.path.join(REPO, 'src', *name.split('.')) + '.py') \
            else None
    named = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split('.')[0] == 'engine':
            named |= {module(f'{node.module}.{a.name}') or node.module for a in node.names}
        elif isinstance(node, ast.Import):
            named |= {a.name for a in node.names if a.name.split('.')[0] == 'engine'}
    assert named == {'engine.command.grader_api'}, named
