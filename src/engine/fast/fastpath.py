"""Engine (free to change): the bookkeeping that skips work without changing results.

None of it is the assignment's; each piece is tested against the handout's math
(tests/engine/test_fast_paths.py).

- `row_groups` (training): a batch's rows sorted by length into groups, each computed by the
  handout's forward on the columns its rows need only (engine/training/loop.py's train_step);
- `KVCache` and `visible` (decoding): each step computes the new position only, reusing the keys
  and values of the positions before it (engine/fast/decode.py);
- `causal_math`: the handout's masked softmax attention in fewer passes (training on a CPU);
- `Dropout`: nn.Dropout with cheaper random draws on a CPU (the same distribution).
"""
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


class Dropout(nn.Dropout):
    """nn.Dropout (no parameters, so no state_dict entries), with cheaper random draws in training
    on a CPU when the model's config asks for them (fast_dropout).

    On a CPU, nn.Dropout draws each element's Bernoulli variable from the generator separately,
    a large share of a training step (docs/speed.md, "Figures behind the code"). Here every 64-bit draw of the same generator (so torch.manual_seed still
    fixes it) gives four elements 16 random bits each: an element is dropped when its bits are
    below p * 2^16, with probability q = round(p * 2^16) / 2^16 (within 2^-17 of p: 0.1 gives
    0.1000061), and a kept one is scaled by 1 / (1 - q), so that its expected value is the input,
    as with nn.Dropout. Other devices keep nn.Dropout (a GPU draws fast), and so do compiled models (the compiler
    makes its own random numbers).
    """

    def __init__(self, p, config=None):
        super().__init__(p)
        self.fast = getattr(config, 'fast_dropout', False)

    def forward(self, x):
        dropped = round(self.p * 2 ** 16)  # how many of an element's 2^16 bit patterns drop it
        if not (self.fast and self.training and x.device.type == 'cpu' and 0 < dropped < 2 ** 16) \
                or torch.compiler.is_compiling():
            return super().forward(x)
        n = x.numel()
        draws = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-2 ** 63, None)
        bits = draws.view(torch.int16)[:n].view(x.shape)  # uniform on -2^15..2^15-1
        keep, scale = bits >= dropped - 2 ** 15, 2 ** 16 / (2 ** 16 - dropped)
        if x.dtype == torch.float32:
            # one multiplier tensor: the backward is then one product, not two
            return x * keep.float().mul_(scale)
        return x * keep * scale  # (a bf16 multiplier would round the scale, biasing the mean)


def kept_lengths(targets):
    """(B, T) targets -> (B,): how many positions of each row can change the training loss: up
    to and including its last non-PAD (index 0) target (the model is causal and the loss ignores
    PAD targets, so no later position reaches it); at least 1."""
    t = targets.size(1)
    return (torch.arange(1, t + 1, device=targets.device) * (targets != 0)).amax(dim=1).clamp(min=1)


def row_groups(targets, groups, width=1):
    """(order, spans): how a training step computes a (B, T) batch, read from its targets on the
    host. The rows sorted by kept_lengths, longest first (`order`; None for one group: the batch
    as it is), and cut into `groups` groups of consecutive rows, each (rows, columns): the
    columns its longest row needs, rounded up to a multiple of `width` (a few shapes: CUDA graphs
    record each), at most T; 0 where none of its rows has a target (nothing to compute: its
    loss, a mean over no target, would be NaN).

    The step calls the handout's forward once a group, on the group's rows cut to its columns:
    a position past them changes no loss (kept_lengths), so each group's mean loss, weighted by
    its share of the batch's targets, sums to the handout's loss over the whole batch. A
    pretraining batch's documents end at random lengths: about half its positions need no
    computing (results/grouped-steps.md)."""
    B, T = targets.shape
    lengths = kept_lengths(targets)
    has_targets = (targets != 0).any(dim=1)
    order = lengths.argsort(descending=True, stable=True) if groups > 1 else None
    if order is not None:
        lengths, has_targets = lengths[order], has_targets[order]
    spans, start = [], 0
    for rows in (B // groups + (g < B % groups) for g in range(min(groups, B))):
        part = slice(start, start + rows)
        columns = min(T, -(-int(lengths[part].max()) // width) * width)
        spans.append((rows, columns if bool(has_targets[part].any()) else 0))
        start += rows
    return order, tuple(spans)


class KVCache:
    """The keys and values of the positions one attention layer has already seen, for decoding
    one step at a time. The first call (the prompts) stores columns 0..T-1 of every row; after
    that, rows may stand at different positions (prompts of different lengths are decoded
    together): each row's new keys/values go to its own position, and each query is shown the
    keys up to its own position only (`visible`)."""

    def __init__(self, size, trim=True):
        self.size = size  # the most positions a row will hold
        # trim: return the keys up to the furthest position written only. Finding it reads a
        # device number back each layer and step, which stalls a GPU: there the whole cache is
        # returned (the positions not reached yet are hidden from every query all the same).
        self.trim = trim
        self.k = self.v = None

    def write(self, k, v, positions=None):
        """Store k, v (B, nh, T, hs) of the columns at `positions` (B, T), or at 0..T-1 when
        positions is None. Returns the keys and values of positions 0..max(positions) (with
        trim; else all `size`), (B, nh, S, hs): no row sees beyond max(positions). k is None for
        the synthesizer, which has no keys. Entries not written yet (zeros) and those of a
        prompt's padding are hidden from every query until its row writes them."""
        if positions is None:
            self.v = v.new_zeros(v.size(0), v.size(1), self.size, v.size(3))
            self.v[:, :, :v.size(2)] = v
            if k is not None:
                self.k = torch.zeros_like(self.v)
                self.k[:, :, :k.size(2)] = k
            return k, v
        rows = torch.arange(v.size(0), device=v.device)[:, None]
        # self.v[rows, :, positions] is (B, T, nh, hs): row r's columns at its own positions
        self.v[rows, :, positions] = v.transpose(1, 2)
        if k is not None:
            self.k[rows, :, positions] = k.transpose(1, 2)
        S = int(positions.max()) + 1 if self.trim else self.size
        return None if k is None else self.k[:, :, :S], self.v[:, :, :S]

    def keep_rows(self, rows):
        """Drop the rows that have finished decoding (rows: the indices of those that go on)."""
        self.v = self.v[rows]
        self.k = None if self.k is None else self.k[rows]


def visible(q_positions, size):
    """(B, 1, T, size) mask, 1 where the key position is at or before the query's position (the
    causal mask of rows that stand at different positions)."""
    keys = torch.arange(size, device=q_positions.device)
    return (keys <= q_positions[..., None])[:, None]


def causal_math(q, k, v, attn_drop):
    """The handout's math (fastmodel.softmax_attention) with a causal mask, in fewer passes over
    the (..., T, S) weights: the fast path's math in training on a CPU. The scale and the mask
    ride on the batched product (baddbmm adds -1e10 above the diagonal, where masked_fill would
    set -1e10: either way the softmax gives those entries weight 0), and the batches are
    flattened to 3-D, whose products transpose in the backward without copies (what that saves:
    docs/speed.md, "Figures behind the code")."""
    *batch, T, hs = q.shape
    S = k.size(-2)
    q, k, v = (x.reshape(-1, x.size(-2), hs) for x in (q, k, v))
    above = torch.full((T, S), -1e10, device=q.device).triu_(1)  # the top-left-aligned tril
    att = torch.baddbmm(above, q, k.transpose(1, 2), alpha=1.0 / math.sqrt(hs))
    att = attn_drop(F.softmax(att, dim=-1))
    return (att @ v).view(*batch, T, hs)
