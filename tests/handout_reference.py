"""A plain re-implementation of the handout's model code (CS224N a5 starter code, 2021-22 edition
with the synthesizer and 2022-23 edition with the perceiver; a4 of 2024-25 with RoPE), written
for the tests only.

It mirrors the starter code's module names, parameter shapes and arithmetic as the handouts give
them (their texts and starter code, read for facts; the RoPE edition's public sources), with every
step written out (no fused kernels, no caches, no shared helpers with src/), so
that src/model.py can be checked against it: same state_dict keys and shapes, params files loading
both ways, same logits.
"""
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


class RefGPTConfig:
    embd_pdrop = 0.1
    resid_pdrop = 0.1
    attn_pdrop = 0.1
    perceiver = False
    bottleneck_dim = None
    synthesizer = False
    rope = False

    def __init__(self, vocab_size, block_size, **kwargs):
        self.vocab_size = vocab_size
        self.block_size = block_size
        for k, v in kwargs.items():
            setattr(self, k, v)


def _tril_buffer(size):
    return torch.tril(torch.ones(size, size)).view(1, 1, size, size)


# ---- RoPE as the 2024-25 edition's handout writes it (eq. 3/4), with complex numbers ----------

def ref_rope_cache(dim, max_positions):
    """(max_positions, dim/2, 2): cos and sin of t * theta_i, theta_i = 10000^(-2(i-1)/dim),
    i = 1..dim/2, one entry at a time."""
    cache = torch.zeros(max_positions, dim // 2, 2)
    for t in range(max_positions):
        for i in range(1, dim // 2 + 1):
            angle = t * 10000.0 ** (-2 * (i - 1) / dim)
            cache[t, i - 1, 0] = math.cos(angle)
            cache[t, i - 1, 1] = math.sin(angle)
    return cache


def ref_apply_rope(x, cache):
    """x (B, nh, T, hs): (x(2i-1) + i x(2i)) * (cos t theta_i + i sin t theta_i), the cache cut
    to the sequence's length."""
    T = x.size(-2)
    z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
    rot = torch.view_as_complex(cache[:T].contiguous())
    return torch.view_as_real(z * rot).reshape(x.shape)


class RefCausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.key = nn.Linear(config.n_embd, config.n_embd)
        self.query = nn.Linear(config.n_embd, config.n_embd)
        self.value = nn.Linear(config.n_embd, config.n_embd)
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.rope = config.rope
        if self.rope:
            self.register_buffer("rope_cache", ref_rope_cache(config.n_embd // config.n_head,
                                                              config.block_size))
        self.register_buffer("mask", _tril_buffer(config.block_size))
        self.n_head = config.n_head

    def forward(self, x):
        B, T, C = x.size()
        hs = C // self.n_head
        k = self.key(x).view(B, T, self.n_head, hs).transpose(1, 2)
        q = self.query(x).view(B, T, self.n_head, hs).transpose(1, 2)
        v = self.value(x).view(B, T, self.n_head, hs).transpose(1, 2)
        if self.rope:
            q, k = ref_apply_rope(q, self.rope_cache), ref_apply_rope(k, self.rope_cache)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, -1e10)
        att = F.softmax(att, dim=-1)
        att = self.attn_drop(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class RefSynthesizerAttention(nn.Module):
    """Eq. 11: softmax(ReLU(X A_i + b1) B_i + b2) (X V_i), causal; w1 holds every head's A_i/b1,
    w2 is (d/h, block_size-1) shared by the heads, b2 (block_size-1)."""

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.w1 = nn.Linear(config.n_embd, config.n_embd)
        self.w2 = nn.Parameter(torch.zeros(config.n_embd // config.n_head, config.block_size - 1))
        self.b2 = nn.Parameter(torch.zeros(config.block_size - 1))
        self.value = nn.Linear(config.n_embd, config.n_embd)
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.register_buffer("mask", _tril_buffer(config.block_size))
        self.n_head = config.n_head
        self.block_size = config.block_size
        nn.init.uniform_(self.w2, -0.001, 0.001)

    def forward(self, x):
        B, T, C = x.size()
        hs = C // self.n_head
        hidden = F.relu(self.w1(x)).view(B, T, self.n_head, hs).transpose(1, 2)
        v = self.value(x).view(B, T, self.n_head, hs).transpose(1, 2)
        att = hidden @ self.w2[:, :T] + self.b2[:T]
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, -1e10)
        att = F.softmax(att, dim=-1)
        att = self.attn_drop(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class RefCausalCrossAttention(nn.Module):
    """Keys/values from x_kv, queries from x_q; the batch dims broadcast in the matmuls."""

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.key = nn.Linear(config.n_embd, config.n_embd)
        self.query = nn.Linear(config.n_embd, config.n_embd)
        self.value = nn.Linear(config.n_embd, config.n_embd)
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.register_buffer("mask", _tril_buffer(config.block_size))
        self.n_head = config.n_head

    def forward(self, x_kv, x_q):
        Bk, Tk, Ck = x_kv.size()
        Bq, Tq, Cq = x_q.size()
        k = self.key(x_kv).view(Bk, Tk, self.n_head, Ck // self.n_head).transpose(1, 2)
        q = self.query(x_q).view(Bq, Tq, self.n_head, Cq // self.n_head).transpose(1, 2)
        v = self.value(x_kv).view(Bk, Tk, self.n_head, Ck // self.n_head).transpose(1, 2)
        B = max(Bk, Bq)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :Tq, :Tk] == 0, -1e10)
        att = F.softmax(att, dim=-1)
        att = self.attn_drop(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, Tq, Cq)
        return self.resid_drop(self.proj(y))


def _ref_mlp(config):
    return nn.Sequential(
        nn.Linear(config.n_embd, 4 * config.n_embd),
        nn.GELU(),
        nn.Linear(4 * config.n_embd, config.n_embd),
        nn.Dropout(config.resid_pdrop),
    )


class RefBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        if config.synthesizer:
            self.attn = RefSynthesizerAttention(config)
        else:
            self.attn = RefCausalSelfAttention(config)
        self.mlp = _ref_mlp(config)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class RefDownProjectBlock(nn.Module):
    """Eq. 5: queries from the learned basis C (1, m, d), keys/values from the input."""

    def __init__(self, config):
        super().__init__()
        self.C = nn.Parameter(torch.empty(1, config.bottleneck_dim, config.n_embd))
        nn.init.xavier_uniform_(self.C)
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = RefCausalCrossAttention(config)
        self.mlp = _ref_mlp(config)

    def forward(self, x_input):
        x = self.C + self.attn(x_input, self.ln1(self.C))
        x = x + self.mlp(self.ln2(x))
        return x


class RefUpProjectBlock(nn.Module):
    """Eq. 6: queries from the original input, keys/values from the bottleneck output y."""

    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = RefCausalCrossAttention(config)
        self.mlp = _ref_mlp(config)

    def forward(self, y, x_input):
        x = x_input + self.attn(self.ln1(y), x_input)
        x = x + self.mlp(self.ln2(x))
        return x


class RefGPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.rope = config.rope
        if not config.rope:  # 2024-25: with rope there is no position table at all
            self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd))
        self.drop = nn.Dropout(config.embd_pdrop)
        self.perceiver = config.perceiver
        if config.perceiver:
            full_block_size = config.block_size
            self.down_block = RefDownProjectBlock(config)
            config.block_size = config.bottleneck_dim
            self.blocks = nn.Sequential(*[RefBlock(config) for _ in range(config.n_layer - 2)])
            config.block_size = full_block_size
            self.up_block = RefUpProjectBlock(config)
        else:
            self.blocks = nn.Sequential(*[RefBlock(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.block_size = config.block_size
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)

    def get_block_size(self):
        return self.block_size

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.block_size
        x_input = self.tok_emb(idx)
        if not self.rope:
            x_input = x_input + self.pos_emb[:, :t, :]
        x_input = self.drop(x_input)
        x = self.down_block(x_input) if self.perceiver else x_input
        x = self.blocks(x)
        if self.perceiver:
            x = self.up_block(x, x_input)
        logits = self.head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=0)
        return logits, loss
