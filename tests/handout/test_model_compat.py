"""src/model.py and src/attention.py against the handout's starter code (tests/handout_reference.py)
and against the attention equations written out per head: state_dict keys and shapes, params
files loading both ways, equal logits with the fused and the plain attention paths."""
import io
import math

import pytest
import torch
import torch.nn as nn
from torch.nn import functional as F

import attention
import model
import utils
from engine.fast.decode import greedy_complete
from handout_reference import RefGPT, RefGPTConfig, ref_apply_rope, ref_rope_cache

VOCAB = 23
BLOCK = 128
SIZES = dict(n_layer=4, n_head=4, n_embd=32)

# (name, config overrides)
VARIANTS = [
    ('vanilla', {}),
    ('synthesizer', dict(synthesizer=True)),
    ('perceiver8', dict(perceiver=True, bottleneck_dim=8)),
    ('perceiver64', dict(perceiver=True, bottleneck_dim=64)),
    ('rope', dict(rope=True)),
]
VARIANT_IDS = [name for name, _ in VARIANTS]


def ours(overrides, fast=True, **sizes):
    kw = {**SIZES, **sizes, **overrides}
    return model.GPT(model.GPTConfig(VOCAB, BLOCK, fast_attention=fast, **kw))


def reference(overrides, **sizes):
    kw = {**SIZES, **sizes, **overrides}
    return RefGPT(RefGPTConfig(VOCAB, BLOCK, **kw))


def shapes(state):
    return {k: tuple(v.shape) for k, v in state.items()}


def max_len(overrides):
    # the synthesizer's w2/b2 cover block_size - 1 positions, the others block_size
    return BLOCK - 1 if overrides.get('synthesizer') else BLOCK


def randomize(mod, seed):
    """Replace the default init by larger random values so that mistakes show."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in mod.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return mod.eval()


# ---- state_dict layout ------------------------------------------------------------------------

@pytest.mark.parametrize('name,overrides', VARIANTS, ids=VARIANT_IDS)
def test_state_dict_keys_and_shapes_equal_the_handouts(name, overrides):
    torch.manual_seed(0)
    ref_state = reference(overrides).state_dict()
    our_state = ours(overrides).state_dict()
    assert shapes(our_state) == shapes(ref_state)
    if not overrides.get('perceiver'):
        # minGPT's own module order: the keys of a params file come in the same order
        assert list(our_state) == list(ref_state)
    for k in ref_state:
        assert our_state[k].dtype == ref_state[k].dtype, k


def test_state_dict_landmarks():
    """The handful of keys the handout's files are known by, spelled out."""
    torch.manual_seed(0)
    d = SIZES['n_embd']
    van = ours({}).state_dict()
    assert van['pos_emb'].shape == (1, BLOCK, d)
    assert van['tok_emb.weight'].shape == (VOCAB, d)
    assert van['head.weight'].shape == (VOCAB, d) and 'head.bias' not in van
    assert van['blocks.0.attn.mask'].shape == (1, 1, BLOCK, BLOCK)
    assert torch.equal(van['blocks.0.attn.mask'][0, 0], torch.tril(torch.ones(BLOCK, BLOCK)))
    assert van['blocks.3.mlp.0.weight'].shape == (4 * d, d)
    assert van['blocks.3.mlp.2.weight'].shape == (d, 4 * d)
    assert {'ln_f.weight', 'ln_f.bias', 'blocks.0.ln1.weight', 'blocks.0.ln2.bias',
            'blocks.0.attn.key.weight', 'blocks.0.attn.query.bias', 'blocks.0.attn.value.weight',
            'blocks.0.attn.proj.weight'} <= set(van)
    assert not any(k.startswith(('down_block', 'up_block')) for k in van)

    syn = ours(dict(synthesizer=True)).state_dict()
    assert syn['blocks.0.attn.w2'].shape == (d // SIZES['n_head'], BLOCK - 1)
    assert syn['blocks.0.attn.b2'].shape == (BLOCK - 1,)
    assert syn['blocks.0.attn.w1.weight'].shape == (d, d)
    assert not any(k.endswith(('attn.key.weight', 'attn.query.weight')) for k in syn)

    per = ours(dict(perceiver=True, bottleneck_dim=8)).state_dict()
    assert per['down_block.C'].shape == (1, 8, d)
    assert per['down_block.attn.mask'].shape == (1, 1, BLOCK, BLOCK)
    assert per['up_block.attn.mask'].shape == (1, 1, BLOCK, BLOCK)
    assert per['blocks.0.attn.mask'].shape == (1, 1, 8, 8)  # inner blocks built with block_size m
    assert sum(k.endswith('ln1.weight') and k.startswith('blocks.') for k in per) == SIZES['n_layer'] - 2


# ---- params files both ways, equal logits ----------------------------------------------------

def roundtrip(state):
    """What torch.save / torch.load(weights_only=True) of a params file gives back."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


@pytest.mark.parametrize('fast', [True, False], ids=['fast', 'plain'])
@pytest.mark.parametrize('name,overrides', VARIANTS, ids=VARIANT_IDS)
def test_params_load_both_ways_and_logits_agree(name, overrides, fast, device):
    torch.manual_seed(1)
    # weights far from the small init, so that attention is far from uniform and every
    # difference in the arithmetic shows in the logits
    ref = randomize(reference(overrides), 11).to(device)
    gpt = ours(overrides, fast=fast).eval().to(device)
    # reference -> ours
    gpt.load_state_dict(roundtrip(ref.state_dict()), strict=True)
    T = max_len(overrides)
    gen = torch.Generator().manual_seed(2)
    idx_full = torch.randint(0, VOCAB, (3, T), generator=gen).to(device)
    targets = torch.randint(0, VOCAB, (3, T), generator=gen).to(device)
    targets[:, T // 2:] = 0  # PAD targets are ignored by both losses
    with torch.no_grad():
        for idx, tgt in ((idx_full, targets), (idx_full[:, :20].contiguous(), targets[:, :20].contiguous()),
                         (idx_full[:1, :1], None)):
            ref_logits, ref_loss = ref(idx, tgt)
            our_logits, our_loss = gpt(idx, tgt)
            assert our_logits.shape == (idx.size(0), idx.size(1), VOCAB)
            torch.testing.assert_close(our_logits, ref_logits, atol=1e-5, rtol=1e-4)
            if tgt is not None:
                torch.testing.assert_close(our_loss, ref_loss, atol=1e-5, rtol=1e-4)
            else:
                assert our_loss is None

    # ours -> reference, from a model with its own random init
    torch.manual_seed(3)
    gpt2 = randomize(ours(overrides, fast=fast), 12).to(device)
    ref2 = reference(overrides).eval().to(device)
    ref2.load_state_dict(roundtrip(gpt2.state_dict()), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(gpt2(idx_full)[0], ref2(idx_full)[0], atol=1e-5, rtol=1e-4)
        # and it is not the same function as the first model (the load did something)
        assert not torch.allclose(gpt2(idx_full)[0], gpt(idx_full)[0], atol=1e-3)


# ---- RoPE (2024-25 edition) ------------------------------------------------------------------

def test_rope_state_dict_is_the_2024_starters():
    """No pos_emb; a float32 rope_cache (block_size, head_size/2, 2) in every attention layer,
    saved with the params, just before the mask: 76 keys and 3,290,624 parameters for the
    handout's sizes and wiki.txt's vocabulary of 256 (vanilla: 73 keys, 3,323,392)."""
    counts = {}
    for rope in (False, True):
        gpt = model.GPT(model.GPTConfig(256, BLOCK, n_layer=4, n_head=8, n_embd=256, rope=rope))
        state = gpt.state_dict()
        counts[rope] = (len(state), sum(p.numel() for p in gpt.parameters()))
        if rope:
            assert 'pos_emb' not in state and not hasattr(gpt, 'pos_emb')
            cache = state['blocks.2.attn.rope_cache']
            assert cache.shape == (BLOCK, 16, 2) and cache.dtype == torch.float32
            keys = list(state)
            assert keys.index('blocks.0.attn.rope_cache') + 1 == keys.index('blocks.0.attn.mask')
            torch.testing.assert_close(cache, ref_rope_cache(32, BLOCK), atol=2e-5, rtol=0)
    assert counts == {False: (73, 3323392), True: (76, 3290624)}


def test_rope_functions_are_the_handouts_rotation():
    """precompute_rotary_emb and apply_rotary_emb (the starter's names and signatures) against
    the rotation written out with complex numbers (handout eq. 4): adjacent pairs, cos then sin,
    decaying frequencies, the cache cut to the sequence's length."""
    cache = attention.precompute_rotary_emb(8, 50)
    assert cache.shape == (50, 4, 2)
    torch.testing.assert_close(cache, ref_rope_cache(8, 50), atol=1e-5, rtol=0)
    assert torch.equal(cache[0, :, 0], torch.ones(4)) and torch.equal(cache[0, :, 1], torch.zeros(4))
    x = torch.randn(2, 3, 17, 8)
    torch.testing.assert_close(attention.apply_rotary_emb(x, cache), ref_apply_rope(x, cache),
                               atol=1e-6, rtol=1e-5)
    # a rotation: lengths of the pairs kept; position 0 unchanged, the others not
    y = attention.apply_rotary_emb(x, cache)
    torch.testing.assert_close(y.unflatten(-1, (4, 2)).norm(dim=-1),
                               x.unflatten(-1, (4, 2)).norm(dim=-1), atol=1e-5, rtol=1e-5)
    assert torch.equal(y[..., 0, :], x[..., 0, :]) and not torch.allclose(y[..., 1:, :], x[..., 1:, :])
    # scores depend on the distance between positions only (RoPE's point)
    q, k = torch.randn(8), torch.randn(8)
    def score(i, j):
        qs, ks = q.expand(1, 1, 50, 8), k.expand(1, 1, 50, 8)
        return (attention.apply_rotary_emb(qs, cache)[0, 0, i] @ attention.apply_rotary_emb(ks, cache)[0, 0, j])
    torch.testing.assert_close(score(9, 4), score(30, 25), atol=1e-5, rtol=1e-5)
    assert abs(score(9, 4) - score(9, 5)) > 1e-4


def test_models_py_is_the_2024_editions_module_name():
    """The RoPE edition's run.py: `import models`, models.GPTConfig(..., rope=True), models.GPT."""
    import models
    assert models.GPT is model.GPT and models.GPTConfig is model.GPTConfig
    conf = models.GPTConfig(VOCAB, BLOCK, n_layer=2, n_head=4, n_embd=32)
    conf.rope = True  # what its run.py's [part g] sets
    state = models.GPT(conf).state_dict()
    assert 'blocks.1.attn.rope_cache' in state and 'pos_emb' not in state


def test_rope_and_vanilla_params_do_not_mix():
    vanilla, rope = ours({}).state_dict(), ours(dict(rope=True)).state_dict()
    with pytest.raises(RuntimeError):
        ours(dict(rope=True)).load_state_dict(vanilla)
    with pytest.raises(RuntimeError):
        ours({}).load_state_dict(rope)
    with pytest.raises(ValueError):
        ours(dict(rope=True, perceiver=True, bottleneck_dim=8))


def test_loss_ignores_pad_targets():
    torch.manual_seed(0)
    gpt = ours({}).eval()
    idx = torch.randint(0, VOCAB, (2, 16))
    tgt = torch.randint(1, VOCAB, (2, 16))
    with torch.no_grad():
        logits, loss = gpt(idx, tgt)
        masked = tgt.clone()
        masked[:, 8:] = 0
        _, loss_masked = gpt(idx, masked)
    expected = F.cross_entropy(logits[:, :8].reshape(-1, VOCAB), tgt[:, :8].reshape(-1))
    torch.testing.assert_close(loss_masked, expected)
    assert not torch.allclose(loss, loss_masked)


def test_too_long_input_is_refused():
    gpt = ours({})
    with pytest.raises(AssertionError):
        gpt(torch.zeros(1, BLOCK + 1, dtype=torch.long))


# ---- init, config classes, parameter count ------------------------------------------------------

def test_initialisation_is_the_handouts():
    torch.manual_seed(0)
    gpt = ours(dict(perceiver=True, bottleneck_dim=8))
    linears = [m for m in gpt.modules() if isinstance(m, nn.Linear)]
    weights = torch.cat([m.weight.flatten() for m in linears])
    assert abs(weights.std().item() - 0.02) < 0.002 and abs(weights.mean().item()) < 0.002
    assert all(torch.all(m.bias == 0) for m in linears if m.bias is not None)
    assert abs(gpt.tok_emb.weight.std().item() - 0.02) < 0.004
    for m in gpt.modules():
        if isinstance(m, nn.LayerNorm):
            assert torch.all(m.weight == 1) and torch.all(m.bias == 0)
    assert torch.all(gpt.pos_emb == 0)
    C = gpt.down_block.C
    bound = math.sqrt(6.0 / (C.size(1) * C.size(2) + C.size(2)))  # xavier_uniform on (1, m, d)
    assert C.abs().max().item() <= bound + 1e-7
    assert C.abs().max().item() > 0.5 * bound

    syn = ours(dict(synthesizer=True))
    for block in syn.blocks:
        w2 = block.attn.w2
        assert w2.abs().max().item() <= 0.001 and w2.abs().max().item() > 0.0005
        assert torch.all(block.attn.b2 == 0)


def test_config_classes():
    assert model.GPTConfig.embd_pdrop == 0.1
    assert model.GPTConfig.resid_pdrop == 0.1
    assert model.GPTConfig.attn_pdrop == 0.1
    assert model.GPTConfig.perceiver is False
    assert model.GPTConfig.bottleneck_dim is None
    conf = model.GPTConfig(50, 64, n_layer=2, n_head=2, n_embd=16, synthesizer=True)
    assert (conf.vocab_size, conf.block_size, conf.n_layer, conf.synthesizer) == (50, 64, 2, True)
    assert issubclass(model.GPT1Config, model.GPTConfig)
    g1 = model.GPT1Config(50, 64)
    assert (g1.n_layer, g1.n_head, g1.n_embd) == (12, 12, 768)
    assert (g1.vocab_size, g1.block_size) == (50, 64)


@pytest.mark.parametrize('name,overrides', VARIANTS, ids=VARIANT_IDS)
def test_parameter_count_is_printed(name, overrides, capsys):
    gpt = ours(overrides)
    n = sum(p.numel() for p in gpt.parameters())
    assert n == sum(p.numel() for p in reference(overrides).parameters())
    out = capsys.readouterr().out
    assert f'number of parameters: {n}' in out.splitlines()


def test_get_block_size():
    assert ours({}).get_block_size() == BLOCK
    assert ours(dict(perceiver=True, bottleneck_dim=8)).get_block_size() == BLOCK


# ---- the attention modules against the equations, head by head ---------------------------------

def _heads(linear, x, n_head, i):
    """x W_i^T + b_i for head i of an nn.Linear holding all heads side by side."""
    hs = linear.out_features // n_head
    return x @ linear.weight[i * hs:(i + 1) * hs].T + linear.bias[i * hs:(i + 1) * hs]


def _masked_softmax(scores):
    """softmax over keys, query t seeing keys 0..t (top-left aligned for Tq != Tk)."""
    Tq, Tk = scores.shape
    allowed = torch.arange(Tk)[None, :] <= torch.arange(Tq)[:, None]
    return torch.softmax(scores.masked_fill(~allowed, float('-inf')), dim=-1)


def plain_dot_product_attention(mod, x_kv, x_q):
    """Eqs. (3)/(5)/(6): per head softmax((x_q Q_i)(x_kv K_i)^T / sqrt(d/h)) (x_kv V_i), heads
    concatenated, then the output projection. Batch sizes broadcast."""
    B = max(x_kv.size(0), x_q.size(0))
    n_head = mod.n_head
    hs = mod.key.out_features // n_head
    out = []
    for b in range(B):
        kv = x_kv[b if x_kv.size(0) > 1 else 0]
        q_in = x_q[b if x_q.size(0) > 1 else 0]
        heads = []
        for i in range(n_head):
            Q = _heads(mod.query, q_in, n_head, i)
            K = _heads(mod.key, kv, n_head, i)
            V = _heads(mod.value, kv, n_head, i)
            heads.append(_masked_softmax(Q @ K.T / math.sqrt(hs)) @ V)
        out.append(torch.cat(heads, dim=-1) @ mod.proj.weight.T + mod.proj.bias)
    return torch.stack(out)


def plain_synthesizer(mod, x):
    """Eq. (11): per head softmax(ReLU(X A_i + b1_i) B + b2) (X V_i), causal."""
    T = x.size(1)
    n_head = mod.n_head
    out = []
    for b in range(x.size(0)):
        heads = []
        for i in range(n_head):
            H = torch.relu(_heads(mod.w1, x[b], n_head, i))
            scores = H @ mod.w2[:, :T] + mod.b2[:T]
            heads.append(_masked_softmax(scores) @ _heads(mod.value, x[b], n_head, i))
        out.append(torch.cat(heads, dim=-1) @ mod.proj.weight.T + mod.proj.bias)
    return torch.stack(out)


def attn_config(fast, block_size=40):
    return model.GPTConfig(VOCAB, block_size, n_layer=1, n_head=4, n_embd=32, fast_attention=fast)


@pytest.mark.parametrize('fast', [True, False], ids=['fast', 'plain'])
def test_causal_self_attention_equations(fast):
    torch.manual_seed(0)
    mod = randomize(attention.CausalSelfAttention(attn_config(fast)), 1)
    x = torch.randn(2, 40, 32)
    for T in (40, 17, 1):
        with torch.no_grad():
            torch.testing.assert_close(mod(x[:, :T]), plain_dot_product_attention(mod, x[:, :T], x[:, :T]),
                                       atol=1e-5, rtol=1e-4)
    # causal: changing the last position changes nothing before it
    x2 = x.clone()
    x2[:, -1] += 1.0
    with torch.no_grad():
        torch.testing.assert_close(mod(x2)[:, :-1], mod(x)[:, :-1], atol=1e-6, rtol=0)
        assert not torch.allclose(mod(x2)[:, -1], mod(x)[:, -1])


def test_synthesizer_attention_equations():
    torch.manual_seed(0)
    mod = randomize(attention.SynthesizerAttention(attn_config(False)), 2)
    assert mod.w2.shape == (8, 39) and mod.b2.shape == (39,)
    x = torch.randn(3, 39, 32)
    for T in (39, 10, 1):
        with torch.no_grad():
            torch.testing.assert_close(mod(x[:, :T]), plain_synthesizer(mod, x[:, :T]),
                                       atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize('fast', [True, False], ids=['fast', 'plain'])
@pytest.mark.parametrize('Bkv,Tkv,Bq,Tq', [
    (3, 30, 1, 8),    # down projection: batch of inputs, one basis C as queries, Tq < Tk
    (3, 8, 3, 30),    # up projection: Tq > Tk
    (1, 12, 4, 12),   # a batch-1 key/value side broadcast too
    (2, 5, 2, 5),
])
def test_cross_attention_equations(fast, Bkv, Tkv, Bq, Tq):
    torch.manual_seed(0)
    mod = randomize(attention.CausalCrossAttention(attn_config(fast)), 3)
    x_kv = torch.randn(Bkv, Tkv, 32)
    x_q = torch.randn(Bq, Tq, 32)
    with torch.no_grad():
        y = mod(x_kv, x_q)
    assert y.shape == (max(Bkv, Bq), Tq, 32)
    torch.testing.assert_close(y, plain_dot_product_attention(mod, x_kv, x_q), atol=1e-5, rtol=1e-4)


def test_cross_attention_matches_reference_module():
    """Same parameters in the handout's CausalCrossAttention give the same outputs."""
    from handout_reference import RefCausalCrossAttention
    ours_mod = randomize(attention.CausalCrossAttention(attn_config(True)), 4)
    ref_mod = RefCausalCrossAttention(RefGPTConfig(VOCAB, 40, n_head=4, n_embd=32)).eval()
    ref_mod.load_state_dict(ours_mod.state_dict(), strict=True)
    x_kv, x_q = torch.randn(3, 25, 32), torch.randn(1, 9, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours_mod(x_kv, x_q), ref_mod(x_kv, x_q), atol=1e-5, rtol=1e-4)


# ---- decoding: the batched, cached greedy decoder is the handout's sample() ---------------------

@pytest.mark.parametrize('name,overrides', [VARIANTS[i] for i in (0, 1, 2, 4)],
                         ids=[VARIANT_IDS[i] for i in (0, 1, 2, 4)])
def test_greedy_complete_equals_handout_sample(name, overrides, device):
    torch.manual_seed(5)
    gpt = randomize(ours(overrides, n_layer=3), 7).to(device)  # positions and context matter
    gen = torch.Generator().manual_seed(6)
    prompts = [torch.randint(2, VOCAB, (n,), generator=gen).tolist() for n in (5, 9, 5, 14, 1)]
    got = greedy_complete(gpt, prompts, 12, stop_id=None, batch_size=2, device=device)
    for p, seq in zip(prompts, got):
        want = utils.sample(gpt, torch.tensor([p], device=device), 12, sample=False)[0].tolist()
        assert seq == want


# ---- the editions' seeds ------------------------------------------------------------------------

class _Built(Exception):
    """Raised by a stand-in Trainer.train with the model run.py built, before any step."""


@pytest.mark.parametrize('variant,edition,torch_seed', [
    ('vanilla', '2021-23', 1), ('perceiver', '2021-23', 1), ('synthesizer', '2021-23', 1),
    ('vanilla', '2024-25', 0), ('rope', '2024-25', 0)])
def test_a_run_starts_from_the_weights_its_editions_starter_draws(variant, edition, torch_seed,
                                                                   tmp_path, monkeypatch):
    """The starters seed torch when their model file is imported (2022-23 model.py: 1; 2024-25
    models.py: 0; 2021-22 none, so 2022-23's is one of its runs) and build the model first:
    run.py's model, as it is about to train, equals the handout's model built right after that
    seed."""
    import run
    import trainer
    from tiny_run import CORPUS
    (tmp_path / 'corpus.txt').write_text(CORPUS, encoding='utf-8')
    monkeypatch.chdir(tmp_path)

    def built(self):
        raise _Built({k: v.clone() for k, v in self.model.state_dict().items()})
    monkeypatch.setattr(trainer.Trainer, 'train', built)
    extra = dict(perceiver=dict(perceiver=True, bottleneck_dim=32),
                 synthesizer=dict(synthesizer=True), rope=dict(rope=True)).get(variant, {})
    with pytest.raises(_Built) as got:
        run.main(['pretrain', variant, 'corpus.txt', '--writing_params_path', 'p.params',
                  '--edition', edition, '--device', 'cpu', '--precision', 'fp32'])
    torch.manual_seed(torch_seed)
    want = RefGPT(RefGPTConfig(len(set(CORPUS)) + 2, 128, n_layer=4, n_head=8, n_embd=256,
                               **extra)).state_dict()
    state = got.value.args[0]
    assert state.keys() == want.keys()
    # the weights drawn; the buffers (masks, RoPE's angles: float rounding of their own) as they are
    assert all(torch.equal(state[k], want[k]) if not k.endswith(('mask', 'rope_cache')) else
               torch.allclose(state[k], want[k], atol=1e-5) for k in want), variant
