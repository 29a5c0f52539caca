"""How long grade.py takes over one complete submission on this machine, everything included
(unzipping, layout, accuracy, loading, reproducing all predictions of the 500 dev and 437 test
questions, the dataset check in its sandbox), measured from the command line as a TA runs it.

    python scripts/grading/benchmark_grade.py [--handout synthesizer|perceiver|rope ...] [--repeat 2]
        [--class_size 6 --jobs 1,2]

The sample submissions (sample_submission.py) hold one-step models: their answers are noise, so
greedy decoding runs all 32 steps for every question; trained models stop at the second ⁇ and
grade faster. Prints one line per handout: seconds per grading, each run and the best. With
--class_size N: N submissions (the handouts' zips in turn) in one grade.py run, once per --jobs
value, side by side: the seconds of each and the speed-up over --jobs 1.
"""
import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, 'src'))
from engine.machine.cpu_paths import cpu_model  # noqa: E402
import sample_submission  # noqa: E402
import submission  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--handout', action='append', choices=sorted(submission.HANDOUTS))
    ap.add_argument('--repeat', type=int, default=2)
    ap.add_argument('--class_size', type=int, default=0, help='also grade a class of this many')
    ap.add_argument('--jobs', default='1,2', help='--jobs values for the class (comma-separated)')
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
        if args.class_size:
            grade_a_class(tmp, data, handouts, args.class_size,
                          [int(j) for j in args.jobs.split(',')])


def grade_a_class(tmp, data, handouts, size, jobs):
    """One grade.py run over `size` submissions per --jobs value; the seconds side by side."""
    folder = os.path.join(tmp, 'class')
    os.makedirs(folder)
    for i in range(size):
        handout = handouts[i % len(handouts)]
        shutil.copy(os.path.join(tmp, handout, submission.ZIP_NAME[handout]),
                    os.path.join(folder, f'{i:03d}-{handout}.zip'))
    took = {}
    for j in jobs:
        start = time.perf_counter()
        subprocess.run([sys.executable, os.path.join(HERE, 'grade.py'), folder, '--data_dir', data,
                        '--jobs', str(j)], check=True, capture_output=True)
        took[j] = time.perf_counter() - start
    print(f'a class of {size}: ' + ', '.join(
        f'--jobs {j} {t:.1f} s ({t / size:.1f} s each, {took[jobs[0]] / t:.2f}x)'
        for j, t in took.items()))


if __name__ == '__main__':
    main()
