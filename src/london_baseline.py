"""Handout file: the starter's london_baseline.py (its line fixed: tests/test_cli.py)."""
# Calculate the accuracy of a baseline that simply predicts "London" for every
#   example in the dev set.
#   python src/london_baseline.py [EVAL_CORPUS_PATH]      (default birth_dev.tsv)
# Prints the handout's `Correct: ...` line and, as the 2024-25 edition's script does, writes the
# accuracy to london_baseline_accuracy.txt in the current folder (its submission includes it).
# An empty or unreadable file, or one without gold places, is one error line (exit 2), and
# nothing is written.
import sys

from engine import common
from engine import inputs
from engine import paths
import utils
from engine.datafiles import resolve

OUTPUT = 'london_baseline_accuracy.txt'


def main(path='birth_dev.tsv'):
    """The accuracy in [0, 100] of predicting London for every line of `path`."""
    path = resolve(path, 'eval corpus')
    rows = inputs.read_gold_lines(path, 'eval corpus')
    if not any(row is not None and row[1] is not None for row in rows):
        raise common.UsageError(f'eval corpus {path} has no gold places (its lines are bare '
                               'questions): there is no accuracy to compute')
    total, correct = utils.evaluate_places(path, ['London'] * len(rows))
    print('Correct: {} out of {}: {}%'.format(correct, total, correct / total * 100))
    return correct / total * 100


if __name__ == '__main__':
    try:
        problem = paths.output_problem(OUTPUT, [('eval corpus', sys.argv[1] if sys.argv[1:] else None)])
        if problem is not None:
            raise common.UsageError(f'{OUTPUT} (written in the current folder): {problem}')
        accuracy = main(*sys.argv[1:2])
    except common.UsageError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)

    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as f:
            f.write(f'{accuracy}\n')
    common.atomic_write(OUTPUT, write)
