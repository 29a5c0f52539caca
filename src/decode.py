"""Batched greedy decoding that returns exactly what the handout's one-question-at-a-time loop
returns (`utils.sample(model, x, steps, sample=False)` for each prompt), only faster:

- prompts of the same length are decoded together, so no row is ever padded and every row's
  positions are the handout's;
- vanilla and synthesizer models keep each layer's keys/values (KVCache), so a step runs the new
  position only; the perceiver, whose bottleneck changes with each new input, reruns its prefix
  (as the handout does), still batched;
- a batch stops as soon as every row holds `stop_count` stop characters: nothing after that can
  change the text the evaluation keeps (between the first and the second ⁇).

The next token is chosen exactly as `sample` chooses it (top-1 of the softmax), from logits that
equal the handout's up to float rounding.
"""
from collections import defaultdict

import torch
from torch.nn import functional as F


def _pick(logits):
    # the handout's choice: softmax, then top-1 (ties broken as torch.topk breaks them)
    return torch.topk(F.softmax(logits[:, -1, :], dim=-1), k=1, dim=-1)[1]


@torch.no_grad()
def _decode_batch(model, x, steps, stop_id, stop_count):
    caches = model.new_caches() if x.size(1) + steps <= model.max_len else None
    window = model.max_len  # the handout crops to block_size; the synthesizer can only take max_len
    for step in range(steps):
        if caches is not None:
            logits, _ = model(x if step == 0 else x[:, -1:], caches=caches)
        else:
            logits, _ = model(x[:, -window:])
        x = torch.cat((x, _pick(logits)), dim=1)
        if stop_id is not None and bool(((x == stop_id).sum(dim=1) >= stop_count).all()):
            break
    return x


@torch.no_grad()
def greedy_complete(model, prompts, steps, stop_id=None, stop_count=2, batch_size=256,
                    device='cpu', autocast=None):
    """prompts: lists of token ids. Returns, for each prompt, the prompt followed by the tokens
    greedy decoding appends: all `steps` of them, or fewer once the row holds `stop_count`
    tokens `stop_id` (the text up to there is final)."""
    model.eval()
    by_length = defaultdict(list)
    for i, p in enumerate(prompts):
        by_length[len(p)].append(i)
    out = [None] * len(prompts)
    for length in sorted(by_length):
        rows = by_length[length]
        for i in range(0, len(rows), batch_size):
            chunk = rows[i:i + batch_size]
            x = torch.tensor([prompts[r] for r in chunk], dtype=torch.long, device=device)
            with autocast or torch.autocast(torch.device(device).type, enabled=False):
                x = _decode_batch(model, x, steps, stop_id, stop_count)
            for r, seq in zip(chunk, x.tolist()):
                out[r] = seq
    return out
