"""How many positions a packed GPU step computes (run.py --pack_multiple N), batch by batch.

    python scripts/dev/packed_sizes.py [--multiple 256 512 1024] [--epochs 3] [--stage pretrain]
                                       [--groups 2 4 8] [--groups_multiple 512]

The handout's training batches of one stage (pretraining on wiki.txt, or finetuning on
birth_places_train.tsv), drawn as the trainer draws them (seed 0, the file's order), trimmed as a
recorded step trims them (engine/fast/graphs.py). For each N: the sizes the steps pack to
(fastpath.packed_size) and how many batches have each; each size a CUDA graph under
--compile graphs. Also the positions the loss needs, against the positions of the batch; and
for each number of groups (run.py --pack_groups, with the first N): the share of the causal
attention's work left when each group of rows attends over its own columns (fastpath.layout),
and how many recordings the sizes (--pack_multiple --groups_multiple) and columns make.
"""
import argparse
import collections
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'src'))
import torch  # noqa: E402

import dataset  # noqa: E402
from engine import presets  # noqa: E402
from engine.fast import batches, fastpath, graphs  # noqa: E402
from engine.datafiles import resolve  # noqa: E402
import utils  # noqa: E402


def stage_batches(stage, epochs):
    """The stage's (x, y) batches over `epochs` epochs, as graphs.CapturedSteps shapes them."""
    utils.set_seed(0)
    wiki = dataset.CharCorruptionDataset(open(resolve('wiki.txt', 'wiki.txt'), encoding='utf-8').read(),
                                         presets.BLOCK_SIZE)
    data = wiki
    if stage == 'finetune':
        data = dataset.NameDataset(wiki, open(resolve('birth_places_train.tsv', 'tsv'),
                                              encoding='utf-8').read())
    size = presets.stage_values('handout', 'pretrain' if stage == 'pretrain'
                                else 'finetune_pretrained')['batch_size']
    generator = torch.Generator().manual_seed(torch.initial_seed())
    for _ in range(epochs):
        for batch in batches.batch_indices(len(data), size, generator, shuffle=False):
            yield graphs.CapturedSteps.shaped(*batches.collate(data, *batch), size)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--multiple', type=int, nargs='+', default=[256, 512, 1024])
    ap.add_argument('--epochs', type=int, default=3)
    ap.add_argument('--stage', choices=('pretrain', 'finetune'), default='pretrain')
    ap.add_argument('--groups', type=int, nargs='+', default=[2, 4, 8])
    ap.add_argument('--groups_multiple', type=int, default=512)
    args = ap.parse_args()
    if min(args.multiple + args.groups) <= 0 or args.epochs <= 0 or args.groups_multiple <= 0:
        ap.error('--multiple, --epochs, --groups and --groups_multiple must be positive')
    needed, whole = [], []
    sizes = {m: collections.Counter() for m in args.multiple}
    work = {g: [0, 0, collections.Counter()] for g in args.groups}  # attention's, full, layouts
    for x, y in stage_batches(args.stage, args.epochs):
        needed.append(int(fastpath.kept_lengths(y).sum()))
        whole.append(y.numel())
        for m in args.multiple:
            sizes[m][fastpath.packed_size(y, m)] += 1
        for g in args.groups:
            _, (size, spans) = fastpath.layout(y, args.groups_multiple, g)
            work[g][0] += sum(rows * t * (t + 1) / 2 for rows, t in spans)
            work[g][1] += len(y) * y.size(1) * (y.size(1) + 1) / 2
            work[g][2][size, spans] += 1
    print(f'{args.stage}: {len(needed)} batches ({args.epochs} epochs), shapes '
          f'{sorted(set(whole))} positions; needed {min(needed):,} to {max(needed):,}, '
          f'mean {sum(needed) / len(needed):,.0f} ({sum(needed) / sum(whole):.1%} of the positions)')
    for m, counts in sizes.items():
        packed = sum(s * n for s, n in counts.items())
        print(f'--pack_multiple {m}: {len(counts)} size{"s" if len(counts) > 1 else ""}, '
              + ', '.join(f'{s:,} in {n}' for s, n in sorted(counts.items()))
              + f'; {packed / sum(whole):.1%} of the positions computed')
    for g, (part, full, layouts) in work.items():
        print(f'--pack_groups {g}: {part / full:.1%} of the causal attention\'s work, '
              f'{len(layouts)} recordings (--pack_multiple {args.groups_multiple})')


if __name__ == '__main__':
    main()
