# [engine] Handout file: the starter's london_baseline.py (its lines: tests/handout/test_cli.py).
# [2024-25] TODO: [part d]
# Compute the accuracy of a baseline that answers "London" to every question of the dev set.
# Hint: the starter's utilities already score a list of predictions; a few lines suffice.
# [engine]   python src/london_baseline.py [EVAL_CORPUS_PATH]      (default birth_dev.tsv)
# [engine] It prints the handout's `Correct: ...` line and writes the accuracy to
# [engine] london_baseline_accuracy.txt in the current folder (the 2024-25 submission zips it).
# [engine] An empty or unreadable file, or one without gold places, is one error line (exit 2),
# [engine] and nothing is written.

import argparse  # [2024-25] noqa: F401 (the starter imports it)
import sys  # [engine]
import utils  # [2024-25]
#[2021-22 2022-23 solved] import utils
#[2021-22 2022-23 solved] with open('birth_dev.tsv', encoding='utf-8') as f:
#[2021-22 2022-23 solved]     questions = f.readlines()
#[2021-22 2022-23 solved] total, correct = utils.evaluate_places('birth_dev.tsv', ['London'] * len(questions))
#[2021-22 2022-23 solved] print('Correct: {} out of {}: {}%'.format(correct, total, correct / total * 100))

from engine import common  # [engine]
from engine.command import inputs, paths  # [engine]
from engine.datafiles import resolve  # [engine]


def main():  # [2024-25]
    accuracy = 0.0

    # Compute accuracy in the range [0.0, 100.0]
    ### YOUR CODE HERE ###
    path = 'birth_dev.tsv'
    path = resolve(sys.argv[1] if sys.argv[1:] else path, 'eval corpus')  # [engine]
    rows = inputs.read_gold_lines(path, 'eval corpus')  # [engine] every line checked first
    if not any(row is not None and row[1] is not None for row in rows):  # [engine]
        raise common.UsageError(f'eval corpus {path} has no gold places (its lines are bare '
                                'questions): there is no accuracy to compute')
    with open(path, encoding='utf-8') as f:
        questions = f.readlines()
    # [engine] scored as run.py scores (blank lines, CRLF ends), where the handout's raises:
    total, correct = inputs.evaluate_places(path, ['London'] * len(questions))  # [engine]
    #[2021-22 2022-23 2024-25] total, correct = utils.evaluate_places(path, ['London'] * len(questions))
    if total > 0:
        accuracy = correct / total * 100
    print('Correct: {} out of {}: {}%'.format(correct, total, accuracy))
    ### END YOUR CODE ###

    return accuracy


if __name__ == '__main__':  # [2024-25]
    try:  # [wrapper]
        # [engine] the output is checked before anything is read: never an input, a name that fits
        problem = paths.output_problem('london_baseline_accuracy.txt', [  # [engine]
            ('eval corpus', sys.argv[1] if sys.argv[1:] else None)])
        if problem is not None:  # [engine]
            raise common.UsageError(f'london_baseline_accuracy.txt (written in the current '
                                    f'folder): {problem}')
        accuracy = main()
    except common.UsageError as e:  # [engine]
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)
    with open("london_baseline_accuracy.txt", "w", encoding="utf-8") as f:
        f.write(f"{accuracy}\n")
