"""
The three attention modules of the assignment. Their parameters and buffers are exactly the
handout's (so params files load both ways); the arithmetic they share, masked softmax attention,
is written once in `attend`, with PyTorch's fused kernel as a branch beside the plain math.
"""
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


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


class KVCache:
    """Keys and values of the positions a layer has already seen, for step-by-step decoding."""

    def __init__(self):
        self.k = self.v = None

    def extend(self, k, v):
        """Append the new positions' k, v (k is None for the synthesizer, which has no keys);
        return (index of the first new position, all keys, all values)."""
        start = 0 if self.v is None else self.v.size(2)
        if start:
            k = None if k is None else torch.cat((self.k, k), dim=2)
            v = torch.cat((self.v, v), dim=2)
        self.k, self.v = k, v
        return start, k, v


def attend(scores_or_q, k, v, mask, attn_drop, fast):
    """softmax(scores masked by `mask`) @ v, with dropout on the attention weights.

    Plain path (the handout's math): `scores_or_q` is q, scores = q k^T / sqrt(hs), masked entries
    set to -1e10. Fast path: the same function through F.scaled_dot_product_attention, which picks
    a fused (flash / memory-efficient) kernel and never materialises the T x T weights. `mask` is a
    top-left-aligned tril slice, which is exactly what is_causal=True means for Tq != Tk too.
    When k is None, `scores_or_q` already holds the scores (the synthesizer) and only the plain
    path applies.
    """
    if fast and k is not None:
        return F.scaled_dot_product_attention(
            scores_or_q, k, v, is_causal=True,
            dropout_p=attn_drop.p if attn_drop.training else 0.0)
    if k is None:
        att = scores_or_q
    else:
        att = (scores_or_q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(mask == 0, -1e10)
    att = F.softmax(att, dim=-1)
    att = attn_drop(att)
    return att @ v


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
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        # output projection
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        # causal mask to ensure that attention is only applied to the left in the input sequence
        self.register_buffer("mask", causal_mask(config.block_size))
        self.n_head = config.n_head
        self.fast = getattr(config, 'fast_attention', False)

    def forward(self, x, cache=None):
        """`cache` (decoding only) holds the keys and values of the positions already seen; x
        then holds only the new positions."""
        T = x.size(1)
        k = split_heads(self.key(x), self.n_head)
        q = split_heads(self.query(x), self.n_head)
        v = split_heads(self.value(x), self.n_head)
        start = 0
        if cache is not None:
            start, k, v = cache.extend(k, v)
        mask = self.mask[:, :, start:start + T, :start + T]
        # a cached step has queries at the end of the keys: not top-left aligned, so plain math
        y = attend(q, k, v, mask, self.attn_drop, self.fast and start == 0)
        return self.resid_drop(self.proj(merge_heads(y)))


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
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        # output projection
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        # causal mask to ensure that attention is only applied to the left in the input sequence
        self.register_buffer("mask", causal_mask(config.block_size))
        self.n_head = config.n_head
        self.block_size = config.block_size

        nn.init.uniform_(self.w2, -0.001, 0.001)

    def forward(self, x, cache=None):
        T = x.size(1)
        a = F.relu(split_heads(self.w1(x), self.n_head))  # (B, nh, T, hs): ReLU(X A_i + b_1)
        v = split_heads(self.value(x), self.n_head)
        start = 0
        if cache is not None:
            start, _, v = cache.extend(None, v)
        end = start + T
        # each query's scores over the key positions come straight from its own vector: no keys
        scores = a @ self.w2[:, :end] + self.b2[:end]  # (B, nh, T, end)
        y = attend(scores, None, v, self.mask[:, :, start:end, :end], self.attn_drop, False)
        return self.resid_drop(self.proj(merge_heads(y)))


class CausalCrossAttention(CausalSelfAttention):
    """
    Modifications over the self-attention layer to handle two inputs and perform cross-attention
    between them. This follows the implementation of the self attention module with auto-regressive
    masking on (key). Manipulation of batch-size to allow for different batch size between the two
    inputs, with broadcasting over to the higher batch size value.
    Its parameters and mask are CausalSelfAttention's; only forward differs.
    """

    def forward(self, x_kv, x_q):
        Tk, Tq = x_kv.size(1), x_q.size(1)
        B = max(x_kv.size(0), x_q.size(0))
        k = split_heads(self.key(x_kv), self.n_head).expand(B, -1, -1, -1)
        q = split_heads(self.query(x_q), self.n_head).expand(B, -1, -1, -1)
        v = split_heads(self.value(x_kv), self.n_head).expand(B, -1, -1, -1)
        y = attend(q, k, v, self.mask[:, :, :Tq, :Tk], self.attn_drop, self.fast)
        return self.resid_drop(self.proj(merge_heads(y)))
