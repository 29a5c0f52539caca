"""scripts/dev/compare_commits.py judges params by their tensors (torch.save records the file's name,
so equal params saved under two names are different bytes) and predictions by their lines, and
says by how much they differ."""
import importlib.util
import os

import torch

from support import REPO


def load():
    spec = importlib.util.spec_from_file_location(
        'compare_commits', os.path.join(REPO, 'scripts', 'dev', 'compare_commits.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_difference_compares_tensors_and_lines(tmp_path):
    compare = load()
    state = {'a.weight': torch.randn(3, 4), 'mask': torch.ones(2, 2)}
    torch.save(state, tmp_path / 'x.params')
    torch.save(state, tmp_path / 'y.params')
    assert (tmp_path / 'x.params').read_bytes() != (tmp_path / 'y.params').read_bytes()
    assert compare.difference(str(tmp_path / 'x.params'), str(tmp_path / 'y.params')) is None
    changed = dict(state, **{'a.weight': state['a.weight'].clone()})
    changed['a.weight'][1, 2] += 1.0
    torch.save(changed, tmp_path / 'z.params')
    scale = float(state['a.weight'].abs().max())
    assert compare.difference(str(tmp_path / 'x.params'), str(tmp_path / 'z.params')) == \
        f'largest difference 1 ({1 / scale:.2%} of the largest weight) in a.weight'
    torch.save({'a.weight': state['a.weight']}, tmp_path / 'fewer.params')
    assert compare.difference(str(tmp_path / 'x.params'), str(tmp_path / 'fewer.params')) == \
        'other tensors'
    (tmp_path / 'p.predictions').write_text('Paris\nRome\n')
    (tmp_path / 'q.predictions').write_text('Paris\nRome \n')
    assert compare.difference(str(tmp_path / 'p.predictions'), str(tmp_path / 'q.predictions')) \
        == '1 of 2 lines differ'
    assert compare.difference(str(tmp_path / 'p.predictions'), str(tmp_path / 'p.predictions')) \
        is None
    # both trees run the same commands: every variant's three outputs, and vanilla in bf16
    outputs = [out for _, out in compare.commands()]
    for variant in ('vanilla', 'synthesizer', 'perceiver', 'rope'):
        assert {f'{variant}.pretrain.params', f'{variant}.finetune.params',
                f'{variant}.dev.predictions'} <= set(outputs)
    assert 'vanilla-bf16.pretrain.params' in outputs


def test_a_preset_s_commands_are_the_handout_s_with_that_preset():
    """--preset NAME: the same commands with --preset NAME; beyond the handout, --plain (a preset
    without dropout would let each tree time two attention paths) and the questions for a
    pretraining that mixes them in. The handout's commands are as they were."""
    compare = load()
    handout, cpu = compare.commands(), compare.commands('cpu-20min')
    assert [out for _, out in handout] == [out for _, out in cpu]
    for (argv, _), (argv_cpu, _) in zip(handout, cpu):
        if 'bf16' in argv:
            assert argv_cpu == argv
            continue
        assert argv[argv.index('--preset') + 1] == 'handout' and '--plain' not in argv
        assert argv_cpu[argv_cpu.index('--preset') + 1] == 'cpu-20min' and '--plain' in argv_cpu
        if argv[0] == 'pretrain':
            assert '--finetune_corpus_path' not in argv and '--finetune_corpus_path' in argv_cpu


def test_dropout_is_handed_to_every_command():
    """--dropout P: every command trains with it (the masks of a change that draws them in other
    shapes differ; without dropout what differs is the arithmetic)."""
    compare = load()
    plain, none = compare.commands(), compare.commands(dropout=0.0)
    assert all('--dropout' not in argv for argv, _ in plain) and len(plain) == len(none)
    for (argv, _), (argv_none, _) in zip(plain, none):
        at = argv_none.index('--dropout')
        assert argv_none[at + 1] == '0.0' and argv_none[:at] + argv_none[at + 2:] == argv
