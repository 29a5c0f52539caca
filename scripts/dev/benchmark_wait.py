"""How fast run.py pretrains on this CPU, idle and beside one CPU-bound process, with OpenMP's
default wait policy, with passive waiting, and with run.py's own choice (src/cpu_load.py: passive
when other processes hold a quarter of the CPUs or more when it starts).

    python scripts/dev/benchmark_wait.py [--rounds 2] [--lines 1344] [--out results/wait-policy.md]

Each measurement is `python src/run.py pretrain vanilla CORPUS --preset cpu-20min --max_epochs 1`
on the first --lines lines of wiki.txt (21 steps of 64 at the default), its throughput the last
tok/s run.py's progress line shows. The three settings take turns, --rounds times per condition
(a machine's pace drifts), and the medians are compared: the target is run.py's choice within
10% of the better of the other two in both conditions.
"""
import argparse
import os
import statistics
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, 'src'))
from cpu_paths import cpu_model  # noqa: E402
from datafiles import resolve  # noqa: E402

SETTINGS = {  # name -> environment changes
    'OpenMP default': {'CS224N_WAIT_POLICY': 'default'},
    'passive': {'OMP_WAIT_POLICY': 'PASSIVE'},
    'run.py\'s choice': {},
}
CHOICE = 'run.py\'s choice'
SPIN = 'while True:\n    pass\n'


def throughput(corpus, folder, env_changes):
    """tok/s of one pretraining epoch, and run.py's wait-policy line if it printed one."""
    env = {k: v for k, v in os.environ.items() if k not in ('OMP_WAIT_POLICY', 'CS224N_WAIT_POLICY')}
    env.update(env_changes, CS224N_PATH_CACHE=os.path.join(folder, 'paths.json'))
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'src', 'run.py'), 'pretrain',
                           'vanilla', corpus, '--preset', 'cpu-20min', '--max_epochs', '1',
                           '--precision', 'fp32', '--writing_params_path',
                           os.path.join(folder, 'p.params')],
                          cwd=folder, env=env, capture_output=True, text=True, check=True)
    rates = re.findall(r'([\d,]+) tok/s', proc.stderr)
    note = next((line for line in proc.stdout.splitlines() if line.startswith('cpu: ')), None)
    return float(rates[-1].replace(',', '')), note


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--lines', type=int, default=1344)
    ap.add_argument('--out', default=None, help='also write the report here (markdown)')
    args = ap.parse_args(argv)
    rows, notes = [], set()
    with tempfile.TemporaryDirectory() as folder:
        corpus = os.path.join(folder, 'wiki.txt')
        with open(resolve('wiki.txt', 'wiki.txt'), encoding='utf-8') as f:
            lines = f.read().split('\n')[:args.lines]
        with open(corpus, 'w', encoding='utf-8') as f:
            f.write('\n'.join(lines) + '\n')
        for condition in ('idle', 'beside one CPU-bound process'):
            spinner = None
            if condition != 'idle':
                spinner = subprocess.Popen([sys.executable, '-c', SPIN])
                time.sleep(1)
            try:
                figures = {name: [] for name in SETTINGS}
                for _ in range(args.rounds):
                    for name, changes in SETTINGS.items():
                        rate, note = throughput(corpus, folder, changes)
                        figures[name].append(rate)
                        if note and name == CHOICE:
                            notes.add(f'{condition}: {note}')
                        print(f'{condition}, {name}: {rate:,.0f} tok/s', flush=True)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
            m = {name: statistics.median(v) for name, v in figures.items()}
            ratio = m[CHOICE] / max(m['OpenMP default'], m['passive'])
            rows.append(f'| {condition} | ' + ' | '.join(f'{m[n]:,.0f}' for n in SETTINGS)
                        + f' | {ratio:.2f} |')
    lines = [f'- machine: {cpu_model()}, {os.cpu_count()} cores; command: `python '
             f'scripts/dev/benchmark_wait.py {" ".join(sys.argv[1:] if argv is None else argv)}`'.rstrip(),
             f'- date: {time.strftime("%Y-%m-%d", time.gmtime())}; pretraining tok/s, median of '
             f'{args.rounds} rounds taking turns', '',
             '| condition | ' + ' | '.join(SETTINGS) + ' | choice / better of the two |',
             '|---|---|---|---|---|'] + rows + [''] + sorted(notes)
    print('\n'.join(lines))
    if args.out:
        with open(args.out, 'w', encoding='utf-8') as f:
            f.write('# OpenMP wait policy: run.py pretraining, idle and busy\n\n'
                    + '\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
