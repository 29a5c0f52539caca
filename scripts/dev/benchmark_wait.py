"""How fast run.py pretrains on this CPU, idle, beside scripts/load.py's light and heavy loads, and
beside the heavy one for the run's first seconds only: with OpenMP's default wait policy (threads
spin) and every thread, with passive waiting and every thread, with one thread, and with run.py's
own choice (src/engine/machine/cpu_load.py: spinning threads, one per core the other processes leave,
re-measured every 5 s).

    python scripts/dev/benchmark_wait.py [--rounds 2] [--lines 1344] [--out results/wait-policy.md]

Each measurement is `python src/run.py pretrain vanilla CORPUS --preset cpu-20min --max_epochs 1`
on the first --lines lines of wiki.txt (21 steps of 64 at the default), its throughput the last
tok/s run.py's progress line shows (the average since the run's first step). The settings take
turns, --rounds times per condition (a machine's pace drifts), and the medians are compared:
the target is run.py's choice within 10% of the best of the others in every condition.
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
from engine.machine.cpu_load import FIXED  # noqa: E402
from engine.machine.cpu_paths import cpu_model  # noqa: E402
from engine.datafiles import resolve  # noqa: E402

SETTINGS = {  # name -> environment changes
    'OpenMP default': {FIXED: 'fixed'},
    'passive': {'OMP_WAIT_POLICY': 'PASSIVE', FIXED: 'fixed'},
    'one thread': {'OMP_NUM_THREADS': '1'},
    'run.py\'s choice': {},
}
CHOICE = 'run.py\'s choice'
LOAD = os.path.join(REPO, 'scripts', 'load.py')
CONDITIONS = {  # name -> (scripts/load.py's load, seconds it runs from 1 s before each run)
    'idle': (None, 0),
    'light load': ('light', 1e9),
    'heavy load (one CPU-bound process)': ('heavy', 1e9),
    'heavy load for the first 5 s': ('heavy', 6),
}


def throughput(corpus, folder, env_changes):
    """tok/s of one pretraining epoch, and run.py's line about threads if it printed one."""
    env = {k: v for k, v in os.environ.items() if k not in ('OMP_WAIT_POLICY', 'OMP_NUM_THREADS', FIXED)}
    env.update(env_changes, CS224N_PATH_CACHE=os.path.join(folder, 'paths.json'))
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'src', 'run.py'), 'pretrain',
                           'vanilla', corpus, '--preset', 'cpu-20min', '--max_epochs', '1',
                           '--precision', 'fp32', '--writing_params_path',
                           os.path.join(folder, 'p.params')],
                          cwd=folder, env=env, capture_output=True, text=True, check=True)
    rates = re.findall(r'([\d,]+) tok/s', proc.stderr)
    note = next((line for line in proc.stdout.splitlines() if line.startswith('cpu: other')), None)
    return float(rates[-1].replace(',', '')), note


def main(argv=None):
    ap = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--lines', type=int, default=1344)
    ap.add_argument('--out', default=None, help='also write the report here (markdown)')
    args = ap.parse_args(argv)
    rows, notes = [], set()
    with tempfile.TemporaryDirectory() as folder:
        corpus = os.path.join(folder, 'wiki.txt')
        with open(resolve('wiki.txt', 'wiki.txt'), encoding='utf-8') as f:
            wiki = f.read().split('\n')
        lines = wiki[:args.lines]
        # the preset's mix trains on the questions too: their characters must be in the vocabulary
        with open(resolve('birth_places_train.tsv', 'birth_places_train.tsv'), encoding='utf-8') as f:
            missing = set(f.read()) - set('\n'.join(lines)) - {'\t', '\n'}
        lines += list(dict.fromkeys(next(line for line in wiki if c in line) for c in sorted(missing)))
        with open(corpus, 'w', encoding='utf-8') as f:
            f.write('\n'.join(lines) + '\n')
        for condition, (load, seconds) in CONDITIONS.items():
            figures = {name: [] for name in SETTINGS}
            for _ in range(args.rounds):
                for name, changes in SETTINGS.items():
                    spinner = None
                    if seconds:
                        spinner = subprocess.Popen([sys.executable, LOAD, load, '--seconds', str(seconds)],
                                                   stderr=subprocess.DEVNULL)
                        time.sleep(1)
                    try:
                        rate, note = throughput(corpus, folder, changes)
                    finally:
                        if spinner is not None:  # load.py stops its worker
                            spinner.terminate()
                            spinner.wait()
                    figures[name].append(rate)
                    if note and name == CHOICE:
                        notes.add(f'{condition}: {note}')
                    print(f'{condition}, {name}: {rate:,.0f} tok/s', flush=True)
            m = {name: statistics.median(v) for name, v in figures.items()}
            ratio = m[CHOICE] / max(v for n, v in m.items() if n != CHOICE)
            rows.append(f'| {condition} | ' + ' | '.join(f'{m[n]:,.0f}' for n in SETTINGS)
                        + f' | {ratio:.2f} |')
    lines = [f'- machine: {cpu_model()}, {os.cpu_count()} cores; command: `python '
             f'scripts/dev/benchmark_wait.py {" ".join(sys.argv[1:] if argv is None else argv)}`'.rstrip(),
             f'- date: {time.strftime("%Y-%m-%d", time.gmtime())}; pretraining tok/s, median of '
             f'{args.rounds} rounds taking turns', '',
             '| condition | ' + ' | '.join(SETTINGS) + ' | choice / best of the others |',
             '|---|' + '---|' * (len(SETTINGS) + 1)] + rows + [''] + sorted(notes)
    print('\n'.join(lines))
    if args.out:
        with open(args.out, 'w', encoding='utf-8') as f:
            f.write('# Busy CPUs: run.py pretraining, idle and busy\n\n'
                    + '\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
