"""The fast paths compute what the handout computes.

- Evaluation: decode.greedy_complete (prompts of different lengths in one batch, KV caches for
  every variant, the perceiver included, rows leaving the batch at their closing ⁇) gives the
  same prediction strings as the handout's one-question loop (utils.sample(model, x, 32,
  sample=False), split on ⁇, [1]), also for prompts long enough to need the handout's cropping
  and for rows that never close their answer.
- Attention: scaled_dot_product_attention and the written-out math agree, outputs and gradients,
  for self- and cross-attention.
- Dropout: fastpath.Dropout's cheaper draws on a CPU drop with nn.Dropout's probability,
  independently, scale and pass gradients as it does, and give the model the same mean loss.
- Training: skipping the positions that cannot change the loss (trim_padding, and the step's
  groups of rows, each through the handout's forward on its own columns) gives the loss and
  gradients of the full batch, for all four variants (the
  perceiver also with inputs shorter than its bottleneck); and a short run of trainer.Trainer
  matches a plain handout loop (same seed, same batches, dropout 0) within float noise in fp32
  (also torch.compile'd) and within a small tolerance in bf16.
"""
import functools
import math

import pytest
import torch
from torch.nn import functional as F

import attention
from engine import devices
from engine.fast import fastpath
from engine.training import loop, optim
from engine.machine import plan as planning
from support import LossLog
from engine.fast import batches
import dataset
import handout_reference
import model
import trainer
import utils
from engine.fast.decode import greedy_complete

CORPUS = '\n'.join([
    'Ada Lovelace was born in London and wrote about engines.',
    'Alan Turing was born in Maida Vale, London.',
    'Marie Curie was born in Warsaw.',
    'Niels Bohr was born in Copenhagen, Denmark.',
    'Emmy Noether was born in Erlangen, Bavaria.',
    'Srinivasa Ramanujan was born in Erode. Where? Who?',
] * 3)
TSV = ''.join(f'Where was {n} born?\t{p}\n' for n, p in [
    ('Ada Lovelace', 'London'), ('Alan Turing', 'London'), ('Marie Curie', 'Warsaw'),
    ('Niels Bohr', 'Copenhagen'), ('Emmy Noether', 'Erlangen'), ('Srinivasa Ramanujan', 'Erode')])
# every variant of model.VARIANTS, the perceiver with a bottleneck small enough for short inputs
VARIANTS = {v: dict(settings, **({'bottleneck_dim': 8} if 'bottleneck_dim' in settings else {}))
            for v, settings in model.VARIANTS.items()}


def tiny(vocab, overrides, fast=True, dropout=0.1, block_size=128, n_layer=3):
    conf = model.GPTConfig(vocab, block_size, n_layer=n_layer, n_head=2, n_embd=32,
                           fast_attention=fast, **overrides)
    conf.embd_pdrop = conf.resid_pdrop = conf.attn_pdrop = dropout
    return model.GPT(conf)


@torch.no_grad()
def jitter(gpt, scale):
    """Add N(0, scale^2) noise (from the global generator) to every parameter: weights far enough
    from their initialisation that positions, context and dropout masks matter. Returns gpt."""
    for p in gpt.parameters():
        p.add_(torch.randn(p.shape) * scale)
    return gpt


@pytest.fixture(scope='module')
def data():
    utils.set_seed(0)
    pre = dataset.CharCorruptionDataset(CORPUS, 128)
    return pre, dataset.NameDataset(pre, TSV)


# ---- evaluation ---------------------------------------------------------------------------------

def handout_completion(gpt, vocab, question):
    """The handout's evaluation of one question: 32 greedy steps of utils.sample."""
    x = torch.tensor([[vocab.stoi[c] for c in question + '⁇']], device=gpt.tok_emb.weight.device)
    return ''.join(vocab.itos[int(i)] for i in utils.sample(gpt, x, 32, sample=False)[0])


@pytest.mark.parametrize('name', VARIANTS)
def test_batched_decoding_gives_the_handouts_predictions(data, name, device):
    pre, names = data
    utils.set_seed(1)
    gpt = tiny(pre.vocab_size, VARIANTS[name])
    # a few finetuning steps: the model learns to close some answers with ⁇, and emits
    # question-dependent text
    conf = trainer.TrainerConfig(max_epochs=40, batch_size=3, learning_rate=3e-3, device=device)
    trainer.Trainer(gpt, names, None, conf).train()
    questions = [line.split('\t')[0] for line in TSV.splitlines()]
    # other lengths, among them prompts shorter than the perceiver's bottleneck (8), and
    # questions the model has not seen
    questions += ['Where was Ada born?', 'Who?', 'Why', 'Where was Marie Curie born? ' * 3,
                  'Where was Alan born?', 'Niels Bohr born where?']
    if name != 'synthesizer':  # (the handout's loop itself fails there: w2 has 127 columns)
        questions.append('Ada Lovelace was born in ' * 5)  # 125 + 1 + 32 > 128: cropped, uncached
    prompts = [[pre.stoi[c] for c in q + '⁇'] for q in questions]
    mask = pre.stoi['⁇']
    got = [''.join(pre.itos[i] for i in ids).split('⁇')[1]
           for ids in greedy_complete(gpt, prompts, 32, stop_id=mask, batch_size=5, device=device)]
    want = [handout_completion(gpt, pre, q) for q in questions]
    assert got == [w.split('⁇')[1] for w in want]
    # the check means something: the answers differ, and rows close their answers (and leave
    # the batch) at different steps
    assert len(set(got)) >= 3
    assert len({len(w.split('⁇')[1]) for w in want if w.count('⁇') >= 2}) >= 2


@pytest.mark.parametrize('trim', [True, False], ids=['trimmed-caches', 'whole-caches'])
@pytest.mark.parametrize('name', VARIANTS)
def test_batched_decoding_is_the_handouts_loop_token_for_token(name, device, trim):
    """All 32 tokens, prompt for prompt: the caches reproduce every step, not only the answer
    (random weights large enough that positions and context matter). With a stop token, each row
    is the handout's sequence cut after its second stop token, or whole if it has fewer. Both
    ways of reading the caches (trimmed to the furthest position, the CPU's default; whole, the
    GPU's, with no host sync per layer) give the same tokens."""
    torch.manual_seed(2)
    gpt = jitter(tiny(40, VARIANTS[name], block_size=64).eval(), 0.3).to(device)
    gen = torch.Generator().manual_seed(3)
    lengths = (1, 3, 7, 8, 9, 20, 31) + ((40,) if name != 'synthesizer' else ())
    prompts = [torch.randint(2, 40, (n,), generator=gen).tolist() for n in lengths]
    got = greedy_complete(gpt, prompts, 32, batch_size=4, device=device, trim_caches=trim)
    want = [utils.sample(gpt, torch.tensor([p], device=device), 32, sample=False)[0].tolist()
            for p in prompts]
    assert got == want

    # a stop token that some rows emit twice and others not: rows leave the batch at different
    # steps while the others go on
    def stops(t):
        done = sum(w.count(t) >= 2 for w in want)
        return min(done, len(want) - done)
    stop = max(range(40), key=stops)

    def cut(seq, prompt):
        # decoding stops after the step at which the row holds two stop tokens (at least one
        # step, even when the prompt holds two already)
        hits = [i for i, t in enumerate(seq) if t == stop]
        return seq if len(hits) < 2 else seq[:max(hits[1], len(prompt)) + 1]
    got = greedy_complete(gpt, prompts, 32, stop_id=stop, batch_size=4, device=device,
                          trim_caches=trim)
    assert got == [cut(w, p) for w, p in zip(want, prompts)]
    assert any(len(g) < len(w) for g, w in zip(got, want)) and any(g == w for g, w in zip(got, want))


def test_rows_leave_the_decoding_batch_without_a_mask_read_back():
    """When rows finish, the others are taken by their indices, not by a boolean mask: on a GPU a
    mask index waits for the mask to come back (aten.nonzero), a second wait in that step beside
    the one count read per step. Every aten op of a decoding whose rows finish at different steps
    is recorded; none indexes by a bool tensor or calls nonzero.
    (Before: rows[going] and KVCache.keep_rows(going) did, on every step where a row finished.)"""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.masked = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            flat = [a for arg in args for a in (arg if isinstance(arg, (list, tuple)) else [arg])]
            if func.__name__.startswith('nonzero') or (
                    func.__name__.startswith('index') and
                    any(isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in flat[1:])):
                self.masked.append(func.__name__)
            return func(*args, **(kwargs or {}))
    torch.manual_seed(2)
    gpt = jitter(tiny(40, VARIANTS['vanilla'], block_size=64).eval(), 0.3)
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(2, 40, (n,), generator=gen).tolist() for n in (1, 3, 7, 8, 9, 20)]
    plain = greedy_complete(gpt, prompts, 32, batch_size=8)
    stop = max(range(40), key=lambda t: len({sum(1 for x in p if x == t) >= 2 for p in plain}) * 100
               + sum(p.count(t) >= 2 for p in plain))
    with Ops() as ops:
        got = greedy_complete(gpt, prompts, 32, stop_id=stop, batch_size=8)
    assert len({len(g) for g in got}) >= 2  # rows did leave at different steps
    assert ops.masked == []


# ---- attention: the fused kernel and the written-out math ---------------------------------------

def attention_pair(cls, seed, **overrides):
    conf = model.GPTConfig(30, 40, n_layer=1, n_head=4, n_embd=32, attn_pdrop=0.0, resid_pdrop=0.0,
                           **overrides)
    torch.manual_seed(seed)
    fast = cls(conf)
    with torch.no_grad():
        for p in fast.parameters():
            p.normal_(0, 0.3)  # far from uniform attention, so that differences show
    plain = cls(conf)
    plain.load_state_dict(fast.state_dict())
    fast.flash, plain.flash = True, False
    return fast, plain


def grads(mod, inputs):
    return [x.grad for x in inputs] + [p.grad for p in mod.parameters()]


@pytest.mark.parametrize('kind,shapes', [
    ('self', [(3, 40, 32)]),
    ('self', [(2, 17, 32)]),
    ('cross', [(3, 30, 32), (1, 8, 32)]),   # the perceiver's down projection: C as queries
    ('cross', [(3, 8, 32), (3, 30, 32)]),   # the up projection: more queries than keys
    ('rope', [(3, 40, 32)]),
])
def test_sdpa_and_plain_attention_agree_with_gradients(kind, shapes, device):
    cls = attention.CausalCrossAttention if kind == 'cross' else attention.CausalSelfAttention
    fast, plain = (m.to(device) for m in attention_pair(cls, 4, rope=kind == 'rope'))
    gen = torch.Generator().manual_seed(5)
    xs = [torch.randn(s, generator=gen).to(device) for s in shapes]
    results = []
    for mod in (fast, plain):
        inputs = [x.clone().requires_grad_() for x in xs]
        y = mod(*inputs)
        (y * torch.linspace(-1, 1, y.numel(), device=device).view_as(y)).sum().backward()
        results.append((y.detach(), grads(mod, inputs)))
    (y_fast, g_fast), (y_plain, g_plain) = results
    torch.testing.assert_close(y_fast, y_plain, atol=1e-5, rtol=1e-4)
    # gradients reach ~100 here; atol 1e-4 is float noise at that scale (the key bias's gradient
    # is exactly 0 in exact arithmetic: both paths give rounding noise of ~1e-5 there)
    for a, b in zip(g_fast, g_plain):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert y_fast.abs().mean() > 0.1 and all(g.abs().sum() > 0 for g in g_fast)


@pytest.mark.parametrize('kind,shapes', [
    ('self', [(3, 40, 32)]),
    ('cross', [(3, 30, 32), (1, 8, 32)]),   # the perceiver's down projection: C as queries
    ('cross', [(3, 8, 32), (3, 30, 32)]),   # the up projection: more queries than keys
    ('rope', [(3, 40, 32)]),
])
def test_cpu_training_attention_with_dropout_is_the_handouts_math(kind, shapes):
    """Training on a CPU with attention dropout, the fast path computes attention as
    fastpath.causal_math (the scale and mask inside one batched product): the handout's
    written-out math, as the reference module has it, with nn.Dropout's draws on both sides (the
    same masks), gives the same outputs and gradients."""
    over = dict(n_layer=1, n_head=4, n_embd=32, attn_pdrop=0.3, resid_pdrop=0.0,
                rope=kind == 'rope')
    conf = model.GPTConfig(30, 40, fast_attention=True, fast_dropout=False, **over)
    cls, ref_cls = ((attention.CausalCrossAttention, handout_reference.RefCausalCrossAttention)
                    if kind == 'cross' else
                    (attention.CausalSelfAttention, handout_reference.RefCausalSelfAttention))
    torch.manual_seed(4)
    fast = cls(conf)
    with torch.no_grad():
        for p in fast.parameters():
            p.normal_(0, 0.3)
    ref = ref_cls(handout_reference.RefGPTConfig(30, 40, **over))
    ref.load_state_dict(fast.state_dict())
    gen = torch.Generator().manual_seed(5)
    xs = [torch.randn(s, generator=gen) for s in shapes]
    results = []
    for mod in (fast.train(), ref.train()):
        inputs = [x.clone().requires_grad_() for x in xs]
        torch.manual_seed(9)
        y = mod(*inputs)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        results.append((y.detach(), grads(mod, inputs)))
    (y_fast, g_fast), (y_ref, g_ref) = results
    torch.testing.assert_close(y_fast, y_ref, atol=1e-5, rtol=1e-4)
    for a, b in zip(g_fast, g_ref):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    with torch.no_grad():  # the dropout did drop: without it the output differs
        assert (fast.eval()(*xs) - y_fast).abs().max() > 1e-2


def test_cpu_bf16_training_takes_the_written_out_math(data):
    """Told bf16 (nothing measured), training on a CPU computes attention as the plain path does
    (there it is faster than the fused kernel): the run's plan sets that path (plan.make), and
    the numbers are the same to the last bit of float noise, where the
    fused kernel's bf16 rounding would differ by about 1e-3 (checked below in eval mode)."""
    pre, _ = data
    x, y = batches.collate(pre, range(8))
    torch.manual_seed(6)
    fast = jitter(tiny(pre.vocab_size, {}, dropout=0.0), 0.3)
    plain = tiny(pre.vocab_size, {}, fast=False, dropout=0.0)
    plain.load_state_dict(fast.state_dict())
    config = trainer.TrainerConfig(precision='bf16', batch_size=8)
    plan, _ = planning.make(fast, pre, config, loop.train_step, optim.make_optimizer)
    assert plan.precision == 'bf16' and plan.how is None
    assert {m.cpu_kernel for m in fast.modules() if hasattr(m, 'cpu_kernel')} == {False}
    losses = {}
    for mode in ('train', 'eval'):
        with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
            losses[mode] = [getattr(gpt, mode)()(x, y)[1].float() for gpt in (fast, plain)]
    torch.testing.assert_close(*losses['train'], rtol=1e-6, atol=1e-6)
    assert abs(losses['eval'][0] - losses['eval'][1]) > 1e-5  # the kernel's path differs


# ---- dropout: cheaper random draws on a CPU, nn.Dropout's distribution ---------------------------

def sigmas(observed, expected_rate, n):
    """How many binomial standard deviations a rate observed over n draws lies from the expected."""
    return abs(observed - expected_rate) / (expected_rate * (1 - expected_rate) / n) ** 0.5


@pytest.mark.parametrize('p', [0.1, 0.5, 0.73])
def test_fast_dropout_has_nn_dropouts_distribution(p, device):
    """nn.Dropout (the handout's): each element zeroed independently with probability p, the
    others scaled by 1 / (1 - p), gradients through the same mask. (On a GPU the model's
    Dropout is nn.Dropout itself: the same checks, of the path a GPU takes.)"""
    drop = fastpath.Dropout(p, model.GPTConfig(10, 8)).train()
    assert drop.fast  # GPTConfig's default
    x = (torch.rand(1 << 20, generator=torch.Generator().manual_seed(0)) + 0.5).to(device)
    x.requires_grad_()
    torch.manual_seed(1)
    y = drop(x)
    y.sum().backward()
    zero = y == 0
    n = x.numel()
    assert sigmas(zero.float().mean().item(), p, n) < 5
    # neighbours share a 64-bit draw (four elements each): still independent
    for shift in (1, 2, 3, 4):
        both = (zero[shift:] & zero[:-shift]).float().mean().item()
        assert sigmas(both, p * p, n - shift) < 5
    scale = y[~zero] / x[~zero]
    torch.testing.assert_close(scale, torch.full_like(scale, 1 / (1 - p)), rtol=2e-5, atol=0)
    torch.testing.assert_close(x.grad, (~zero).float() * scale[0], rtol=1e-6, atol=0)
    # seeded like nn.Dropout: the same seed draws the same mask, later draws other masks
    torch.manual_seed(1)
    assert torch.equal(drop(x), y)
    assert not torch.equal(drop(x), y)
    # in eval mode, or without fast_dropout, it is nn.Dropout itself
    assert torch.equal(drop.eval()(x), x)
    torch.manual_seed(2)
    want = torch.nn.Dropout(p)(x)
    torch.manual_seed(2)
    assert torch.equal(fastpath.Dropout(p)(x), want)


def test_fast_dropout_trains_the_model_as_nn_dropout_does(data):
    """The model's mean training loss over many dropout masks (fixed weights and batch) is the
    same with the fast draws as with nn.Dropout's, within the sampling error; on a CPU, attention
    dropout takes the written-out math whether or not fast_attention is set."""
    pre, _ = data
    x, y = batches.collate(pre, range(8))
    torch.manual_seed(6)
    fast = jitter(tiny(pre.vocab_size, {}, dropout=0.3).train(), 0.3)
    handout = tiny(pre.vocab_size, {'fast_dropout': False}, fast=False,
                   dropout=0.3).train()
    handout.load_state_dict(fast.state_dict())
    losses = {}
    with torch.no_grad():
        for name, gpt in (('fast', fast), ('handout', handout)):
            torch.manual_seed(7)
            losses[name] = torch.stack([gpt(x, y)[1] for _ in range(300)])
    (f, h) = losses['fast'], losses['handout']
    error = (f.var() / len(f) + h.var() / len(h)) ** 0.5
    assert abs(f.mean() - h.mean()) < 4 * error
    assert f.std() > 0.01  # the masks do change the loss: the comparison means something
    # the fused attention kernel is not used on a CPU with dropout: with nn.Dropout's draws,
    # fast_attention gives the written-out math's numbers
    sdpa = tiny(pre.vocab_size, {'fast_dropout': False}, dropout=0.3).train()
    sdpa.load_state_dict(fast.state_dict())
    with torch.no_grad():
        torch.manual_seed(8)
        want = handout(x, y)[1]
        torch.manual_seed(8)
        torch.testing.assert_close(sdpa(x, y)[1], want, rtol=1e-6, atol=1e-6)


# ---- training: skipped positions change neither loss nor gradients ------------------------------

def pad_batch(lengths, vocab, T=60, seed=6):
    """Rows of random tokens whose targets are non-PAD up to `length` (then PAD), with some PAD
    targets inside too (as the NameDataset's questions have)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(1, vocab, (len(lengths), T), generator=gen)
    y = torch.randint(1, vocab, (len(lengths), T), generator=gen)
    for r, n in enumerate(lengths):
        y[r, n:] = 0
        y[r, :n // 3] = 0
    return x, y


@pytest.mark.parametrize('groups', [1, 3, 'each row'])
@pytest.mark.parametrize('name,overrides,lengths', [
    ('vanilla', {}, [60, 3, 17, 0, 41, 9, 60, 25]),
    ('synthesizer', {'synthesizer': True}, [59, 3, 17, 1, 41, 9]),
    ('perceiver', {'perceiver': True, 'bottleneck_dim': 16}, [60, 3, 17, 30, 9, 12]),
    ('perceiver-short', {'perceiver': True, 'bottleneck_dim': 16}, [3, 9, 12, 5, 7]),  # T < m
    ('rope', {'rope': True}, [60, 3, 17, 0, 41, 9, 60, 25]),
])
def test_a_step_in_groups_of_rows_gives_the_loss_and_gradients_of_the_whole_batch(
        name, overrides, lengths, device, groups):
    """loop.train_step (the engine's step: trimmed columns, the rows in groups by length, the
    handout's forward called once a group on the columns its rows need, each group's loss
    weighted by its share of the targets) against the whole padded batch through the plain
    math in one call: the same loss and gradients. A rate of 0 and no clipping leave the
    gradients to compare; a row with no target (length 0) is in a group of its own once each
    row is one, which the step skips."""
    vocab = 30
    torch.manual_seed(7)
    full = jitter(tiny(vocab, overrides, fast=False, dropout=0.0, block_size=64), 0.1).to(device)
    fast = tiny(vocab, overrides, fast=True, dropout=0.0, block_size=64).to(device)
    fast.load_state_dict(full.state_dict())
    x, y = pad_batch(lengths, vocab, T=63 if overrides.get('synthesizer') else 60)
    full.train(), fast.train()
    loss = full(x.to(device), y.to(device))[1]
    loss.backward()
    conf = trainer.TrainerConfig(grad_norm_clip=1e9, row_groups=len(lengths) if groups ==
                                 'each row' else groups)
    calls = []
    fast.register_forward_pre_hook(lambda module, args: calls.append(tuple(args[0].shape)))
    optimizer = torch.optim.AdamW(fast.parameters(), lr=0.0, weight_decay=0.0)
    got = loop.train_step(fast, optimizer, devices.autocast(torch.device(device), 'fp32'), x, y,
                          conf, torch.device(device))
    torch.testing.assert_close(got, loss.detach(), atol=0, rtol=1e-5)
    for (key, a), b in zip(full.named_parameters(), fast.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-7, rtol=1e-4, msg=key)
    assert loss.item() > 1 and full.tok_emb.weight.grad.abs().sum() > 0
    # one call a group that has a target, on its rows and their longest row's columns (rounded
    # up to 8: pad_multiple), the whole batch trimmed for one group
    width = lambda n: min(x.size(1), -(-n // 8) * 8)  # noqa: E731
    if groups == 1:
        assert calls == [(len(lengths), width(max(lengths)))]
    else:
        rows = sorted(lengths, reverse=True)
        size = -(-len(lengths) // conf.row_groups)
        parts = [rows[i:i + size] for i in range(0, len(rows), size)]
        assert sorted(calls) == sorted((len(p), width(max(p))) for p in parts if max(p) > 0)
        assert len(calls) < len(lengths) or 0 not in lengths  # the row with no target: skipped


def test_row_groups_sort_the_rows_and_give_each_group_the_columns_its_rows_need():
    y = torch.zeros(7, 40, dtype=torch.long)
    for row, n in enumerate([5, 33, 0, 12, 40, 31, 2]):
        y[row, :n] = 1
    y[0, :4] = 0  # a row's targets may start late: its last one counts
    assert fastpath.kept_lengths(y).tolist() == [5, 33, 1, 12, 40, 31, 2]  # no target: 1
    assert fastpath.row_groups(y, 1) == (None, ((7, 40),))  # one group: the batch as it is
    order, spans = fastpath.row_groups(y, 3, width=8)
    assert order.tolist() == [4, 1, 5, 3, 0, 6, 2]  # longest first (the empty row keeps 1)
    assert spans == ((3, 40), (2, 16), (2, 8))  # rows 7 = 3 + 2 + 2; 40 (capped), 12 -> 16, 2 -> 8
    # one row a group: the columns each needs (rounded up to 32, at most 40), and none for the
    # row without a target
    assert fastpath.row_groups(y, 9, width=32)[1] == ((1, 40), (1, 40), (1, 32), (1, 32),
                                                      (1, 32), (1, 32), (1, 0))
    assert fastpath.row_groups(torch.zeros(2, 5, dtype=torch.long), 1)[1] == ((2, 0),)


@pytest.mark.parametrize('overrides', [{}, {'synthesizer': True}, {'rope': True},
                                       {'perceiver': True, 'bottleneck_dim': 16}])
def test_forward_returns_the_handouts_logits_and_loss_in_every_mode(overrides, device):
    """The starter's GPT.forward(idx, targets) -> (logits, loss) in training and in evaluation,
    fast paths on: a TA's or an autograder's script reads the logits."""
    vocab = 30
    torch.manual_seed(3)
    gpt = tiny(vocab, overrides, dropout=0.0, block_size=64).to(device)
    x, y = (t.to(device) for t in pad_batch([20, 5, 33], vocab, T=40))
    for mode in ('train', 'eval'):
        getattr(gpt, mode)()
        logits, loss = gpt(x, y)
        assert logits is not None and logits.shape == (3, 40, vocab), mode
        want = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1),
                                                 ignore_index=0)
        torch.testing.assert_close(loss, want)
        logits_alone, none = gpt(x)
        assert none is None and torch.equal(logits_alone, logits)


# ---- training: a short run, fast path vs the plain handout loop ---------------------------------

def plain_losses(gpt, data, lr, epoch_batches, device='cpu'):
    """The handout's training loop (fp32, full-length batches, written-out attention; its
    optimizer's groups by name, as its trainer.py)."""
    gpt.to(device)
    named = list(gpt.named_parameters())
    escapes = [any(s in n for s in ('bias', 'LayerNorm.weight')) for n, _ in named]
    groups = [{'params': [p for (_, p), e in zip(named, escapes) if not e], 'weight_decay': 0.1},
              {'params': [p for (_, p), e in zip(named, escapes) if e], 'weight_decay': 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))
    gpt.train()
    losses = []
    for batch in epoch_batches:
        x, y = (t.to(device) for t in batches.collate(data, *batch))
        _, loss = gpt(x, y)
        gpt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(gpt.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def fast_and_plain(data, name, precision='fp32', compile=False, device='cpu', n_layer=3,
                   row_groups=0):
    """Span-corruption pretraining, as run.py pretrain does it (a tiny model, dropout 0), by
    trainer.Trainer (row_groups: its TrainerConfig's) and by the plain loop: (fast losses,
    plain losses, fast model, plain model)."""
    pre, _ = data
    epochs, batch, lr = 2, 6, 3e-3
    # the batches the Trainer will draw: the dataset in its order (the handout's DataLoader
    # does not shuffle), each batch's corruptions seeded from the Trainer's generator, itself
    # seeded from torch's seed
    utils.set_seed(5)
    g = torch.Generator().manual_seed(torch.initial_seed())
    order = [b for _ in range(epochs) for b in batches.batch_indices(len(pre), batch, g, False)]
    assert [i for b, _ in order for i in b] == list(range(len(pre))) * epochs

    utils.set_seed(5)
    fast = tiny(pre.vocab_size, VARIANTS[name], fast=True, dropout=0.0, n_layer=n_layer)
    log = LossLog()
    conf = trainer.TrainerConfig(max_epochs=epochs, batch_size=batch, learning_rate=lr,
                                 precision=precision, compile=compile, writer=log, device=device,
                                 row_groups=row_groups)
    trainer.Trainer(fast, pre, None, conf).train()

    utils.set_seed(5)
    plain = tiny(pre.vocab_size, VARIANTS[name], fast=False, dropout=0.0, n_layer=n_layer)
    want = plain_losses(plain, pre, lr, order, device)
    assert len(log.values) == len(want) == 6
    assert want[-1] < want[0]  # it trained
    return log.values, want, fast, plain


def largest_relative_gap(got, want):
    return max(abs(a - b) / abs(b) for a, b in zip(got, want))


def assert_same_run(got, want, fast, plain, tolerance):
    """The fast path computes the plain loop's function in another order (fused attention,
    trimmed columns, rows in groups): in fp32 (TF32 off, conftest) the losses and params differ by
    rounding only, which holds on a GPU's fp32 kernels as on a CPU's. The tolerances leave a wide
    margin over the gaps measured (docs/speed.md, "Equivalence tolerances")."""
    assert largest_relative_gap(got, want) < tolerance, (got, want)
    for (key, a), b in zip(plain.named_parameters(), fast.parameters()):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-3, msg=key)


@pytest.mark.parametrize('name', ['vanilla', 'rope'])
def test_the_starters_own_loop_in_trainer_py_matches_the_engines(data, name, tmp_path):
    """trainer.py holds the starter's loop (TrainerConfig(engine=False): its DataLoader, its
    optimizer groups, its schedule, torch.save of the checkpoint), which a student's copy runs;
    the engine's loop (the default) gives its losses and weights within float noise, finetuning
    (a dataset with no random draws), dropout 0, the handout's schedule."""
    pre, names = data
    runs = {}
    for engine in (False, True):
        utils.set_seed(5)
        gpt = tiny(pre.vocab_size, VARIANTS[name], fast=engine, dropout=0.0)
        log = LossLog()
        conf = trainer.TrainerConfig(max_epochs=3, batch_size=4, learning_rate=3e-3,
                                     lr_decay=True, warmup_tokens=200, final_tokens=2000,
                                     writer=log, engine=engine,
                                     ckpt_path=str(tmp_path / f'{engine}.params'))
        trainer.Trainer(gpt, names, None, conf).train()
        runs[engine] = log.values, gpt
    (want, plain), (got, fast) = runs[False], runs[True]
    assert len(want) == len(got) == 6 and want[-1] < want[0]
    assert_same_run(got, want, fast, plain, tolerance=1e-4)
    saved = torch.load(tmp_path / 'False.params', weights_only=True)
    assert all(torch.equal(saved[k], v) for k, v in plain.state_dict().items())


@pytest.mark.parametrize('name', VARIANTS)
def test_fast_training_matches_the_plain_loop(data, name, device):
    assert_same_run(*fast_and_plain(data, name, device=device), tolerance=1e-4)


def spans_seen(monkeypatch):
    """The groups of rows (fastpath.row_groups' spans) the steps take from now on (a list that
    grows)."""
    seen = []
    row_groups = fastpath.row_groups

    def counted(targets, groups, width=1):
        order, spans = row_groups(targets, groups, width)
        seen.append(spans)
        return order, spans
    monkeypatch.setattr(batches, 'row_groups', counted)
    return seen


@pytest.mark.parametrize('groups', [1, 3])
@pytest.mark.parametrize('name', VARIANTS)
def test_training_in_groups_of_rows_matches_the_plain_loop(data, name, device, monkeypatch,
                                                           groups):
    """--row_groups, asked for here on every device: each step's rows sorted by length, each
    group computed by the handout's forward on its own columns, trains as the plain loop does."""
    seen = spans_seen(monkeypatch)
    assert_same_run(*fast_and_plain(data, name, device=device, row_groups=groups),
                    tolerance=1e-4)
    assert len(seen) == 6 and all(len(spans) == groups for spans in seen), seen
    if groups > 1:  # columns left out: the groups did something
        assert any(t < max(c for _, c in spans) for spans in seen for _, t in spans)


def checked_args(extra, monkeypatch, tmp_path, device='cuda', world_size='1', bf16=True,
                 member=None):
    """run.py's arguments after flags.check_args, as if on `device` (a stand-in: the choice of
    defaults only asks which device there is, and whether it has bf16) in a run of `world_size`
    processes."""
    from engine import devices
    from tiny_run import checked
    monkeypatch.setattr(devices, 'pick_device', lambda name, variant=None: device)
    monkeypatch.setattr(devices, 'bf16_supported', lambda name: bf16)
    monkeypatch.setenv('WORLD_SIZE', world_size)
    return checked(['pretrain', 'vanilla', 'wiki.txt', '--writing_params_path', 'x.params']
                   + extra, tmp_path, monkeypatch, member)


@pytest.mark.parametrize('extra, device, world_size, compile_, groups', [
    ([], 'cuda', '1', 'graphs', (4, 0)),  # one GPU: recorded steps, pretraining's rows grouped
    ([], 'cuda', '2', False, (0, 0)),  # torchrun: eager steps, the device's choice (one group)
    ([], 'cpu', '1', False, (0, 0)),  # a CPU groups in its own way (batches.groups_for)
    (['--plain'], 'cuda', '1', False, (1, 1)),  # the handout's computations: each batch whole
    (['--plain'], 'cpu', '1', False, (1, 1)),
    (['--compile', 'none'], 'cuda', '1', False, (0, 0)),
    (['--compile'], 'cuda', '1', 'default', (0, 0)),
    (['--row_groups', '1'], 'cuda', '1', 'graphs', (1, 1)),
    (['--row_groups', '3'], 'cuda', '1', 'graphs', (3, 3)),  # asked: every stage
    (['--compile', 'none', '--row_groups', '4'], 'cuda', '1', False, (4, 4)),
])
def test_gpu_defaults_record_the_step_and_group_pretrainings_rows(extra, device, world_size,
                                                                  compile_, groups, monkeypatch,
                                                                  tmp_path):
    """--compile and --row_groups unset: on one GPU the step recorded, and pretraining's rows
    (not finetuning's: its questions are of like lengths) in presets.GPU's groups; elsewhere,
    and where the flags say otherwise, what they say."""
    from tiny_run import stage_config
    args = checked_args(extra, monkeypatch, tmp_path, device, world_size)
    assert args.compile == compile_
    got = tuple(stage_config(args, stage, 100, device)
                for stage in ('pretrain', 'finetune_pretrained'))
    assert tuple(c.row_groups for c in got) == groups
    assert all(c.compile == compile_ for c in got)
    assert stage_config(args, 'finetune_scratch', 100, device).row_groups == groups[1]


def test_the_devices_choice_of_groups():
    """row_groups 0: on a CPU groups of at least 16 rows, at most 8; on a GPU the batch whole."""
    conf = trainer.TrainerConfig()
    cpu, cuda = torch.device('cpu'), torch.device('cuda')
    assert [batches.groups_for(conf, cpu, rows) for rows in (6, 16, 64, 127, 128, 256)] == \
        [1, 1, 4, 7, 8, 8]
    assert batches.groups_for(conf, cuda, 128) == 1
    assert batches.groups_for(trainer.TrainerConfig(row_groups=3), cpu, 128) == 3


@pytest.mark.parametrize('name', VARIANTS)
def test_bf16_training_stays_close_to_the_plain_loop(data, name, device):
    got, want, _, _ = fast_and_plain(data, name, precision='bf16', device=device)
    assert largest_relative_gap(got, want) < 3e-2, (got, want)


@pytest.mark.parametrize('mode', ['default', 'reduce-overhead'])
def test_compiled_training_matches_the_plain_loop(data, device, mode):
    """torch.compile (--compile): on a CPU a step's groups of rows have widths of their own,
    hence a dynamic-shape graph; on a GPU the trimmed
    batches (multiples of 8 columns), and with reduce-overhead a CUDA graph replayed per batch
    shape. One layer: what is compiled is the same for every layer, and the compiling
    (inductor's, a cold cache) takes minutes for three."""
    if mode == 'reduce-overhead' and device == 'cpu':
        pytest.skip('CUDA graphs are a GPU\'s (a CPU compiles as the default mode does; the '
                    'step wrapper is tested on the CPU below)')
    assert_same_run(*fast_and_plain(data, 'vanilla', compile=mode, device=device, n_layer=1),
                    tolerance=1e-4)


def test_the_cuda_graph_step_wrapper_leaves_training_unchanged(data, monkeypatch):
    """--compile reduce-overhead's wrapper (distributed.GraphedSteps: a new CUDA-graph step per
    call, the outputs copied out of the graph's memory) under dynamo's eager backend, no
    compiling wait: the run is the plain loop's, and each step's loss is a tensor of its own."""
    from engine import distributed
    monkeypatch.setattr(torch, 'compile', functools.partial(torch.compile, backend='eager'))
    made = []
    real = distributed.wrapped
    monkeypatch.setattr(distributed, 'wrapped', lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    assert_same_run(*fast_and_plain(data, 'vanilla', compile='reduce-overhead', n_layer=1),
                    tolerance=1e-4)
    assert made and all(isinstance(m, distributed.GraphedSteps) for m in made)


def test_compile_takes_a_mode_and_alone_means_the_default():
    import run
    base = ['pretrain', 'vanilla', 'wiki.txt', '--writing_params_path', 'x.params']
    assert run.parse_args(base).compile == 'auto'  # (check_args resolves it: the test above)
    assert run.parse_args(base[:3] + ['--compile'] + base[3:]).compile == 'default'
    assert run.parse_args(base + ['--compile', 'reduce-overhead']).compile == 'reduce-overhead'
    with pytest.raises(SystemExit):
        run.parse_args(base + ['--compile', 'fastest'])
    # an 'auto' that reached the model unresolved compiled it unasked (a test helper's, 20-95 s
    # of a CPU step): the model's wrapper refuses any value check_args does not leave
    from engine import distributed
    for value in ('auto', 'none', 'fastest'):
        with pytest.raises(ValueError, match=f"not '{value}'"):
            distributed.wrapped(torch.nn.Linear(2, 2), torch.device('cpu'), value)
    plain = torch.nn.Linear(2, 2)
    assert distributed.wrapped(plain, torch.device('cpu'), False) is plain


@pytest.mark.parametrize('extra, device, env, said', [
    ([], 'cpu', {}, None),  # the handout's run: the starter's printed lines only
    ([], 'cuda', {}, "settings: a GPU's defaults --compile graphs --row_groups 4 (the same "
     'function, other dropout draws than eager steps: --compile none --row_groups 1)'),
    (['--compile', 'none', '--row_groups', '1'], 'cuda', {},
     'settings: --compile none; --row_groups 1'),
    (['--max_epochs', '3', '--seed', '4', '--preset', 'cpu-quick', '--plain'], 'cpu', {},
     "settings: preset cpu-quick (not the handout's settings); --max_epochs 3; --seed 4; --plain"),
    (['--device', 'cpu', '--replace', '--eval_batch_size', '8'], 'cpu', {}, None),  # no numbers
    ([], 'cpu', {'CS224N_EDITION': '2024-25', 'CS224N_THREADS': 'fixed'},
     'settings: edition 2024-25 (from $CS224N_EDITION); $CS224N_THREADS=fixed'),
])
def test_a_run_says_once_what_makes_it_other_than_the_handouts(extra, device, env, said,
                                                               monkeypatch, tmp_path, capsys):
    """The run's settings are resolved once (check_args) and said in one line where they
    change anything against the handout's run of the edition: a preset, the flags typed that
    change what is computed, a GPU's defaults (other random draws), the environment variables
    that change the numbers; the handout's own run prints nothing more than the starter."""
    from engine.command import stages
    for name in stages.NUMBERS_ENV + ('CS224N_EDITION',):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = checked_args(extra, monkeypatch, tmp_path, device=device)
    assert stages.settings_line(args, device) == said
    capsys.readouterr()
    stages.start(args)
    out = capsys.readouterr().out
    assert out == ('' if said is None else said + '\n')


# ---- --plain computes with the handout's own code ------------------------------------------------

# lines of each handout forward that every call runs (by their text)
HANDOUT_LINES = {
    'GPT': ['token_embeddings = self.tok_emb(idx)', 'x = self.blocks(x)', 'logits = self.head(x)'],
    'Block': ['x = x + self.mlp(self.ln2(x))'],
    'CausalSelfAttention': ['y = self.resid_drop(self.proj(y))'],
    'SynthesizerAttention': ['att = F.softmax(att, dim=-1)'],
    'CausalCrossAttention': ['y = self.resid_drop(self.proj(y))'],
    'DownProjectBlock': ['x = self.C + self.attn(x_input, self.ln1(self.C))'],
    'UpProjectBlock': ['x = x_input + self.attn(self.ln1(y), x_input)'],
}


def line_numbers(cls, texts):
    """(file, {line number of each text in cls.forward})."""
    import inspect
    code = cls.forward.__code__
    lines, first = inspect.getsourcelines(code)
    found = {first + i for i, line in enumerate(lines) if any(t in line for t in texts)}
    assert len(found) == len(texts), (cls.__name__, texts)
    return code.co_filename, found


@pytest.mark.parametrize('variant', ['vanilla', 'synthesizer', 'perceiver', 'rope'])
def test_a_training_step_runs_the_handouts_own_bodies(variant, tmp_path, monkeypatch):
    """`run.py finetune ...`, with --plain and without: the training steps compute with
    GPT.forward's, Block.forward's and the variant's attention forward's own lines (the
    perceiver's down and up projections too). Traced with sys.settrace."""
    import sys as _sys
    import run
    from tiny_run import CORPUS, TRAIN, tsv, FAST
    (tmp_path / 'corpus.txt').write_text(CORPUS, encoding='utf-8')
    (tmp_path / 'train.tsv').write_text(tsv(TRAIN), encoding='utf-8')
    monkeypatch.chdir(tmp_path)
    watched = [model.GPT, model.Block] + {
        'vanilla': [attention.CausalSelfAttention], 'rope': [attention.CausalSelfAttention],
        'synthesizer': [attention.SynthesizerAttention],
        'perceiver': [attention.CausalSelfAttention, model.DownProjectBlock,
                      model.UpProjectBlock, attention.CausalCrossAttention]}[variant]
    wanted = {cls.__name__: line_numbers(cls, HANDOUT_LINES[cls.__name__]) for cls in watched}
    extra = ['--bottleneck_dim', '8'] if variant == 'perceiver' else []

    def traced(*flags):
        ran = set()

        def tracer(frame, event, arg):
            if event == 'line':
                ran.add((frame.f_code.co_filename, frame.f_lineno))
            return tracer
        _sys.settrace(tracer)
        try:
            run.main(['finetune', variant, 'corpus.txt', '--finetune_corpus_path', 'train.tsv',
                      '--writing_params_path', f'{variant}{len(flags)}.params', '--max_epochs', '1',
                      *extra, *FAST, *flags])
        finally:
            _sys.settrace(None)
        return {name: {n for f, n in ran if f == file} & lines
                for name, (file, lines) in wanted.items()}

    for flags in (('--plain',), ()):
        ran = traced(*flags)
        for name, (_, lines) in wanted.items():
            assert ran[name] == lines, (flags, name, sorted(lines - ran[name]))


@pytest.mark.parametrize('variant', ['vanilla', 'perceiver'])
def test_whole_rows_through_the_fused_kernel_run_the_handouts_bodies(variant):
    """A model computing the fast way (fast_attention) computes with the handout's GPT, Block
    and attention bodies, the fused kernel a branch of the attention's: the engine holds no
    copy of a forward that could run instead (the decoder's is decode.py's). Traced with
    sys.settrace."""
    import sys as _sys
    from engine.fast import fastmodel
    conf = model.config_for(variant, 30, 40, bottleneck_dim=8, n_layer=2, n_head=4, n_embd=32)
    gpt = model.GPT(conf)
    assert conf.fast_attention
    ran = set()

    def tracer(frame, event, arg):
        if event == 'call':
            ran.add(frame.f_code)
        return None
    x = torch.randint(2, 30, (3, 40))
    _sys.settrace(tracer)
    try:
        logits, loss = gpt(x, x)
    finally:
        _sys.settrace(None)
    names = {(c.co_filename, c.co_name) for c in ran}
    assert (attention.__file__, 'forward') in names and (model.__file__, 'forward') in names
    assert (fastmodel.__file__, 'kernel') in names
    assert {n for f, n in names if f == fastmodel.__file__} <= {'kernel', 'cpu_math'}, names
    assert logits.shape == (3, 40, 30) and loss is not None


# ---- fp16: a GPU without bf16 (a T4, a V100), its code path run on the CPU --------------------

def one_batch(pre, size=6):
    return batches.collate(pre, range(size), seed=0)


def test_fp16_steps_unscale_before_clipping_and_skip_an_overflow(data):
    """--precision fp16: autocast to float16, the loss scaled (torch.amp.GradScaler) so that
    small gradients survive, and unscaled before the handout's clipping: the step's gradients
    are fp32's to fp16's rounding. A scale that overflows skips the step and halves the scale."""
    from engine import devices
    from engine.training import loop
    pre, _ = data
    x, y = one_batch(pre)
    conf = trainer.TrainerConfig(max_epochs=1, batch_size=6, learning_rate=3e-3)
    grads = {}
    for precision in ('fp32', 'fp16'):
        utils.set_seed(5)
        gpt = tiny(pre.vocab_size, {}, dropout=0.0)
        cast = devices.autocast('cpu', precision)
        assert cast.scaler.is_enabled() == (precision == 'fp16')
        if cast.scaler.is_enabled():
            cast.scaler = torch.amp.GradScaler('cpu', init_scale=2.0 ** 8)
        optimizer = optim.make_optimizer(gpt, conf, conf.learning_rate)
        loop.train_step(gpt, optimizer, cast, x, y, conf, torch.device('cpu'))
        grads[precision] = torch.cat([p.grad.flatten() for p in gpt.parameters()])
    cosine = F.cosine_similarity(grads['fp16'], grads['fp32'], dim=0)
    ratio = grads['fp16'].norm() / grads['fp32'].norm()
    assert cosine > 0.999 and abs(ratio - 1) < 0.01, (cosine, ratio)  # unscaled: not 256x

    before = [p.detach().clone() for p in gpt.parameters()]
    cast.scaler = torch.amp.GradScaler('cpu', init_scale=2.0 ** 40)  # overflows in float16
    loop.train_step(gpt, optimizer, cast, x, y, conf, torch.device('cpu'))
    assert all(torch.equal(a, b) for a, b in zip(before, gpt.parameters()))
    assert cast.scaler.get_scale() == 2.0 ** 39


def test_fp16_training_runs_the_loop_and_its_checkpoint_keeps_the_scale(data, tmp_path):
    """A whole fp16 run through the Trainer: finite losses that fall, and the checkpoint holds
    the loss scaler's state (a resumed run goes on at the scale reached)."""
    pre, _ = data
    utils.set_seed(5)
    gpt = tiny(pre.vocab_size, {}, dropout=0.0)
    log = LossLog()
    conf = trainer.TrainerConfig(max_epochs=2, batch_size=6, learning_rate=3e-3,
                                 precision='fp16', writer=log,
                                 resume_path=str(tmp_path / 'x.ckpt'), checkpoint_every=1)
    trainer.Trainer(gpt, pre, None, conf).train()
    losses = log.values
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0], losses
    state = torch.load(tmp_path / 'x.ckpt', weights_only=True)
    assert state['scaler'] and state['scaler']['scale'] > 0


def test_fp16_is_the_default_on_a_gpu_without_bf16_and_refuses_cuda_graphs(monkeypatch, tmp_path):
    """Training on a GPU without bf16, precision auto takes fp16 (evaluation stays fp32: its
    predictions are the handout's), the compile default is eager steps (fp16's loss scaler reads
    back each step), the settings line says so; --compile graphs with fp16 is one error."""
    from engine import common, devices
    from engine.command import stages
    # a T4 (compute capability 7.5): torch counts its slow emulation of bf16 unless told not to
    monkeypatch.setattr(torch.cuda, 'is_bf16_supported',
                        lambda including_emulation=True: including_emulation)
    assert not devices.bf16_supported('cuda') and devices.lacks_bf16('cuda')
    monkeypatch.setattr(devices, 'bf16_supported', lambda device: False)
    assert devices.pick_precision('auto', 'cuda', training=True) == 'fp16'
    assert devices.pick_precision('auto', 'cuda', training=False) == 'fp32'
    assert devices.pick_precision('auto', 'cpu', training=True, measure=False) == 'fp32'
    args = checked_args([], monkeypatch, tmp_path, bf16=False)
    assert args.compile is False
    assert '--precision fp16, the default on a GPU without bf16' in \
        stages.settings_line(args, 'cuda', environ={})
    with pytest.raises(common.UsageError, match='--compile graphs cannot record'):
        checked_args(['--compile', 'graphs', '--precision', 'fp16'], monkeypatch, tmp_path)
    args = checked_args([], monkeypatch, tmp_path)  # (a GPU with bf16)
    assert args.compile == 'graphs' and 'fp16' not in stages.settings_line(args, 'cuda', {})


def test_a_member_of_one_process_takes_eager_steps_on_a_gpu(monkeypatch, tmp_path):
    """run_all --one_process: a model trained as a thread of the team would record its steps on
    the GPU generator every member shares (their replays would draw each other's dropout), so
    --compile auto takes eager steps there and --compile graphs is one error line; a command
    alone keeps recording. (A stand-in GPU: the choice only asks which device there is.)"""
    from engine import common
    args = checked_args([], monkeypatch, tmp_path)
    assert args.compile == 'graphs'  # alone in its process
    import time
    import types
    member = types.SimpleNamespace(name='vanilla', started=time.time())  # of a team
    args = checked_args([], monkeypatch, tmp_path, member=member)
    assert args.compile is False and args.member is member and args.started == member.started
    with pytest.raises(common.UsageError, match='cannot record a step of run_all --one_process'):
        checked_args(['--compile', 'graphs'], monkeypatch, tmp_path, member=member)
    args = checked_args(['--device', 'cpu'], monkeypatch, tmp_path, device='cpu')
    assert args.compile is False  # (a CPU records nothing either way)
