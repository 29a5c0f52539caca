"""run.py's command is built once: parsed() gives the parser's flags and what engine/command/flags.py
declares (ADDED), check_args decides the rest and returns a flags.Command that nothing writes onto;
a reader of the parser, ADDED and the Command's fields knows every attribute a later line reads."""
import ast
import dataclasses
import os

import pytest

import run
from support import REPO
from engine.command import flags
from tiny_run import CORPUS, FAST, TRAIN, tsv

SRC = os.path.join(REPO, 'src')


def read_names(path):
    """The attributes of `args` the file at `path` reads or writes: args.NAME, and the names
    handed to getattr/setattr(args, 'NAME'...) or looped over into them as literal strings."""
    return args_names(path)[0]


def written_names(path):
    """The attributes written onto `args` in the file at `path`: args.NAME = ..., augmented or
    unpacked, and setattr(args, ...)."""
    return args_names(path)[1]


def args_names(path):
    """(read, written): args_names's two sets of attribute names of `args` in `path`."""
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read())
    names, written = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == 'args':
            names.add(node.attr)
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                written.add(node.attr)
        elif isinstance(node, ast.Call) and getattr(node.func, 'id', None) in ('getattr', 'setattr') \
                and isinstance(node.args[0], ast.Name) and node.args[0].id == 'args':
            names.add(node.args[1])
            if node.func.id == 'setattr':
                written.add(node.args[1])
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
    return found, written


def src_files():
    return [os.path.join(SRC, 'run.py')] + [
        os.path.join(folder, f) for folder, _, names in os.walk(os.path.join(SRC, 'engine'))
        for f in names if f.endswith('.py')]


def test_every_attribute_of_args_read_in_src_is_declared():
    declared = flags.declared(run.argp) | {f.name for f in dataclasses.fields(flags.Command)}
    used = {}
    for path in src_files():
        for name in read_names(path):
            used.setdefault(name, []).append(os.path.relpath(path, REPO))
    # (the static read sees what it should: flags read and attributes decided, across modules)
    assert {'function', 'typed', 'slow_model', 'stage', 'pretrain_lr', 'eval_batch_size'} <= set(used)
    assert {n: where for n, where in used.items() if n not in declared} == {}


def test_nothing_under_src_writes_onto_args():
    """The command is decided once (check_args); no line under src/ writes onto it after."""
    written = {os.path.relpath(path, REPO): sorted(names) for path in src_files()
               for names in [written_names(path)] if names}
    assert written == {}
    # (the static read sees a write where there is one)
    probe = os.path.join(SRC, 'engine', 'command', 'flags.py')
    with open(probe, encoding='utf-8') as f:
        assert 'args.compile = ' not in f.read()


def test_args_refuses_an_undeclared_attribute():
    args = run.parse_args(['pretrain', 'vanilla', 'wiki.txt', '--writing_params_path', 'x'])
    assert isinstance(args, flags.Args) and args.typed == {'writing_params_path'}
    args.member = None  # declared (ADDED)
    with pytest.raises(AttributeError, match='args has no attribute .stage.'):
        args.stage = 'pretrain'
    assert not hasattr(args, 'stage') and '_declared' not in vars(args)


def test_the_command_is_immutable_and_reads_the_parsers_flags(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'wiki.txt').write_text(CORPUS, encoding='utf-8')
    args = run.parse_args(['pretrain', 'vanilla', 'wiki.txt', '--writing_params_path', 'x',
                           '--compile', 'none', *FAST])
    command = flags.check_args(args)
    try:
        assert isinstance(command, flags.Command)
        assert command.variant == 'vanilla' and command.pretrain_lr == 6e-3  # the parser's
        assert command.compile is False and command.stage == 'pretrain'  # decided
        assert command.precision == 'fp32' and command.device == 'cpu'
        assert command.pretrain_corpus_path.endswith('wiki.txt')
        with pytest.raises(dataclasses.FrozenInstanceError):
            command.stage = 'finetune_scratch'
        with pytest.raises(dataclasses.FrozenInstanceError):
            command.variant = 'rope'
        with pytest.raises(TypeError):
            command.flags['variant'] = 'rope'
        with pytest.raises(AttributeError, match='no attribute .stages.'):
            command.stages
        assert args.compile == 'none' and not hasattr(args, 'stage')  # the parsed args as given
    finally:
        from engine.command import records
        records.finish(command)


def test_each_command_lets_go_of_what_it_holds(tmp_path, monkeypatch):
    """What a command holds (its outputs' claims; its copies of piped inputs; its writers) is
    its own, handed along with it, and records.finish lets go of it all."""
    from engine.command import records
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'wiki.txt').write_text(CORPUS, encoding='utf-8')
    first, second = (run.parse_args(['pretrain', 'vanilla', 'wiki.txt', '--writing_params_path',
                                     name, *FAST]) for name in ('a.params', 'b.params'))
    assert first.held is not second.held
    one, two = flags.check_args(first), flags.check_args(second)
    assert one.held is first.held and len(one.held.claims) == 1 == len(two.held.claims)
    assert os.path.exists('.a.params.lock') and os.path.exists('.b.params.lock')
    records.finish(one)
    assert not os.path.exists('.a.params.lock') and os.path.exists('.b.params.lock')
    assert one.held.claims == [] and len(two.held.claims) == 1
    records.finish(two)
    assert not os.path.exists('.b.params.lock')


def test_a_whole_run_decides_each_command_once(tmp_path, monkeypatch):
    """pretrain, finetune and evaluate of a tiny run: each parsed args afterwards holds exactly
    the declared names, as parsed (nothing wrote onto them); each command its stage."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'wiki.txt').write_text(CORPUS, encoding='utf-8')
    (tmp_path / 'train.tsv').write_text(tsv(TRAIN), encoding='utf-8')
    seen, commands = [], []
    check = flags.check_args

    def checked(args):
        seen.append((args, dict(vars(args))))
        commands.append(check(args))
        return commands[-1]
    monkeypatch.setattr(flags, 'check_args', checked)
    common = ['wiki.txt', '--max_epochs', '1'] + FAST
    run.main(['pretrain', 'vanilla'] + common + ['--writing_params_path', 'p.params'])
    run.main(['finetune', 'vanilla'] + common + ['--reading_params_path', 'p.params',
                                                 '--writing_params_path', 'f.params',
                                                 '--finetune_corpus_path', 'train.tsv'])
    run.main(['evaluate', 'vanilla', 'wiki.txt', '--reading_params_path', 'f.params',
              '--eval_corpus_path', 'train.tsv', '--outputs_path', 'out.txt', '--device', 'cpu'])
    assert len(seen) == 3 and os.path.getsize(tmp_path / 'out.txt') > 0
    declared = flags.declared(run.argp)
    for args, before in seen:
        assert set(vars(args)) == declared and vars(args) == before, args.function
    assert [c.stage for c in commands] == ['pretrain', 'finetune_pretrained', None]
