"""How long grade.py takes over one complete submission on this machine, everything included
(unzipping, layout, accuracy, loading, reproducing all predictions of the 500 dev and 437 test
questions, the dataset check in its sandbox), measured from the command line as a TA runs it.

    python scripts/grading/benchmark_grade.py [--handout synthesizer|perceiver|rope ...] [--repeat 2]

The sample submissions (sample_submission.py) hold one-step models: their answers are noise, so
greedy decoding runs all 32 steps for every question; trained models stop at the second ⁇ and
grade faster. Prints one line per handout: seconds per grading, each run and the best.
"""
import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, 'src'))
from cpu_paths import cpu_model  # noqa: E402
import sample_submission  # noqa: E402
import submission  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--handout', action='append', choices=sorted(submission.HANDOUTS))
    ap.add_argument('--repeat', type=int, default=2)
    args = ap.parse_args(argv)
    handouts = args.handout or ['synthesizer', 'perceiver', 'rope']
    print(f'machine: {cpu_model()}, {os.cpu_count()} cores; python {platform.python_version()}')
    with tempfile.TemporaryDirectory() as tmp:
        data = sample_submission.make_data(os.path.join(tmp, 'data'))
        for handout in handouts:
            zipped = sample_submission.build(os.path.join(tmp, handout), handout, data)
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                subprocess.run([sys.executable, os.path.join(HERE, 'grade.py'), zipped,
                                '--data_dir', data], check=True, capture_output=True)
                times.append(time.perf_counter() - start)
            print(f'{handout}: grading one complete submission took '
                  f'{", ".join(f"{t:.1f}" for t in times)} s (best {min(times):.1f} s)')


if __name__ == '__main__':
    main()
