"""Handout file: the starter's attention.py (names, keys fixed: tests/test_model_compat.py).

The three attention modules of the assignment, as the handout writes them: their parameters and
buffers are exactly the handout's (so params files load both ways), and each computes masked
softmax attention with the handout's written-out math (`softmax_attention`), or, on the fast
path, with PyTorch's fused kernel as a labelled branch beside it (`if self.flash:`, as nanoGPT).
RoPE (the 2024-25 edition's `rope` variant) rotates the queries and keys, written once in
`rotate`; every path rotates them at their own positions. What lets the same modules skip work
(packed rows, decoding caches, cheaper dropout draws) is fastpath.py's, passed in by keyword
(`packing=`, `cache=`, `positions=`); without it they compute what the handout's do.
"""
import logging
import math

import torch
import torch.nn as nn
from torch.nn import functional as F

from engine.fastpath import Dropout, by_spans, causal_math, visible

logger = logging.getLogger(__name__)


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


def softmax_attention(att, mask, attn_drop, v):
    """The handout's attention from scores `att` (B, nh, Tq, Tk): masked entries set to -1e10,
    softmax over the keys, dropout on the weights, then the weighted sum of the values."""
    att = att.masked_fill(mask == 0, -1e10)
    att = F.softmax(att, dim=-1)
    att = attn_drop(att)
    return att @ v


def to_heads(x, n_head, packing):
    """(B, T, C), or (N, C) packed by `packing`, -> (B, n_head, T, C // n_head)"""
    if x.dim() == 2:
        x = packing.unpack(x)
    return split_heads(x, n_head)


def from_heads(y, packing):
    """(B, n_head, T, hs) -> (B, T, C), or (N, C) when `packing` is given"""
    y = merge_heads(y)
    return y if packing is None else packing.pack(y)


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
        # Not in the handout: F.scaled_dot_product_attention, the same function through fused
        # kernels (GPTConfig.fast_attention; False is the handout's math everywhere)
        self.flash = getattr(config, 'fast_attention', False)
        # Training on a CPU, the kernel or the math (causal_math) may be the faster: set per run
        # by cpu_paths (measured, or by its rule); None takes the kernel
        self.cpu_kernel = None

    def forward(self, x, *, packing=None, cache=None, positions=None):
        """x: (B, T, C), or (N, C) packed by `packing`. Decoding: `cache` stores the keys/values
        of positions 0..T-1 (positions None: the prompts), or holds those of the positions
        already seen, and x has the new columns, at `positions` (B, T)."""
        return self.attention(x, x, packing=packing, cache=cache, kv_positions=positions,
                              q_positions=positions)

    def cpu_math(self, device):
        """Whether training on a CPU takes the written-out math instead of the kernel: with
        attention dropout (the kernel has none of its own on a CPU: it would fall back to the
        same math with nn.Dropout's slower draws), or where cpu_paths found the math faster."""
        return self.attn_drop.training and device.type == 'cpu' and (
            self.attn_drop.p > 0 or self.cpu_kernel is False)

    def attention(self, x_kv, x_q, *, packing=None, cache=None, kv_positions=None, q_positions=None):
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
        causal = q_positions is None  # positions 0..T-1 in every row: the mask's top-left slice
        mask = self.mask[:, :, :q.size(2), :k.size(2)] if causal else visible(q_positions, k.size(2))
        if self.flash and not self.cpu_math(v.device):
            # is_causal is the top-left-aligned tril for Tq != Tk too, as the mask's slice is;
            # by_spans: a packed step's groups of rows each over their own columns (--pack_groups)
            y = by_spans(lambda q, k, v: F.scaled_dot_product_attention(
                q, k, v, attn_mask=None if causal else mask.bool(), is_causal=causal,
                dropout_p=self.attn_drop.p if self.attn_drop.training else 0.0),
                q, k, v, packing if causal else None)
        elif self.flash and causal:
            y = causal_math(q, k, v, self.attn_drop)  # the math below in fewer passes
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            y = softmax_attention(att, mask, self.attn_drop, v)
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
    weight_decay = {'w2': True, 'b2': False}  # a matmul weight, a bias (optimizer_groups' 'matmul')

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

    def forward(self, x, *, packing=None, cache=None, positions=None):
        a = F.relu(to_heads(self.w1(x), self.n_head, packing))  # (B, nh, T, hs): ReLU(X A_i + b_1)
        v = to_heads(self.value(x), self.n_head, packing)
        if cache is not None:
            _, v = cache.write(None, v, positions)
        T = v.size(2)
        mask = self.mask[:, :, :T, :T] if positions is None else visible(positions, T)
        # each query's scores over the key positions come straight from its own vector: no keys
        scores = a @ self.w2[:, :T] + self.b2[:T]  # (B, nh, Tq, T)
        y = softmax_attention(scores, mask, self.attn_drop, v)
        return self.resid_drop(self.proj(from_heads(y, packing)))


class CausalCrossAttention(CausalSelfAttention):
    """
    Modifications over the self-attention layer to handle two inputs and perform cross-attention
    between them. This follows the implementation of the self attention module with auto-regressive
    masking on (key). Manipulation of batch-size to allow for different batch size between the two
    inputs, with broadcasting over to the higher batch size value.
    Its parameters and mask are CausalSelfAttention's; only forward differs.
    """

    def forward(self, x_kv, x_q, *, packing=None, cache=None, kv_positions=None, q_positions=None):
        """Either input may be packed (2-D): the perceiver's input sequence in training."""
        return self.attention(x_kv, x_q, packing=packing, cache=cache, kv_positions=kv_positions,
                              q_positions=q_positions)
