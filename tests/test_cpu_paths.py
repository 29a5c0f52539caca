"""precision 'auto' in training on a CPU (cpu_paths.ChoosePaths): the candidates that
compute the same function (fp32 / bf16 autocast where the CPU has bf16; attention through the
fused kernel / the written-out math where attention has no dropout) are timed on this run's
model and batch, the fastest is kept and printed with the figures, and the choice is remembered
per machine and run shape; measuring changes nothing else; a bad cache file is a warning."""
import json

import pytest
import torch

import cpu_paths
import dataset
import devices
import model
import trainer
import utils

CORPUS = '\n'.join(f'Person {i} was born in Town {i % 7} and wrote {i} books.' for i in range(24))


def run(cache, precision='auto', dropout=0.0, kernel='unset'):
    utils.set_seed(0)
    data = dataset.CharCorruptionDataset(CORPUS, 64)
    conf = model.GPTConfig(data.vocab_size, 64, n_layer=2, n_head=2, n_embd=32)
    conf.embd_pdrop = conf.resid_pdrop = conf.attn_pdrop = dropout
    gpt = model.GPT(conf)
    if kernel != 'unset':
        gpt.set_cpu_attention_path(kernel)
    tconf = trainer.TrainerConfig(max_epochs=1, batch_size=8, learning_rate=3e-3,
                                  precision=precision, path_cache=str(cache))
    trainer.Trainer(gpt, data, None, tconf).train()
    return tconf, gpt


def kernels(gpt):
    return {m.cpu_kernel for m in gpt.modules() if hasattr(m, 'cpu_kernel')}


def test_measured_choice_is_printed_remembered_and_changes_nothing_else(tmp_path, capsys):
    cache = tmp_path / 'paths.json'
    conf, gpt = run(cache)
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith('auto: '))
    assert 'measured, median of 3 steps' in line and 'attention kernel' in line and 'attention math' in line
    (kernel,) = kernels(gpt)
    assert kernel in (True, False) and conf.precision in ('fp32', 'bf16')
    saved = json.loads(cache.read_text())
    assert list(saved['choices'].values()) == [[conf.precision, kernel]]
    # the next run of the same shape takes it from the cache, and trains exactly as a run that
    # was told that precision and path: the measuring steps were undone
    conf2, gpt2 = run(cache)
    assert 'cached for this machine' in capsys.readouterr().out
    _, told = run(cache, precision=conf.precision, kernel=kernel)
    for k, v in told.state_dict().items():
        assert torch.equal(gpt.state_dict()[k], v) and torch.equal(gpt2.state_dict()[k], v), k


def test_the_fastest_candidate_is_kept(tmp_path, monkeypatch, capsys):
    """Four candidates (a CPU with bf16 arithmetic), timed by a stand-in clock: bf16 with the
    written-out math is the fastest here, fp32 with the kernel the slowest."""
    monkeypatch.setattr(devices, 'cpu_has_bf16', lambda: True)
    fake = {('fp32', True): 0.9, ('fp32', False): 0.8, ('bf16', True): 0.7, ('bf16', False): 0.5}

    def timed(self, precision, warm, timed, ahead=False, stop=None):
        kernel, = kernels(self.model)
        return [fake[precision, kernel]] * timed
    monkeypatch.setattr(trainer.Trainer, 'timed_steps', timed)
    conf, gpt = run(tmp_path / 'paths.json')
    assert conf.precision == 'bf16' and kernels(gpt) == {False}
    assert 'auto: bf16 + attention math (measured' in capsys.readouterr().out


def test_attention_dropout_leaves_only_the_precision_to_choose(tmp_path, capsys):
    """With attention dropout the CPU path is the written-out math (attention.attend): on a CPU
    without bf16 nothing is left to measure."""
    conf, gpt = run(tmp_path / 'paths.json', dropout=0.1)
    if not devices.cpu_has_bf16():
        assert conf.precision == 'fp32' and 'auto: ' not in capsys.readouterr().out
        assert not (tmp_path / 'paths.json').exists()
    assert kernels(gpt) == {None}


@pytest.mark.parametrize('content', ['{not json', '[1, 2, 3]', '{"format": "someone else"}'])
def test_a_corrupt_or_foreign_cache_is_a_warning(tmp_path, capsys, content):
    cache = tmp_path / 'paths.json'
    cache.write_text(content)
    conf, _ = run(cache)
    err = capsys.readouterr().err
    assert f'warning: ignoring the cache of measured choices {cache}' in err
    assert json.loads(cache.read_text())['format'] == cpu_paths.PATH_CACHE_FORMAT  # measured anew
