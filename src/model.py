"""
GPT model:
- the initial stem consists of a combination of token encoding and a positional encoding
- the meat of it is a uniform sequence of Transformer blocks
    - each Transformer is a sequential combination of a 1-hidden-layer MLP block and a
      self-attention block
    - all blocks feed into a central residual pathway similar to resnets
- the final decoder is a linear projection into a vanilla Softmax classifier

Three variants share this file: vanilla (CausalSelfAttention in every block), synthesizer
(SynthesizerAttention in every block, config.synthesizer) and perceiver (config.perceiver: the
first block becomes a DownProjectBlock onto bottleneck_dim learned queries, the last an
UpProjectBlock back to the input length). Module names match the handout's, so state_dicts are
interchangeable with it.
"""
import copy

import torch
import torch.nn as nn
from torch.nn import functional as F

from attention import CausalCrossAttention, CausalSelfAttention, KVCache, SynthesizerAttention


class GPTConfig:
    """ base GPT config, params common to all GPT versions """
    embd_pdrop = 0.1
    resid_pdrop = 0.1
    attn_pdrop = 0.1
    perceiver = False
    bottleneck_dim = None
    synthesizer = False
    # Not in the handout: False computes attention with the handout's written-out masked softmax,
    # True with F.scaled_dot_product_attention (same function, fused kernels). Not a parameter.
    fast_attention = True

    def __init__(self, vocab_size, block_size, **kwargs):
        self.vocab_size = vocab_size
        self.block_size = block_size
        for k, v in kwargs.items():
            setattr(self, k, v)


class GPT1Config(GPTConfig):
    """ GPT-1 like network roughly 125M params """
    n_layer = 12
    n_head = 12
    n_embd = 768


def mlp(config):
    """The position-wise feed-forward net every block ends with (keys mlp.0 / mlp.2)."""
    return nn.Sequential(
        nn.Linear(config.n_embd, 4 * config.n_embd),
        nn.GELU(),
        nn.Linear(4 * config.n_embd, config.n_embd),
        nn.Dropout(config.resid_pdrop),
    )


class Block(nn.Module):
    """ an unassuming Transformer block """

    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        if config.synthesizer:
            self.attn = SynthesizerAttention(config)
        else:
            self.attn = CausalSelfAttention(config)
        self.mlp = mlp(config)

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln1(x), cache)
        x = x + self.mlp(self.ln2(x))
        return x


class DownProjectBlock(nn.Module):
    """Transformer block used for down projection: cross-attention from the learned basis C
    (bottleneck_dim queries, eq. 5) onto the input sequence, so the blocks after it work on
    bottleneck_dim positions instead of the input length."""

    def __init__(self, config):
        super().__init__()
        self.C = nn.Parameter(torch.empty(1, config.bottleneck_dim, config.n_embd))
        nn.init.xavier_uniform_(self.C)
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = CausalCrossAttention(config)
        self.mlp = mlp(config)

    def forward(self, x_input):
        # the handout's hint: layernorm on C (the queries), then on the MLP's input
        x = self.C + self.attn(x_input, self.ln1(self.C))
        x = x + self.mlp(self.ln2(x))
        return x


class UpProjectBlock(nn.Module):
    """Transformer block used for up projection: cross-attention from the original input (as
    queries, eq. 6) onto the bottleneck_dim outputs of the previous block, back to input length."""

    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = CausalCrossAttention(config)
        self.mlp = mlp(config)

    def forward(self, y, x_input):
        # the handout's hint: layernorm on y (keys and values), then on the MLP's input
        x = x_input + self.attn(self.ln1(y), x_input)
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    """  the full GPT language model, with a context size of block_size """

    def __init__(self, config):
        super().__init__()

        # input embedding stem
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd))
        self.drop = nn.Dropout(config.embd_pdrop)

        # transformer
        self.perceiver = config.perceiver
        if config.perceiver:
            self.down_block = DownProjectBlock(config)
            # the middle blocks see bottleneck_dim positions, so their causal masks are that size
            inner = copy.copy(config)
            inner.block_size = config.bottleneck_dim
            self.blocks = nn.Sequential(*[Block(inner) for _ in range(config.n_layer - 2)])
            self.up_block = UpProjectBlock(config)
        else:
            self.blocks = nn.Sequential(*[Block(config) for _ in range(config.n_layer)])
        # decoder head
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

        self.block_size = config.block_size
        # the synthesizer's w2/b2 have block_size - 1 columns: that is its longest input
        self.max_len = config.block_size - 1 if config.synthesizer else config.block_size
        self.apply(self._init_weights)

        print("number of parameters: {}".format(sum(p.numel() for p in self.parameters())))

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

    def new_caches(self):
        """One KVCache per block, for decoding one step at a time (vanilla and synthesizer; the
        perceiver's bottleneck changes with every new input position, so it has none)."""
        if self.perceiver:
            return None
        return [KVCache() for _ in self.blocks]

    def forward(self, idx, targets=None, caches=None):
        b, t = idx.size()
        start = 0 if not caches or caches[0].v is None else caches[0].v.size(2)
        assert start + t <= self.block_size, "Cannot forward, model block size is exhausted."

        # forward the GPT model
        token_embeddings = self.tok_emb(idx)  # each index maps to a (learnable) vector
        position_embeddings = self.pos_emb[:, start:start + t, :]  # each position maps to a (learnable) vector
        x_input = self.drop(token_embeddings + position_embeddings)

        if self.perceiver:
            x = self.up_block(self.blocks(self.down_block(x_input)), x_input)
        elif caches is not None:
            x = x_input
            for block, cache in zip(self.blocks, caches):
                x = block(x, cache)
        else:
            x = self.blocks(x_input)

        x = self.ln_f(x)
        logits = self.head(x)

        # if we are given some desired targets also calculate the loss
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=0)

        return logits, loss
