"""Handout file: the starter's model.py (names, state_dict keys fixed: tests/test_model_compat.py).

GPT model:
- the initial stem consists of a combination of token encoding and a positional encoding
- the meat of it is a uniform sequence of Transformer blocks
    - each Transformer is a sequential combination of a 1-hidden-layer MLP block and a
      self-attention block
    - all blocks feed into a central residual pathway similar to resnets
- the final decoder is a linear projection into a vanilla Softmax classifier

A handout file: four variants, module names and state_dict keys as the handouts'
(tests/test_model_compat.py): vanilla; synthesizer (SynthesizerAttention in every block);
perceiver (a DownProjectBlock onto bottleneck_dim learned queries first, an UpProjectBlock back
last); rope (2024-25, no position table: attention rotates queries and keys). src/models.py is
this module under the 2024-25 starter's file name. Changing no result: training on a CPU
computes only the positions that can change the loss (fastpath.Packing), and decoding keeps each
layer's keys and values (decode.py); that bookkeeping is passed by keyword.
"""
import copy

import torch
import torch.nn as nn
from torch.nn import functional as F

from attention import CausalCrossAttention, CausalSelfAttention, SynthesizerAttention
from engine.fastpath import Dropout, loss_groups


class GPTConfig:
    """ base GPT config, params common to all GPT versions """
    embd_pdrop = 0.1
    resid_pdrop = 0.1
    attn_pdrop = 0.1
    perceiver = False
    bottleneck_dim = None
    synthesizer = False
    rope = False
    # Not in the handout: False computes attention with the handout's written-out masked softmax,
    # True with F.scaled_dot_product_attention (same function, fused kernels). Not a parameter.
    fast_attention = True
    # Not in the handout: in training on a CPU, skip the positions that cannot change the loss
    # (see fastpath.Packing). False computes every position, as the handout does. (A GPU computes
    # every position, fixed shapes, unless the trainer's pack_multiple asks: docs/gpu.md.)
    skip_padding = True
    # Not in the handout: dropout draws its random numbers faster on a CPU, same distribution
    # (fastpath.Dropout). False draws them as nn.Dropout does.
    fast_dropout = True

    def __init__(self, vocab_size, block_size, **kwargs):
        self.vocab_size = vocab_size
        self.block_size = block_size
        for k, v in kwargs.items():
            setattr(self, k, v)


# The variants by name (as minGPT's model_type table names model sizes): the GPTConfig settings
# each one turns on. run.py's choices, the scripts and the tests' tables read them here. A variant
# with a bottleneck_dim key takes the --bottleneck_dim given (the value here is the handout's
# default).
VARIANTS = {
    'vanilla': {},
    'synthesizer': {'synthesizer': True},  # 2021-22: SynthesizerAttention in every block
    'perceiver': {'perceiver': True, 'bottleneck_dim': 32},  # 2022-23: down/up projection blocks
    'rope': {'rope': True},  # 2024-25: rotary positions in every attention layer, no pos_emb
}


def config_for(variant, vocab_size, block_size, bottleneck_dim=None, **kwargs):
    """The GPTConfig of a variant named in VARIANTS, with kwargs (sizes, dropout, paths) set."""
    settings = dict(VARIANTS[variant])
    if bottleneck_dim is not None and 'bottleneck_dim' in settings:
        settings['bottleneck_dim'] = bottleneck_dim
    return GPTConfig(vocab_size, block_size, **settings, **kwargs)


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
        Dropout(config.resid_pdrop, config),
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

    def forward(self, x, *, packing=None, cache=None, positions=None):
        x = x + self.attn(self.ln1(x), packing=packing, cache=cache, positions=positions)
        x = x + self.mlp(self.ln2(x))
        return x


class DownProjectBlock(nn.Module):
    """Transformer block used for down projection: cross-attention from the learned basis C
    (bottleneck_dim queries, eq. 5) onto the input sequence, so the blocks after it work on
    bottleneck_dim positions instead of the input length."""
    weight_decay = {'C': False}  # query vectors, like an embedding (optimizer_groups' 'matmul')

    def __init__(self, config):
        super().__init__()
        self.C = nn.Parameter(torch.empty(1, config.bottleneck_dim, config.n_embd))
        nn.init.xavier_uniform_(self.C)
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = CausalCrossAttention(config)
        self.mlp = mlp(config)

    def forward(self, x_input, *, packing=None, cache=None, positions=None, slots=None):
        """Decoding steps: x_input holds the new input columns at `positions`, and only the
        bottleneck slots `slots` (B, S) are computed (see GPT.transformer)."""
        if slots is None:
            # Slot j only sees inputs 0..j and only reaches positions j.. of the output, so an
            # input of T < bottleneck_dim positions needs the first T slots only (same outputs).
            T = x_input.size(1) if packing is None else packing.T
            C = self.C if T >= self.C.size(1) else self.C[:, :T]
        else:
            C = self.C[0, slots]
        # the handout's hint: layernorm on C (the queries), then on the MLP's input
        x = C + self.attn(x_input, self.ln1(C), packing=packing, cache=cache,
                          kv_positions=positions, q_positions=slots)
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

    def forward(self, y, x_input, *, packing=None, cache=None, positions=None, slots=None):
        # the handout's hint: layernorm on y (keys and values), then on the MLP's input
        x = x_input + self.attn(self.ln1(y), x_input, packing=packing, cache=cache,
                                kv_positions=slots, q_positions=positions)
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    """  the full GPT language model, with a context size of block_size """
    weight_decay = {'pos_emb': False}  # a lookup table, like tok_emb (optimizer_groups' 'matmul')

    def __init__(self, config):
        super().__init__()

        if config.rope and (config.perceiver or config.synthesizer):
            raise ValueError('rope is a variant of the vanilla model (CausalSelfAttention only)')
        # input embedding stem
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.rope = config.rope
        if not config.rope:  # with RoPE, positions enter through the attention layers only
            self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd))
        self.drop = Dropout(config.embd_pdrop, config)

        # transformer
        self.perceiver = config.perceiver
        self.bottleneck_dim = config.bottleneck_dim
        self.skip_padding = config.skip_padding
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

    def forward(self, idx, targets=None, caches=None, positions=None, loss_only=False,
                packed=None):
        """idx (B, T) -> logits (B, T, vocab_size), and the loss when targets are given.

        loss_only (the trainer's steps): in training (skip_padding) only the positions that can
        change the loss are computed, on a CPU always, elsewhere where the trainer counted them
        (`packed`: see packed_loss), and the logits, not computed everywhere, are None. Every
        other call gets the handout's (logits, loss).
        Decoding (see decode.py): `caches` (new_caches) store the keys and values of the positions
        seen; with `positions` (B, T), idx holds only the new tokens, at those positions.
        """
        b, t = idx.size()
        if loss_only and targets is not None and self.training and self.skip_padding \
                and (packed is not None or idx.device.type == 'cpu'):
            return None, self.packed_loss(idx, targets, packed)
        if positions is None:
            assert t <= self.block_size, "Cannot forward, model block size is exhausted."
        elif positions.device.type == 'cpu':  # (on a GPU reading it back would stall every step;
            # decode.py never goes past the block)
            assert int(positions.max()) < self.block_size, "Cannot forward, model block size is exhausted."

        logits = self.head(self.ln_f(self.transformer(idx, positions, caches=caches)))

        # if we are given some desired targets also calculate the loss
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=0)

        return logits, loss

    def transformer(self, idx, positions=None, packing=None, caches=None):
        """Embeddings and blocks: idx -> the vectors that ln_f and the head turn into logits.

        idx is (B, T) at positions 0..T-1, or packed (N,) by `packing`, or (decoding steps) at
        `positions` (B, T), rows standing at different positions. `caches` (decoding) store the
        keys and values of every attention layer."""
        # forward the GPT model
        x_input = self.tok_emb(idx)  # each index maps to a (learnable) vector
        if not self.rope:
            if packing is not None:
                # a lookup, as tok_emb's: its gradient is summed in a fixed order (indexing's
                # backward accumulates repeated positions in an order that varies with threads)
                position_embeddings = F.embedding(packing.positions, self.pos_emb[0])
            elif positions is not None:
                position_embeddings = self.pos_emb[0, positions]
            else:
                position_embeddings = self.pos_emb[:, :idx.size(1), :]  # each position maps to a (learnable) vector
            x_input = x_input + position_embeddings
        x_input = self.drop(x_input)

        if not self.perceiver:
            x = x_input
            for i, block in enumerate(self.blocks):
                x = block(x, packing=packing, cache=None if caches is None else caches[i],
                          positions=positions)
            return x
        down_cache, block_caches, up_cache = (None, [None] * len(self.blocks), None) \
            if caches is None else (caches[0], caches[1:-1], caches[-1])
        slots = None
        if positions is not None:
            # A decoding step. Bottleneck slot j only sees inputs 0..j, and input position i
            # only sees slots 0..i, so the logits at position i need slots 0..min(i, m - 1)
            # only, each computed once all its inputs are known. The prompts' slots were stored
            # by the first call (slots past a row's prompt saw padding, and are recomputed
            # before they are used); a step computes one slot per row: its new position, capped
            # at m - 1 (slot m - 1 then comes out as stored: it only sees inputs 0..m-1).
            slots = positions.clamp(max=self.bottleneck_dim - 1)
        x = self.down_block(x_input, packing=packing, cache=down_cache, positions=positions,
                            slots=slots)
        for block, cache in zip(self.blocks, block_caches):
            x = block(x, cache=cache, positions=slots)  # never packed: m slots in every row
        return self.up_block(x, x_input, packing=packing, cache=up_cache, positions=positions,
                             slots=slots)

    def packed_loss(self, idx, targets, packed=None):
        """The training loss, computed on the positions that can change it only: a row's
        positions after its last non-PAD target change no loss (fastpath.Packing). The rows come
        in groups (fastpath.loss_groups: a CPU's, sorted by length; or, with `packed`, a GPU's
        one group of that many positions, fastpath.layout's); the loss is the handout's (the
        mean over the non-PAD targets), summed group by group and divided once.
        """
        total = 0.0
        for packing, x, y in loss_groups(idx, targets, packed):
            x = self.transformer(packing.pack(x), packing=packing)
            total = total + F.cross_entropy(self.head(self.ln_f(x)), packing.pack(y),
                                            ignore_index=0, reduction='sum')
        return total / (targets != 0).sum()


class CustomLayerNorm(nn.Module):
    """The 2021-22 starter's empty placeholder, kept under its name; no model uses it."""
