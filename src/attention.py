# [engine] Handout file: the starter's attention.py (names, keys fixed: tests/handout/test_model_compat.py).
# [engine] Each forward is the handout's math, the fused kernel a branch beside it
# [engine] (engine/fast/fastmodel.py).
"""
The assignment's attention layers, after Andrej Karpathy's minGPT.
"""
# [2021-22] Causal self-attention, and the synthesizer's attention (its forward is part g's).
# [2022-23] Causal self-attention, and the cross-attention of the perceiver's down and up
# [2022-23] projections.
# [2024-25] Causal self-attention, with rotary position embeddings for the rope variant, and a
# [2024-25] causal cross-attention.

import math
import logging

import torch
import torch.nn as nn
from torch.nn import functional as F

from engine.fast import fastmodel  # [engine]

logger = logging.getLogger(__name__)


def precompute_rotary_emb(dim, max_positions):  # [2024-25]
    """
    The angles RoPE rotates by, for every position below max_positions: position t turns the
    i-th pair of features (i = 1 .. dim/2) by the angle t * theta_i, with
    theta_i = 10000^(-2(i-1)/dim) (decaying frequencies).

    Returns a tensor of shape (max_positions, dim/2, 2) whose last dimension holds the cosine and
    the sine of each angle, computed once since the longest sequence is known.
    """

    rope_cache = None
    # TODO: [part g]
    ### YOUR CODE HERE ###
    theta = 10000.0 ** (-torch.arange(0, dim // 2, dtype=torch.float32) * 2 / dim)
    angles = torch.arange(max_positions, dtype=torch.float32)[:, None] * theta
    rope_cache = torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1)
    ### END YOUR CODE ###
    return rope_cache


def apply_rotary_emb(x, rope_cache):  # [2024-25]
    """Apply the RoPE to the input tensor x."""
    # TODO: [part g]
    # Read each pair of features (x[2i], x[2i+1]) as one complex number and multiply it by
    # cos + i sin of its position's angle (torch.view_as_complex and torch.view_as_real convert
    # between the two views). The cache may hold more positions than x: use the first ones.

    rotated_x = None
    ### YOUR CODE HERE ###
    # The product written with real numbers: the same values, also under bf16 autocast.
    rope_cache = rope_cache[:x.size(-2)]
    cos, sin = rope_cache[..., 0], rope_cache[..., 1]
    pairs = x.float().unflatten(-1, (-1, 2))
    re, im = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack([re * cos - im * sin, re * sin + im * cos], dim=-1)
    rotated_x = rotated.flatten(-2).to(x.dtype)
    ### END YOUR CODE ###
    return rotated_x


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

        self.rope = config.rope  # [2024-25]
        if self.rope:  # [2024-25]
            assert (config.n_embd % config.n_head) % 2 == 0

            # TODO: [part g] the cosines and sines of RoPE, computed once into rope_cache.
            # The longest sequence is config.block_size.
            rope_cache = None
            ### YOUR CODE HERE ###
            rope_cache = precompute_rotary_emb(config.n_embd // config.n_head, config.block_size)
            ### END YOUR CODE ###

            self.register_buffer("rope_cache", rope_cache)

        # regularization
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        # output projection
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        # causal mask to ensure that attention is only applied to the left in the input sequence
        self.register_buffer("mask", torch.tril(torch.ones(config.block_size, config.block_size))
                                     .view(1, 1, config.block_size, config.block_size))
        self.n_head = config.n_head
        fastmodel.attention_paths(self, config)  # [engine] fused kernel or this math

    #[2022-23 2024-25] def forward(self, x):
    #[2021-22] def forward(self, x, layer_past=None):
    def forward(self, x):  # [engine] (2021-22's unused layer_past left out)
        B, T, C = x.size()

        # calculate query, key, values for all heads in batch and move head forward to be the batch dim
        k = self.key(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
        q = self.query(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
        v = self.value(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)

        if self.rope:  # [2024-25]
            # TODO: [part g] Apply RoPE to the query and key.
            ### YOUR CODE HERE ###
            k = apply_rotary_emb(k, self.rope_cache)
            q = apply_rotary_emb(q, self.rope_cache)
            ### END YOUR CODE ###

        if self.flash:  # [engine] the same function through PyTorch's fused kernel
            y = fastmodel.kernel(self, q, k, v)
        else:  # [starter]
            # causal self-attention; Self-attend: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))

            att = att.masked_fill(self.mask[:,:,:T,:T] == 0, -1e10)
            att = F.softmax(att, dim=-1)
            att = self.attn_drop(att)
            y = att @ v # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C) # re-assemble all head outputs side by side

        # output projection
        y = self.resid_drop(self.proj(y))
        return y


# [2021-22] Eq. (11) of the handout: each head's weights over the positions come straight from
# [2021-22] its own input, Y_i = softmax(ReLU(X A_i + b_1) B_i + b_2) (X V_i), causally masked.
class SynthesizerAttention(nn.Module):  # [2021-22]
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # NEW learnable weights
        self.w1 = nn.Linear(config.n_embd, config.n_embd)
        self.w2 = nn.Parameter(torch.zeros(config.n_embd // config.n_head,
            config.block_size-1))
        self.b2 = nn.Parameter(torch.zeros(config.block_size-1))
        # value projection
        self.value = nn.Linear(config.n_embd, config.n_embd)
        # regularization
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        # output projection
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        # causal mask to ensure that attention is only applied to the left in
        #     the input sequence
        self.register_buffer("mask", torch.tril(
            torch.ones(config.block_size, config.block_size)).view(
                1, 1, config.block_size, config.block_size))
        self.n_head = config.n_head
        self.block_size = config.block_size

        nn.init.uniform_(self.w2,-0.001,0.001)

    weight_decay = {'w2': True, 'b2': False}  # [engine] a matmul weight, a bias (minGPT's rule)

    def forward(self, x, layer_past=None):
        # TODO [part g]: the synthesizer's attention, eq. (11); __init__ stays as it is.
        # w1 gives A_i and b_1 of every head at once, w2 is B_i and b2 is b_2.
        ### YOUR CODE HERE ###
        B, T, C = x.size()
        # ReLU(X A_i + b_1) and X V_i, heads moved forward: (B, nh, T, hs)
        a = F.relu(self.w1(x)).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = self.value(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        # the weights over the T positions, with no keys: (B, nh, T, hs) x (hs, T) -> (B, nh, T, T)
        att = a @ self.w2[:, :T] + self.b2[:T]
        att = att.masked_fill(self.mask[:,:,:T,:T] == 0, -1e10)
        att = F.softmax(att, dim=-1)
        att = self.attn_drop(att)
        y = att @ v # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.resid_drop(self.proj(y))
        return y
        ### END YOUR CODE ###


class CausalCrossAttention(nn.Module):  # [2022-23 2024-25]
    """
    Modifications over the self-attention layer to handle two inputs and perform
    cross-attention between them.
    This follows the implementation of the self attention module with
    auto-regressive masking on (key).
    Manipulation of batch-size to allow for different batch size between the
    two inputs, with broadcasting over to the higher batch size value.
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
        self.register_buffer("mask", torch.tril(torch.ones(config.block_size, config.block_size))
                                     .view(1, 1, config.block_size, config.block_size))
        self.n_head = config.n_head
        fastmodel.attention_paths(self, config)  # [engine] fused kernel or this math

    def forward(self, x_kv, x_q):
        Bk, Tk, Ck = x_kv.size()
        Bq, Tq, Cq = x_q.size()

        # calculate query, key, values for all heads in batch and move head forward to be the batch dim

        # keys of x1
        k = self.key(x_kv).view(Bk, Tk, self.n_head, Ck // self.n_head).transpose(1, 2) # (B, nh, Tk, hs)

        # query with x2
        q = self.query(x_q).view(Bq, Tq, self.n_head, Cq // self.n_head).transpose(1, 2) # (B, nh, Tq, hs)

        # values from x1
        v = self.value(x_kv).view(Bk, Tk, self.n_head, Ck // self.n_head).transpose(1, 2) # (B, nh, Tk, hs)

        B = max(Bk, Bq)  # [engine]
        if self.flash:  # [engine] the same function through PyTorch's fused kernel
            y = fastmodel.kernel(self, q, k, v)
        else:  # [starter]
            # causal self-attention;  (B, nh, Tk, hs) x (B, nh, hs, Tq) -> (B, nh, Tq, Tk)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))

            B = max(Bk, Bq)

            att = att.masked_fill(self.mask[:,:,:Tq,:Tk] == 0, -1e10)
            att = F.softmax(att, dim=-1)
            att = self.attn_drop(att)
            y = att @ v # (B, nh, Tq, Tk) x (B, nh, Tk, hs) -> (B, nh, Tq, hs)
        y = y.transpose(1, 2).contiguous().view(B, Tq, Cq) # re-assemble all head outputs side by side

        # output projection
        y = self.resid_drop(self.proj(y))
        return y
