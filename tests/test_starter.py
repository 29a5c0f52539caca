"""scripts/grading/starter.py: a course's starter read out of the handout files by their markers.

The markers' meaning on small sources written here (each kind, and the ways they combine); the
handout files already marked read as each edition's starter: they compile, import no engine
module, hold the public starter's statements (counted against their digests in
tests/data/w25_starter_statements.json: the untouched 2024-25 starter
code), and the students' blocks are emptied to `pass` (kept with --solved)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, 'scripts', 'grading'))
import starter  # noqa: E402

SOURCE = '''import os
import engine  # [engine]
# [engine] a comment of the project's only
x = 1  # [2024-25]
y = 2  # [2021-22 2022-23]
#[2022-23] z = 3
# [2024-25] a comment of the 2024-25 starter
if fast:  # [engine]
    engine_path()
else:  # [starter]
    plain()
if v == 1:
    one()
elif v == 2:  # [2024-25]
    two()
elif v == 3:  # [2022-23]
    three()
else:
    raise ValueError
if rope:  # [2024-25]
    a = b
else:
    a = b + c
#[2021-22 2022-23 2024-25] def f(a):
def f(a, extra=None):  # [engine]
    return a
def main(argv=None):  # [wrapper]
    args = parse(argv)  # [engine]
    #[2021-22 2022-23 2024-25] args = parse()
    if edition == "2024-25":  # [wrapper 2024-25]
        w = 1
    else:  # [wrapper 2021-22 2022-23]
        w = 2
    try:  # [wrapper]
        go()
    except Stop as e:  # [engine]
        handle(e)
    ### YOUR CODE HERE ###
    solution()
    ### END YOUR CODE ###
if __name__ == "__main__":  # [engine]
    main()
'''


def code_lines(text):
    return [line for line in text.split('\n') if line.strip()]


def test_each_marker_reads_as_its_edition_says():
    want = {
        '2024-25': ['import os', 'x = 1', '# a comment of the 2024-25 starter', 'plain()',
                    'if v == 1:', '    one()', 'elif v == 2:', '    two()', 'else:',
                    '    raise ValueError', 'if rope:', '    a = b', 'else:', '    a = b + c',
                    'def f(a):', '    return a', 'args = parse()', 'w = 1', 'go()',
                    '### YOUR CODE HERE ###', 'pass', '### END YOUR CODE ###'],
        '2022-23': ['import os', 'y = 2', 'z = 3', 'plain()', 'if v == 1:', '    one()',
                    'elif v == 3:', '    three()', 'else:', '    raise ValueError', 'a = b + c',
                    'def f(a):', '    return a', 'args = parse()', 'w = 2', 'go()',
                    '### YOUR CODE HERE ###', 'pass', '### END YOUR CODE ###'],
        '2021-22': ['import os', 'y = 2', 'plain()', 'if v == 1:', '    one()', 'else:',
                    '    raise ValueError', 'a = b + c', 'def f(a):', '    return a',
                    'args = parse()', 'w = 2', 'go()', '### YOUR CODE HERE ###', 'pass',
                    '### END YOUR CODE ###'],
    }
    for edition, lines in want.items():
        assert code_lines(starter.starter_source(SOURCE, edition)) == lines, edition
    solved = code_lines(starter.starter_source(SOURCE, '2024-25', solved=True))
    assert solved[-3:] == ['### YOUR CODE HERE ###', 'solution()', '### END YOUR CODE ###']


def test_a_marker_on_a_line_that_opens_no_block_is_an_error():
    with pytest.raises(starter.StarterError, match='opens no block'):
        starter.starter_source('x = 1  # [wrapper]\n', '2024-25')


def test_run_py_names_the_model_module_as_its_edition_does():
    source = 'import models\nmconf = models.GPTConfig(1, 2)\nmodel = models.GPT(mconf)\n'
    assert 'import model\n' in starter.starter_source(source, '2022-23', name='run.py')
    assert 'model = model.GPT(mconf)' in starter.starter_source(source, '2021-22', name='run.py')
    assert starter.starter_source(source, '2024-25', name='run.py') == source


MARKED = starter.HANDOUT_FILES
# 2024-25's statements each file holds, of the public starter's (counted as above): run.py's
# `args = argp.parse_args()` is there; utils.get_name_prediction's three lines that name objects
# it does not have are written as the function can run
HELD = {'run.py': 65, 'dataset.py': 60, 'utils.py': 44, 'london_baseline.py': 9,
        'attention.py': 70, 'models.py': 71, 'trainer.py': 94}


@pytest.mark.parametrize('edition', starter.EDITIONS)
@pytest.mark.parametrize('solved', [False, True])
def test_the_marked_files_read_as_a_starter_that_runs_without_the_engine(edition, solved):
    sources = starter.handout_sources()
    for name in MARKED:
        text = starter.starter_source(sources[name], edition, solved, name)
        compile(text, name, 'exec')
        assert not starter.ENGINE_MODULES.search(text), name
        assert '[engine]' not in text and '#[20' not in text, name
        blocks = text.count('### YOUR CODE HERE ###')
        assert blocks == text.count('### END YOUR CODE ###')
        if not solved and blocks:
            assert all(line.strip() == 'pass' for line in
                       text.split('### YOUR CODE HERE ###\n')[1:] and
                       [part.split('\n')[0] for part in text.split('### YOUR CODE HERE ###\n')[1:]])


def test_the_2024_25_starters_statements_are_held():
    with open(os.path.join(REPO, 'tests', 'data', 'w25_starter_statements.json')) as f:
        public = json.load(f)['files']
    sources = starter.handout_sources()
    counts = {}
    for name in MARKED:
        text = starter.starter_source(sources[name], '2024-25', name=name)
        public_name = starter.model_file('2024-25') if name == 'model.py' else name
        counts[public_name] = starter.held(public[public_name], text)
    assert {name: held for name, (held, _) in counts.items()} == HELD
    assert {name: total for name, (_, total) in counts.items()} == \
        {name: sum(public[name].values()) for name in HELD}
    held, total = (sum(c[i] for c in counts.values()) for i in (0, 1))
    assert held >= 0.9 * total, (held, total)  # the mark


def test_the_solved_2024_25_run_py_evaluates_as_the_project_does(tmp_path):
    """The solved 2024-25 starter, as the command writes it (no engine beside it: its own
    model, its one-question evaluation loop), answers the questions as the project's run.py
    does, line for line, from params the project trained."""
    from tiny_run import CORPUS, DEV, TRAIN, tsv
    (tmp_path / 'wiki.txt').write_text(CORPUS, encoding='utf-8')
    (tmp_path / 'dev.tsv').write_text(tsv(DEV), encoding='utf-8')
    (tmp_path / 'train.tsv').write_text(tsv(TRAIN), encoding='utf-8')
    env = dict(os.environ, PYTHONIOENCODING='utf-8', CS224N_EDITION='2024-25')
    fast = ['--max_epochs', '1', '--batch_size', '8', '--device', 'cpu', '--precision', 'fp32']
    project = [sys.executable, os.path.join(REPO, 'src', 'run.py')]
    for argv in (['pretrain', 'rope', 'wiki.txt', '--writing_params_path', 'pt.params'],
                 ['finetune', 'rope', 'wiki.txt', '--reading_params_path', 'pt.params',
                  '--writing_params_path', 'ft.params', '--finetune_corpus_path', 'train.tsv'],
                 ['evaluate', 'rope', 'wiki.txt', '--reading_params_path', 'ft.params',
                  '--eval_corpus_path', 'dev.tsv', '--outputs_path', 'ours.predictions']):
        proc = subprocess.run(project + argv + fast, cwd=tmp_path, env=env, capture_output=True,
                              text=True, encoding='utf-8', timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    solved = tmp_path / 'solved'
    starter.write(starter.starter_files('2024-25', solved=True), str(solved))
    assert not (solved / 'src' / 'engine').exists()
    proc = subprocess.run([sys.executable, str(solved / 'src' / 'run.py'), 'evaluate', 'rope',
                           'wiki.txt', '--reading_params_path', 'ft.params', '--eval_corpus_path',
                           'dev.tsv', '--outputs_path', 'starter.predictions'], cwd=tmp_path,
                          env=env, capture_output=True, text=True, encoding='utf-8', timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours = (tmp_path / 'ours.predictions').read_text(encoding='utf-8')
    assert (tmp_path / 'starter.predictions').read_text(encoding='utf-8') == ours
    assert len(ours.splitlines()) == len(DEV)


def test_the_command_writes_each_editions_starter_and_never_over_a_file(tmp_path):
    """Every edition's starter, empty and solved, from the command: its files compile and import
    no engine module (starter_files checks both); the empty one has no solution left in a
    block. A second run into the same folder refuses in one line and changes nothing."""
    for edition in starter.EDITIONS:
        for solved in ([], ['--solved']):
            out = tmp_path / (edition + ''.join(solved))
            proc = subprocess.run(
                [sys.executable, os.path.join(REPO, 'scripts', 'grading', 'starter.py'),
                 '--edition', edition, '--out', str(out)] + solved,
                capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr
            model_file = out / 'src' / starter.model_file(edition)
            assert model_file.exists() and not (out / 'src' / 'engine').exists()
            for path in (out / 'src').iterdir():
                text = path.read_text(encoding='utf-8')
                compile(text, str(path), 'exec')
                assert not starter.ENGINE_MODULES.search(text), path
    before = (tmp_path / '2024-25' / 'src' / 'run.py').read_text(encoding='utf-8')
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'grading', 'starter.py'),
                           '--edition', '2024-25', '--out', str(tmp_path / '2024-25')],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count('\n') == 1, proc.stderr
    assert (tmp_path / '2024-25' / 'src' / 'run.py').read_text(encoding='utf-8') == before
    # --out naming a file: one line (a NotADirectoryError traceback before), the file kept
    (tmp_path / 'notes.txt').write_text('mine\n')
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'grading', 'starter.py'),
                           '--edition', '2024-25', '--out', str(tmp_path / 'notes.txt')],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f'error: --out {tmp_path / "notes.txt"}: a file, not a folder (name a new folder)'], proc.stderr
    assert (tmp_path / 'notes.txt').read_text() == 'mine\n'


def test_a_handout_file_importing_the_engine_unmarked_is_refused(tmp_path):
    """A handout file that imports the engine outside an [engine] line cannot give a starter
    (it would not run beside a student's files): refused, naming the file."""
    src = tmp_path / 'src'
    src.mkdir()
    for name, text in starter.handout_sources().items():
        (src / name).write_text(text, encoding='utf-8')
    assert starter.unmarked(str(src)) == []
    text = (src / 'utils.py').read_text(encoding='utf-8')
    (src / 'utils.py').write_text('from engine import decode\n' + text, encoding='utf-8')
    assert starter.unmarked(str(src)) == ['utils.py']
    with pytest.raises(starter.StarterError, match='src/utils.py not marked'):
        starter.starter_files('2024-25', src=str(src))


def test_the_starters_scripts_hold_the_handouts_commands_and_zip():
    scripts = starter.extra_files('2024-25')
    assert sorted(scripts) == ['collect_submission.sh', 'scripts/run_rope.sh',
                               'scripts/run_vanilla.sh', 'scripts/run_vanilla_no_pretraining.sh']
    zipped = scripts['collect_submission.sh'].split('zip -r ')[1].split()
    assert zipped[0] == 'assignment4_submission.zip' and zipped[1] == 'src/'
    assert 'london_baseline_accuracy.txt' in zipped and 'wiki.txt' not in zipped
    rope = scripts['scripts/run_rope.sh']
    assert rope.count('python src/run.py ') == 4
    assert '--outputs_path rope.pretrain.test.predictions' in rope
    assert starter.extra_files('2021-22').keys() == {'collect_submission.sh'}
    perceiver = starter.extra_files('2022-23')['scripts/run_perceiver.sh']
    assert perceiver.count('--bottleneck_dim 64') == 4
    assert perceiver.count('--pretrain_lr 6e-3') == 1  # the 2022-23 starter's script's reading
