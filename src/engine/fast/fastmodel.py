"""Engine (free to change): the model's forward without the handout's needless work.

The handout files (attention.py, model.py) compute with their own forward wherever a batch of
whole rows is computed, with PyTorch's fused attention kernel as a branch beside the written-out
math (`kernel`). They hand a call here, on one marked line, only for what their shapes cannot
carry: packed rows (training: only the positions that can change the loss, as (N, C) rows) and
decoding caches (each step computes its new positions only). They pass themselves: this module
reads their parameters and submodules by the handout's names and imports none of them. Every
path is tested against the handout's math (tests/test_fast_paths.py).
"""
import math

import torch.nn as nn
from torch.nn import functional as F

from engine.fast.fastpath import Dropout, by_spans, causal_math, loss_groups, visible


# ---- attention ----------------------------------------------------------------------------------

def attention_paths(layer, config):
    """The engine's attributes of an attention layer: `flash` takes F.scaled_dot_product_attention
    (GPTConfig.fast_attention; False computes the handout's math everywhere), `cpu_kernel` the
    kernel or the math when training on a CPU (set per run by cpu_paths; None takes the kernel)."""
    layer.flash = getattr(config, 'fast_attention', False)
    layer.cpu_kernel = None


def split_heads(x, n_head, packing=None):
    """(B, T, C), or (N, C) packed by `packing`, -> (B, n_head, T, C // n_head)"""
    if x.dim() == 2:
        x = packing.unpack(x)
    B, T, C = x.size()
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


def merge_heads(y, packing=None):
    """(B, n_head, T, hs) -> (B, T, C), or (N, C) when `packing` is given"""
    B, nh, T, hs = y.size()
    y = y.transpose(1, 2).contiguous().view(B, T, nh * hs)
    return y if packing is None else packing.pack(y)


def softmax_attention(att, mask, attn_drop, v):
    """The handout's attention from scores `att` (B, nh, Tq, Tk), under any mask."""
    att = att.masked_fill(mask == 0, -1e10)
    att = F.softmax(att, dim=-1)
    att = attn_drop(att)
    return att @ v


def written_out(layer, q, k, v, mask):
    """The handout's scaled dot-product attention of the heads q over k, v, written out."""
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    return softmax_attention(att, mask, layer.attn_drop, v)


def cpu_math(layer, device):
    """Whether training on a CPU takes the written-out math instead of the kernel: with
    attention dropout (the kernel has none of its own on a CPU: it would fall back to the same
    math with nn.Dropout's slower draws), or where cpu_paths found the math faster."""
    return layer.attn_drop.training and device.type == 'cpu' and (
        layer.attn_drop.p > 0 or layer.cpu_kernel is False)


def rotary(layer, rotate, x, positions):
    """RoPE on queries or keys (B, nh, T, hs) at positions 0..T-1 (positions None: also packed
    rows, which split_heads has put back at their positions), or, decoding, at each row's own
    `positions` (B, T). `rotate` is the handout's apply_rotary_emb."""
    if positions is None:
        return rotate(x, layer.rope_cache)
    return rotate(x, layer.rope_cache[positions][:, None])


def kernel(layer, q, k, v, causal=True, mask=None, packing=None):
    """What a layer with `flash` computes in place of the handout's masked softmax over the heads
    q (B, nh, Tq, hs), k and v (B', nh, Tk, hs), a batch of 1 broadcast: F.scaled_dot_product_
    attention, the same function through a fused kernel; in training on a CPU (cpu_math) the
    written-out math, in fewer passes where the mask is the causal one. `causal`: the handout's
    top-left-aligned tril (is_causal's, for Tq != Tk too), else `mask`; by_spans: a packed step's
    groups of rows each over their own columns (--pack_groups)."""
    B = max(k.size(0), q.size(0))
    k, q, v = k.expand(B, -1, -1, -1), q.expand(B, -1, -1, -1), v.expand(B, -1, -1, -1)
    if not cpu_math(layer, v.device):
        return by_spans(lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=None if causal else mask.bool(), is_causal=causal,
            dropout_p=layer.attn_drop.p if layer.attn_drop.training else 0.0),
            q, k, v, packing if causal else None)
    if causal:
        return causal_math(q, k, v, layer.attn_drop)
    return written_out(layer, q, k, v, mask)


# (a copy of the attention layers' forward: packed (N, C) rows and cached keys are not their shapes)
def attend(layer, x_kv, x_q, *, rotate=None, packing=None, cache=None, positions=None,
           kv_positions=None, q_positions=None):
    """A self- or cross-attention layer's forward: keys and values from x_kv, queries from x_q
    (the same tensor for self-attention; `positions` then stands for both). Either input may be
    packed (2-D) by `packing`; the batch sizes may differ (one side is broadcast: the
    perceiver's basis C is one sequence). Decoding: `cache` stores the keys/values of positions
    0..T-1 (positions None: the prompts), or holds those of the positions already seen, and the
    inputs have the new columns, at their positions (B, T)."""
    if positions is not None:
        kv_positions = q_positions = positions
    k = split_heads(layer.key(x_kv), layer.n_head, packing)
    q = split_heads(layer.query(x_q), layer.n_head, packing)
    v = split_heads(layer.value(x_kv), layer.n_head, packing)
    if getattr(layer, 'rope', False):  # before the cache: a stored key keeps its own rotation
        k, q = rotary(layer, rotate, k, kv_positions), rotary(layer, rotate, q, q_positions)
    B = max(k.size(0), q.size(0))
    k, q, v = k.expand(B, -1, -1, -1), q.expand(B, -1, -1, -1), v.expand(B, -1, -1, -1)
    if cache is not None:
        k, v = cache.write(k, v, kv_positions)
    causal = q_positions is None  # positions 0..T-1 in every row: the mask's top-left slice
    mask = layer.mask[:, :, :q.size(2), :k.size(2)] if causal else visible(q_positions, k.size(2))
    y = kernel(layer, q, k, v, causal, mask, packing) if layer.flash else \
        written_out(layer, q, k, v, mask)
    y = merge_heads(y, packing if x_q.dim() == 2 else None)
    return layer.resid_drop(layer.proj(y))


# (a copy of the synthesizer's forward, for packed rows and a cache of values)
def synthesize(layer, x, *, packing=None, cache=None, positions=None):
    """The synthesizer's forward (eq. 11) over packed rows or a decoding cache (of values: it has
    no keys)."""
    a = F.relu(split_heads(layer.w1(x), layer.n_head, packing))  # ReLU(X A_i + b_1)
    v = split_heads(layer.value(x), layer.n_head, packing)
    if cache is not None:
        _, v = cache.write(None, v, positions)
    T = v.size(2)
    mask = layer.mask[:, :, :T, :T] if positions is None else visible(positions, T)
    scores = a @ layer.w2[:, :T] + layer.b2[:T]  # (B, nh, Tq, T)
    y = softmax_attention(scores, mask, layer.attn_drop, v)
    return layer.resid_drop(layer.proj(merge_heads(y, packing)))


# ---- the model ----------------------------------------------------------------------------------

def check_variant(config):
    if config.rope and (config.perceiver or config.synthesizer):
        raise ValueError('rope is a variant of the vanilla model (CausalSelfAttention only)')


def model_paths(model, config):
    """The engine's attributes of a GPT, and its dropout layers' cheaper draws on a CPU
    (fastpath.Dropout: nn.Dropout's distribution; it has no state, so nothing else changes)."""
    model.bottleneck_dim = config.bottleneck_dim
    model.skip_padding = config.skip_padding
    # the synthesizer's w2/b2 have block_size - 1 columns: that is its longest input
    model.max_len = config.block_size - 1 if config.synthesizer else config.block_size
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Dropout:
                setattr(module, name, Dropout(child.p, config))


def hands_off(model, idx, targets, fast):
    """Whether GPT.forward gives a call with the engine's keywords `fast` to forward() below:
    where they ask for what the handout's body cannot carry: packed rows (the trainer's steps
    on a CPU, or where it counted the positions that can change the loss), decoding caches or
    positions. A model that computes as the handout does (--plain) never packs its rows, so the
    trainer's keywords (loss_only, packed=None) then ask nothing of it; the fused kernel is a
    branch of the handout's attention bodies."""
    return bool(fast.get('packed') is not None or fast.get('caches') is not None
                or fast.get('positions') is not None
                or packs(model, idx, targets, fast.get('loss_only'), fast.get('packed')))


def packs(model, idx, targets, loss_only, packed):
    """Whether a trainer's step is computed on the positions that can change its loss only."""
    return bool(loss_only and targets is not None and model.training and model.skip_padding
                and (packed is not None or idx.device.type == 'cpu'))


def passed(**kwargs):
    """The engine's keywords a call passes on: those set (a layer given none computes with its
    handout body)."""
    return {k: v for k, v in kwargs.items() if v is not None}


# (a copy of DownProjectBlock's forward: packed rows, and a decoding step's slots)
def down_project(layer, x_input, *, packing=None, cache=None, positions=None, slots=None):
    """The perceiver's DownProjectBlock; decoding steps: x_input holds the new input columns at
    `positions`, and only the bottleneck slots `slots` (B, S) are computed (see transformer)."""
    if slots is None:
        # Slot j only sees inputs 0..j and only reaches positions j.. of the output, so an
        # input of T < bottleneck_dim positions needs the first T slots only (same outputs).
        T = x_input.size(1) if packing is None else packing.T
        C = layer.C if T >= layer.C.size(1) else layer.C[:, :T]
    else:
        C = layer.C[0, slots]
    x = C + layer.attn(x_input, layer.ln1(C), packing=packing, cache=cache,
                       kv_positions=positions, q_positions=slots)
    return x + layer.mlp(layer.ln2(x))


# (a copy of UpProjectBlock's forward: packed rows, and a decoding step's slots)
def up_project(layer, y, x_input, *, packing=None, cache=None, positions=None, slots=None):
    """The perceiver's UpProjectBlock over packed rows or with a decoding cache."""
    x = x_input + layer.attn(layer.ln1(y), x_input, packing=packing, cache=cache,
                             kv_positions=slots, q_positions=positions)
    return x + layer.mlp(layer.ln2(x))


# (a copy of GPT.forward: packed rows and decoding caches, through transformer below)
def forward(model, idx, targets=None, caches=None, positions=None, loss_only=False, packed=None):
    """GPT.forward with the engine's bookkeeping: idx (B, T) -> (logits, loss).

    loss_only (the trainer's steps): in training (skip_padding) only the positions that can
    change the loss are computed, on a CPU always, elsewhere where the trainer counted them
    (`packed`: see packed_loss), and the logits, not computed everywhere, are None.
    Decoding (decode.py): `caches` (new_caches) store the keys and values of the positions seen;
    with `positions` (B, T), idx holds only the new tokens, at those positions."""
    if packs(model, idx, targets, loss_only, packed):
        return None, packed_loss(model, idx, targets, packed)
    if positions is None:
        assert idx.size(1) <= model.block_size, "Cannot forward, model block size is exhausted."
    elif positions.device.type == 'cpu':  # (on a GPU reading it back would stall every step;
        # decode.py never goes past the block)
        assert int(positions.max()) < model.block_size, "Cannot forward, model block size is exhausted."
    logits = model.head(model.ln_f(transformer(model, idx, positions, caches=caches)))
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=0)
    return logits, loss


def transformer(model, idx, positions=None, packing=None, caches=None):
    """Embeddings and blocks: idx -> the vectors that ln_f and the head turn into logits.

    idx is (B, T) at positions 0..T-1, or packed (N,) by `packing`, or (decoding steps) at
    `positions` (B, T), rows standing at different positions. `caches` (decoding) store the
    keys and values of every attention layer."""
    x_input = model.tok_emb(idx)
    if not model.rope:
        if packing is not None:
            # a lookup, as tok_emb's: its gradient is summed in a fixed order (indexing's
            # backward accumulates repeated positions in an order that varies with threads)
            position_embeddings = F.embedding(packing.positions, model.pos_emb[0])
        elif positions is not None:
            position_embeddings = model.pos_emb[0, positions]
        else:
            position_embeddings = model.pos_emb[:, :idx.size(1), :]
        x_input = x_input + position_embeddings
    x_input = model.drop(x_input)

    if not model.perceiver:
        x = x_input
        for i, layer in enumerate(model.blocks):  # (Block's own forward, which passes them on)
            x = layer(x, **passed(packing=packing, cache=None if caches is None else caches[i],
                                  positions=positions))
        return x
    down_cache, block_caches, up_cache = (None, [None] * len(model.blocks), None) \
        if caches is None else (caches[0], caches[1:-1], caches[-1])
    slots = None
    if positions is not None:
        # A decoding step. Bottleneck slot j only sees inputs 0..j, and input position i only
        # sees slots 0..i, so the logits at position i need slots 0..min(i, m - 1) only, each
        # computed once all its inputs are known. The prompts' slots were stored by the first
        # call (slots past a row's prompt saw padding, and are recomputed before they are
        # used); a step computes one slot per row: its new position, capped at m - 1 (slot
        # m - 1 then comes out as stored: it only sees inputs 0..m-1).
        slots = positions.clamp(max=model.bottleneck_dim - 1)
    x = model.down_block(x_input, **passed(packing=packing, cache=down_cache,
                                           positions=positions, slots=slots))
    for layer, cache in zip(model.blocks, block_caches):  # never packed: m slots in every row
        x = layer(x, **passed(cache=cache, positions=slots))
    return model.up_block(x, x_input, **passed(packing=packing, cache=up_cache,
                                               positions=positions, slots=slots))


def packed_loss(model, idx, targets, packed=None):
    """The training loss, computed on the positions that can change it only: a row's positions
    after its last non-PAD target change no loss (fastpath.Packing). The rows come in groups
    (fastpath.loss_groups: a CPU's, sorted by length; or, with `packed`, a GPU's one group of
    that many positions, fastpath.layout's); the loss is the handout's (the mean over the
    non-PAD targets), summed group by group and divided once."""
    total = 0.0
    for packing, x, y in loss_groups(idx, targets, packed):
        x = transformer(model, packing.pack(x), packing=packing)
        total = total + F.cross_entropy(model.head(model.ln_f(x)), packing.pack(y),
                                        ignore_index=0, reduction='sum')
    return total / (targets != 0).sum()
