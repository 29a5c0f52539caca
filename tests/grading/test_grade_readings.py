"""The dataset check of scripts/grading/grade.py on what students really write
(scripts/grading/student_datasets.py): the readings the handouts allow pass and say which they follow, the masked length is judged in
characters against a band, documents of 0-3 characters only warn, and the figures repeat.

Most cases draw in this process (dataset_probe.draw, the probe's own code, on a module imported
from the case's text) so that the default number of draws stays affordable; the sandboxed child
(spec_check.run_probe) is exercised where the seeding of the child matters."""
import itertools
import math
import os
import random

import pytest

from support import REPO
import spec_check  # noqa: E402
import student_datasets  # noqa: E402

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)

DEFAULT_DRAWS = spec_check.DEFAULTS['draws']
PASSING, FAILING = student_datasets.PASSING, student_datasets.FAILING
_modules = itertools.count()


def judged(tmp_path, text, handout='synthesizer', draws=spec_check.MIN_DRAWS, seed=0, also=()):
    return student_datasets.judge(text, str(tmp_path), f'student_dataset_{next(_modules)}',
                                  handout, draws, seed, also)


def others_pass(results, but=()):
    return {p: ok for p, (ok, _) in results.items() if p not in but and ok is not True}


def mean_gap(detail):
    return float(detail.split('truncated/4 ')[1].split(' ')[0])


@pytest.mark.parametrize('case', sorted(PASSING))
def test_public_masked_lengths_pass_at_every_allowed_draw_count(tmp_path, case):
    verdicts = judged(tmp_path, student_datasets.source(**PASSING[case]), draws=DEFAULT_DRAWS,
                      also=[spec_check.MIN_DRAWS, 5000])
    for draws, (results, _) in zip([DEFAULT_DRAWS, spec_check.MIN_DRAWS, 5000], verdicts):
        assert others_pass(results) == {}, (draws, results)
        detail = results['masked_length_mean'][1]
        assert abs(mean_gap(detail)) <= spec_check.DEFAULTS['masked_band'], detail
        assert 'interval [' in detail and 'band \u00b11.25' in detail


@pytest.mark.parametrize('case', sorted(FAILING))
def test_off_or_fixed_masked_lengths_fail_at_the_default_draws(tmp_path, case):
    # a fixed length shows at the fewest draws already (more draws only judge more lengths)
    draws = spec_check.MIN_DRAWS if case == 't // 4' else DEFAULT_DRAWS
    results, _ = judged(tmp_path, student_datasets.source(**FAILING[case]), draws=draws)
    ok, detail = results['masked_length_mean']
    assert ok is False, detail
    assert others_pass(results, but=['masked_length_mean']) == {}, results
    if case == 't // 4':
        assert 'fixed at every truncated length from 16 on' in detail
    else:
        low, high = (float(v) for v in detail.split('interval [')[1].split(']')[0].split(', '))
        assert low > 1.25 or high < -1.25, detail  # the whole interval outside the band


def test_a_length_fixed_only_for_the_shortest_truncations_is_reported_not_failed(tmp_path):
    # randint(1, 2*(t//4)-1) masks exactly 1 character for t = 4..7
    results, _ = judged(tmp_path, student_datasets.source(**PASSING['randint(1, 2*(t//4)-1)']))
    ok, detail = results['masked_length_mean']
    assert ok is True and 'fixed at truncated lengths 4..7 always 1 (allowed)' in detail


def test_the_short_lengths_fixed_are_judged_on_truncated_draws_and_say_their_value():
    """A dataset fixed at 1 masked character wherever it cuts a document to 4..7, and at 0 at 8
    (empty masked content), that masks a whole 5-character document by another rule: the whole
    document's draws no longer hide lengths 5..7, and each run says its value."""
    import random
    draw = random.Random(0)
    masked, truncated, documents = [], [], []
    for _ in range(3000):
        t = draw.randint(4, 112)
        masked.append(1 if t < 8 else 0 if t == 8 else draw.randint(1, t // 2))
        truncated.append(t)
        documents.append(300)
    for _ in range(40):  # the whole 5-character document: 1 or 2 masked
        masked.append(draw.randint(1, 2))
        truncated.append(5)
        documents.append(5)
    assert spec_check.fixed_short(masked, truncated, documents) == \
        '4..7 always 1, 8 always 0 (empty masked content)'
    ok, detail = spec_check.masked_length_check(masked, truncated, documents, band=100)
    assert ok and detail.endswith('fixed at truncated lengths 4..7 always 1, 8 always 0 (empty '
                                  'masked content) (allowed)'), detail


def test_the_bound_is_empirical_bernstein_and_narrower_than_hoeffding():
    """Maurer and Pontil's bound, each side with half the probability: sqrt(2 V ln(4/p) / n) +
    7 W ln(4/p) / (3 (n - 1)); for values 0 and W alternating (V = W^2 n / (4 (n - 1)))."""
    n, width = 10000, 112
    values = [0, width] * (n // 2)
    log = math.log(4 / spec_check.FAIL_PROBABILITY)
    variance = width ** 2 * n / (4 * (n - 1))
    want = math.sqrt(2 * variance * log / n) + 7 * width * log / (3 * (n - 1))
    assert spec_check.bernstein_half_width(values, width) == pytest.approx(want, rel=1e-12)
    # masked lengths spread like a correct dataset's: under half of Hoeffding's bound (3.02
    # characters at 10,000 draws), which assumes the widest spread
    rng = random.Random(0)
    gaps = [rng.randint(1, t // 2) - t / 4 for t in (rng.randint(4, 112) for _ in range(n))]
    hoeffding = width * math.sqrt(math.log(2 / spec_check.FAIL_PROBABILITY) / (2 * n))
    assert spec_check.bernstein_half_width(gaps, width) < hoeffding / 2


def test_a_handful_of_truncation_lengths_fails_and_the_span_start_is_only_reported(tmp_path):
    """Two lengths, the range's two ends, and the span always at the start: the ends alone passed
    it. Where the span starts the spec leaves free: the detail says where, nothing fails on it."""
    text = student_datasets.source(truncate='random.choice([4, int(self.block_size * 7 / 8)])',
                                   start='0')
    results, _ = judged(tmp_path, text)
    ok, detail = results['truncation_length']
    assert ok is False and detail.startswith('only 2 distinct lengths in '), detail
    assert others_pass(results, but=['truncation_length']) == {}, results
    assert 'the masked content starts at 0%..0% of the truncated document' in results['rearranged'][1]


def test_a_correct_dataset_shows_its_truncation_lengths_and_span_starts(tmp_path):
    results, _ = judged(tmp_path, student_datasets.source())
    assert others_pass(results) == {}, results
    assert results['truncation_length'][1] == '4..112, 109 distinct lengths'
    detail = results['rearranged'][1]
    low, high = detail.split('starts at ')[1].split(' of')[0].split('..')
    assert low == '0%' and int(high.rstrip('%')) >= 90, detail


def test_a_third_mask_after_the_content_passes_and_is_named(tmp_path):
    results, _ = judged(tmp_path, student_datasets.source(third_mask=True))
    assert others_pass(results) == {}, results
    assert 'end the masked content with a third \u2047, as the starter\'s examples do' in \
        results['two_masks'][1]


@pytest.mark.parametrize('handout, length, passes', [
    ('synthesizer', 127, True), ('synthesizer', 128, False),  # w2 has block_size - 1 columns
    ('perceiver', 127, True), ('perceiver', 128, True),  # the comment's reading and the slicing's
    ('rope', 128, True), ('rope', 127, False),
    (None, 127, True), (None, 128, True),  # handout unknown: either
])
def test_lengths_follow_each_handouts_readings(tmp_path, handout, length, passes):
    results, _ = judged(tmp_path, student_datasets.source(length=length), handout=handout)
    ok, detail = results['lengths']
    assert ok is passes, detail
    assert others_pass(results, but=['lengths']) == {}, results
    if passes:
        assert detail.startswith(f'{length} (block_size')


def test_a_dataset_that_raises_on_a_short_document_gets_a_warning_not_a_failure(tmp_path):
    # randint(1, t//2) raises for t < 2: on the corpus's documents of 0 and 1 characters
    results, warnings = judged(tmp_path, student_datasets.source(masked='random.randint(1, t // 2)'))
    assert others_pass(results) == {}, results
    assert [w.split(' (')[0] for w in warnings] == [
        'CharCorruptionDataset raised on a document of 0 characters',
        'CharCorruptionDataset raised on a document of 1 characters']
    assert 'ValueError' in warnings[0] and 'wiki.txt (whose last document is empty)' in warnings[0]
    # a document of 1 character is in neither edition's wiki.txt: no reason given of the empty one
    assert 'whose last document is empty' not in warnings[1] and 'wiki.txt has none' in warnings[1]
    # the rope handout's wiki.txt (2024-25) has no empty document either
    _, rope = judged(tmp_path, student_datasets.source(masked='random.randint(1, t // 2)',
                                                       length=128), handout='rope')
    assert [w.split(' (')[0] for w in rope] == [w.split(' (')[0] for w in warnings]
    assert not any('whose last document is empty' in w for w in rope)
    assert rope[0].endswith('(the 2024-25 wiki.txt has none)')
    # the same error on a longer document fails every draw property
    results, _ = judged(tmp_path, student_datasets.source(masked='random.randint(1, t // 2 - 40)'))
    assert results['two_masks'][0] is False and 'ValueError' in results['two_masks'][1]


def test_the_made_up_corpus_holds_every_kind_of_document():
    _, docs = spec_check.make_corpus(0)
    lengths = [len(d) for d in docs]
    assert {0, 1, 2, 3} <= set(lengths)
    assert sum(4 <= n < 112 for n in lengths) >= 30  # shorter than the longest truncation
    assert sum(n >= 150 for n in lengths) >= 200
    assert '' in docs and spec_check.make_corpus(0)[1] == docs  # the seed repeats it


def test_a_numpy_dataset_gives_the_same_figures_twice_in_the_sandbox(tmp_path):
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'dataset.py').write_text(student_datasets.source(**PASSING["numpy's generator"]))
    request, docs, pairs = spec_check.request_for(draws=spec_check.MIN_DRAWS)
    details = []
    for run in range(2):
        report, why = spec_check.run_probe(str(src), str(tmp_path / f'sandbox{run}'), request,
                                           isolate=spec_check.sandbox_problem() is None)
        assert why is None
        results, _ = spec_check.check(report, 'synthesizer', docs, pairs)
        assert others_pass(results) == {}, results
        details.append(results['masked_length_mean'][1])
    assert details[0] == details[1]


def test_an_empty_starters_dataset_is_told_it_returns_none_not_warned_of_short_documents(tmp_path):
    """The 2024-25 starter's dataset.py with its blocks empty: __getitem__ returns None. Every
    draw property fails saying so, and no warning blames the short documents (it fails on all)."""
    import starter
    with open(os.path.join(REPO, 'src', 'dataset.py'), encoding='utf-8') as f:
        text = starter.starter_source(f.read(), '2024-25')
    results, warnings = judged(tmp_path, text, handout='rope')
    assert results['vocab'][0] is True
    for name in ('tensors', 'lengths', 'shifted', 'pad_fill', 'truncation_length'):
        ok, detail = results[name]
        assert ok is False and 'returned None, not (x, y)' in detail, (name, detail)
    assert warnings == []
