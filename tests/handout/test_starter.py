"""scripts/grading/starter.py: a course's starter read out of the handout files by their markers.

The markers' meaning on small sources written here (each kind, and the ways they combine); the
handout files already marked read as each edition's starter: they compile, import no engine
module, hold the public starter's statements (counted against their digests in
tests/data/w25_starter_statements.json: the untouched 2024-25 starter
code), and the students' blocks are emptied to `pass` (kept with --solved)."""
import ast
import json
import os
import re
import subprocess
import sys

import pytest

from support import REPO

import starter  # noqa: E402

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)

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


STATES_SOURCE = '''if config.synthesizer:  # [2021-22 solved]
    attn = Synthesizer()
elif config.additive:  # [2021-22 empty]
    attn = Additive()
else:
    attn = Causal()
#[2022-23 2024-25] with open(path, encoding='utf-8') as f:
#[2021-22] with open(path) as f:
with open(path, encoding='utf-8', errors='strict') as f:  # [engine]
    text = f.read()
#[2021-22] with open(out) as g:
with open(out, encoding='utf-8') as g:  # [2022-23 2024-25]
    g.write(text)
x = 1  # [2024-25] the first
def f():
    ### YOUR CODE HERE
    ### Hint: a line or two.
    return 1
    ### END YOUR CODE
'''


def test_solved_and_empty_lines_several_headers_and_kept_hints():
    """`solved`/`empty` beside an edition; a run of editions' headers in place of an engine's
    or an edition's; an edition's words after its line kept; hints kept in an emptied block."""
    def read(edition, solved=False):
        return code_lines(starter.starter_source(STATES_SOURCE, edition, solved))
    assert read('2021-22')[:4] == ['if config.additive:', '    attn = Additive()', 'else:',
                                   '    attn = Causal()']
    assert read('2021-22', True)[:4] == ['if config.synthesizer:', '    attn = Synthesizer()',
                                         'else:', '    attn = Causal()']
    assert read('2021-22')[4:8] == ['with open(path) as f:', '    text = f.read()',
                                    'with open(out) as g:', '    g.write(text)']
    assert read('2024-25')[:6] == ['attn = Causal()', "with open(path, encoding='utf-8') as f:",
                                   '    text = f.read()',
                                   "with open(out, encoding='utf-8') as g:", '    g.write(text)',
                                   'x = 1  # the first']
    assert read('2022-23')[-4:] == ['    ### YOUR CODE HERE', '    ### Hint: a line or two.',
                                    '    pass', '    ### END YOUR CODE']


def test_a_marker_on_a_line_that_opens_no_block_is_an_error():
    with pytest.raises(starter.StarterError, match='opens no block'):
        starter.starter_source('x = 1  # [wrapper]\n', '2024-25')


def test_run_py_names_the_model_module_as_its_edition_does():
    source = 'import models\nmconf = models.GPTConfig(1, 2)\nmodel = models.GPT(mconf)\n'
    assert 'import model\n' in starter.starter_source(source, '2022-23', name='run.py')
    assert 'model = model.GPT(mconf)' in starter.starter_source(source, '2021-22', name='run.py')
    assert starter.starter_source(source, '2024-25', name='run.py') == source


MARKED = starter.HANDOUT_FILES
# The statements each file holds, of the public starter's outside the student's parts (counted as
# above). 2024-25: run.py's `args = argp.parse_args()` is there; utils.get_name_prediction's three
# lines that name objects it does not have are written as the function can run (2022-23's too).
HELD = {
    '2024-25': {'run.py': 65, 'dataset.py': 60, 'utils.py': 44, 'london_baseline.py': 9,
                'attention.py': 70, 'models.py': 71, 'trainer.py': 94},
    '2022-23': {'run.py': 63, 'dataset.py': 60, 'utils.py': 44, 'london_baseline.py': 0,
                'attention.py': 58, 'model.py': 88, 'trainer.py': 91},
    '2021-22': {'run.py': 57, 'dataset.py': 60, 'utils.py': 41, 'london_baseline.py': 0,
                'attention.py': 47, 'model.py': 68, 'trainer.py': 84},
}
# each edition's public starter, and the share of its statements the issues asked for
PUBLIC = {'2024-25': ('w25_starter_statements.json', 0.9),
          '2022-23': ('w23_starter_statements.json', 0.96),
          '2021-22': ('w22_starter_statements.json', 0.97)}


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


@pytest.mark.parametrize('edition', starter.EDITIONS)
def test_each_editions_starter_holds_its_public_starters_statements(edition):
    """Counted against the stored digests of the public starter's statements (made by
    scripts/dev/starter_digests.py, the student's parts left out), file by file."""
    name, share = PUBLIC[edition]
    with open(os.path.join(REPO, 'tests', 'data', name)) as f:
        public = json.load(f)['files']
    sources = starter.handout_sources()
    counts = {}
    for name in MARKED:
        text = starter.starter_source(sources[name], edition, name=name)
        public_name = starter.model_file(edition) if name == 'model.py' else name
        counts[public_name] = starter.held(public[public_name], text)
    assert {name: held for name, (held, _) in counts.items()} == HELD[edition]
    assert {name: total for name, (_, total) in counts.items()} == \
        {name: sum(public[name].values()) for name in HELD[edition]}
    held, total = (sum(c[i] for c in counts.values()) for i in (0, 1))
    assert held >= share * total, (held, total)


def starter_text(edition, name, solved=False):
    return starter.starter_source(starter.handout_sources()[name], edition, solved, name)


def test_no_student_part_is_written_in_an_empty_starter():
    """2021-22's part g adds the synthesizer to the model: its emptied model.py has the public
    starter's `additive` stub in its place, and names no SynthesizerAttention; solved, it has
    the switch and no stub. The other editions have neither."""
    empty, solved = (starter_text('2021-22', 'model.py', s) for s in (False, True))
    assert 'SynthesizerAttention' not in empty and 'synthesizer' not in empty
    assert 'if config.additive:\n            self.attn = attention.AdditiveSelfAttention' in empty
    assert 'if config.synthesizer:\n            self.attn = attention.SynthesizerAttention' in solved
    assert 'additive' not in solved
    for edition in ('2022-23', '2024-25'):
        for s in (False, True):
            text = starter_text(edition, 'model.py', s)
            assert 'additive' not in text and 'Synthesizer' not in text


def argument(text, name):
    """The keywords of run.py's add_argument call for `name`, as {keyword: value source}."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and getattr(node.func, 'attr', '') == 'add_argument' \
                and ast.literal_eval(node.args[0]) == name:
            return {k.arg: ast.unparse(k.value) for k in node.keywords}
    raise AssertionError(f'no argument {name}')


@pytest.mark.parametrize('edition', starter.EDITIONS)
def test_each_run_py_has_its_editions_arguments_and_lines(edition):
    """2021-22's arguments have help texts and choices (a mistyped command is refused there);
    the later editions' have neither. 2022-23 prints no `Model on device`; the rename of the
    model's module leaves comments alone."""
    text = starter_text(edition, 'run.py')
    function, variant = argument(text, 'function'), argument(text, 'variant')
    if edition == '2021-22':
        assert function['choices'] == "['pretrain', 'finetune', 'evaluate']"
        assert variant['choices'] == "['vanilla', 'synthesizer']"
        assert 'help' in argument(text, '--eval_corpus_path')
        assert 'assert args.pretrain_corpus_path is not None' in text
    else:
        assert 'choices' not in function and 'choices' not in variant
        assert '# define models.' in text
    assert ('Model on device' in text) == (edition == '2024-25')


# what each edition's variants are called, which another edition's files do not name
OWN_WORDS = {'2021-22': ('synthesizer',), '2022-23': ('perceiver',), '2024-25': ('rope', 'rotary')}


@pytest.mark.parametrize('edition', starter.EDITIONS)
@pytest.mark.parametrize('name', MARKED)
def test_a_starters_comments_and_docstrings_speak_of_its_edition_only(edition, name):
    text = starter_text(edition, name, solved=True).lower()
    others = [w for e, words in OWN_WORDS.items() if e != edition for w in words]
    assert not [w for w in others if re.search(rf'\b{w}\b', text)], name


def test_the_2022_23_blocks_keep_their_hints_and_its_london_baseline_is_comments():
    """The hints of 2022-23's empty blocks stay in them; the 2021-22 and 2022-23 London
    baselines are comments only (their students write the script), solved a short one."""
    model = starter_text('2022-23', 'model.py')
    assert model.count('### Hint') == 4
    for edition in ('2021-22', '2022-23'):
        assert not starter.statements(starter_text(edition, 'london_baseline.py'))
        solved = starter_text(edition, 'london_baseline.py', solved=True)
        assert "['London'] * len(questions)" in solved


@pytest.mark.parametrize('edition,variant', [('2024-25', 'rope'), ('2022-23', 'perceiver'),
                                             ('2021-22', 'synthesizer')])
def test_each_solved_starter_evaluates_as_the_project_does(tmp_path, edition, variant):
    """The solved starter, as the command writes it (no engine beside it: its own model, its
    one-question evaluation loop), answers the questions as the project's run.py does, line for
    line, from params the project trained (2021-22: the synthesizer part g adds)."""
    from tiny_run import CORPUS, DEV, TRAIN, tsv
    (tmp_path / 'wiki.txt').write_text(CORPUS, encoding='utf-8')
    (tmp_path / 'dev.tsv').write_text(tsv(DEV), encoding='utf-8')
    (tmp_path / 'train.tsv').write_text(tsv(TRAIN), encoding='utf-8')
    env = dict(os.environ, PYTHONIOENCODING='utf-8',
               CS224N_EDITION='2024-25' if edition == '2024-25' else '2021-23')
    fast = ['--max_epochs', '1', '--batch_size', '8', '--device', 'cpu', '--precision', 'fp32']
    project = [sys.executable, os.path.join(REPO, 'src', 'run.py')]
    for argv in (['finetune', variant, 'wiki.txt', '--writing_params_path', 'ft.params',
                  '--finetune_corpus_path', 'train.tsv'],
                 ['evaluate', variant, 'wiki.txt', '--reading_params_path', 'ft.params',
                  '--eval_corpus_path', 'dev.tsv', '--outputs_path', 'ours.predictions']):
        proc = subprocess.run(project + argv + fast, cwd=tmp_path, env=env, capture_output=True,
                              text=True, encoding='utf-8', timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    solved = tmp_path / 'solved'
    starter.write(starter.starter_files(edition, solved=True), str(solved))
    assert not (solved / 'src' / 'engine').exists()
    proc = subprocess.run([sys.executable, str(solved / 'src' / 'run.py'), 'evaluate', variant,
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
