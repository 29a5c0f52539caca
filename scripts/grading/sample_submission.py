"""A complete submission made the way a student makes one, in minutes: run.py finetunes each model
for one epoch from scratch on the first questions of birth_places_train.tsv (one step: the
params are of the handout's shapes, the answers are noise), evaluates it on the dev and test
questions, and collect_submission.sh zips the result. For grade.py's tests and benchmark.

    python scripts/grading/sample_submission.py --handout rope --out DIR [--dev 40 --test 30]

vanilla.finetune.params and the vanilla.pretrain predictions are copies of the no-pretraining
ones (a real run pretrains first; the grader cannot tell, and needs only files of the right
kind). Writes into DIR (which must not exist): the data used (data/), the run's folder (run/),
the zip and its unzipped copy (unzipped/).
"""
import argparse
import os
import shutil
import subprocess
import sys
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, 'data')
sys.path.insert(0, os.path.join(REPO, 'scripts', 'grading'))
import submission  # noqa: E402

# every run.py command of the submission in one process (one torch import)
RUNS = '''
import shutil, sys
sys.path.insert(0, {src!r})
import run
wiki, train, dev, test, variant = sys.argv[1:6]
quick = ['--max_epochs', '1', '--precision', 'fp32']
for model, params, preds in [('vanilla', 'vanilla.model.params', 'vanilla.nopretrain'),
                             (variant, variant + '.finetune.params', variant + '.pretrain')]:
    size = ['--bottleneck_dim', '64'] if model == 'perceiver' else []  # the handout's commands
    run.main(['finetune', model, wiki, '--writing_params_path', params,
              '--finetune_corpus_path', train] + quick + size)
    for split, path in (('dev', dev), ('test', test)):
        run.main(['evaluate', model, wiki, '--reading_params_path', params,
                  '--eval_corpus_path', path, '--outputs_path', f'{{preds}}.{{split}}.predictions']
                 + size)
shutil.copyfile('vanilla.model.params', 'vanilla.finetune.params')
for split in ('dev', 'test'):
    shutil.copyfile(f'vanilla.nopretrain.{{split}}.predictions',
                    f'vanilla.pretrain.{{split}}.predictions')
'''.format(src=os.path.join(REPO, 'src'))


def head(src, dest, n=None, suffix=''):
    """The first n lines of src (all with None) into dest, each with `suffix` added."""
    with open(src, encoding='utf-8') as f:
        lines = [line.rstrip('\n') for line in f][:n]
    with open(dest, 'w', encoding='utf-8') as f:
        f.writelines(line + suffix + '\n' for line in lines)


def make_data(folder, dev=None, test=None, train=64):
    """The grader's data folder: wiki.txt, and the first questions of each TSV."""
    os.makedirs(folder)
    shutil.copyfile(os.path.join(DATA, 'wiki.txt'), os.path.join(folder, 'wiki.txt'))
    for name, n in (('birth_dev.tsv', dev), ('birth_test_inputs.tsv', test),
                    ('birth_places_train.tsv', train)):
        head(os.path.join(DATA, name), os.path.join(folder, name), n)
    return folder


def build(out, handout, data):
    """Run the submission's commands in out/run with the data in `data`; returns the zip."""
    run_dir = os.path.join(out, 'run')
    os.makedirs(run_dir)
    for name in os.listdir(data):
        shutil.copyfile(os.path.join(data, name), os.path.join(run_dir, name))
    subprocess.run([sys.executable, '-c', RUNS, 'wiki.txt', 'birth_places_train.tsv',
                    'birth_dev.tsv', 'birth_test_inputs.tsv', handout],
                   cwd=run_dir, check=True, capture_output=True)
    if handout == 'rope':  # its london_baseline_accuracy.txt, from this birth_dev.tsv
        subprocess.run([sys.executable, os.path.join(REPO, 'src', 'london_baseline.py')],
                       cwd=run_dir, check=True, capture_output=True)
    zipped = os.path.join(out, submission.ZIP_NAME[handout])
    subprocess.run(['bash', os.path.join(REPO, 'collect_submission.sh'), '--dir', run_dir,
                    '--output', zipped, '--handout', handout], cwd=run_dir, check=True,
                   capture_output=True)
    with zipfile.ZipFile(zipped) as z:
        z.extractall(os.path.join(out, 'unzipped'))
    return zipped


def main(argv=None):
    ap = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--handout', choices=sorted(submission.HANDOUTS), default='synthesizer')
    ap.add_argument('--out', required=True)
    ap.add_argument('--dev', type=int, default=None, help='dev questions (default: all 500)')
    ap.add_argument('--test', type=int, default=None, help='test questions (default: all 437)')
    args = ap.parse_args(argv)
    if os.path.exists(args.out):
        ap.error(f'--out {args.out} exists; name a new folder')
    out = os.path.abspath(args.out)  # the commands below run in out/run
    data = make_data(os.path.join(out, 'data'), args.dev, args.test)
    try:
        zipped = build(out, args.handout, data)
    except subprocess.CalledProcessError as e:
        said = (e.stderr or b'').decode('utf-8', 'replace').strip().splitlines()
        raise SystemExit(f'error: making the sample submission in {args.out}: '
                         f'{" ".join(e.cmd[:2])} failed: {said[-1] if said else e}')
    print(os.path.relpath(zipped))


if __name__ == '__main__':
    main()
