"""wiki.txt as each edition ships it: the RoPE edition's (2024-25) is the 2021-23 file without
its final newline. Set-up accepts either file, and a run reads its edition's: `data has 418352
characters` under 2021-23, `418351` under 2024-25, whichever file the data folder holds."""
import os
import shutil
import subprocess
import sys

import pytest

import dataset
from engine import datafiles
from engine.command import inputs
from engine.common import UsageError

from support import REPO
WIKI = os.path.join(REPO, 'data', 'wiki.txt')


@pytest.fixture(scope='module')
def wikis(tmp_path_factory):
    """{edition: a folder holding the data files, wiki.txt as that edition ships it}."""
    text = open(WIKI, 'rb').read()
    assert text.endswith(b'\n') and not text.endswith(b'\n\n')
    folders = {}
    for edition, wiki in (('2021-23', text), ('2024-25', text[:-1])):
        folder = tmp_path_factory.mktemp(edition)
        for name in datafiles.checksums():  # (the demo's input.txt where set-up got it)
            if os.path.exists(os.path.join(REPO, 'data', name)):
                shutil.copy(os.path.join(REPO, 'data', name), folder / name)
        (folder / 'wiki.txt').write_bytes(wiki)
        folders[edition] = folder
    return folders


def test_the_rope_editions_wiki_is_the_2021_23_one_without_its_last_newline(wikis):
    assert os.path.getsize(wikis['2024-25'] / 'wiki.txt') == 419252
    for edition, folder in wikis.items():
        assert datafiles.sha256(folder / 'wiki.txt') == datafiles.WIKI[edition]


@pytest.mark.parametrize('edition', ['2021-23', '2024-25'])
def test_set_up_accepts_either_editions_wiki(edition, wikis, tmp_path, monkeypatch):
    data = tmp_path / 'data'
    data.mkdir()
    shutil.copy(os.path.join(REPO, 'data', 'SHA256SUMS'), data)
    monkeypatch.setattr(datafiles, 'DATA', str(data))
    datafiles.setup(str(wikis[edition]))
    assert (data / 'wiki.txt').read_bytes() == (wikis[edition] / 'wiki.txt').read_bytes()
    datafiles.setup(str(wikis[edition]))  # already there: left alone, no error


def test_set_up_takes_a_students_starter_folder(wikis, tmp_path, monkeypatch):
    """The handout's zip unpacked: wiki.txt (the RoPE edition's) and the birth_*.tsv files at
    its top, the demo's input.txt under mingpt-demo/ or not there at all (it is optional)."""
    starter = tmp_path / 'a4'
    starter.mkdir()
    for name in ('wiki.txt', 'birth_places_train.tsv', 'birth_dev.tsv', 'birth_test_inputs.tsv'):
        shutil.copy(wikis['2024-25'] / name, starter / name)
    # (the demo's case where this checkout's set-up had input.txt: a starter may ship none)
    for demo in (True, False) if (wikis['2024-25'] / 'input.txt').exists() else (False,):
        data = tmp_path / f'data-{demo}'
        data.mkdir()
        shutil.copy(os.path.join(REPO, 'data', 'SHA256SUMS'), data)
        monkeypatch.setattr(datafiles, 'DATA', str(data))
        if demo:
            (starter / 'mingpt-demo').mkdir()
            shutil.copy(wikis['2024-25'] / 'input.txt', starter / 'mingpt-demo' / 'input.txt')
        else:
            shutil.rmtree(starter / 'mingpt-demo', ignore_errors=True)
        datafiles.setup(str(starter))
        assert (data / 'wiki.txt').read_bytes() == (starter / 'wiki.txt').read_bytes()
        assert (data / 'birth_dev.tsv').is_file() and (data / 'input.txt').is_file() == demo
    with pytest.raises(UsageError, match='data folder .*nowhere: not found'):
        datafiles.setup(str(tmp_path / 'nowhere'))


def test_set_up_refuses_a_wiki_of_neither_edition(wikis, tmp_path, monkeypatch):
    data, source = tmp_path / 'data', tmp_path / 'source'
    data.mkdir()
    shutil.copytree(wikis['2021-23'], source)
    (source / 'wiki.txt').write_bytes((source / 'wiki.txt').read_bytes() + b'\n')
    shutil.copy(os.path.join(REPO, 'data', 'SHA256SUMS'), data)
    monkeypatch.setattr(datafiles, 'DATA', str(data))
    with pytest.raises(UsageError, match=r'wiki\.txt does not match its checksum'):
        datafiles.setup(str(source))
    assert not (data / 'wiki.txt').exists()


@pytest.mark.parametrize('file_of', ['2021-23', '2024-25'])
@pytest.mark.parametrize('edition,characters', [('2021-23', 418352), ('2024-25', 418351)])
def test_a_run_reads_its_editions_wiki_whichever_file_it_is_given(edition, characters, file_of,
                                                                   wikis, capsys):
    corpus = inputs.read_corpus(str(wikis[file_of] / 'wiki.txt'), dataset.CharCorruptionDataset,
                               edition)
    assert capsys.readouterr().out.splitlines() == [f'data has {characters} characters, 256 unique.']
    assert len(corpus) == {'2021-23': 2938, '2024-25': 2937}[edition]
    assert (corpus.data[-1] == '') == (edition == '2021-23')  # 2021-23's empty last document
    assert all(corpus.data[:2937])


def test_another_corpus_is_read_as_it_is(tmp_path):
    text = 'Ann. Ann was born in Rome.\n'
    (tmp_path / 'c.txt').write_text(text, encoding='utf-8')
    for edition in ('2021-23', '2024-25'):
        assert datafiles.as_edition(text, edition) == text
    assert inputs.read_corpus(str(tmp_path / 'c.txt'), dataset.CharCorruptionDataset, '2024-25').data == text.split('\n')


def test_dataset_script_under_the_rope_edition_prints_its_count():
    env = dict(os.environ, PYTHONIOENCODING='utf-8', CS224N_EDITION='2024-25')
    proc = subprocess.run([sys.executable, 'src/dataset.py', 'charcorruption'], cwd=REPO, env=env,
                          capture_output=True, text=True, encoding='utf-8', timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == 'data has 418351 characters, 256 unique.'


def test_set_up_again_needs_no_folder_and_without_data_names_both(wikis, tmp_path, monkeypatch):
    """Once data/ holds every file with its checksum it is used as it is (a second set-up needs
    no A5_DATA_DIR); a data/ that lacks one, with no folder given, is one error naming the file
    and A5_DATA_DIR, and copies nothing."""
    data = tmp_path / 'data'
    data.mkdir()
    shutil.copy(os.path.join(REPO, 'data', 'SHA256SUMS'), data)
    monkeypatch.setattr(datafiles, 'DATA', str(data))
    monkeypatch.delenv(datafiles.DATA_DIR_ENV, raising=False)
    with pytest.raises(UsageError, match=r'data/ lacks birth_dev\.tsv.*wiki\.txt.*A5_DATA_DIR'):
        datafiles.setup()
    assert sorted(os.listdir(data)) == ['SHA256SUMS']
    monkeypatch.setenv(datafiles.DATA_DIR_ENV, str(wikis['2024-25']))
    datafiles.setup()
    monkeypatch.setenv(datafiles.DATA_DIR_ENV, str(tmp_path / 'moved-away'))
    datafiles.setup()  # data/ complete: the stale folder is not read
    monkeypatch.delenv(datafiles.DATA_DIR_ENV)
    datafiles.setup()
    (data / 'birth_dev.tsv').write_text('changed\n')
    with pytest.raises(UsageError, match=r'data/ lacks birth_dev\.tsv and no data folder'):
        datafiles.setup()
