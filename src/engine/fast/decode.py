"""Engine (free to change): batched greedy decoding, and the evaluation's answers from it.

It returns exactly what the handout's one-question-at-a-time loop returns (`utils.sample(model,
x, steps, sample=False)` for each prompt), only faster:

- many prompts are decoded together, whatever their lengths: each row keeps its own positions
  (a causal model never lets a position see what comes after it, padding included), so every
  row computes what it would compute alone;
- every layer keeps its keys and values (KVCache), so a step runs the one new position of each
  row. This holds for the perceiver too: its bottleneck slot j only sees inputs 0..j, so the
  slots a position needs are computed once and kept (see _transformer);
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
from engine.fast.fastmodel import kernel, softmax_attention, written_out
from engine.fast.fastpath import KVCache, visible


# ---- the decoder's forward ----------------------------------------------------------------------
# The project's one second implementation of the model's forward (everything else, training
# included, runs the handout's): a cached step computes one new position per row, each row at a
# position of its own, shapes the handout's forwards (which recompute every position) cannot
# take. It reads the model's parameters by the handout's names, in evaluation (no dropout), and
# is tested token for token against the handout's `utils.sample` (tests/engine/test_fast_paths.py).

def _heads(x, n_head):
    """(B, T, C) -> (B, n_head, T, C // n_head)"""
    B, T, C = x.size()
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


def _merged(y):
    """(B, n_head, T, hs) -> (B, T, C)"""
    B, nh, T, hs = y.size()
    return y.transpose(1, 2).contiguous().view(B, T, nh * hs)


def _rotated(layer, x, positions):
    """RoPE on queries or keys (B, nh, T, hs) at positions 0..T-1 (positions None) or at each
    row's own `positions` (B, T): each pair of features turned by its position's angle."""
    cache = layer.rope_cache[:x.size(2)] if positions is None else layer.rope_cache[positions][:, None]
    cos, sin = cache[..., 0], cache[..., 1]
    re, im = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    return torch.stack([re * cos - im * sin, re * sin + im * cos], dim=-1).flatten(-2).to(x.dtype)


def _attend(layer, x_kv, x_q, cache, kv_positions=None, q_positions=None):
    """A self- or cross-attention layer: keys and values from x_kv, queries from x_q, one side
    maybe a batch of 1 (the perceiver's basis C). `cache` stores the keys and values of
    positions 0..T-1 (kv_positions None: the prompts) or of the new columns at kv_positions
    (B, T), and gives back those of every position seen; a query at q_positions sees those at or
    before its own."""
    k = _heads(layer.key(x_kv), layer.n_head)
    q = _heads(layer.query(x_q), layer.n_head)
    v = _heads(layer.value(x_kv), layer.n_head)
    if getattr(layer, 'rope', False):  # before the cache: a stored key keeps its own rotation
        k, q = _rotated(layer, k, kv_positions), _rotated(layer, q, q_positions)
    B = max(k.size(0), q.size(0))
    k, q, v = k.expand(B, -1, -1, -1), q.expand(B, -1, -1, -1), v.expand(B, -1, -1, -1)
    k, v = cache.write(k, v, kv_positions)
    causal = q_positions is None  # positions 0..T-1 in every row: the mask's top-left slice
    mask = layer.mask[:, :, :q.size(2), :k.size(2)] if causal else visible(q_positions, k.size(2))
    y = kernel(layer, q, k, v, causal, mask) if layer.flash else written_out(layer, q, k, v, mask)
    return layer.resid_drop(layer.proj(_merged(y)))


def _synthesize(layer, x, cache, positions=None):
    """The synthesizer's attention (eq. 11), its cache one of values (it has no keys)."""
    a = F.relu(_heads(layer.w1(x), layer.n_head))  # ReLU(X A_i + b_1)
    v = _heads(layer.value(x), layer.n_head)
    _, v = cache.write(None, v, positions)
    T = v.size(2)
    mask = layer.mask[:, :, :a.size(2), :T] if positions is None else visible(positions, T)
    scores = a @ layer.w2[:, :T] + layer.b2[:T]  # (B, nh, Tq, T)
    y = softmax_attention(scores, mask, layer.attn_drop, v)
    return layer.resid_drop(layer.proj(_merged(y)))


def _block(block, x, cache, positions=None):
    """A Transformer block: attention, then the MLP, each added onto the residual stream."""
    h = block.ln1(x)
    if hasattr(block.attn, 'w2'):
        x = x + _synthesize(block.attn, h, cache, positions)
    else:
        x = x + _attend(block.attn, h, h, cache, positions, positions)
    return x + block.mlp(block.ln2(x))


def _transformer(model, idx, caches, positions=None):
    """Embeddings and blocks: idx (B, T) at positions 0..T-1 (the prompts) or, a decoding step,
    at `positions` (B, T) -> the vectors ln_f and the head turn into logits."""
    x_input = model.tok_emb(idx)
    if not model.rope:
        x_input = x_input + (model.pos_emb[:, :idx.size(1)] if positions is None
                             else model.pos_emb[0, positions])
    if not model.perceiver:
        x = x_input
        for block, cache in zip(model.blocks, caches):
            x = _block(block, x, cache, positions)
        return x
    # The perceiver. Bottleneck slot j only sees inputs 0..j, and input position i only sees
    # slots 0..i, so the logits at position i need slots 0..min(i, m - 1) only, each computed
    # once all its inputs are known. The prompts' call stores every slot (those past a row's
    # prompt saw padding, and are recomputed before they are used); a step computes one slot a
    # row: its new position, capped at m - 1 (slot m - 1 then comes out as stored: it only sees
    # inputs 0..m-1). An input of T < m positions needs its first T slots only.
    down, up = model.down_block, model.up_block
    if positions is None:
        slots, C = None, down.C[:, :idx.size(1)]
    else:
        slots = positions.clamp(max=model.bottleneck_dim - 1)
        C = down.C[0, slots]
    x = C + _attend(down.attn, x_input, down.ln1(C), caches[0], positions, slots)
    x = x + down.mlp(down.ln2(x))
    for block, cache in zip(model.blocks, caches[1:-1]):
        x = _block(block, x, cache, slots)
    x = x_input + _attend(up.attn, up.ln1(x), x_input, caches[-1], slots, positions)
    return x + up.mlp(up.ln2(x))


def _logits(model, idx, caches, positions=None):
    return model.head(model.ln_f(_transformer(model, idx, caches, positions)))


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
    # The prompts as one batch at positions 0..P-1 (past a row's prompt its cache holds padding's
    # keys and values, overwritten by its next tokens before any query sees them); only each
    # row's last position needs logits.
    x = _transformer(model, seqs[:, :P], caches)
    logits = model.head(model.ln_f(x[torch.arange(B, device=device), lengths - 1]))
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
        logits = _logits(model, token, caches, pos[:, None])[:, -1]
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
