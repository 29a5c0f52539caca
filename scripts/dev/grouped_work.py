"""What a GPU's recorded step computes with its rows in groups (run.py --row_groups G), batch by
batch, against the packed step that came before it.

    python scripts/dev/grouped_work.py [--groups 1 2 4 8] [--epochs 3] [--stage pretrain] [--width 32]

The handout's training batches of one stage (pretraining on wiki.txt, or finetuning on
birth_places_train.tsv), drawn as the trainer draws them (seed 0, the file's order), shaped as a
recorded step shapes them (engine/fast/graphs.py: columns to a multiple of WIDTH, PAD rows to the
batch size). For each number of groups: the share of the batch's positions the position-wise
layers compute, the share of the causal attention's (query, key) pairs, how many recordings the
groups' shapes make, and the handout model's FLOPs (forward, matrix products) against those of
the packed step the engine took before (every position the loss needs, rounded up to 512, the
position-wise layers only; attention over every column): a stand-in for the GPU's time, which
no CPU measures.
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

PACKED_MULTIPLE = 512  # the packed step's sizes (presets.GPU's pack_multiple before row groups)


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


def flops(positions, pairs, model=presets.MODEL, vocab=256):
    """The handout model's forward FLOPs (matrix products) for `positions` through the
    position-wise layers and `pairs` (query, key) pairs through attention."""
    C, layers = model['n_embd'], model['n_layer']
    per_position = layers * 24 * C * C + 2 * C * vocab  # q, k, v, proj, the MLP; the head
    return positions * per_position + pairs * layers * 4 * C  # q.k and the weighted values


def main():
    ap = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--groups', type=int, nargs='+', default=[1, 2, 4, 8])
    ap.add_argument('--epochs', type=int, default=3)
    ap.add_argument('--stage', choices=('pretrain', 'finetune'), default='pretrain')
    ap.add_argument('--width', type=int, default=graphs.WIDTH,
                    help='groups\' columns rounded up to a multiple of this (graphs.WIDTH)')
    args = ap.parse_args()
    if min(args.groups) <= 0 or args.epochs <= 0 or args.width <= 0:
        ap.error('--groups, --epochs and --width must be positive')
    n = positions = pairs = packed_positions = 0
    work = {g: [0, 0, collections.Counter()] for g in args.groups}  # positions, pairs, shapes
    for x, y in stage_batches(args.stage, args.epochs):
        B, T = y.shape
        n += 1
        positions += B * T
        pairs += B * T * (T + 1) // 2
        needed = int(fastpath.kept_lengths(y).sum())
        packed_positions += min(B * T, -(-needed // PACKED_MULTIPLE) * PACKED_MULTIPLE)
        for g in args.groups:
            _, spans = fastpath.row_groups(y, g, args.width)
            work[g][0] += sum(rows * t for rows, t in spans)
            work[g][1] += sum(rows * t * (t + 1) // 2 for rows, t in spans)
            work[g][2][spans] += 1
    packed = flops(packed_positions, pairs)
    print(f'{args.stage}: {n} batches ({args.epochs} epochs); the packed step: '
          f'{packed_positions / positions:.1%} of the positions, every pair')
    for g, (p, q, shapes) in work.items():
        print(f'--row_groups {g}: {p / positions:.1%} of the positions, {q / pairs:.1%} of the '
              f'causal attention\'s pairs, {len(shapes)} recordings; FLOPs '
              f'{flops(p, q) / packed:.2f}x the packed step\'s')


if __name__ == '__main__':
    main()
