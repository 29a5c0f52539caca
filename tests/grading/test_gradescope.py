"""scripts/grading/gradescope.py without grading anything: the rubric is checked key by key
(a typo is one line naming it, never a silent 0), and a grade.py row becomes Gradescope's
results.json with the rubric's points. The autograder run end to end is in test_grade.py."""
import json

import pytest


import gradescope  # noqa: E402

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)


def rubric_file(tmp_path, value):
    path = tmp_path / 'rubric.json'
    path.write_text(value if isinstance(value, str) else json.dumps(value))
    return str(path)


def test_the_shipped_rubric_loads_and_names_every_group():
    rubric = gradescope.load_rubric(gradescope.RUBRIC)
    assert set(gradescope.GROUPS) <= set(rubric)
    assert rubric['threshold: rope.pretrain.test >= 30%'] == (10, 'after_published')


@pytest.mark.parametrize('value, words', [
    ({'treshold': 5}, "'treshold' is no check"),
    ({'dataset': -1}, "'dataset' is worth -1, not a number of points >= 0"),
    ({'dataset': True}, "'dataset' is worth True"),
    ({'dataset': 'ten'}, "'dataset' is worth 'ten'"),
    ('{"dataset": NaN}', "'dataset' is worth nan"),
    ({'layout': {'points': 1, 'visibility': 'secret'}}, "visibility 'secret'"),
    ({'layout': {'points': 1, 'hidden': True}}, "'layout' has 'hidden'"),
    ({'visibility': 'later'}, "visibility 'later'"),
    ('[1, 2]', 'expected an object'),
    ('{"layout": ', 'not JSON'),
])
def test_a_bad_rubric_is_one_line_naming_the_key(tmp_path, value, words):
    with pytest.raises(gradescope.RubricError) as e:
        gradescope.load_rubric(rubric_file(tmp_path, value))
    assert words in str(e.value) and '\n' not in str(e.value) and 'rubric.json' in str(e.value)


def row(**changes):
    r = dict(submission='s.zip', handout='synthesizer', year='2021-22', layout_ok=True, errors=[],
             warnings=[], notes=[], accuracy={'vanilla.pretrain.dev.predictions': 12.0},
             thresholds={'vanilla.pretrain.dev >= 10%': True, 'synthesizer.pretrain.test >= 5%': None},
             params={'vanilla.model.params': 'ok', 'vanilla.finetune.params': 'not a readable params file'},
             reproduced={'vanilla.pretrain.dev.predictions': 1.0,
                         'vanilla.nopretrain.dev.predictions': None},
             verified={'vanilla.pretrain.dev.predictions': 12.0}, differences={},
             dataset={'vocab': True, 'rearranged': None}, dataset_details={'vocab': '60 ids',
                                                                          'rearranged': 'no draw'})
    r.update(changes)
    return r


def test_a_row_becomes_gradescopes_results_with_the_rubrics_points(tmp_path):
    rubric = gradescope.load_rubric(rubric_file(tmp_path, {
        'layout': 2, 'threshold': 10, 'params': 1, 'reproduction': 3, 'dataset': 1,
        'threshold: synthesizer.pretrain.test >= 5%': {'points': 7, 'visibility': 'hidden'}}))
    results = gradescope.results_json(row(), rubric)
    tests = {t['name']: t for t in results['tests']}
    assert tests['threshold: vanilla.pretrain.dev >= 10%'] == dict(
        name='threshold: vanilla.pretrain.dev >= 10%', score=10, max_score=10, status='passed',
        output='12%', visibility='visible')
    # a check not judged (no answers for it) is informational: no points either way
    unjudged = tests['threshold: synthesizer.pretrain.test >= 5%']
    assert set(unjudged) == {'name', 'output', 'visibility'} and unjudged['visibility'] == 'hidden'
    assert unjudged['output'].startswith('not judged: ')
    assert 'max_score' not in tests['dataset: rearranged']
    assert tests['params: vanilla.finetune.params loads']['score'] == 0
    assert tests['reproduction: vanilla.nopretrain.dev.predictions']['output'] == \
        'its params do not load'
    assert tests['dataset: vocab']['status'] == 'passed'
    assert results['score'] == 2 + 10 + 1 + 3 + 1
    assert results['visibility'] == 'visible'  # the total, at once
    assert 'london' not in {n.split(':')[0] for n in tests}  # rope's file only


def test_a_check_the_rubric_does_not_name_is_shown_for_no_points(tmp_path):
    rubric = gradescope.load_rubric(rubric_file(tmp_path, {'layout': 1}))
    results = gradescope.results_json(row(), rubric)
    assert results['score'] == 1
    assert all(t['max_score'] == 0 for t in results['tests']
               if not t['name'].startswith('layout') and 'not judged' not in t['output'])


def test_the_results_visibility_is_the_rubrics_and_partial_results_say_so(tmp_path):
    rubric = gradescope.load_rubric(rubric_file(tmp_path, {'layout': 1,
                                                           'visibility': 'after_published'}))
    assert 'visibility' not in {t['name'] for t in gradescope.results_json(row(), rubric)['tests']}
    partial = gradescope.results_json(row(dataset={}, dataset_details={}), rubric, ['dataset'])
    assert partial['visibility'] == 'after_published'
    assert 'Still grading (dataset)' in partial['output']
    assert 'Still grading' not in gradescope.results_json(row(), rubric)['output']
