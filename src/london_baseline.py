# Calculate the accuracy of a baseline that simply predicts "London" for every
#   example in the dev set.
#   python src/london_baseline.py [EVAL_CORPUS_PATH]      (default birth_dev.tsv)
# Prints the handout's `Correct: ...` line and, as the 2024-25 edition's script does, writes the
# accuracy to london_baseline_accuracy.txt in the current folder (its submission includes it).
import sys

import utils
from datafiles import resolve


def main(path='birth_dev.tsv'):
    """The accuracy in [0, 100] of predicting London for every line of `path`."""
    path = resolve(path, 'eval corpus')
    with open(path, encoding='utf-8') as f:
        n_lines = sum(1 for _ in f)
    total, correct = utils.evaluate_places(path, ['London'] * n_lines)
    if total > 0:
        print('Correct: {} out of {}: {}%'.format(correct, total, correct / total * 100))
    return correct / total * 100 if total > 0 else 0.0


if __name__ == '__main__':
    try:
        accuracy = main(*sys.argv[1:2])
    except utils.UsageError as e:
        sys.exit(f'error: {e}')

    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as f:
            f.write(f'{accuracy}\n')
    utils.atomic_write('london_baseline_accuracy.txt', write)
