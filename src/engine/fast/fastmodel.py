"""Engine (free to change): what the handout's model and attention layers ask of the engine.

The handout files (attention.py, model.py) compute every training step and every loss with
their own forwards. They reach this module on marked lines only: for PyTorch's fused attention
kernel, a branch beside the written-out math in each attention's forward (`kernel`), and for the
engine's attributes (`attention_paths`, `model_paths`). It reads their parameters by the
handout's names and imports none of them. The one other implementation of the model's forward
is the batched, cached decoder of the evaluation (engine/fast/decode.py).
"""
import math

import torch.nn as nn
from torch.nn import functional as F

from engine.fast.fastpath import Dropout, causal_math


def attention_paths(layer, config):
    """The engine's attributes of an attention layer: `flash` takes F.scaled_dot_product_attention
    (GPTConfig.fast_attention; False computes the handout's math everywhere), `cpu_kernel` the
    kernel or the math when training on a CPU (set per run by cpu_paths; None takes the kernel)."""
    layer.flash = getattr(config, 'fast_attention', False)
    layer.cpu_kernel = None


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


def kernel(layer, q, k, v, causal=True, mask=None):
    """What a layer with `flash` computes in place of the handout's masked softmax over the heads
    q (B, nh, Tq, hs), k and v (B', nh, Tk, hs), a batch of 1 broadcast: F.scaled_dot_product_
    attention, the same function through a fused kernel; in training on a CPU (cpu_math) the
    written-out math, in fewer passes where the mask is the causal one. `causal`: the handout's
    top-left-aligned tril (is_causal's, for Tq != Tk too), else `mask`."""
    B = max(k.size(0), q.size(0))
    k, q, v = k.expand(B, -1, -1, -1), q.expand(B, -1, -1, -1), v.expand(B, -1, -1, -1)
    if not cpu_math(layer, v.device):
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=None if causal else mask.bool(), is_causal=causal,
            dropout_p=layer.attn_drop.p if layer.attn_drop.training else 0.0)
    if causal:
        return causal_math(q, k, v, layer.attn_drop)
    return written_out(layer, q, k, v, mask)


def check_variant(config):
    if config.rope and (config.perceiver or config.synthesizer):
        raise ValueError('rope is a variant of the vanilla model (CausalSelfAttention only)')


def model_paths(model, config):
    """The engine's attributes of a GPT (what the decoder reads), and its dropout layers' cheaper
    draws on a CPU (fastpath.Dropout: nn.Dropout's distribution; it has no state, so nothing
    else changes)."""
    model.bottleneck_dim = config.bottleneck_dim
    # the synthesizer's w2/b2 have block_size - 1 columns: that is its longest input
    model.max_len = config.block_size - 1 if config.synthesizer else config.block_size
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Dropout:
                setattr(module, name, Dropout(child.p, config))
