"""Seeding and sampling helpers for the demo."""
import random

import torch
from torch.nn import functional as F


def set_seed(seed):
    """Seed Python's, NumPy's (when installed) and torch's random generators."""
    random.seed(seed)
    try:
        import numpy as np
        np.random.seed(seed)
    except ImportError:
        pass
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def top_k_logits(logits, k):
    """Keep the k largest logits of each row; set the rest to -inf."""
    v, _ = torch.topk(logits, k)
    out = logits.clone()
    out[out < v[:, [-1]]] = -float('inf')
    return out


@torch.no_grad()
def sample(model, x, steps, temperature=1.0, sample=False, top_k=None):
    """Extend the (b, t) token ids in x by `steps` tokens, one at a time, feeding each prediction
    back in. The context is cropped to the model's block size, so every step reruns the whole
    (at most block_size long) window: quadratic work, unlike an RNN's constant work per step.
    sample=False takes the most likely token; sample=True draws from the (top_k-cropped,
    temperature-scaled) distribution."""
    block_size = model.get_block_size()
    model.eval()
    for _ in range(steps):
        x_cond = x if x.size(1) <= block_size else x[:, -block_size:]
        logits, _ = model(x_cond)
        logits = logits[:, -1, :] / temperature
        if top_k is not None:
            logits = top_k_logits(logits, top_k)
        probs = F.softmax(logits, dim=-1)
        if sample:
            ix = torch.multinomial(probs, num_samples=1)
        else:
            _, ix = torch.topk(probs, k=1, dim=-1)
        x = torch.cat((x, ix), dim=1)
    return x
