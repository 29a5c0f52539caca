"""Every command a page shows works as typed. The pages: README.md, docs/*.md, results/*.md and
the grader's scripts/grading/README.md; the commands: each line of their fenced shell blocks (continuations
joined) and each inline `python src/...`, `python scripts/...` or `bash ...` span.

- Every command names a script that is there, flags that script takes (read from its --help,
  or from the shell script's text) and, for run.py, params files some command of the same page
  writes.
- The quick ones run as typed in a fresh copy of the checkout (its tracked files, and data/ as
  set-up leaves it; nothing beside it), a student's folder: the starter, the handout's examples,
  London, the edition switch and back, the handout's no-pretraining commands with one epoch on
  a few lines, a sample submission graded. Afterwards `git status` there is clean: what the
  commands write is ignored."""
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from support import REPO

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)

PAGES = ['README.md', 'scripts/grading/README.md'] + sorted(
    os.path.join(folder, name) for folder in ('docs', 'results')
    for name in os.listdir(os.path.join(REPO, folder)) if name.endswith('.md'))
FENCE = re.compile(r'^```(bash|sh|shell)\n(.*?)^```', re.S | re.M)
INLINE = re.compile(r'`((?:python|bash|torchrun) [^`]+)`')
# words a page writes in a command's place for what the reader fills in, or a part left out
PLACEHOLDER = re.compile(r'^(DIR|OUT|FOLDER|FILE|NAME|N|SHA|M|SUBMISSION|\.\.\.|DATA_DIR)$')


def shell_commands(text):
    """(line, command) for each command of the page's fenced shell blocks, its comment cut."""
    for block in FENCE.finditer(text):
        first = text.count('\n', 0, block.start(2)) + 1
        lines, start, joined = block.group(2).splitlines(), None, ''
        for i, line in enumerate(lines):
            if start is None:
                start, joined = first + i, ''
            part = line.strip() if joined else line.rstrip()
            joined += part.rstrip('\\').rstrip() + ' ' if line.endswith('\\') else part
            if not line.endswith('\\'):
                command = re.split(r'\s+#', ' ' + joined)[0].strip()
                if command and not command.startswith('#'):
                    yield start, command
                start = None


def inline_commands(text):
    for m in INLINE.finditer(text):
        yield text.count('\n', 0, m.start()) + 1, m.group(1)


def all_commands():
    """(page, line, command, fenced) for every command of every page."""
    for page in PAGES:
        with open(os.path.join(REPO, page), encoding='utf-8') as f:
            text = f.read()
        for line, command in shell_commands(text):
            yield page, line, command, True
        for line, command in inline_commands(text):
            yield page, line, command, False


def words(command):
    """The command's words, optional parts written [--like this] kept without their brackets."""
    try:
        return shlex.split(command.replace('[', ' ').replace(']', ' ').replace('|', ' '))
    except ValueError:
        return command.split()


@functools.lru_cache(maxsize=None)
def flags_of(script, sub=None):
    """The flags `script` takes: its --help's for Python (and its subcommand `sub`'s, where it
    has one), its text's for a shell script."""
    path = os.path.join(REPO, script)
    if script.endswith('.sh'):
        with open(path, encoding='utf-8') as f:
            return set(re.findall(r'--[a-z][\w-]*', f.read()))
    out = subprocess.run([sys.executable, path, '--help'], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, f'{script} --help: {out.stderr[-500:]}'
    flags = set(re.findall(r'--[a-z][\w-]*', out.stdout))
    if sub is not None and re.search(r'\{[\w,-]*\b%s\b' % re.escape(sub), out.stdout):
        more = subprocess.run([sys.executable, path, sub, '--help'], capture_output=True,
                              text=True, cwd=REPO, timeout=120)
        flags |= set(re.findall(r'--[a-z][\w-]*', more.stdout))
    return flags


def problems(command, written=()):
    """What is wrong with `command` as a reader would type it: a script that is not there, a
    flag the script does not take, a params file read that no command of the page writes."""
    ws = [w for w in words(command) if not re.fullmatch(r'[A-Z_][A-Z0-9_]*=\S*', w)]
    if not ws or ws[0] not in ('python', 'bash', 'torchrun'):
        return []
    scripts = [w for w in ws[1:] if w.endswith(('.py', '.sh')) and not w.startswith('-')]
    if not scripts:
        return []
    script = scripts[0]
    if not os.path.isfile(os.path.join(REPO, script)):
        return [f'{script}: no such file']
    found, target = [], script
    after = ws[ws.index(script) + 1:]
    sub = after[0] if after and re.fullmatch(r'[a-z]+', after[0]) else None
    for i, w in enumerate(after):
        if w == '--':  # run_all.py: what follows goes to every run.py call
            target, sub = 'src/run.py', None
            continue
        flag = w.split('=')[0]
        if flag.startswith('--') and flag not in flags_of(target, sub):
            found.append(f'{target} takes no {flag}')
        if flag == '--reading_params_path' and i + 1 < len(after) \
                and not PLACEHOLDER.match(after[i + 1]) and after[i + 1] not in written:
            found.append(f'{after[i + 1]}: read, and no command of the page writes it')
    return found


def written_params(page_commands):
    return {ws[i + 1] for ws in map(words, page_commands)
            for i, w in enumerate(ws[:-1]) if w == '--writing_params_path'}


def test_every_command_on_every_page_names_a_script_and_flags_that_exist():
    by_page = {}
    for page, line, command, _ in all_commands():
        by_page.setdefault(page, []).append((line, command))
    assert sum(len(v) for v in by_page.values()) >= 60
    wrong = []
    for page, commands in by_page.items():
        written = written_params(c for _, c in commands)
        for line, command in commands:
            wrong += [f'{page}:{line}: {p}  ({command})' for p in problems(command, written)]
    assert not wrong, '\n'.join(wrong)


def test_the_check_finds_a_script_a_flag_and_a_params_file_that_are_not_there():
    assert problems('python scripts/grade.py x') == ['scripts/grade.py: no such file']
    assert problems('python src/run.py pretrain vanilla wiki.txt --writing_params_path a '
                    '--max_epoch 1') == ['src/run.py takes no --max_epoch']
    assert problems('python scripts/run_all.py -- --device cuda --resum') == \
        ['src/run.py takes no --resum']
    assert problems('python src/run.py finetune vanilla wiki.txt --reading_params_path b.params',
                    written={'a.params'}) == ['b.params: read, and no command of the page writes it']
    assert problems('bash scripts/gpu_check.sh --stage tests [--minutes 9] --out OUT') == []
    assert list(shell_commands('```bash\npython a.py \\\n    --x 1   # note\n# only a comment\n```\n')) \
        == [(2, 'python a.py --x 1')]


# The quick ones: (what a page's command must match, what to change as it runs). Each is run from
# every page that shows it, in this order; each must be shown somewhere.
QUICK = [
    ('the starter', r'python scripts/grading/starter\.py ', 'out'),
    ('the handout\'s examples', r'python src/dataset\.py (namedata|charcorruption)$', None),
    ('London', r'python src/london_baseline\.py$', None),
    ('no pretraining, one epoch', r'python src/run\.py (finetune|evaluate) vanilla .*vanilla\.model\.params',
     'one epoch'),
    ('a sample submission graded', r'python scripts/grading/(sample_submission|grade)\.py ', None),
    ('the autograder built', r'python scripts/grading/gradescope\.py build --out \S+$', None),
    # (last: before it, nobody has chosen the clone's edition, and the commands say so)
    ('the edition switch and back', r'python src/engine/presets\.py --edition \S+$', None),
]


@pytest.fixture
def fresh(tmp_path):
    """A copy of the checkout as a clone of it would be (its tracked and not ignored files, data/
    as set-up leaves it), committed; and the environment, `python` on its PATH this test's."""
    files = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'],
                           cwd=REPO, capture_output=True, text=True)
    if files.returncode != 0:
        pytest.skip('not a git checkout')
    data = os.path.join(REPO, 'data')
    if not os.path.exists(os.path.join(data, 'wiki.txt')):
        pytest.skip('data/ is not set up (bash scripts/setup.sh)')
    clone = tmp_path / 'a5'
    for name in files.stdout.split('\0'):
        if name and os.path.isfile(os.path.join(REPO, name)):
            os.makedirs(clone / os.path.dirname(name), exist_ok=True)
            shutil.copy2(os.path.join(REPO, name), clone / name)
    for name in os.listdir(data):
        shutil.copy2(os.path.join(data, name), clone / 'data' / name)
    git = ['git', '-c', 'user.name=t', '-c', 'user.email=t@example.com']
    for step in (['init', '-q'], ['add', '-A'], ['commit', '-q', '-m', 'fresh']):
        subprocess.run(git + step, cwd=clone, check=True, capture_output=True)
    # `python` is this interpreter, as `. .venv/bin/activate` makes it (its folder first on PATH;
    # a link elsewhere would leave the virtualenv behind)
    bin_dir = os.path.dirname(sys.executable)
    if not os.path.exists(os.path.join(bin_dir, 'python')):
        bin_dir = tmp_path / 'bin'
        bin_dir.mkdir()
        os.symlink(sys.executable, bin_dir / 'python')
    env = {k: v for k, v in os.environ.items() if k not in ('CS224N_EDITION', 'PYTHONPATH')}
    env['PATH'] = f'{bin_dir}{os.pathsep}{env["PATH"]}'
    return clone, env


def test_the_quick_commands_run_as_typed_in_a_fresh_clone(fresh, tmp_path):
    clone, env = fresh
    # the student's own few finetuning lines, in their folder as the handout keeps its files
    with open(os.path.join(REPO, 'data', 'birth_places_train.tsv'), encoding='utf-8') as f:
        (clone / 'birth_places_train.tsv').write_text(''.join(f.readlines()[:16]), encoding='utf-8')
    commands = [(page, line, command) for page, line, command, fenced in all_commands() if fenced]
    ran = {}
    for kind, pattern, change in QUICK:
        # (a synopsis, with [optional parts] or words to fill in, is checked above, not run)
        chosen = [(p, l, c) for p, l, c in commands if re.match(pattern, c)
                  and not (change is None and ('[' in c or any(map(PLACEHOLDER.match, words(c)))))]
        assert chosen, f'no page shows {kind}'
        for page, line, command in chosen:
            if change == 'out':
                command = re.sub(r'--out \S+', f'--out {tmp_path}/starter-{len(ran)}', command)
            elif change == 'one epoch' and ' finetune ' in command:
                command += ' --max_epochs 1'
            out = subprocess.run(['bash', '-c', command], cwd=clone, env=env, capture_output=True,
                                 text=True, timeout=600)
            assert out.returncode == 0, f'{page}:{line}: {command}\n{out.stdout[-1500:]}{out.stderr[-1500:]}'
            ran[(page, line)] = out
            if kind == 'London':
                assert 'Correct: 25.0 out of 500.0: 5.0%' in out.stdout
            if kind.startswith('no pretraining'):  # a checkout whose edition nobody set says so
                assert 'follows the 2021-23 edition (the default' in out.stderr, out.stderr
    assert (clone / 'vanilla.nopretrain.dev.predictions').is_file()
    assert (clone / 'src' / 'edition.txt').read_text() == '2021-23\n'  # switched, and back
    status = subprocess.run(['git', 'status', '--porcelain'], cwd=clone, capture_output=True,
                            text=True).stdout
    assert status == '', f'the commands left files git does not ignore:\n{status}'


def scripts_with_help():
    """The Python scripts whose argparse description is drawn from their docstring or typed."""
    found = []
    for top in ('src', 'scripts'):
        for folder, _, names in os.walk(os.path.join(REPO, top)):
            for name in names:
                path = os.path.join(folder, name)
                if name.endswith('.py'):
                    with open(path, encoding='utf-8') as f:
                        if 'description=' in f.read():
                            found.append(os.path.relpath(path, REPO))
    return sorted(found)


@pytest.mark.parametrize('script', scripts_with_help())
def test_every_help_text_ends_its_sentence(script):
    """`gradescope.py --help` and `sample_submission.py --help` stopped mid-sentence ("... and
    the"): their description was the docstring's first line. Each description is now a whole
    paragraph, ending as a sentence does."""
    out = subprocess.run([sys.executable, script, '--help'], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-500:]
    description = out.stdout.split('\n\n')[1].strip()
    assert not description.startswith(('options:', 'positional arguments:')), out.stdout
    assert description.endswith(('.', ')', ':', '?')), description
