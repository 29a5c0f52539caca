"""CharCorruptionDataset (part e, autograded) and NameDataset, checked the way an autograder would:
vocabulary, shapes, the decoded layout of every example, and the distribution of the corruption
over many draws, on small synthetic corpora and several block sizes."""
import os
import random
import subprocess
import sys
from collections import Counter

import pytest
import torch

from engine import common
from engine.command import cpu_recipe
import dataset
from engine import presets
from support import REPO, decode

MASK = '\u2047'  # ⁇
PAD = '\u25a1'   # □
BLOCK_SIZES = [8, 16, 33, 128]

# A long document (one line) and a few short ones, plain ASCII.
LONG_DOC = ('The quick brown fox, born in Lisbon in 1901, jumps over the lazy dog; then it '
            'moved to Quebec (Canada) where it wrote 42 books about Zurich, Oslo and Kyoto. '
            'Its brother Max was a painter from Vienna!')
CORPUS = '\n'.join([
    LONG_DOC,
    'Ada Brook. Ada Brook was born in London .',
    'short',
    'Jack Mouradian is a journalist, writer and translator born in Lebanon .',
])


def full_string(ds, x, y):
    """The masked string x and y were cut from (block_size long; 2024-25: block_size + 1):
    x + last char of y."""
    return decode(ds, x) + ds.itos[int(y[-1])]


def parse(s):
    """prefix ⁇ suffix ⁇ masked □…  ->  (prefix, masked, suffix, number of pad chars)"""
    assert s.count(MASK) == 2, s
    prefix, suffix, rest = s.split(MASK)
    masked = rest.rstrip(PAD)
    assert PAD not in prefix + suffix + masked, s
    return prefix, masked, suffix, len(rest) - len(masked)


def check_example(ds, x, y, document, edition='2021-23'):
    """Shapes and layout of one example; returns (truncated_len, masked_len). x and y are
    block_size - 1 long in the 2021-23 editions, block_size long in the 2024-25 one."""
    bs = ds.block_size
    n = bs - 1 if edition == '2021-23' else bs
    assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
    assert x.dtype == torch.long and y.dtype == torch.long
    assert x.shape == (n,) and y.shape == (n,)
    assert torch.equal(x[1:], y[:-1])
    s = full_string(ds, x, y)
    assert len(s) == n + 1
    prefix, masked, suffix, n_pad = parse(s)
    assert document.startswith(prefix)
    assert document[len(prefix):].startswith(masked)
    after = len(prefix) + len(masked)
    if document[after:after + len(suffix)] != suffix:
        # Only possible when prefix + ⁇ + suffix + ⁇ + masked is longer than the block and the
        # masked content lost its tail: int(bs*7/8) + 2 > bs, i.e. block sizes under 10.
        assert n_pad == 0 and int(bs * 7 / 8) + 2 > bs, s
        assert document[after + 1:after + 1 + len(suffix)] == suffix, s
    return len(prefix) + len(masked) + len(suffix), len(masked)


# ---- vocabulary -------------------------------------------------------------------------------

def test_vocabulary_and_print(capsys):
    ds = dataset.CharCorruptionDataset(CORPUS, 16)
    chars = sorted(set(CORPUS))
    assert ds.itos[0] == PAD == '\u25a1' and ds.itos[1] == MASK == '\u2047'
    assert ds.stoi[PAD] == 0 and ds.stoi[MASK] == 1
    assert isinstance(ds.stoi, dict) and isinstance(ds.itos, dict)
    assert [ds.itos[i] for i in range(2, len(chars) + 2)] == chars
    assert ds.stoi == {c: i for i, c in ds.itos.items()}
    assert len(ds.stoi) == len(ds.itos) == len(chars) + 2
    assert ds.vocab_size == len(chars) + 2
    assert ds.block_size == 16
    assert '\n' in ds.stoi  # the vocabulary is built from the whole text, newlines included
    out = capsys.readouterr().out
    assert f'data has {len(CORPUS)} characters, {len(chars) + 2} unique.' in out.splitlines()


def test_wiki_vocabulary(capsys):
    text = open(os.path.join(REPO, 'data', 'wiki.txt'), encoding='utf-8').read()
    ds = dataset.CharCorruptionDataset(text, 128)
    assert ds.vocab_size == 256
    assert len(ds) == len(text.split('\n'))
    assert f'data has {len(text)} characters, 256 unique.' in capsys.readouterr().out


@pytest.mark.parametrize('special', [MASK, PAD])
def test_corpus_with_special_characters_is_refused(special):
    with pytest.raises(common.UsageError):
        dataset.CharCorruptionDataset('hello\nwor' + special + 'ld\n', 16)


@pytest.mark.parametrize('text,n', [('a\nb\nc', 3), ('a\nb\nc\n', 4), ('one line', 1), ('a\n\nb', 3)])
def test_len_is_number_of_newline_split_lines(text, n):
    assert len(dataset.CharCorruptionDataset(text, 16)) == n


# ---- every example ----------------------------------------------------------------------------

EDITIONS = ['2021-23', '2024-25']


@pytest.mark.parametrize('edition', EDITIONS)
@pytest.mark.parametrize('bs', BLOCK_SIZES)
def test_examples_layout(bs, edition):
    random.seed(bs)
    ds = dataset.CharCorruptionDataset(CORPUS, bs, edition)
    docs = CORPUS.split('\n')
    assert len(ds) == len(docs)
    for _ in range(100):
        for idx in range(len(ds)):
            x, y = ds[idx]
            check_example(ds, x, y, docs[idx], edition)


@pytest.mark.parametrize('edition', EDITIONS)
@pytest.mark.parametrize('bs', BLOCK_SIZES)
def test_short_and_empty_documents(bs, edition):
    docs = ['', 'a', 'ab', 'abc', '', 'abcd']
    ds = dataset.CharCorruptionDataset('\n'.join(docs), bs, edition)
    assert len(ds) == len(docs)
    random.seed(0)
    for _ in range(30):
        for idx, doc in enumerate(docs):
            x, y = ds[idx]
            truncated, masked = check_example(ds, x, y, doc, edition)
            if len(doc) < 4:  # shorter than every truncation length: kept whole
                assert truncated == len(doc)
            if doc:
                assert masked >= 1


def test_edition_from_the_environment_as_an_autograder_builds_it(monkeypatch):
    """CharCorruptionDataset(data, block_size), the two-argument call of every edition's run.py
    and autograder: 2021-23 by default, the RoPE edition's lengths with CS224N_EDITION=2024-25,
    the same corruption either way (same seed, same draws: only the padding differs)."""
    examples = {}
    for value in (None, '2024-25', '2021-23'):
        if value is None:
            monkeypatch.delenv('CS224N_EDITION', raising=False)
        else:
            monkeypatch.setenv('CS224N_EDITION', value)
        random.seed(3)
        ds = dataset.CharCorruptionDataset(CORPUS, 64)
        examples[value] = [ds[i] for i in range(len(ds))]
    assert all(x.shape == (63,) for x, _ in examples[None] + examples['2021-23'])
    assert all(x.shape == (64,) and y.shape == (64,) for x, y in examples['2024-25'])
    for (x_old, y_old), (x_new, y_new) in zip(examples[None], examples['2024-25']):
        assert torch.equal(x_new[:63], x_old) and torch.equal(y_new[:63], y_old)
        assert int(y_new[63]) == 0  # one more PAD


def test_unknown_edition_in_the_environment_is_a_usage_error(monkeypatch):
    monkeypatch.setenv('CS224N_EDITION', '2019')
    with pytest.raises(common.UsageError, match='CS224N_EDITION'):
        dataset.CharCorruptionDataset(CORPUS, 64)


# ---- the distribution of the corruption --------------------------------------------------------

DRAWS = 6000


@pytest.fixture(scope='module')
def draws():
    """{block_size: [(truncated_len, masked_len)] over DRAWS examples of the long document}"""
    text = LONG_DOC + '\n' + 'Ada Brook was born in London .'
    out = {}
    for bs in BLOCK_SIZES:
        random.seed(1000 + bs)
        ds = dataset.CharCorruptionDataset(text, bs)
        out[bs] = [check_example(ds, *ds[0], LONG_DOC) for _ in range(DRAWS)]
    return out


@pytest.mark.parametrize('bs', BLOCK_SIZES)
def test_truncation_length_takes_every_value(draws, bs):
    assert len(LONG_DOC) > int(128 * 7 / 8)
    top = int(bs * 7 / 8)
    # what fits in the block: prefix + suffix + masked + two ⁇ (only bs < 10 is short of room)
    visible_top = min(top, bs - 2)
    seen = Counter(t for t, _ in draws[bs])
    assert set(seen) == set(range(4, visible_top + 1))
    if visible_top < top:
        # truncations to `top` show as visible_top: that value turns up about twice as often
        others = [seen[v] for v in range(4, visible_top)]
        assert seen[visible_top] > 1.5 * max(others)


@pytest.mark.parametrize('bs', [16, 33, 128])
def test_masked_fraction_is_a_quarter_on_average(draws, bs):
    ratios = [m / t for t, m in draws[bs]]
    mean = sum(ratios) / len(ratios)
    assert 0.22 <= mean <= 0.28, mean
    assert any(r < 0.25 for r in ratios) and any(r > 0.25 for r in ratios)
    # the masked length is random for a given truncation length
    by_len = {}
    for t, m in draws[bs]:
        by_len.setdefault(t, set()).add(m)
    assert len(by_len[int(bs * 7 / 8)]) >= 3
    # never the whole document, never nothing
    assert all(1 <= m < t for t, m in draws[bs])


def test_masked_fraction_of_long_truncations_at_block_128(draws):
    """Not only on average over all lengths: among the long truncations alone it is 1/4 too."""
    long_ones = [m / t for t, m in draws[128] if t >= 60]
    assert 0.22 <= sum(long_ones) / len(long_ones) <= 0.28


# ---- NameDataset ------------------------------------------------------------------------------

NAME_CORPUS = ('Khatchig Mouradian. Khatchig Mouradian is a journalist born in Lebanon .\n'
               'Where was he born? Jacob Henry Studer, Columbus.\n')


def name_dataset(tsv, bs=128):
    return dataset.NameDataset(dataset.CharCorruptionDataset(NAME_CORPUS, bs), tsv)


def test_name_dataset_exact_strings():
    inp, place = 'Where was Khatchig Mouradian born?', 'Lebanon'
    ds = name_dataset(f'{inp}\t{place}\nWhere was Jacob Henry Studer born?\tColumbus\n')
    assert len(ds) == 2
    x, y = ds[0]
    assert x.dtype == torch.long and y.dtype == torch.long
    assert x.shape == (127,) and y.shape == (127,)
    full = inp + MASK + place + MASK
    full = full + PAD * (128 - len(full))
    want_x = full[:-1]
    want_y = PAD * (len(inp) - 1) + full[len(inp):]
    assert len(want_y) == 127
    assert decode(ds, x) == want_x
    assert decode(ds, y) == want_y
    assert decode(ds, y).startswith(PAD * 33 + MASK + 'Lebanon' + MASK + PAD)
    # the learned part: exactly ⁇place⁇, shifted one position left of where x has it
    nonpad = (y != 0).nonzero().flatten().tolist()
    assert nonpad == list(range(len(inp) - 1, len(inp) - 1 + len(place) + 2))
    assert torch.equal(y[len(inp) - 1:len(inp) + len(place) + 1], x[len(inp):len(inp) + len(place) + 2])
    assert ds.itos[0] == PAD and ds.block_size == 128


def test_name_dataset_shares_the_pretraining_vocabulary():
    pre = dataset.CharCorruptionDataset(NAME_CORPUS, 128)
    ds = dataset.NameDataset(pre, 'Where was Khatchig Mouradian born?\tLebanon\n')
    assert ds.stoi == pre.stoi and ds.itos == pre.itos and ds.block_size == pre.block_size


@pytest.mark.parametrize('tsv,n', [
    ('Where was Jacob Henry Studer born?\tColumbus\n', 1),
    ('Where was Jacob Henry Studer born?\tColumbus', 1),
    ('Where was he born?\tLebanon\nWhere was she born?\tColumbus\n', 2),
    ('Where was he born?\tLebanon\n\nWhere was she born?\tColumbus\n\n', 2),
])
def test_name_dataset_len_counts_nonblank_lines(tsv, n):
    ds = name_dataset(tsv)
    assert len(ds) == n
    for i in range(n):
        x, y = ds[i]
        assert x.shape == y.shape == (127,)


@pytest.mark.parametrize('bs', [64, 128])
def test_name_dataset_every_example(bs):
    lines = ['Where was Khatchig Mouradian born?\tLebanon', 'Where was he born?\tColumbus',
             'Where was Jacob Henry Studer born?\tLebanon']
    ds = name_dataset('\n'.join(lines) + '\n', bs)
    for i, line in enumerate(lines):
        inp, place = line.split('\t')
        x, y = ds[i]
        assert x.shape == y.shape == (bs - 1,)
        sx, sy = decode(ds, x), decode(ds, y)
        assert sx == (inp + MASK + place + MASK).ljust(bs, PAD)[:-1]
        assert sy.strip(PAD) == MASK + place + MASK
        assert sy.index(MASK) == len(inp) - 1


def test_name_dataset_handout_examples():
    """The first examples of birth_places_train.tsv as the handout's dataset.py prints them."""
    wiki = open(os.path.join(REPO, 'data', 'wiki.txt'), encoding='utf-8').read()
    train = open(os.path.join(REPO, 'data', 'birth_places_train.tsv'), encoding='utf-8').read()
    ds = dataset.NameDataset(dataset.CharCorruptionDataset(wiki, 128), train)
    assert len(ds) == 2000
    x, y = ds[0]
    assert decode(ds, x) == 'Where was Khatchig Mouradian born?⁇Lebanon⁇'.ljust(127, PAD)
    assert decode(ds, y) == (PAD * 33 + '⁇Lebanon⁇').ljust(127, PAD)
    x, y = ds[1]
    assert decode(ds, x) == 'Where was Jacob Henry Studer born?⁇Columbus⁇'.ljust(127, PAD)
    assert decode(ds, y) == (PAD * 33 + '⁇Columbus⁇').ljust(127, PAD)


def test_lead_in_dataset_puts_the_lead_before_each_example_and_does_not_learn_it():
    """LeadInDataset (the CPU recipe's rehearsal): the same corrupted example, the lead before it
    as input, PAD targets for the lead, and the example's own pairs (x_i -> y_i) after it."""
    pre = dataset.CharCorruptionDataset(NAME_CORPUS, 128)
    led = cpu_recipe.LeadInDataset(pre, 'Where was ')
    assert len(led) == len(pre)
    for i in range(len(pre)):
        random.seed(i)
        x, y = pre[i]
        random.seed(i)
        lx, ly = led[i]
        assert lx.shape == ly.shape == (127,) and lx.dtype == ly.dtype == torch.long
        assert decode(pre, lx) == ('Where was ' + decode(pre, x))[:127]
        assert decode(pre, ly) == (PAD * 10 + decode(pre, y))[:127]
        assert (ly[:10] == pre.stoi[PAD]).all()


# ---- python src/dataset.py ---------------------------------------------------------------------

def run_dataset_script(kind):
    env = dict(os.environ, PYTHONIOENCODING='utf-8')
    proc = subprocess.run([sys.executable, 'src/dataset.py', kind], cwd=REPO, env=env,
                          capture_output=True, text=True, encoding='utf-8', timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def _pairs(lines):
    xy = [line for line in lines if line.startswith(('x: ', 'y: '))]
    assert [line[:3] for line in xy] == ['x: ', 'y: '] * 4
    return [(xy[i][3:], xy[i + 1][3:]) for i in range(0, 8, 2)]


def test_dataset_script_charcorruption():
    lines = run_dataset_script('charcorruption')
    assert 'data has' in lines[0] and lines[0].endswith('256 unique.')
    docs = open(os.path.join(REPO, 'data', 'wiki.txt'), encoding='utf-8').read().split('\n')
    for i, (x, y) in enumerate(_pairs(lines)):
        assert len(x) == len(y) == 127
        assert x[1:] == y[:-1]
        prefix, masked, suffix, _ = parse(x + y[-1])
        doc = docs[i]
        assert doc.startswith(prefix + masked + suffix)
        assert 4 <= len(prefix + masked + suffix) <= 112


def test_dataset_script_namedata():
    pairs = _pairs(run_dataset_script('namedata'))
    assert pairs[0][0] == 'Where was Khatchig Mouradian born?⁇Lebanon⁇'.ljust(127, PAD)
    assert pairs[0][1] == (PAD * 33 + '⁇Lebanon⁇').ljust(127, PAD)
    assert pairs[1][0].startswith('Where was Jacob Henry Studer born?⁇Columbus⁇□')
    for x, y in pairs:
        assert len(x) == len(y) == 127 and x.count(MASK) == 2 and y.count(MASK) == 2


def test_lead_in_examples_batch_with_the_questions_in_the_2024_edition():
    """The 2024-25 corpus examples are block_size long, the questions block_size - 1: the
    rehearsal's examples are cut to the questions' length, so the two mix in one batch."""
    pre = dataset.CharCorruptionDataset(NAME_CORPUS, 128, '2024-25')
    names = dataset.NameDataset(pre, 'Where was Khatchig Mouradian born?\tLebanon\n')
    lead = cpu_recipe.LeadInDataset(pre, 'Where was ')
    assert pre[0][0].shape == (128,)
    assert lead[0][0].shape == lead[0][1].shape == names[0][0].shape == (127,)


def test_the_checkout_sets_its_edition_once(tmp_path, monkeypatch, capsys):
    """src/edition.txt (written by `python src/engine/presets.py --edition NAME`) sets the edition of
    every command of the checkout and of a bare CharCorruptionDataset; the variant's own
    edition, $CS224N_EDITION and --edition come before it, in that order from the last."""
    setting = tmp_path / 'edition.txt'
    monkeypatch.setattr(presets, 'EDITION_FILE', str(setting))
    monkeypatch.delenv(presets.EDITION_ENV, raising=False)
    assert presets.edition_source() == ('2021-23', 'the default')
    # nobody chose: a command says which edition it follows and the one command that sets it
    note = presets.edition_note(*presets.edition_source(variant='vanilla'))
    assert '2021-23 edition (the default' in note and \
        'python src/engine/presets.py --edition 2024-25' in note
    presets.main(['--edition', '2024-25'])
    assert setting.read_text() == '2024-25\n'
    assert 'this checkout follows the 2024-25 edition' in capsys.readouterr().out
    assert presets.edition() == presets.edition(variant='vanilla') == '2024-25'
    x, y = dataset.CharCorruptionDataset('Ada Brook was born in London.\n' * 3, 128)[0]
    assert len(x) == len(y) == 128
    assert presets.edition(variant='synthesizer') == '2021-23'  # a variant of one edition
    for chosen, why in (((None, None), 'src/edition.txt'), ((None, 'rope'), 'the rope variant'),
                        (('2021-23', 'vanilla'), '--edition')):  # switched: says so, and why
        note = presets.edition_note(*presets.edition_source(*chosen))
        assert note.startswith(f'note: this command follows the {presets.edition(*chosen)} '
                               'edition (chosen by ') and why in note, (chosen, note)
    monkeypatch.setenv(presets.EDITION_ENV, '2021-23')  # the environment over the checkout
    assert presets.edition_source(variant='vanilla') == ('2021-23', presets.EDITION_ENV)
    assert presets.edition('2024-25', 'vanilla') == '2024-25'  # --edition over everything
    monkeypatch.delenv(presets.EDITION_ENV)
    setting.write_text('2023\n')
    with pytest.raises(common.UsageError, match=r"edition.txt '2023': no such edition"):
        presets.edition()
    with pytest.raises(SystemExit) as e:
        presets.main(['--edition', '2023'])
    assert e.value.code == 2 and setting.read_text() == '2023\n'  # a bad name writes nothing


def test_the_examples_with_a_bad_edition_are_one_error_line(tmp_path):
    """`CS224N_EDITION=bogus python src/dataset.py charcorruption`: one error line naming the
    variable, exit 2 (a traceback ending in UsageError before)."""
    env = dict(os.environ, CS224N_EDITION='bogus')
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'src', 'dataset.py'), 'charcorruption'],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["error: CS224N_EDITION 'bogus': no such edition (choose "
                                        "from 2021-23, 2024-25)"], proc.stderr
