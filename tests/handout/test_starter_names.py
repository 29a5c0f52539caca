"""The handout's files as the starters wrote them: every top-level name of each edition's starter
file of that name is defined in the project's file (a student's or an autograder's
`from utils import get_name_prediction` works), dataset.py holds no name of the CPU recipe, and
no two modules of src/ import each other, directly or in a loop.

The names were read from public copies of the three starters (the editions' notes name them):
2021-22 parachutel/cs224n-stanford-winter2021 and amanchadha/stanford-cs224n-assignments-2021
(a5/src), 2022-23 JosselinSomervilleRoberts/CS224N-HW5-minGPT (its first commit, src/), 2024-25
ericdong314/nlp-stanford-cs224n (a4/student/src). Names a solution added there are left out."""
import ast
import os

import pytest

from support import SRC

STARTERS = {
    '2021-22': {
        'dataset.py': ['NameDataset', 'CharCorruptionDataset'],
        'attention.py': ['logger', 'CausalSelfAttention', 'SynthesizerAttention'],
        'model.py': ['GPTConfig', 'GPT1Config', 'Block', 'GPT', 'CustomLayerNorm'],
        'trainer.py': ['logger', 'TrainerConfig', 'Trainer'],
        'utils.py': ['set_seed', 'top_k_logits', 'sample', 'evaluate_places'],
        'london_baseline.py': [],
    },
    '2022-23': {
        'dataset.py': ['NameDataset', 'CharCorruptionDataset'],
        'attention.py': ['logger', 'CausalSelfAttention', 'CausalCrossAttention'],
        'model.py': ['GPTConfig', 'GPT1Config', 'Block', 'DownProjectBlock', 'UpProjectBlock', 'GPT'],
        'trainer.py': ['logger', 'TrainerConfig', 'Trainer'],
        'utils.py': ['set_seed', 'top_k_logits', 'sample', 'get_name_prediction', 'evaluate_places'],
        'london_baseline.py': [],
    },
    '2024-25': {
        'dataset.py': ['CharCorruptionDataset', 'NameDataset'],
        'attention.py': ['logger', 'precompute_rotary_emb', 'apply_rotary_emb', 'CausalSelfAttention',
                         'CausalCrossAttention'],
        'models.py': ['GPTConfig', 'GPT1Config', 'Block', 'GPT'],
        'trainer.py': ['logger', 'TrainerConfig', 'Trainer'],
        'utils.py': ['set_seed', 'top_k_logits', 'sample', 'get_name_prediction', 'evaluate_places'],
        'london_baseline.py': ['main'],
    },
}
# run.py is a script in every starter: its top-level names are the command's values. The
# project's run.py binds the same names, `argp` at the top, the others in main() (its body is
# the starter's script: scripts/grading/starter.py).
RUN_TOP = ['argp']
RUN_VALUES = {'2021-22': ['args', 'device', 'block_size', 'text', 'pretrain_dataset', 'mconf'],
              '2022-23': ['args', 'device', 'writer', 'block_size', 'text', 'pretrain_dataset',
                          'mconf'],
              '2024-25': ['args', 'device', 'writer', 'block_size', 'text', 'pretrain_dataset',
                          'mconf', 'model']}
RECIPE = ['LeadInDataset', 'BornViewMix', 'born_view', 'born_cut', 'undated', 'MONTHS', 'BORN',
          'VIEW_CHARS']


def parsed(name):
    with open(os.path.join(SRC, name), encoding='utf-8') as f:
        return ast.parse(f.read())


def bound(nodes):
    """The names a sequence of statements binds: definitions, assignments, imports."""
    names = set()
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split('.')[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


@pytest.mark.parametrize('edition', sorted(STARTERS))
def test_every_starter_name_is_defined_in_the_file_of_that_name(edition):
    for name, wanted in STARTERS[edition].items():
        missing = set(wanted) - bound(parsed(name).body)
        assert not missing, f'{name} of the {edition} starter: {sorted(missing)} not defined'


@pytest.mark.parametrize('edition', sorted(RUN_VALUES))
def test_run_py_binds_the_starter_scripts_names(edition):
    tree = parsed('run.py')
    assert set(RUN_TOP) <= bound(tree.body)
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == 'main')
    inside = bound(ast.walk(main)) | {a.arg for a in main.args.args}
    missing = set(RUN_VALUES[edition]) - inside
    assert not missing, f'run.py of the {edition} starter: {sorted(missing)} not bound in main()'


def test_dataset_py_holds_no_name_of_the_cpu_recipe():
    assert not set(RECIPE) & bound(parsed('dataset.py').body)
    from engine.command import cpu_recipe
    assert all(hasattr(cpu_recipe, name) for name in RECIPE)


HANDOUT_FILES = ['dataset.py', 'attention.py', 'model.py', 'models.py', 'trainer.py', 'run.py',
                 'utils.py', 'london_baseline.py']


def modules_of_src():
    """{module name: path} of every module of src/: the handout's files and engine.*."""
    found = {f[:-3]: os.path.join(SRC, f) for f in os.listdir(SRC) if f.endswith('.py')}
    for folder, _, names in os.walk(os.path.join(SRC, 'engine')):
        package = os.path.relpath(folder, SRC).replace(os.sep, '.')
        found.update({package + '.' + f[:-3]: os.path.join(folder, f)
                      for f in names if f.endswith('.py') and f != '__init__.py'})
    return found


# The engine's floors, from the top: a module imports from its own floor or the floors below.
# (The handout's files stand above them all.)
FLOORS = ['engine.command', 'engine.training', 'engine.machine', 'engine.fast', 'engine']


def floor_of(module):
    return FLOORS.index(module.rsplit('.', 1)[0])


def test_src_shows_the_handout_files_and_one_package_beside_them():
    assert sorted(f for f in os.listdir(SRC) if f.endswith('.py')) == sorted(HANDOUT_FILES)
    folders = [f for f in os.listdir(SRC) if os.path.isdir(os.path.join(SRC, f))]
    assert sorted(set(folders) - {'__pycache__'}) == ['engine']


def test_each_module_says_whether_it_is_a_handout_file_or_the_engine():
    """An engine module's docstring says so; a handout file says so in its first line, an
    engine's comment there (`# [engine] Handout file: ...`: in no starter) or, in the files not
    yet marked for the starter, its docstring."""
    paths = modules_of_src()
    paths['engine'] = os.path.join(SRC, 'engine', '__init__.py')
    for name, path in sorted(paths.items()):
        with open(path, encoding='utf-8') as f:
            text = f.read()
        first = (ast.get_docstring(ast.parse(text)) or '').split('\n')[0]
        if name + '.py' in HANDOUT_FILES:
            assert first.startswith('Handout file: ') or \
                text.startswith('# [engine] Handout file: '), f'{path}: {text[:60]!r}'
        else:
            assert first.startswith('Engine (free to change): '), f'{path}: {first!r}'


def test_no_engine_module_imports_a_handout_file():
    """The engine sits under the handout's files: what it needs of them (the datasets, the
    model, the configs) is handed to it."""
    modules = modules_of_src()
    handout = {f[:-3] for f in HANDOUT_FILES}
    back = {m: sorted(imports_of(path, modules) & handout) for m, path in modules.items()
            if m.startswith('engine.')}
    assert not {m: found for m, found in back.items() if found}


def imports_of(path, modules):
    """The modules of src/ that the file `path` imports, anywhere in it."""
    found = set()
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f'{node.module}.{a.name}' for a in node.names)
    return found & set(modules)


def test_the_engine_is_a_few_packages_by_job_each_importing_only_downwards():
    """engine/ shows its jobs (the command, training, fitting the machine, the model's fast
    paths, and the few modules all of them share), no import runs back up a floor, and no
    engine module is longer than one job needs (400 lines)."""
    modules = modules_of_src()
    engine = sorted(m for m in modules if m.startswith('engine.'))
    assert {m.rsplit('.', 1)[0] for m in engine} == set(FLOORS)
    assert len([m for m in engine if m.count('.') == 1]) <= 6  # (what everything shares)
    up = {}
    for m in engine:
        for n in imports_of(modules[m], modules):
            if n.startswith('engine.') and floor_of(n) < floor_of(m):
                up.setdefault(m, []).append(n)
    assert up == {}
    long = {}
    for m in engine:
        with open(modules[m], encoding='utf-8') as f:
            lines = f.read().count('\n')
        if lines > 400:
            long[m] = lines
    assert long == {}


def test_no_two_modules_import_each_other_directly_or_in_a_loop():
    modules = modules_of_src()
    assert {'dataset', 'engine.presets', 'engine.command.flags'} <= set(modules)
    graph = {m: imports_of(path, modules) - {m} for m, path in modules.items()}
    assert 'engine.presets' in graph['dataset'] and 'engine.common' in graph['engine.presets']
    done, path = set(), []

    def visit(m):
        if m in path:
            raise AssertionError('import loop: ' + ' -> '.join(path[path.index(m):] + [m]))
        if m in done:
            return
        path.append(m)
        for n in sorted(graph[m]):
            visit(n)
        path.pop()
        done.add(m)
    for m in sorted(graph):
        visit(m)


def test_get_name_prediction_answers_as_evaluate_does():
    """utils.get_name_prediction (2022-23, 2024-25) runs, and gives evaluate's answer."""
    import torch
    from engine.fast import decode
    import dataset
    import model
    import utils
    corpus = 'Ada Brook. Ada Brook was born in London.\nBen Carter. Ben was born in Paris.\n'
    vocab = dataset.CharCorruptionDataset(corpus + 'Where was ?', 128)
    torch.manual_seed(0)
    gpt = model.GPT(model.GPTConfig(vocab.vocab_size, 128, n_layer=2, n_head=2, n_embd=16)).eval()
    with torch.no_grad():  # answers that differ between the two questions
        gpt.head.weight.normal_(0, 2.0)
    questions = ['Where was Ada Brook born?', 'Where was Ben Carter born?']
    prompts = [q + dataset.MASK_CHAR for q in questions]
    answers = [utils.get_name_prediction(gpt, vocab, p) for p in prompts]
    encoded = [[vocab.stoi[c] for c in p] for p in prompts]
    assert answers == decode.predict(gpt, encoded, vocab, 'cpu')
    assert all(isinstance(a, str) for a in answers)


def test_the_handout_files_stay_the_size_a_student_reads_beside_the_starter():
    """Solved starters hold 959 (2024-25) and 1,023 (2022-23) lines in these files, for two
    variants each; ours hold four variants, the three editions' lines side by side (run.py: the
    starter's 169, twice over where they differ, and 2021-22's arguments with its help texts)
    and the faster paths beside the plain math. What grows past these bounds belongs to the
    engine."""
    def lines(*names):
        return sum(len(open(os.path.join(SRC, n), encoding='utf-8').read().splitlines())
                   for n in names)
    assert lines('run.py') <= 330 and lines('trainer.py') <= 230
    assert lines('dataset.py') <= 220 and lines('utils.py') <= 110
    assert lines('model.py', 'attention.py') <= 540
    assert lines(*HANDOUT_FILES) <= 1400


def test_nothing_in_src_reads_the_results_pages():
    """The product never reads its lab notebook: src/ holds no path under results/ (a string
    that is one, or one handed to a call: open, os.path.join, ...); a citation in words may name
    a page. A preset's expectations are its settings, and a results page may move or go."""
    found = []
    paths = modules_of_src()
    paths['engine'] = os.path.join(SRC, 'engine', '__init__.py')
    for name, path in sorted(paths.items()):
        with open(path, encoding='utf-8') as f:
            tree = ast.parse(f.read())
        handed = {id(node) for call in ast.walk(tree) if isinstance(call, ast.Call)
                  for arg in call.args for node in ast.walk(arg)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    node.value.strip('./').split('/')[0] == 'results' and \
                    (id(node) in handed or not any(c.isspace() for c in node.value)):
                found.append(f'{name}:{node.lineno}: {node.value!r}')  # (a path, not a citation)
    assert found == []
