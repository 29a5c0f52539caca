"""
The three attention modules of the assignment. Their parameters and buffers are exactly the
handout's (so params files load both ways); the arithmetic they share, masked softmax attention,
is written once in `attend`, with PyTorch's fused kernel as a branch beside the plain math.

RoPE (the 2024-25 edition's `rope` variant) is a rotation of the queries and keys, written once
in `rotate` beside the attention it feeds; every path (packed training, cached decoding, the fused
kernel) rotates them at their own positions before attending.

Two pieces of bookkeeping let the same modules skip work that cannot change any result:
- `Packing` (training on a CPU): only the positions that can change the loss are computed;
- `KVCache` (decoding): each step computes the new position only, reusing the keys and values of
  the positions before it.
And `Dropout` is nn.Dropout with cheaper random draws on a CPU (the same distribution).
"""
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


class Dropout(nn.Dropout):
    """nn.Dropout (no parameters, so no state_dict entries), with cheaper random draws in training
    on a CPU when the model's config asks for them (fast_dropout).

    On a CPU, nn.Dropout draws each element's Bernoulli variable from the generator separately, at
    a cost that made dropout about a third of a training step of the handout's model in bf16
    (AVX-512, 2 cores). Here every 64-bit draw of the same generator (so torch.manual_seed still
    fixes it) gives four elements 16 random bits each: an element is dropped when its bits are
    below p * 2^16, with probability q = round(p * 2^16) / 2^16 (within 2^-17 of p: 0.1 gives
    0.1000061), and a kept one is scaled by 1 / (1 - q), so that its expected value is the input,
    as with nn.Dropout. The draws for 2M elements took 1.3 ms, nn.Dropout's 8.9 ms (same machine).
    Other devices keep nn.Dropout (a GPU draws fast), and so do compiled models (the compiler
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


def precompute_rotary_emb(dim, max_positions):
    """RoPE's angles for positions 0..max_positions-1: (max_positions, dim // 2, 2), [..., 0] the
    cos and [..., 1] the sin of t * theta_j, theta_j = 10000^(-2j/dim) for the pair j of features
    (2j, 2j+1). (The handout's theta_i = 10000^(-2(i-1)/d); the 2024-25 starter's docstring prints
    the exponent's sign flipped, but the decaying frequencies are what the handout means.)"""
    theta = 10000.0 ** (-torch.arange(0, dim // 2, dtype=torch.float32) * 2 / dim)
    angles = torch.arange(max_positions, dtype=torch.float32)[:, None] * theta
    return torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1)


def rotate(x, cache):
    """Each adjacent pair (x[2j], x[2j+1]) of x's last dimension, read as the complex number
    x[2j] + i x[2j+1], multiplied by cos + i sin from `cache` (..., dim // 2, 2), which broadcasts
    against x's leading dimensions. Written with real arithmetic rather than view_as_complex:
    the same numbers, also under bf16 autocast (computed in fp32, returned in x's dtype), and on
    devices and compilers without complex tensors."""
    pairs = x.float().unflatten(-1, (-1, 2))
    re, im = pairs[..., 0], pairs[..., 1]
    cos, sin = cache[..., 0], cache[..., 1]
    return torch.stack([re * cos - im * sin, re * sin + im * cos], dim=-1).flatten(-2).to(x.dtype)


def apply_rotary_emb(x, rope_cache):
    """The 2024-25 starter's function: x (..., T, dim) at positions 0..T-1, rotated by the
    cache truncated to T."""
    return rotate(x, rope_cache[:x.size(-2)])


def causal_mask(size):
    # kept as a buffer (and in the state_dict) because the handout's modules have it
    return torch.tril(torch.ones(size, size)).view(1, 1, size, size)


def split_heads(x, n_head):
    """(B, T, C) -> (B, n_head, T, C // n_head)"""
    B, T, C = x.size()
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


def merge_heads(y):
    """(B, n_head, T, hs) -> (B, T, n_head * hs): the head outputs side by side"""
    B, nh, T, hs = y.size()
    return y.transpose(1, 2).contiguous().view(B, T, nh * hs)


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

    def __init__(self, lengths, T):
        """lengths: (B,) number of positions to compute at the start of each row."""
        positions = torch.arange(T, device=lengths.device)
        keep = positions < lengths[:, None]  # (B, T)
        self.B, self.T = keep.shape
        self.index = keep.flatten().nonzero().squeeze(1)  # where each packed row sits in B * T
        self.positions = self.index % T  # the position of each packed row in its sequence

    def pack(self, x):
        """(B, T, ...) -> (N, ...): the kept positions, row after row."""
        return x.flatten(0, 1).index_select(0, self.index)

    def unpack(self, x):
        """(N, C) -> (B, T, C), zeros at the skipped positions."""
        out = x.new_zeros(self.B * self.T, x.size(-1))
        return out.index_copy(0, self.index, x).view(self.B, self.T, -1)


def to_heads(x, n_head, packing):
    """(B, T, C), or (N, C) packed by `packing`, -> (B, n_head, T, C // n_head)"""
    if x.dim() == 2:
        x = packing.unpack(x)
    return split_heads(x, n_head)


def from_heads(y, packing):
    """(B, n_head, T, hs) -> (B, T, C), or (N, C) when `packing` is given"""
    y = merge_heads(y)
    return y if packing is None else packing.pack(y)


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


def attend(scores_or_q, k, v, mask, attn_drop, fast, causal=True, cpu_kernel=None):
    """softmax(scores masked by `mask`) @ v, with dropout on the attention weights.

    Plain path (the handout's math): `scores_or_q` is q, scores = q k^T / sqrt(hs), masked entries
    set to -1e10. Fast path: the same function through F.scaled_dot_product_attention, which picks
    a fused (flash / memory-efficient) kernel and never materialises the T x T weights. `causal`
    says that `mask` is a top-left-aligned tril slice, which is exactly what is_causal=True means
    for Tq != Tk too; other masks (decoding) are passed as they are. When k is None,
    `scores_or_q` already holds the scores (the synthesizer) and only the plain path applies.
    Training on a CPU takes the written-out math (on the fast path, as `causal_math`) in two
    cases where it is the faster one: with attention dropout (the fused kernels have no dropout
    there: scaled_dot_product_attention would fall back to the same math, with nn.Dropout's
    slower draws), and under bf16 autocast, where the fused CPU kernel's forward and backward
    were the slower (the handout's model without dropout, batch 128: about 22k tokens/s against
    38k with the math, a 2-core AVX-512-BF16 EPYC; in fp32 the two ran at the same speed there,
    so fp32 keeps the kernel).
    Machines differ: `cpu_kernel` (True/False), when set, is the path measured fastest for this
    run's model on this machine (cpu_paths.py), used in training on a CPU
    without attention dropout; None keeps the rule above.
    """
    cpu_math = attn_drop.training and v.device.type == 'cpu' and (
        attn_drop.p > 0 or (not cpu_kernel if cpu_kernel is not None
                            else torch.is_autocast_enabled('cpu')))
    if fast and k is not None and not cpu_math:
        return F.scaled_dot_product_attention(
            scores_or_q, k, v, attn_mask=None if causal else mask.bool(), is_causal=causal,
            dropout_p=attn_drop.p if attn_drop.training else 0.0)
    if fast and k is not None and causal:
        return causal_math(scores_or_q, k, v, attn_drop)
    if k is None:
        att = scores_or_q
    else:
        att = (scores_or_q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(mask == 0, -1e10)
    att = F.softmax(att, dim=-1)
    att = attn_drop(att)
    return att @ v


def causal_math(q, k, v, attn_drop):
    """attend's plain math with a causal mask, in fewer passes over the (..., T, S) weights: the
    fast path's math in training on a CPU. The scale and the mask ride on the batched product
    (baddbmm adds -1e10 above the diagonal, where masked_fill would set -1e10: either way the
    softmax gives those entries weight 0), and the batches are flattened to 3-D, whose products
    transpose in the backward without copies. On a 2-core AVX2 EPYC (fp32, the handout's model,
    batch 128, dropout 0.1) this took about a quarter off the attention's forward and backward."""
    *batch, T, hs = q.shape
    S = k.size(-2)
    q, k, v = (x.reshape(-1, x.size(-2), hs) for x in (q, k, v))
    above = torch.full((T, S), -1e10, device=q.device).triu_(1)  # the top-left-aligned tril
    att = torch.baddbmm(above, q, k.transpose(1, 2), alpha=1.0 / math.sqrt(hs))
    att = attn_drop(F.softmax(att, dim=-1))
    return (att @ v).view(*batch, T, hs)


class CausalSelfAttention(nn.Module):
    """
    A vanilla multi-head masked self-attention layer with a projection at the end.
    I believe I could have just used torch.nn.MultiheadAttention but their documentation
    is all but absent and code ugly so I don't trust it, rolling my own here.
    """

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads
        self.key = nn.Linear(config.n_embd, config.n_embd)
        self.query = nn.Linear(config.n_embd, config.n_embd)
        self.value = nn.Linear(config.n_embd, config.n_embd)
        # regularization
        self.attn_drop = Dropout(config.attn_pdrop, config)
        self.resid_drop = Dropout(config.resid_pdrop, config)
        # output projection
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        # RoPE (the rope variant): the rotation angles of every position, a buffer (in the
        # state_dict, registered before the mask) as in the 2024-25 starter code
        self.rope = getattr(config, 'rope', False)
        if self.rope:
            self.register_buffer("rope_cache", precompute_rotary_emb(
                config.n_embd // config.n_head, config.block_size))
        # causal mask to ensure that attention is only applied to the left in the input sequence
        self.register_buffer("mask", causal_mask(config.block_size))
        self.n_head = config.n_head
        self.fast = getattr(config, 'fast_attention', False)
        self.cpu_kernel = None  # a measured choice of path (see attend), set by the trainer

    def forward(self, x, packing=None, cache=None, positions=None):
        """x: (B, T, C), or (N, C) packed by `packing`. Decoding: `cache` stores the keys/values
        of positions 0..T-1 (positions None: the prompts), or holds those of the positions
        already seen, and x has the new columns, at `positions` (B, T)."""
        return self.attention(x, x, packing, cache, positions, positions)

    def attention(self, x_kv, x_q, packing=None, cache=None, kv_positions=None, q_positions=None):
        """Keys and values from x_kv, queries from x_q (the same tensor for self-attention). The
        batch sizes may differ (one side is broadcast: the perceiver's basis C is one sequence)."""
        k = to_heads(self.key(x_kv), self.n_head, packing)
        q = to_heads(self.query(x_q), self.n_head, packing)
        v = to_heads(self.value(x_kv), self.n_head, packing)
        if self.rope:  # before the cache: a stored key keeps the rotation of its own position
            k, q = self.rotary(k, kv_positions), self.rotary(q, q_positions)
        B = max(k.size(0), q.size(0))
        k, q, v = k.expand(B, -1, -1, -1), q.expand(B, -1, -1, -1), v.expand(B, -1, -1, -1)
        if cache is not None:
            k, v = cache.write(k, v, kv_positions)
        if q_positions is None:  # positions 0..T-1 in every row
            mask = self.mask[:, :, :q.size(2), :k.size(2)]
            y = attend(q, k, v, mask, self.attn_drop, self.fast, cpu_kernel=self.cpu_kernel)
        else:
            y = attend(q, k, v, visible(q_positions, k.size(2)), self.attn_drop, self.fast,
                       causal=False, cpu_kernel=self.cpu_kernel)
        y = from_heads(y, packing if x_q.dim() == 2 else None)
        return self.resid_drop(self.proj(y))


    def rotary(self, x, positions):
        """RoPE on queries or keys (B, nh, T, hs) at positions 0..T-1 (positions None: also
        packed rows, which to_heads has put back at their positions), or, decoding, at each
        row's own `positions` (B, T)."""
        if positions is None:
            return apply_rotary_emb(x, self.rope_cache)
        return rotate(x, self.rope_cache[positions][:, None])


class SynthesizerAttention(nn.Module):
    """Eq. (11): Y_i = softmax(ReLU(X A_i + b_1) B_i + b_2) (X V_i), causally masked.
    w1 holds A_i and b_1 for all heads; w2 (shared by the heads, as in the handout) is B_i and
    b2 is b_2, both with block_size - 1 columns because inputs are block_size - 1 long."""

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # NEW learnable weights
        self.w1 = nn.Linear(config.n_embd, config.n_embd)
        self.w2 = nn.Parameter(torch.zeros(config.n_embd // config.n_head,
                                           config.block_size - 1))
        self.b2 = nn.Parameter(torch.zeros(config.block_size - 1))
        # value projection
        self.value = nn.Linear(config.n_embd, config.n_embd)
        # regularization
        self.attn_drop = Dropout(config.attn_pdrop, config)
        self.resid_drop = Dropout(config.resid_pdrop, config)
        # output projection
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        # causal mask to ensure that attention is only applied to the left in the input sequence
        self.register_buffer("mask", causal_mask(config.block_size))
        self.n_head = config.n_head
        self.block_size = config.block_size

        nn.init.uniform_(self.w2, -0.001, 0.001)

    def forward(self, x, packing=None, cache=None, positions=None):
        a = F.relu(to_heads(self.w1(x), self.n_head, packing))  # (B, nh, T, hs): ReLU(X A_i + b_1)
        v = to_heads(self.value(x), self.n_head, packing)
        if cache is not None:
            _, v = cache.write(None, v, positions)
        T = v.size(2)
        mask = self.mask[:, :, :T, :T] if positions is None else visible(positions, T)
        # each query's scores over the key positions come straight from its own vector: no keys
        scores = a @ self.w2[:, :T] + self.b2[:T]  # (B, nh, Tq, T)
        y = attend(scores, None, v, mask, self.attn_drop, False)
        return self.resid_drop(self.proj(from_heads(y, packing)))


class CausalCrossAttention(CausalSelfAttention):
    """
    Modifications over the self-attention layer to handle two inputs and perform cross-attention
    between them. This follows the implementation of the self attention module with auto-regressive
    masking on (key). Manipulation of batch-size to allow for different batch size between the two
    inputs, with broadcasting over to the higher batch size value.
    Its parameters and mask are CausalSelfAttention's; only forward differs.
    """

    def forward(self, x_kv, x_q, packing=None, cache=None, kv_positions=None, q_positions=None):
        """Either input may be packed (2-D): the perceiver's input sequence in training."""
        return self.attention(x_kv, x_q, packing, cache, kv_positions, q_positions)
