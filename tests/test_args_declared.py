"""run.py's `args` holds the parser's flags and what engine/command/flags.py declares (ADDED), nothing
else: a reader of the parser and of ADDED knows every attribute a later line reads."""
import ast
import os

import pytest

import run
from conftest import REPO
from engine.command import flags
from tiny_run import CORPUS, FAST, TRAIN, tsv

SRC = os.path.join(REPO, 'src')


def read_names(path):
    """The attributes of `args` the file at `path` reads or writes: args.NAME, and the names
    handed to getattr/setattr(args, 'NAME'...) or looped over into them as literal strings."""
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == 'args':
            names.add(node.attr)
        elif isinstance(node, ast.Call) and getattr(node.func, 'id', None) in ('getattr', 'setattr') \
                and isinstance(node.args[0], ast.Name) and node.args[0].id == 'args':
            names.add(node.args[1])
    loops = {}  # for NAME in ('a', 'b'): getattr(args, NAME)
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and \
                isinstance(node.iter, (ast.Tuple, ast.List)):
            loops[node.target.id] = [e.value for e in node.iter.elts if isinstance(e, ast.Constant)]
    found = set()
    for name in names:
        if isinstance(name, str):
            found.add(name)
        elif isinstance(name, ast.Constant):
            found.add(name.value)
        elif isinstance(name, ast.Name) and name.id in loops:
            found.update(loops[name.id])
    return found


def test_every_attribute_of_args_read_in_src_is_declared():
    declared = flags.declared(run.argp)
    files = [os.path.join(SRC, 'run.py')] + [
        os.path.join(folder, f) for folder, _, names in os.walk(os.path.join(SRC, 'engine'))
        for f in names if f.endswith('.py')]
    used = {}
    for path in files:
        for name in read_names(path):
            used.setdefault(name, []).append(os.path.relpath(path, REPO))
    # (the static read sees what it should: flags read and attributes added, across modules)
    assert {'function', 'typed', 'smaller', 'stage', 'pretrain_lr', 'eval_batch_size'} <= set(used)
    assert {n: where for n, where in used.items() if n not in declared} == {}


def test_args_refuses_an_undeclared_attribute():
    args = run.parse_args(['pretrain', 'vanilla', 'wiki.txt', '--writing_params_path', 'x'])
    assert isinstance(args, flags.Args) and args.typed == {'writing_params_path'}
    args.stage = 'pretrain'  # declared (ADDED)
    with pytest.raises(AttributeError, match='args has no attribute .stages.'):
        args.stages = 'pretrain'
    assert not hasattr(args, 'stages') and '_declared' not in vars(args)


def test_a_whole_run_leaves_args_with_its_declared_attributes_only(tmp_path, monkeypatch):
    """pretrain, finetune and evaluate of a tiny run, each args afterwards: exactly the declared
    names (the checks, the stages and the records wrote nothing else onto it)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'wiki.txt').write_text(CORPUS, encoding='utf-8')
    (tmp_path / 'train.tsv').write_text(tsv(TRAIN), encoding='utf-8')
    seen = []
    check = flags.check_args
    monkeypatch.setattr(flags, 'check_args', lambda args: (seen.append(args), check(args))[1])
    common = ['wiki.txt', '--max_epochs', '1'] + FAST
    run.main(['pretrain', 'vanilla'] + common + ['--writing_params_path', 'p.params'])
    run.main(['finetune', 'vanilla'] + common + ['--reading_params_path', 'p.params',
                                                 '--writing_params_path', 'f.params',
                                                 '--finetune_corpus_path', 'train.tsv'])
    run.main(['evaluate', 'vanilla', 'wiki.txt', '--reading_params_path', 'f.params',
              '--eval_corpus_path', 'train.tsv', '--outputs_path', 'out.txt', '--device', 'cpu'])
    assert len(seen) == 3 and os.path.getsize(tmp_path / 'out.txt') > 0
    declared = flags.declared(run.argp)
    for args in seen:
        assert set(vars(args)) == declared, args.function
    assert [a.stage for a in seen] == ['pretrain', 'finetune_pretrained', None]
