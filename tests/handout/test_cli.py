"""End to end through the real command line, as the handout runs it: pretrain -> finetune ->
evaluate for each variant on a tiny corpus (one epoch, CPU, fp32), the files each step leaves,
the one-line errors, and the London baseline."""
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from support import PEOPLE, REPO, RUN
from handout_reference import RefGPT, RefGPTConfig

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)

FAST = ['--max_epochs', '1', '--batch_size', '8', '--precision', 'fp32', '--device', 'cpu']

CORPUS = '\n'.join([f'{n}. {n} was born in {p} .' for n, p in PEOPLE]
                   + ['Where was he born? Nobody knows, said the writer.']) + '\n'
TRAIN, DEV, TEST = PEOPLE[:16], PEOPLE[16:24], PEOPLE[24:32]

CORRECT = re.compile(r'^Correct: (\d+\.\d+) out of 8\.0: (\d+(\.\d+)?)%$')


def write_inputs(folder):
    (folder / 'corpus.txt').write_text(CORPUS, encoding='utf-8')
    (folder / 'train.tsv').write_text(''.join(f'Where was {n} born?\t{p}\n' for n, p in TRAIN),
                                      encoding='utf-8')
    (folder / 'dev.tsv').write_text(''.join(f'Where was {n} born?\t{p}\n' for n, p in DEV),
                                    encoding='utf-8')
    (folder / 'test.tsv').write_text(''.join(f'Where was {n} born?\n' for n, _ in TEST),
                                     encoding='utf-8')
    assert set(''.join(n + p for n, p in PEOPLE)) | set('Where was born?') <= set(CORPUS)


def cli(args, cwd, timeout=120):
    env = dict(os.environ, PYTHONIOENCODING='utf-8')
    return subprocess.run([sys.executable, RUN] + [str(a) for a in args], cwd=cwd, env=env,
                          capture_output=True, text=True, encoding='utf-8', timeout=timeout)


def ok(proc):
    assert proc.returncode == 0, f'rc {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}'
    return proc


def handout_state_shapes(variant, bottleneck_dim=None):
    """Keys and shapes of the handout's GPT for this corpus and run.py's model sizes."""
    extra = {}
    if variant == 'synthesizer':
        extra = dict(synthesizer=True)
    elif variant == 'perceiver':
        extra = dict(perceiver=True, bottleneck_dim=bottleneck_dim)
    elif variant == 'rope':
        extra = dict(rope=True)
    vocab = len(set(CORPUS)) + 2
    ref = RefGPT(RefGPTConfig(vocab, 128, n_layer=4, n_head=8, n_embd=256, **extra))
    return {k: tuple(v.shape) for k, v in ref.state_dict().items()}


VARIANTS = {
    # variant: (extra flags, bottleneck_dim in the tensorboard name, pt lr, ft lr in that name)
    'vanilla': ([], 32, '0.006000', '0.000600'),
    'synthesizer': (['--finetune_lr', '1e-3'], 32, '0.006000', '0.001000'),
    'perceiver': (['--bottleneck_dim', '16', '--pretrain_lr', '3e-3'], 16, '0.003000', '0.000600'),
    # the 2024-25 edition: no bottleneck_dim in its tensorboard folder
    'rope': ([], None, '0.006000', '0.000600'),
}


@pytest.fixture(scope='module', params=sorted(VARIANTS))
def pipeline(request, tmp_path_factory):
    """pretrain -> finetune (reading the pretrained params) -> evaluate dev and test."""
    variant = request.param
    extra = VARIANTS[variant][0]
    d = tmp_path_factory.mktemp(variant)
    write_inputs(d)
    procs = {}
    procs['pretrain'] = ok(cli(['pretrain', variant, 'corpus.txt', '--writing_params_path',
                                'pt.params'] + extra + FAST, d))
    procs['finetune'] = ok(cli(['finetune', variant, 'corpus.txt', '--reading_params_path',
                                'pt.params', '--writing_params_path', 'ft.params',
                                '--finetune_corpus_path', 'train.tsv'] + extra + FAST, d))
    procs['dev'] = ok(cli(['evaluate', variant, 'corpus.txt', '--reading_params_path', 'ft.params',
                           '--eval_corpus_path', 'dev.tsv', '--outputs_path', 'dev.predictions']
                          + extra + FAST, d))
    procs['test'] = ok(cli(['evaluate', variant, 'corpus.txt', '--reading_params_path', 'ft.params',
                            '--eval_corpus_path', 'test.tsv', '--outputs_path', 'test.predictions']
                           + extra + FAST, d))
    return variant, d, procs


def test_evaluate_dev_prints_accuracy(pipeline):
    variant, d, procs = pipeline
    lines = procs['dev'].stdout.splitlines()
    matches = [CORRECT.match(line) for line in lines if line.startswith('Correct:')]
    assert len(matches) == 1 and matches[0], lines
    correct = float(matches[0].group(1))
    assert float(matches[0].group(2)) == pytest.approx(correct / 8 * 100)
    # the count is the predictions file compared with the gold places
    preds = (d / 'dev.predictions').read_text(encoding='utf-8').split('\n')
    assert preds[-1] == '' and len(preds) == 9
    assert correct == sum(p == place for p, (_, place) in zip(preds, DEV))


def test_evaluate_test_without_gold(pipeline):
    variant, d, procs = pipeline
    out = procs['test'].stdout.splitlines()
    assert 'Predictions written to test.predictions; no targets provided' in out
    assert not any(line.startswith('Correct:') for line in out)
    text = (d / 'test.predictions').read_text(encoding='utf-8')
    assert text.endswith('\n') and text.count('\n') == len(TEST)
    assert '\u2047' not in text  # only what lies between the two ⁇ is kept


def test_params_files_are_the_handouts(pipeline):
    variant, d, procs = pipeline
    bottleneck = VARIANTS[variant][1]
    want = handout_state_shapes(variant, bottleneck)
    states = {}
    for name in ('pt.params', 'ft.params'):
        state = torch.load(d / name, weights_only=True, map_location='cpu')
        assert isinstance(state, dict)
        assert {k: tuple(v.shape) for k, v in state.items()} == want
        assert all(v.dtype == torch.float32 for v in state.values())
        states[name] = state
    # finetuning started from the pretrained params (a few small steps away from them)
    pt, ft = states['pt.params'], states['ft.params']
    assert any(not torch.equal(pt[k], ft[k]) for k in pt)
    assert max((pt[k] - ft[k]).abs().max().item() for k in pt) < 0.01
    # the resumable checkpoint of a finished run is removed
    assert not (d / 'pt.params.ckpt').exists() and not (d / 'ft.params.ckpt').exists()


def test_tensorboard_dirs(pipeline):
    variant, d, procs = pipeline
    _, bottleneck, pt_lr, ft_lr = VARIANTS[variant]
    name = f'run_{variant}' + (f'_{bottleneck}' if bottleneck else '') + f'_pt_lr_{pt_lr}_ft_lr_{ft_lr}'
    for function in ('pretrain', 'finetune'):
        folder = d / 'expt' / function / name
        assert folder.is_dir(), sorted(p.name for p in (d / 'expt' / function).iterdir())
        assert any(f.name.startswith('events.out.tfevents') for f in folder.iterdir())


def test_each_output_has_a_record_of_the_settings_used(pipeline):
    variant, d, procs = pipeline
    _, _, pt_lr, ft_lr = VARIANTS[variant]
    records = {name: json.loads((d / f'{name}.run.json').read_text(encoding='utf-8'))
               for name in ('pt.params', 'ft.params', 'dev.predictions', 'test.predictions')}
    for name, lr, stage in (('pt.params', pt_lr, 'pretrain'), ('ft.params', ft_lr, 'finetune_pretrained')):
        r = records[name]
        edition = '2024-25' if variant == 'rope' else '2021-23'  # rope is only the 2024-25 edition's
        assert (r['variant'], r['preset'], r['edition'], r['stage']) == (variant, 'handout', edition, stage)
        assert r['learning_rate'] == float(lr) and r['batch_size'] == 8 and r['precision'] == 'fp32'
        assert r['epochs_asked'] == r['epochs_planned'] == r['epochs_trained'] == 1
        # the starters' seeds: python's 0, torch's at the model file's import (2022-23 1, 2024-25 0)
        assert r['commit'] and r['seed'] == dict(python=0, torch=0 if variant == 'rope' else 1)
        # where the command's seconds went, in order (the imports before the clock of nothing)
        phases = r['phases']
        assert list(phases) == ['imports', 'setup', 'training', 'after'], phases
        assert min(phases.values()) >= 0 and phases['imports'] > 0 and phases['training'] > 0
        assert sum(phases.values()) == pytest.approx(r['seconds'], abs=0.5), (phases, r['seconds'])
        # and each epoch's seconds, within the training's
        walls = r['epoch_walls']
        assert len(walls) == r['epochs_trained'] and 0 < sum(walls) <= phases['training'] + 0.1
    assert records['ft.params']['reading_params_path'] == 'pt.params'
    dev_preds = (d / 'dev.predictions').read_text(encoding='utf-8').split('\n')
    assert records['dev.predictions']['correct'] == sum(p == place for p, (_, place) in zip(dev_preds, DEV))
    assert records['test.predictions']['correct'] is None
    assert records['test.predictions']['questions'] == len(TEST)


def test_training_progress_and_vocab_print(pipeline):
    variant, d, procs = pipeline
    vocab = len(set(CORPUS)) + 2
    for stage in ('pretrain', 'finetune', 'dev', 'test'):
        assert f'data has {len(CORPUS)} characters, {vocab} unique.' in procs[stage].stdout
        assert 'number of parameters: ' in procs[stage].stdout
        # the 2022-23 and 2024-25 starters' line once the model is built; 2021-22's (the
        # synthesizer's) has none
        assert ('Model on device:  cpu' in procs[stage].stdout.splitlines()) \
            == (variant != 'synthesizer')
    # tqdm's description, as the handout's
    assert re.search(r'epoch 1 iter \d+: train loss \d+\.\d{5}\. lr \d\.\d{6}e-\d\d',
                     procs['pretrain'].stderr)


def test_finetune_without_pretraining(tmp_path):
    write_inputs(tmp_path)
    proc = ok(cli(['finetune', 'vanilla', 'corpus.txt', '--writing_params_path', 'model.params',
                   '--finetune_corpus_path', 'train.tsv'] + FAST, tmp_path))
    state = torch.load(tmp_path / 'model.params', weights_only=True)
    assert {k: tuple(v.shape) for k, v in state.items()} == handout_state_shapes('vanilla')
    assert (tmp_path / 'expt' / 'finetune' /
            'run_vanilla_32_pt_lr_0.006000_ft_lr_0.000600').is_dir()
    assert 'epoch 1 iter 1' in proc.stderr  # 16 examples, batch 8: two steps


# ---- failures: one `error:` line, before any training ------------------------------------------

def one_error_line(proc):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith('error: '), proc.stderr
    assert 'Traceback' not in proc.stderr
    return lines[0]


def test_unwritable_params_path_fails_fast(tmp_path):
    proc = cli(['pretrain', 'vanilla', 'wiki.txt', '--writing_params_path',
                '/nonexistent_dir/x.params'], tmp_path)
    line = one_error_line(proc)
    assert '/nonexistent_dir' in line and 'does not exist' in line
    assert not (tmp_path / 'expt').exists()


def test_missing_corpus_is_named(tmp_path):
    proc = cli(['pretrain', 'vanilla', 'no_such_corpus.txt', '--writing_params_path', 'x.params'],
               tmp_path)
    line = one_error_line(proc)
    assert 'no_such_corpus.txt' in line and 'not found' in line
    assert not (tmp_path / 'x.params').exists()


def test_bare_corpus_name_resolves_to_data(tmp_path):
    """`wiki.txt` from a folder without it is data/wiki.txt (its 256-character vocabulary): a
    params file of the tiny corpus then has the wrong sizes for it, which is the error given."""
    write_inputs(tmp_path)
    from model import GPT, GPTConfig
    gpt = GPT(GPTConfig(len(set(CORPUS)) + 2, 128, n_layer=4, n_head=8, n_embd=256))
    torch.save(gpt.state_dict(), tmp_path / 'tiny.params')
    proc = cli(['evaluate', 'vanilla', 'wiki.txt', '--reading_params_path', 'tiny.params',
                '--eval_corpus_path', 'dev.tsv', '--outputs_path', 'out.predictions'] + FAST, tmp_path)
    assert 'data has 418' in proc.stdout and '256 unique.' in proc.stdout
    line = one_error_line(proc)
    assert 'tiny.params' in line and 'other sizes' in line and 'not found' not in line
    assert not (tmp_path / 'out.predictions').exists()


def test_params_of_another_variant_are_refused(tmp_path):
    write_inputs(tmp_path)
    from model import GPT, GPTConfig
    gpt = GPT(GPTConfig(len(set(CORPUS)) + 2, 128, n_layer=4, n_head=8, n_embd=256))
    torch.save(gpt.state_dict(), tmp_path / 'vanilla.params')
    proc = cli(['finetune', 'perceiver', 'corpus.txt', '--reading_params_path', 'vanilla.params',
                '--writing_params_path', 'p.params', '--finetune_corpus_path', 'train.tsv'] + FAST,
               tmp_path)
    line = one_error_line(proc)
    assert 'vanilla model' in line and 'perceiver' in line
    assert not (tmp_path / 'p.params').exists()


@pytest.mark.parametrize('saved,asked', [('vanilla', 'rope'), ('rope', 'vanilla')])
def test_rope_and_vanilla_params_are_refused_naming_both(tmp_path, saved, asked):
    write_inputs(tmp_path)
    from model import GPT, GPTConfig
    gpt = GPT(GPTConfig(len(set(CORPUS)) + 2, 128, n_layer=4, n_head=8, n_embd=256,
                        rope=saved == 'rope'))
    torch.save(gpt.state_dict(), tmp_path / f'{saved}.params')
    proc = cli(['evaluate', asked, 'corpus.txt', '--reading_params_path', f'{saved}.params',
                '--eval_corpus_path', 'dev.tsv', '--outputs_path', 'dev.predictions'] + FAST, tmp_path)
    line = one_error_line(proc)
    assert f'params are a {saved} model, you asked for a {asked} model' in line
    assert not (tmp_path / 'dev.predictions').exists()


def test_edition_and_variant_must_agree(tmp_path):
    write_inputs(tmp_path)
    for variant, edition in (('synthesizer', '2024-25'), ('rope', '2021-23')):
        proc = cli(['pretrain', variant, 'corpus.txt', '--writing_params_path', 'x.params',
                    '--edition', edition] + FAST, tmp_path)
        line = one_error_line(proc)
        assert f'--edition {edition}' in line and variant in line
    assert not (tmp_path / 'x.params').exists()


def test_params_of_other_sizes_are_one_error_line(tmp_path):
    """A params file of a narrower model than the handout's (another preset's, say): reading it
    is one error line naming the file and the likely cause."""
    write_inputs(tmp_path)
    from model import GPT, GPTConfig
    gpt = GPT(GPTConfig(len(set(CORPUS)) + 2, 128, n_layer=4, n_head=4, n_embd=128))
    torch.save(gpt.state_dict(), tmp_path / 'narrow.params')
    evaluate = ['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path', 'narrow.params',
                '--eval_corpus_path', 'dev.tsv', '--outputs_path', 'dev.predictions'] + FAST
    line = one_error_line(cli(evaluate, tmp_path))
    assert 'narrow.params' in line and 'other sizes' in line and '--preset' in line
    assert not (tmp_path / 'dev.predictions').exists()


def test_the_cpu_recipe_trains_the_handouts_model_and_rehearses(tmp_path):
    """cpu-rehearsal's params have the handout model's keys and shapes (they load without the preset),
    and its finetuning also rehearses the pretraining corpus."""
    write_inputs(tmp_path)
    ok(cli(['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path', 'pt.params',
            '--preset', 'cpu-rehearsal'] + FAST, tmp_path))
    state = torch.load(tmp_path / 'pt.params', weights_only=True)
    assert state['tok_emb.weight'].shape[1] == 256 and state['blocks.0.mlp.0.weight'].shape == (1024, 256)
    # the run says what it used: the preset's learning rate, in its record and tensorboard's name
    record = json.loads((tmp_path / 'pt.params.run.json').read_text(encoding='utf-8'))
    assert (record['preset'], record['learning_rate'], record['batch_size']) == ('cpu-rehearsal', 1.5e-3, 8)
    assert record['time_budget_minutes'] == 38 and record['epochs_trained'] == 1
    assert (tmp_path / 'expt' / 'pretrain' / 'run_vanilla_32_pt_lr_0.001500_ft_lr_0.000600').is_dir()
    ok(cli(['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path', 'pt.params',
            '--eval_corpus_path', 'dev.tsv', '--outputs_path', 'dev.predictions'] + FAST, tmp_path))
    assert len((tmp_path / 'dev.predictions').read_text(encoding='utf-8').splitlines()) == len(DEV)
    # its finetuning also rehearses the corpus (cpu_recipe.LeadInDataset): the 16 questions and the
    # corpus's 34 lines ('\n'-split, the last one empty) are 50 examples, 7 steps of 8
    proc = ok(cli(['finetune', 'vanilla', 'corpus.txt', '--reading_params_path', 'pt.params',
                   '--writing_params_path', 'ft.params', '--finetune_corpus_path', 'train.tsv',
                   '--preset', 'cpu-rehearsal'] + FAST, tmp_path))
    assert len(CORPUS.split('\n')) == 34
    assert 'epoch 1 iter 6' in proc.stderr and 'epoch 1 iter 7' not in proc.stderr


# ---- London baseline ------------------------------------------------------------------------------

@pytest.mark.parametrize('where', ['repo', 'elsewhere'])
def test_london_baseline(where, tmp_path):
    cwd = REPO if where == 'repo' else tmp_path
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'src', 'london_baseline.py')],
                          cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines() == ['Correct: 25.0 out of 500.0: 5.0%']
    # the 2024-25 edition's file for its submission, in the folder it was run from
    written = os.path.join(cwd, 'london_baseline_accuracy.txt')
    with open(written, encoding='utf-8') as f:
        content = f.read()
    if where == 'repo':
        os.remove(written)
    assert content == '5.0\n'


@pytest.mark.parametrize('content,words', [
    ('', 'has no questions (the file is empty)'),
    ('Where was Ada Brook born?\nWhere was Ben Carter born?\n', 'has no gold places'),
    ('Where was Ada Brook born?\t\nWhere was Ben Carter born?\tParis\n', 'line 1: empty place'),
    (b'Where was Zo\xeb Abel born?\tGeneva\n', 'not UTF-8'),
    ('same', 'london_baseline_accuracy.txt'),
])
def test_london_baseline_refuses_what_has_no_accuracy(tmp_path, content, words):
    """An empty, unreadable or gold-less file (or one that is the output itself) is one error
    line, exit 2, and no london_baseline_accuracy.txt (the rope submission zips it)."""
    path = tmp_path / ('london_baseline_accuracy.txt' if content == 'same' else 'q.tsv')
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text('Where was Ada Brook born?\tLondon\n' if content == 'same' else content,
                        encoding='utf-8')
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'src', 'london_baseline.py'),
                           path.name], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith('error: '), proc.stderr
    assert words in lines[0]
    assert sorted(os.listdir(tmp_path)) == [path.name]
