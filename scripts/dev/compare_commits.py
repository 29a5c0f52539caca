"""Whether two versions of this code compute the same thing: the same short commands run in each,
their params compared tensor by tensor and their predictions byte by byte.

    python scripts/dev/compare_commits.py BEFORE            # commit BEFORE against the working tree
    python scripts/dev/compare_commits.py BEFORE AFTER      # two commits
    python scripts/dev/compare_commits.py BEFORE --preset cpu-20min   # a preset's commands
    python scripts/dev/compare_commits.py BEFORE --dropout 0   # no random draws to differ

For a change that should change no result (a reorganisation, a faster path): every variant is
pretrained for 1 epoch (fp32) on the first 300 lines of wiki.txt and the questions' lines,
finetuned for 1 epoch on 256 questions and evaluated on 40 dev questions; vanilla is also
pretrained on one batch in bf16; the same seed in both trees.
Params are compared as tensors, not as files (torch.save records the file's name). Prints one line
per output, and for one that differs by how much (params: the largest difference of a weight,
and that over the largest weight of its tensor; predictions: the lines that differ), and exits 1
when any differs.
"""
import os
import subprocess
import sys
import tempfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'src'))
import model  # noqa: E402
from engine.common import OneLineParser  # noqa: E402
from engine.datafiles import resolve  # noqa: E402

# every variant, the perceiver with the handout commands' bottleneck
VARIANTS = {v: ['--bottleneck_dim', '64'] if 'bottleneck_dim' in settings else []
            for v, settings in model.VARIANTS.items()}
FIXED = ['--max_epochs', '1', '--seed', '0', '--num_workers', '0', '--device', 'cpu']


def commands(preset='handout', dropout=None):
    """[(argv, output file)] in the order they run (finetuning reads the pretrained params);
    `dropout`: every command's --dropout (a change that draws its dropout masks in other shapes
    trains otherwise; without dropout what differs is the arithmetic's order)."""
    steps = []
    fixed = FIXED + ([] if dropout is None else ['--dropout', str(dropout)])
    for variant, extra in VARIANTS.items():
        common = [variant, 'corpus.txt', *extra, *fixed, '--precision', 'fp32', '--preset', preset]
        questions = []
        if preset != 'handout':
            # a preset without dropout lets each tree time two attention paths (either may win):
            # --plain takes the same one in both; a preset that mixes the questions into
            # pretraining reads them then too
            common.append('--plain')
            questions = ['--finetune_corpus_path', 'train.tsv']
        steps.append((['pretrain', *common, '--writing_params_path', f'{variant}.pretrain.params',
                       *questions], f'{variant}.pretrain.params'))
        steps.append((['finetune', *common, '--reading_params_path', f'{variant}.pretrain.params',
                       '--writing_params_path', f'{variant}.finetune.params',
                       '--finetune_corpus_path', 'train.tsv'], f'{variant}.finetune.params'))
        steps.append((['evaluate', *common, '--reading_params_path', f'{variant}.finetune.params',
                       '--eval_corpus_path', 'dev.tsv', '--outputs_path', f'{variant}.dev.predictions'],
                      f'{variant}.dev.predictions'))
    # bf16 autocast: one batch (a CPU without bf16 arithmetic computes it slowly)
    steps.append((['pretrain', 'vanilla', 'small.txt', *fixed, '--precision', 'bf16',
                   '--writing_params_path', 'vanilla-bf16.pretrain.params'],
                  'vanilla-bf16.pretrain.params'))
    return steps


def head(name, n):
    with open(resolve(name, name), encoding='utf-8') as f:
        return ''.join(line for _, line in zip(range(n), f))


def run_tree(tree, folder, preset, dropout=None):
    """Run commands(preset, dropout) with tree's src/run.py in `folder` (holding the inputs)."""
    # (the thread count fixed: one that followed the machine's load would change the sums' order)
    env = {**os.environ, 'CS224N_PATH_CACHE': os.path.join(folder, 'paths.json'),
           'CS224N_THREADS': 'fixed'}
    env.pop('CS224N_EDITION', None)
    for argv, _ in commands(preset, dropout):
        proc = subprocess.run([sys.executable, os.path.join(tree, 'src', 'run.py'), *argv],
                              cwd=folder, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f'error: {" ".join(argv)} failed in {tree}:\n{proc.stderr[-2000:]}')


def difference(a, b):
    """None where the outputs a and b are the same; else how they differ, in a few words."""
    if a.endswith('.params'):
        x, y = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
        if set(x) != set(y) or any(x[k].shape != y[k].shape for k in x):
            return 'other tensors'
        gaps = {k: float((x[k].float() - y[k].float()).abs().max()) for k in x if x[k].numel()}
        key = max(gaps, key=gaps.get)
        if not gaps[key]:
            return None
        scale = float(x[key].float().abs().max()) or 1.0
        return f'largest difference {gaps[key]:.3g} ({gaps[key] / scale:.2%} of the largest ' \
               f'weight) in {key}'
    with open(a, encoding='utf-8') as f, open(b, encoding='utf-8') as g:
        x, y = f.read().splitlines(), g.read().splitlines()
    if x == y:
        return None
    differ = sum(p != q for p, q in zip(x, y)) + abs(len(x) - len(y))
    return f'{differ} of {max(len(x), len(y))} lines differ'


def main():
    ap = OneLineParser(prog='python scripts/dev/compare_commits.py', description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('before', help='a commit')
    ap.add_argument('after', nargs='?', default=None, help='a commit (default: the working tree)')
    ap.add_argument('--preset', default='handout',
                    help="the commands' --preset (default handout; both trees must know it)")
    ap.add_argument('--dropout', type=float, default=None,
                    help="every command's --dropout (default: the preset's)")
    args = ap.parse_args()
    train, dev = head('birth_places_train.tsv', 256), head('birth_dev.tsv', 40)
    # the questions' lines join the corpus: its vocabulary must hold their characters
    corpus = head('wiki.txt', 300) + (train + dev).replace('\t', ' ')
    inputs = {'corpus.txt': corpus, 'small.txt': ''.join(corpus.splitlines(True)[:128]),
              'train.tsv': train, 'dev.tsv': dev}
    with tempfile.TemporaryDirectory(prefix='compare-') as tmp:
        folders = {}
        for label, rev in (('before', args.before), ('after', args.after)):
            tree = REPO
            if rev is not None:
                tree = os.path.join(tmp, f'{label}-tree')
                os.makedirs(tree)
                archive = subprocess.run(['git', 'archive', rev], cwd=REPO, capture_output=True)
                if archive.returncode != 0:
                    ap.error(f'{rev}: not a commit ({archive.stderr.decode().strip()})')
                subprocess.run(['tar', '-x', '-C', tree], input=archive.stdout, check=True)
            folders[label] = os.path.join(tmp, label)
            os.makedirs(folders[label])
            for name, text in inputs.items():
                with open(os.path.join(folders[label], name), 'w', encoding='utf-8') as f:
                    f.write(text)
            print(f'running the commands with {rev or "the working tree"} ...', flush=True)
            run_tree(tree, folders[label], args.preset, args.dropout)
        differ = 0
        for _, name in commands(args.preset, args.dropout):
            how = difference(os.path.join(folders['before'], name),
                             os.path.join(folders['after'], name))
            differ += how is not None
            print(f'{name}: {"identical" if how is None else "DIFFERENT: " + how}')
    total = len(commands(args.preset, args.dropout))
    print(f'{total - differ} of {total} outputs identical')
    sys.exit(1 if differ else 0)


if __name__ == '__main__':
    main()
