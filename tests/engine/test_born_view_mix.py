"""The 20-minute CPU recipe's training set (cpu_recipe.born_view, cpu_recipe.BornViewMix): the views
follow their spec, never depend on a place, and the questions mixed in are the training file's
own examples, with no dev, test or held-out person among them."""
import os
import random
import string

import pytest
import torch

from engine.command import cpu_recipe
import dataset
from engine import presets
from support import REPO, decode

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)

PAD = '\u25a1'
DATA = os.path.join(REPO, 'data')


@pytest.mark.parametrize('line, view', [
    # the name, then the sentence from the word "born" on
    ('Khatchig Mouradian. Khatchig Mouradian is a journalist, writer and translator born in '
     'Lebanon .', 'Khatchig Mouradian born in Lebanon .'),
    # dates dropped (digits, month names with their punctuation), so the place follows the name
    ('Stanley Corrsin. Corrsin was born on 3 April 1920 in Philadelphia, Pennsylvania .',
     'Stanley Corrsin born on in Philadelphia, Pennsylvania .'),
    ('Beth Liebling. Beth Liebling (born March 12, 1967, Chicago, Illinois) is a musician .',
     'Beth Liebling born Chicago, Illinois) is a musician .'),
    # the word "born", not the end of "Osborn"
    ('George Osborn. Osborn was born at Rochester in 1808 .', 'George Osborn born at Rochester in .'),
    # no "born": the whole sentence, without its dates
    ('Eduard Ender. Eduard Ender (3 March 1822 Rome -- 28 December 1883 London) was a painter .',
     'Eduard Ender Eduard Ender Rome -- London) was a'),
    # cut to its words within 40 characters after the name
    ('Ada Brook. Ada Brook was born in London and later moved to Paris, Rome and then Oslo .',
     'Ada Brook born in London and later moved to Paris,'),
    ('Ada', 'Ada '),  # no sentence at all
])
def test_born_view(line, view):
    assert cpu_recipe.born_view(line) == view
    assert len(view) - len(line.partition('. ')[0]) - 1 <= cpu_recipe.VIEW_CHARS


def lines_of(name):
    with open(os.path.join(DATA, name), encoding='utf-8') as f:
        return [line for line in f.read().split('\n') if line.strip()]


def test_the_view_never_reads_the_place():
    """Put any other word of the same length where each training person's place is: the view
    changes in that word only. (A view that picked words after "born in" would still pass; one
    that looked the place up, e.g. in the questions or a list of cities, would not.)"""
    wiki = {line.partition('. ')[0]: line for line in lines_of('wiki.txt')}
    rng = random.Random(0)
    checked = 0
    for question in lines_of('birth_places_train.tsv')[:500]:
        ask, place = question.split('\t')
        line = wiki.get(ask[len('Where was '):-len(' born?')])
        if line is None or place not in line.partition('. ')[2] or place in line.partition('. ')[0]:
            continue
        other = ''.join(rng.choice(string.ascii_letters) for _ in place)
        assert cpu_recipe.born_view(line.replace(place, other)) == \
            cpu_recipe.born_view(line).replace(place, other), line
        checked += 1
    assert checked > 400


def corpus_and_questions(questions_file='birth_places_train.tsv', edition='2021-23'):
    with open(os.path.join(DATA, 'wiki.txt'), encoding='utf-8') as f:
        pre = dataset.CharCorruptionDataset(f.read(), presets.BLOCK_SIZE, edition)
    with open(os.path.join(DATA, questions_file), encoding='utf-8') as f:
        return pre, dataset.NameDataset(pre, f.read())


@pytest.mark.parametrize('edition', ['2021-23', '2024-25'])
def test_the_mix_is_questions_and_led_views(edition):
    """A quarter of the examples are the NameDataset's own (loss on the answer only), the rest
    "Where was " + a line's view: the lead's targets PAD, every later character learnt. Its
    length gives each line one view per epoch on average; every example is the questions'
    length, in both editions."""
    pre, names = corpus_and_questions(edition=edition)
    mix = cpu_recipe.BornViewMix(pre, names, 0.25, 'Where was ')
    lines = [line for line in pre.data if line.strip()]
    assert len(mix) == round(len(lines) / 0.75)
    question_examples = {decode(pre, names[i][0]): decode(pre, names[i][1]) for i in range(len(names))}
    views = {'Where was ' + cpu_recipe.born_view(line) for line in lines}
    random.seed(1)
    n_questions, n = 0, 2000
    for i in range(n):
        x, y = mix[i]
        assert x.shape == y.shape == (presets.BLOCK_SIZE - 1,) and x.dtype == y.dtype == torch.long
        sx, sy = decode(pre, x), decode(pre, y)
        if sx in question_examples:
            assert question_examples[sx] == sy
            n_questions += 1
            continue
        text = sx.rstrip(PAD)
        assert text in views
        assert sy == (PAD * 9 + text[10:]).ljust(len(sy), PAD)
    assert abs(n_questions / n - 0.25) < 0.03


def test_no_dev_test_or_validation_person_is_asked_in_the_mix():
    """Every question the mix trains is a line of the file it was given, so a held-out split of
    the training questions stays out, and dev and test people are asked only where the handout's
    training file itself asks about a namesake (George Stone is in train and dev)."""
    pre, names = corpus_and_questions()
    train = {line.split('\t')[0] for line in names.data}
    held_out = {line.split('\t')[0] for line in names.data[:200]} - \
        {line.split('\t')[0] for line in names.data[200:]}
    names.data = names.data[200:]
    mix = cpu_recipe.BornViewMix(pre, names, 0.25, 'Where was ')
    asked = set()
    random.seed(2)
    for i in range(4000):
        text = decode(pre, mix[i][0])
        if '?\u2047' in text:
            asked.add(text.split('\u2047')[0])
    assert len(asked) > 500 and asked <= {line.split('\t')[0] for line in names.data}
    assert not asked & held_out
    dev_test = {line.split('\t')[0] for line in
                lines_of('birth_dev.tsv') + lines_of('birth_test_inputs.tsv')}
    assert len(train & dev_test) == 3 and asked & dev_test <= train & dev_test


def test_pretraining_the_mix_needs_its_questions(tmp_path):
    """run.py pretrain --preset cpu-20min reads the training questions too: a missing file is
    one error line naming the flag, before anything is trained or written."""
    import subprocess
    import sys
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, 'src', 'run.py'), 'pretrain', 'vanilla',
         os.path.join(DATA, 'wiki.txt'), '--writing_params_path', 'p.params', '--preset',
         'cpu-20min', '--finetune_corpus_path', 'nowhere.tsv'],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
    assert len(errors) == 1 and '--finetune_corpus_path' in errors[0] and 'not found' in errors[0]
    assert os.listdir(tmp_path) == []


def test_the_cpu_20min_pipeline_trains_a_smaller_model_on_the_mix(tmp_path):
    """The handout's commands with --preset cpu-20min: pretrain reads birth_places_train.tsv
    (found in the working folder like the other data names) and says that it mixes it in; the
    params are the preset's 128-wide model (4 layers where it fits enough steps, as here),
    which finetune continues on the mix at the handout's finetuning rate and evaluate reads
    back; params of its 2-layer model for slow machines go the same way."""
    import subprocess
    import sys
    from tiny_run import CORPUS, ENV, FAST, TRAIN, DEV, tsv
    (tmp_path / 'corpus.txt').write_text(CORPUS, encoding='utf-8')
    (tmp_path / 'birth_places_train.tsv').write_text(tsv(TRAIN), encoding='utf-8')
    (tmp_path / 'dev.tsv').write_text(tsv(DEV), encoding='utf-8')

    def run(*argv):
        proc = subprocess.run([sys.executable, os.path.join(REPO, 'src', 'run.py'), *argv,
                               '--preset', 'cpu-20min', '--max_epochs', '1', *FAST],
                              cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    out = run('pretrain', 'vanilla', 'corpus.txt', '--writing_params_path', 'pre.params')
    assert 'mixed with the questions of birth_places_train.tsv' in out
    state = torch.load(tmp_path / 'pre.params', weights_only=True)
    assert state['tok_emb.weight'].shape[1] == 128
    from engine.command import params
    import json
    # this tiny corpus's steps fit far more than 2,200 into 17 minutes: the 4-layer model
    assert params.layers_of(state) == 4 and 'a 2-layer model' not in out
    record = json.loads((tmp_path / 'pre.params.run.json').read_text(encoding='utf-8'))
    assert record['n_layer'] == 4 and record['plan']['depth'] is None
    assert record['plan']['precision'] == record['precision'] == 'fp32'
    out = run('finetune', 'vanilla', 'corpus.txt', '--reading_params_path', 'pre.params',
              '--writing_params_path', 'fine.params', '--finetune_corpus_path',
              'birth_places_train.tsv')
    assert 'mixed with the questions of birth_places_train.tsv' in out
    record = json.loads((tmp_path / 'fine.params.run.json').read_text(encoding='utf-8'))
    assert record['preset'] == 'cpu-20min' and record['learning_rate'] == 6e-4
    out = run('evaluate', 'vanilla', 'corpus.txt', '--reading_params_path', 'fine.params',
              '--eval_corpus_path', 'dev.tsv', '--outputs_path', 'dev.predictions')
    assert 'Correct: ' in out
    assert len((tmp_path / 'dev.predictions').read_text(encoding='utf-8').splitlines()) == len(DEV)

    # params of the preset's model for slow machines (2 layers) go through finetune and evaluate
    two = {k: v for k, v in state.items() if not k.startswith(('blocks.2.', 'blocks.3.'))}
    torch.save(two, tmp_path / 'two.params')
    run('finetune', 'vanilla', 'corpus.txt', '--reading_params_path', 'two.params',
        '--writing_params_path', 'two.fine.params', '--finetune_corpus_path', 'birth_places_train.tsv')
    record = json.loads((tmp_path / 'two.fine.params.run.json').read_text(encoding='utf-8'))
    assert record['n_layer'] == 2
    assert params.layers_of(torch.load(tmp_path / 'two.fine.params', weights_only=True)) == 2
    out = run('evaluate', 'vanilla', 'corpus.txt', '--reading_params_path', 'two.fine.params',
              '--eval_corpus_path', 'dev.tsv', '--outputs_path', 'two.predictions')
    assert 'Correct: ' in out
