"""How many positions a packed GPU step computes (run.py --pack_multiple N), batch by batch.

    python scripts/dev/packed_sizes.py [--multiple 256 512 1024] [--epochs 3] [--stage pretrain]

The handout's training batches of one stage (pretraining on wiki.txt, or finetuning on
birth_places_train.tsv), drawn as the trainer draws them (seed 0, the file's order), trimmed as a
recorded step trims them (engine/graphs.py). For each N: the sizes the steps pack to
(fastpath.packed_size) and how many batches have each; each size a CUDA graph under
--compile graphs. Also the positions the loss needs, against the positions of the batch.
"""
import argparse
import collections
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'src'))
import torch  # noqa: E402

import dataset  # noqa: E402
from engine import batches, fastpath, graphs, presets  # noqa: E402
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
    args = ap.parse_args()
    if min(args.multiple) <= 0 or args.epochs <= 0:
        ap.error('--multiple and --epochs must be positive')
    needed, whole = [], []
    sizes = {m: collections.Counter() for m in args.multiple}
    for x, y in stage_batches(args.stage, args.epochs):
        needed.append(int(fastpath.kept_lengths(y).sum()))
        whole.append(y.numel())
        for m in args.multiple:
            sizes[m][fastpath.packed_size(y, m)] += 1
    print(f'{args.stage}: {len(needed)} batches ({args.epochs} epochs), shapes '
          f'{sorted(set(whole))} positions; needed {min(needed):,} to {max(needed):,}, '
          f'mean {sum(needed) / len(needed):,.0f} ({sum(needed) / sum(whole):.1%} of the positions)')
    for m, counts in sizes.items():
        packed = sum(s * n for s, n in counts.items())
        print(f'--pack_multiple {m}: {len(counts)} size{"s" if len(counts) > 1 else ""}, '
              + ', '.join(f'{s:,} in {n}' for s, n in sorted(counts.items()))
              + f'; {packed / sum(whole):.1%} of the positions computed')


if __name__ == '__main__':
    main()
