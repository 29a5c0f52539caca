"""Engine (free to change): batched greedy decoding, and the evaluation's answers from it.

It returns exactly what the handout's one-question-at-a-time loop returns (`utils.sample(model,
x, steps, sample=False)` for each prompt), only faster:

- many prompts are decoded together, whatever their lengths: each row keeps its own positions
  (a causal model never lets a position see what comes after it, padding included), so every
  row computes what it would compute alone;
- every layer keeps its keys and values (KVCache), so a step runs the one new position of each
  row. This holds for the perceiver too: its bottleneck slot j only sees inputs 0..j, so the
  slots a position needs are computed once and kept (see fastmodel.transformer);
- a row is done once it holds `stop_count` stop characters: nothing after that can change the
  text the evaluation keeps (between the first and the second ⁇). Done rows leave the batch,
  and decoding ends when all rows are done.

The next token is chosen exactly as `sample` chooses it (top-1 of the softmax), from logits that
equal the handout's up to float rounding. Prompts too long for their continuation to fit in the
model's context are cropped as the handout crops them, without caches (rare: see _decode_cropped).
"""
from collections import defaultdict

import torch
from torch.nn import functional as F

from engine import devices
from engine.fast.fastmodel import transformer
from engine.fast.fastpath import KVCache, Packing


def _pick(logits):
    # the handout's choice: softmax, then top-1 (ties broken as torch.topk breaks them)
    return torch.topk(F.softmax(logits, dim=-1), k=1, dim=-1)[1]


def _count(x, stop_id):
    return (x == stop_id).sum(dim=1) if stop_id is not None else torch.zeros(len(x), dtype=torch.long)


@torch.no_grad()
def new_caches(model, size, trim=True):
    """One KVCache per attention layer of `model`, for decoding one step at a time sequences of
    at most `size` positions (trim: see KVCache)."""
    if not model.perceiver:
        return [KVCache(size, trim) for _ in model.blocks]
    # the perceiver: the down block's keys/values cover the input positions, the others the
    # bottleneck slots
    m = model.bottleneck_dim
    return [KVCache(size, trim)] + [KVCache(m, trim) for _ in model.blocks] + [KVCache(m, trim)]


def _decode_cached(model, prompts, steps, stop_id, stop_count, device, trim):
    """Prompts of any lengths, each continued within the model's context: one batch, caches."""
    B = len(prompts)
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    P = int(lengths.max())
    seqs = torch.zeros(B, P + steps, dtype=torch.long, device=device)
    for r, p in enumerate(prompts):
        seqs[r, :len(p)] = torch.tensor(p, dtype=torch.long)

    caches = new_caches(model, P + steps, trim)
    # The prompts, packed: each row's own positions only, as in fastpath.Packing (the caches
    # get zeros past a row's prompt, overwritten by its next tokens before any query sees them).
    # Only each row's last position needs logits.
    packing = Packing.of_lengths(lengths, P)
    x = transformer(model, packing.pack(seqs[:, :P]), packing=packing, caches=caches)
    logits = model.head(model.ln_f(x[lengths.cumsum(0) - 1]))
    rows = torch.arange(B, device=device)  # the rows still decoding (indices into seqs)
    pos = lengths.clone()  # where each of those rows puts its next token
    count = _count(seqs[:, :P] * (torch.arange(P, device=device) < lengths[:, None]), stop_id)
    generated = torch.zeros(B, dtype=torch.long, device=device)
    for step in range(steps):
        token = _pick(logits)  # (b, 1)
        seqs[rows, pos] = token[:, 0]
        generated[rows] += 1
        if stop_id is not None:
            count[rows] += (token[:, 0] == stop_id).long()
            going = count[rows] < stop_count
            still = int(going.sum())  # the one number read back per step
            if still == 0:
                break
            if still < len(going):  # done rows leave the batch (and their caches)
                # the indices of the rows that go on, first in a stable sort of "done": indexing
                # by a mask would read it back from the device (a second wait in this step)
                keep = torch.argsort((~going).to(torch.uint8), stable=True)[:still]
                rows, pos, token = rows[keep], pos[keep], token[keep]
                for cache in caches:
                    cache.keep_rows(keep)
        if step + 1 == steps:
            break
        logits, _ = model(token, caches=caches, positions=pos[:, None])
        logits = logits[:, -1]
        pos = pos + 1
    return [seqs[r, :int(lengths[r] + generated[r])].tolist() for r in range(B)]


@torch.no_grad()
def _decode_cropped(model, x, steps, stop_id, stop_count):
    """Prompts of one length whose continuation outgrows the context: the handout's own loop
    (the whole sequence each step, cropped to the last positions the model takes), batched."""
    window = model.max_len  # the handout crops to block_size; the synthesizer can only take max_len
    for _ in range(steps):
        logits, _ = model(x[:, -window:])
        x = torch.cat((x, _pick(logits[:, -1, :])), dim=1)
        if stop_id is not None and bool((_count(x, stop_id) >= stop_count).all()):
            break
    return x.tolist()


@torch.no_grad()
def greedy_complete(model, prompts, steps, stop_id=None, stop_count=2, batch_size=256,
                    device='cpu', autocast=None, trim_caches=None):
    """prompts: lists of token ids (at least one each). Returns, for each prompt, the prompt
    followed by the tokens greedy decoding appends: all `steps` of them, or fewer once the row
    holds `stop_count` tokens `stop_id` (the text up to there is final). trim_caches (default:
    on a CPU only) is KVCache's trim: the same tokens either way."""
    if trim_caches is None:
        trim_caches = torch.device(device).type == 'cpu'
    model.eval()
    assert all(len(p) > 0 for p in prompts), "every prompt needs at least one token"
    fits = [i for i, p in enumerate(prompts) if len(p) + steps <= model.max_len]
    cropped = defaultdict(list)
    for i, p in enumerate(prompts):
        if len(p) + steps > model.max_len:
            cropped[len(p)].append(i)
    # batches of similar lengths: little padding in each batch's prompts
    fits.sort(key=lambda i: len(prompts[i]))
    batches = [fits[i:i + batch_size] for i in range(0, len(fits), batch_size)]
    batches += [rows[i:i + batch_size] for _, rows in sorted(cropped.items())
                for i in range(0, len(rows), batch_size)]
    out = [None] * len(prompts)
    for rows in batches:
        with autocast or torch.autocast(torch.device(device).type, enabled=False):
            if len(prompts[rows[0]]) + steps <= model.max_len:
                seqs = _decode_cached(model, [prompts[r] for r in rows], steps, stop_id, stop_count,
                                      device, trim_caches)
            else:
                x = torch.tensor([prompts[r] for r in rows], dtype=torch.long, device=device)
                seqs = _decode_cropped(model, x, steps, stop_id, stop_count)
        for r, seq in zip(rows, seqs):
            out[r] = seq
    return out


def mask_of(stoi):
    """The mask character of a vocabulary (id 1: SPEC's vocabulary, every edition's)."""
    return next(c for c, i in stoi.items() if i == 1)


def predict(gpt, prompts, vocab, device, precision='fp32', batch_size=256):
    """The handout's greedy answers to inputs.read_questions' prompts, batched: one string per
    prompt ('' for a blank line)."""
    gpt.eval()
    mask = mask_of(vocab.stoi)
    questions = [p for p in prompts if p is not None]
    completions = iter(greedy_complete(gpt, questions, 32, stop_id=vocab.stoi[mask], stop_count=2,
                                       batch_size=batch_size, device=device,
                                       autocast=devices.autocast(device, precision)))
    predictions = []
    for prompt in prompts:
        if prompt is None:  # a blank line: nothing asked, nothing predicted
            predictions.append('')
            continue
        completion = ''.join([vocab.itos[int(i)] for i in next(completions)])
        predictions.append(completion.split(mask)[1])
    return predictions
