"""Gradescope, where CS224N grades: its results.json from one graded submission, and the
autograder zip that runs grade.py there.

    python scripts/grading/gradescope.py build --out autograder.zip \
        [--test_answers birth_test_answers.tsv] [--rubric scripts/grading/rubric.json]
        [--allow-unsandboxed]

Gradescope unzips the autograder into /autograder/source, runs its setup.sh once when it builds
the image, then run_autograder for each submission (the student's files in
/autograder/submission); run_autograder runs `grade.py --gradescope
/autograder/results/results.json`. The results follow Gradescope's specification: a total
`score` and `tests`, each with name, score, max_score, status, output and visibility.

The rubric (rubric.json; --rubric) gives each check's points: a key is a group of checks
(`layout`, `london`, `threshold`, `params`, `reproduction`, `dataset`) or one check's full name
(`threshold: vanilla.pretrain.dev >= 10%`), which wins over its group; a value is points, or
{"points": P, "visibility": V} with Gradescope's visibility (visible, hidden, after_due_date,
after_published). A check no key names is worth 0 points and still shown. The key `visibility`
alone is the results' own (the total's; default visible: a student sees the checks judged at
once, those the rubric hides aside). A check that could not be judged (no held-out answers for
it) is shown without points, as Gradescope's informational tests are, never as 0 of its maximum.
grade.py rewrites results.json as each group of checks finishes, so a run stopped by Gradescope's
timeout leaves what was judged.
"""
import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, 'src'))
sys.path.insert(0, HERE)
from engine import common  # noqa: E402
from engine import datafiles  # noqa: E402
from engine.command import paths  # noqa: E402
import submission  # noqa: E402
RUBRIC = os.path.join(HERE, 'rubric.json')
AUTOGRADER = os.path.join(HERE, 'autograder')  # setup.sh and run_autograder
GROUPS = ('layout', 'london', 'threshold', 'params', 'reproduction', 'dataset')
VISIBILITY = ('visible', 'hidden', 'after_due_date', 'after_published')
TEST_ANSWERS = 'birth_test_answers.tsv'  # its name in the autograder's data/
ALLOW_UNSANDBOXED = 'allow_unsandboxed'  # a file in the autograder: run_autograder's --no-sandbox


class RubricError(Exception):
    """A rubric that cannot be used: one line naming the file and the key."""


def load_rubric(path):
    """{key: (points, visibility)} from a rubric file, every key and value checked."""
    try:
        with open(path, encoding='utf-8') as f:
            raw = json.load(f)
    except OSError as e:
        raise RubricError(f'--rubric {path}: cannot read it ({e.strerror})')
    except (ValueError, UnicodeDecodeError) as e:
        raise RubricError(f'--rubric {path}: not JSON ({str(e).splitlines()[0][:80]})')
    if not isinstance(raw, dict):
        raise RubricError(f'--rubric {path}: expected an object of check: points')
    rubric = {'visibility': 'visible'}
    for key, value in raw.items():
        if key.startswith('_'):  # a comment
            continue
        if key == 'visibility':  # the results' own
            if value not in VISIBILITY:
                raise RubricError(f'--rubric {path}: visibility {value!r} (choose from '
                                  f'{", ".join(VISIBILITY)})')
            rubric[key] = value
            continue
        if key.split(':')[0] not in GROUPS:
            raise RubricError(f'--rubric {path}: {key!r} is no check (a key starts with one of '
                              f'{", ".join(GROUPS)})')
        if isinstance(value, dict):
            unknown = set(value) - {'points', 'visibility'}
            if unknown:
                raise RubricError(f'--rubric {path}: {key!r} has {sorted(unknown)[0]!r} (only '
                                  'points and visibility)')
            points, visibility = value.get('points', 0), value.get('visibility', 'visible')
        else:
            points, visibility = value, 'visible'
        if isinstance(points, bool) or not isinstance(points, (int, float)) \
                or not math.isfinite(points) or points < 0:
            raise RubricError(f'--rubric {path}: {key!r} is worth {points!r}, not a number of '
                              'points >= 0')
        if visibility not in VISIBILITY:
            raise RubricError(f'--rubric {path}: {key!r} has visibility {visibility!r} (choose '
                              f'from {", ".join(VISIBILITY)})')
        rubric[key] = (points, visibility)
    return rubric


def checks(r):
    """(name, passed, output) of every check a grade.py row holds: passed None = not judged."""
    out = []
    if r['handout'] is not None:
        layout_errors = [e for e in r['errors'] if e.endswith((': missing', ': empty'))]
        out.append(('layout: the handout\'s files, none missing or empty', r['layout_ok'],
                    '; '.join(layout_errors) or 'every file there'))
    london = [e for e in r['errors'] + r['warnings'] if 'london_baseline_accuracy.txt' in e]
    if r['handout'] == 'rope':
        out.append(('london: london_baseline_accuracy.txt', not any(e in r['errors'] for e in london),
                    '; '.join(london) or 'the London baseline\'s dev accuracy'))
    for label, verdict in r['thresholds'].items():
        name = submission.THRESHOLD_FILES[label]
        figure = r['verified'].get(name, r['accuracy'].get(name))
        said = [e for e in r['errors'] if e.startswith(label)]
        text = ('not judged (no answers for it)' if verdict is None else
                verdict if isinstance(verdict, str) else f'{figure:g}%' if figure is not None else '')
        out.append((f'threshold: {label}', verdict if verdict in (True, False, None) else False,
                    '; '.join([text] + said)))
    for name, status in r['params'].items():
        out.append((f'params: {name} loads', status == 'ok', 'loads' if status == 'ok' else status))
    for name, fraction in r['reproduced'].items():
        lines = r['differences'].get(name, [])
        out.append((f'reproduction: {name}', fraction == 1.0,
                    'its params do not load' if fraction is None
                    else f'{fraction:.2%} of lines regenerated' + ''.join('; ' + d for d in lines)))
    for prop, verdict in r['dataset'].items():
        out.append((f'dataset: {prop}', verdict, r['dataset_details'].get(prop, '')))
    return out


def results_json(r, rubric, still=None):
    """Gradescope's results.json (a dict) for one grade.py row, scored by `rubric`; `still`: the
    groups of checks not yet run (the results so far, said in the output)."""
    tests, score = [], 0.0
    for name, passed, output in checks(r):
        points, visibility = rubric.get(name, rubric.get(name.split(':')[0], (0, 'visible')))
        if passed is None:  # informational: no points either way
            tests.append(dict(name=name, output=f'not judged: {output}', visibility=visibility))
            continue
        got = points if passed is True else 0
        score += got
        tests.append(dict(name=name, score=got, max_score=points,
                          status='passed' if passed is True else 'failed', output=str(output),
                          visibility=visibility))
    problems = [e for e in r['errors'] if not e.endswith((': missing', ': empty'))]
    output = ('Graded as the ' + (f'{r["handout"]} handout ({r["year"]})' if r['handout']
                                  else 'unknown handout'))
    if problems:
        output += '. Problems: ' + '; '.join(problems)
    if r.get('sandbox'):
        output += f'. The dataset check ran in its sandbox: {r["sandbox"]}'
    if still:
        output += (f'. Still grading ({", ".join(still)}): if this stays, the run was stopped '
                   'before it finished (Gradescope\'s time limit?)')
    return dict(score=score, output=output, tests=tests,
                visibility=rubric.get('visibility', 'visible'))


def write_results(path, results):
    """results.json written whole or not at all (Gradescope reads a half-written one as a crash)."""
    def write(tmp):
        with open(tmp, 'w', encoding='utf-8', errors='backslashreplace') as f:
            json.dump(results, f, indent=1, ensure_ascii=False)
    common.atomic_write(path, write)


def failure_results(message):
    """results.json when the grader could not grade at all (bad setup): zero, and why."""
    return dict(score=0, output=f'The autograder could not grade this submission: {message}',
                tests=[])


def build(out, test_answers=None, rubric=RUBRIC, allow_unsandboxed=False, data_dir=None):
    """The autograder zip: setup.sh and run_autograder at its root, the grader (src/ and
    scripts/grading/), data/ (with the held-out test answers) and rubric.json."""
    load_rubric(rubric)  # refuse a bad rubric now, not on Gradescope
    data_dir = data_dir or datafiles.DATA
    members = []
    for name in ('setup.sh', 'run_autograder'):
        members.append((os.path.join(AUTOGRADER, name), name))
    for folder in ('src', os.path.join('scripts', 'grading')):
        for root, dirs, files in os.walk(os.path.join(REPO, folder)):
            dirs[:] = sorted(d for d in dirs if d != '__pycache__')
            for f in sorted(files):
                if not f.endswith('.pyc') and f != 'edition.txt':
                    path = os.path.join(root, f)
                    members.append((path, os.path.relpath(path, REPO).replace(os.sep, '/')))
    for name in ('wiki.txt', 'birth_dev.tsv', 'birth_test_inputs.tsv'):
        path = os.path.join(data_dir, name)
        if not os.path.isfile(path):
            raise RubricError(f'--data_dir {data_dir}: no {name} '
                              '(`python src/engine/datafiles.py` copies it)')
        members.append((path, f'data/{name}'))
    if test_answers is not None:
        if not os.path.isfile(test_answers):
            raise RubricError(f'--test_answers {test_answers}: file not found')
        members.append((test_answers, f'data/{TEST_ANSWERS}'))
    members.append((rubric, 'rubric.json'))
    texts = [(ALLOW_UNSANDBOXED, 'run_autograder passes --no-sandbox\n')] if allow_unsandboxed else []
    problem = paths.output_problem(out, [(name, path) for path, name in members], kind='zip')
    if problem is not None:
        raise RubricError(f'--out {out}: {problem}')
    submission.write_zip(out, members, texts)
    return len(members) + len(texts)


def main(argv=None):
    ap = argparse.ArgumentParser(prog='python scripts/grading/gradescope.py',
                                 description=' '.join(__doc__.split('\n\n')[0].split()))
    sub = ap.add_subparsers(dest='command', required=True)
    b = sub.add_parser('build', help='build the autograder zip to upload to Gradescope')
    b.add_argument('--out', default='autograder.zip')
    b.add_argument('--test_answers', default=None,
                   help='the held-out test answers (birth_dev.tsv\'s format); without them the '
                        'test thresholds are not judged')
    b.add_argument('--rubric', default=RUBRIC, help='points per check (default %(default)s)')
    b.add_argument('--data_dir', default=None, help='wiki.txt, birth_dev.tsv, birth_test_inputs.tsv')
    b.add_argument('--allow-unsandboxed', action='store_true',
                   help='where bubblewrap cannot run in Gradescope\'s container, run the dataset '
                        'check without it: a submission\'s dataset.py could then rewrite its own '
                        'results.json')
    args = ap.parse_args(argv)
    try:
        n = build(args.out, args.test_answers, args.rubric, args.allow_unsandboxed, args.data_dir)
    except RubricError as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    print(f'wrote {args.out}: {n} files; upload it as the assignment\'s autograder (Gradescope '
          'unzips it into /autograder/source and runs setup.sh once, then run_autograder per '
          'submission)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
