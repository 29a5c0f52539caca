"""Engine (free to change): the bookkeeping that skips work without changing results.

It lets the attention modules (attention.py) and the model (model.py) skip work that cannot
change any result. None of it is the assignment's; each piece is tested against the handout's
math (tests/test_fast_paths.py).

- `Packing` (training): only the positions that can change the loss are computed (a CPU's
  steps; a GPU's where --pack_multiple asks, in one packed matrix of a few sizes; with
  --pack_groups, its attention also over each group of rows' own columns: `layout`, `by_spans`);
- `KVCache` and `visible` (decoding): each step computes the new position only, reusing the keys
  and values of the positions before it;
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


def packed_size(targets, multiple):
    """How many positions Packing.covering computes for (B, T) targets (on the host: counting
    them on a GPU would read a number back every step): those kept_lengths keeps, rounded up to
    a multiple of `multiple` (a few sizes, a few CUDA graphs), at most B * T."""
    return layout(targets, multiple)[1]


def layout(targets, multiple, groups=1, width=32):
    """(order, packed) of a GPU's packed step, from the (B, T) targets on the host: packed_size's
    count; with groups > 1 also the rows sorted by kept_lengths, longest first (`order`, for
    the caller to take x and y in: the loss, a mean over the targets, is the same in any row
    order) and cut into `groups` groups of consecutive rows, each with the columns its longest
    row needs rounded up to `width` (a few shapes, for CUDA graphs): packed is then (size,
    ((rows, columns), ...)), which Packing.covering takes, and attention per group (by_spans)
    skips the columns no row of a group needs (about half of the attention's work in the
    handout's pretraining with 4 groups: scripts/dev/packed_sizes.py). Else (None, size)."""
    lengths = kept_lengths(targets)
    size = min(targets.numel(), -(-int(lengths.sum()) // multiple) * multiple)
    if groups <= 1:
        return None, size
    order = lengths.argsort(descending=True, stable=True)
    B, T = targets.shape
    spans, start = [], 0
    for rows in (B // groups + (g < B % groups) for g in range(groups)):
        if rows:
            spans.append((rows, min(T, -(-int(lengths[order[start]]) // width) * width)))
        start += rows
    return order, (size, tuple(spans))


def by_spans(attend, q, k, v, packing):
    """attend(q, k, v): causal attention over (B, nh, T, hs) queries, keys and values at
    positions 0..T-1 (a query sees the keys at or before its own position). Where `packing`
    holds spans (layout's), each group of rows attends over its own first `columns` queries and
    keys only: a query there sees the same keys as over every column, and the queries past them
    get zeros, which reach only positions no loss needs (none of the group's rows needs them)."""
    spans = getattr(packing, 'spans', None)
    if not spans:
        return attend(q, k, v)
    out, start = [], 0
    for rows, t in spans:
        r = slice(start, start + rows)
        start += rows
        y = attend(q[r, :, :t], k[r, :, :t], v[r, :, :t])
        out.append(F.pad(y, (0, 0, 0, q.size(2) - y.size(2))))
    return torch.cat(out)


def kept_lengths(targets):
    """(B, T) targets -> (B,): how many positions of each row Packing keeps in training, up to
    and including its last non-PAD (index 0) target; at least 1 (a row of PAD targets only adds
    nothing to the loss, but keeps a graph)."""
    t = targets.size(1)
    return (torch.arange(1, t + 1, device=targets.device) * (targets != 0)).amax(dim=1).clamp(min=1)


class Packing:
    """Which positions of a (B, T) batch are computed, when not all of them are.

    In training, a position whose own target and all later targets in its row are PAD cannot
    change the loss: the loss ignores PAD targets, and the model is causal, so no earlier position
    looks at it. Such positions are about half of a pretraining batch (documents are cut at a
    random length), so skipping them halves the work. Position-wise layers (embeddings, LayerNorm,
    Linear, the MLP, the head) then run on the kept positions packed into one (N, C) matrix.
    Attention, which mixes positions, unpacks them back into (B, T, C) with zeros at the skipped
    positions: every kept query only sees keys at or before its own position, which are kept, so
    the zeros reach only skipped positions (for the perceiver: only bottleneck slots that feed
    skipped positions).
    """

    def __init__(self, index, B, T, spans=None):
        self.B, self.T, self.spans = B, T, spans  # spans: layout's groups of rows, or None
        self.index = index  # where each packed row sits in B * T
        self.positions = index % T  # the position of each packed row in its sequence

    @classmethod
    def of_lengths(cls, lengths, T):
        """The first lengths[r] positions of each row r ((B,) lengths) of a (B, T) batch."""
        keep = torch.arange(T, device=lengths.device) < lengths[:, None]  # (B, T)
        return cls(keep.flatten().nonzero().squeeze(1), *keep.shape)

    @classmethod
    def covering(cls, targets, packed):
        """`packed` positions of (B, T) targets (a size, or layout's (size, spans)), found with
        no number read back from the device (a GPU's step, which a CUDA graph can record): every
        position kept for the loss (at most the size: packed_size counts them), then the first
        skipped ones, row after row, to make up the size. A skipped position computed changes
        nothing either: its target is PAD, and no kept position looks at it."""
        size, spans = packed if isinstance(packed, tuple) else (packed, None)
        B, T = targets.shape
        keep = torch.arange(T, device=targets.device) < kept_lengths(targets)[:, None]
        # a stable sort of "skipped": the kept positions first, each part in its order
        index = torch.argsort((~keep).flatten().to(torch.uint8), stable=True)[:size]
        return cls(index, B, T, spans)

    def pack(self, x):
        """(B, T, ...) -> (N, ...): the positions in `index`, in its order."""
        return x.flatten(0, 1).index_select(0, self.index)

    def unpack(self, x):
        """(N, C) -> (B, T, C), zeros at the positions not packed."""
        out = x.new_zeros(self.B * self.T, x.size(-1))
        return out.index_copy(0, self.index, x).view(self.B, self.T, -1)


def loss_groups(idx, targets, packed=None, groups=4):
    """The groups fastmodel.packed_loss computes a training batch in, (Packing, idx, targets) each.

    On a CPU the rows are sorted by kept_lengths and taken in `groups` groups: the
    position-wise layers run on a group's kept positions only, its attention on the group's
    longest row. With `packed` (a GPU's step: the trainer counted the positions on the host,
    layout) one group of that many positions, found on the device without reading a number
    back (Packing.covering), one shape for every batch of that size (and spans)."""
    if packed is not None:
        yield Packing.covering(targets, packed), idx, targets
        return
    lengths = kept_lengths(targets)
    for rows in lengths.argsort(descending=True).chunk(groups):
        T = int(lengths[rows[0]])
        yield Packing.of_lengths(lengths[rows], T), idx[rows, :T], targets[rows, :T]


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
        the synthesizer, which has no keys. Entries not written yet are zeros (and hidden from
        every query)."""
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
    """The handout's math (attention.softmax_attention) with a causal mask, in fewer passes over
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
