# Calculate the accuracy of a baseline that simply predicts "London" for every
#   example in the dev set.
#   python src/london_baseline.py [EVAL_CORPUS_PATH]      (default birth_dev.tsv)
import sys

import utils
from datafiles import resolve

if __name__ == '__main__':
    try:
        path = resolve(sys.argv[1] if len(sys.argv) > 1 else 'birth_dev.tsv', 'eval corpus')
    except utils.UsageError as e:
        sys.exit(f'error: {e}')
    with open(path, encoding='utf-8') as f:
        n_lines = sum(1 for _ in f)
    total, correct = utils.evaluate_places(path, ['London'] * n_lines)
    if total > 0:
        print('Correct: {} out of {}: {}%'.format(correct, total, correct / total * 100))
