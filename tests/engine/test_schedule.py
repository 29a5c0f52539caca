"""The trainer against the handout's: the LR schedule (token-counted warmup then cosine to a 10%
floor), weight decay groups, and the padding trimming that must change neither the schedule nor
the loss."""
import math
import os

import pytest
import torch

from engine.fast import batches
from engine.training import loop, optim
import model
from engine import presets
import trainer
from test_batches import batch

BLOCK = 128


def handout_lr_mult(tokens, warmup_tokens, final_tokens):
    """The handout's trainer.py, written out."""
    if tokens < warmup_tokens:
        return float(tokens) / float(max(1, warmup_tokens))
    progress = float(tokens - warmup_tokens) / float(max(1, final_tokens - warmup_tokens))
    return max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))


# ---- lr_multiplier ------------------------------------------------------------------------------

@pytest.mark.parametrize('warmup,final', [(512 * 20, 200 * 2939 * 128), (1000, 5000), (0, 100)])
def test_lr_multiplier_is_the_handouts(warmup, final):
    conf = trainer.TrainerConfig(warmup_tokens=warmup, final_tokens=final)
    points = {0, 1, warmup // 2, max(warmup - 1, 0), warmup, warmup + 1,
              (warmup + final) // 2, final - 1, final, final + 1, int(final * 1.5), final * 3}
    points |= {int(t) for t in torch.linspace(0, final * 1.2, 97).tolist()}
    for t in sorted(points):
        assert loop.lr_multiplier(t, conf) == pytest.approx(handout_lr_mult(t, warmup, final),
                                                               rel=1e-12, abs=1e-15), t


def test_lr_multiplier_shape():
    conf = trainer.TrainerConfig(warmup_tokens=1000, final_tokens=11000)
    f = lambda t: loop.lr_multiplier(t, conf)  # noqa: E731
    assert f(0) == 0.0
    assert f(500) == pytest.approx(0.5)
    assert f(1000) == pytest.approx(1.0)
    assert f(6000) == pytest.approx(0.5)  # halfway down the cosine
    assert f(10990) == pytest.approx(0.1)  # floor reached before final_tokens
    assert f(11000) == pytest.approx(0.1)
    ups = [f(t) for t in range(0, 1000, 50)]
    downs = [f(t) for t in range(1000, 11001, 250)]
    assert ups == sorted(ups) and downs == sorted(downs, reverse=True)
    assert min(downs) >= 0.1


def stable_then_decay(tokens, warmup_tokens, final_tokens, decay_share):
    """recipe_probe.py --schedule wsd (E23-E26), written out: the warmup, the peak held, then a
    straight line to the floor over the last decay_share of the schedule."""
    if tokens < warmup_tokens:
        return float(tokens) / float(max(1, warmup_tokens))
    progress = float(tokens - warmup_tokens) / float(max(1, final_tokens - warmup_tokens))
    return max(0.1, min(1.0, (1.0 - progress) / decay_share))


def test_a_decay_share_holds_the_peak_then_goes_straight_down():
    from engine.training.schedule import Schedule
    conf = trainer.TrainerConfig(warmup_tokens=1000, final_tokens=11000, decay_share=0.2,
                                 max_epochs=10)
    for plan in (conf, Schedule(conf)):  # the config as asked, and the run's schedule
        for t in range(0, 12001, 37):
            assert loop.lr_multiplier(t, plan) == pytest.approx(
                stable_then_decay(t, 1000, 11000, 0.2), rel=1e-9, abs=1e-12), t
    f = lambda t: loop.lr_multiplier(t, conf)  # noqa: E731
    assert f(8999) == 1.0 and f(10000) == pytest.approx(0.5) and f(11000) == pytest.approx(0.1)
    # a budget's re-plan lays the rest of the schedule over other epochs: the line still starts
    # from the peak where the shortened schedule's last fifth begins
    plan = Schedule(conf)
    plan.relaid = (5000, 0.4, 7000, 1.0)  # from progress 0.4 at 5,000 tokens to the end at 7,000
    assert loop.lr_multiplier(6000, plan) == pytest.approx(1.0)  # progress 0.7
    assert loop.lr_multiplier(6666, plan) == pytest.approx((1 - (0.4 + 0.6 * 1666 / 2000)) / 0.2)


def test_trainer_config_defaults():
    c = trainer.TrainerConfig()
    assert (c.max_epochs, c.batch_size, c.learning_rate, c.betas, c.grad_norm_clip) == \
        (10, 64, 3e-4, (0.9, 0.95), 1.0)
    assert (c.weight_decay, c.lr_decay, c.warmup_tokens, c.final_tokens) == (0.1, False, 375e6, 260e9)
    assert (c.ckpt_path, c.num_workers, c.writer) == (None, 0, None)
    assert (c.decay_rule, c.shuffle) == ('names', False)  # the handout trainer's (see below)
    assert trainer.TrainerConfig(max_epochs=3, batch_size=5).max_epochs == 3


# ---- optimizer groups ---------------------------------------------------------------------------

def tiny_gpt(vocab=20, block=BLOCK, **kw):
    conf = dict(n_layer=4, n_head=2, n_embd=16)
    conf.update(kw)
    return model.GPT(model.GPTConfig(vocab, block, **conf))


DECAYED_SUFFIXES = ('key.weight', 'query.weight', 'value.weight', 'proj.weight', 'w1.weight',
                    'mlp.0.weight', 'mlp.2.weight', 'head.weight', 'attn.w2')


VARIANT_KW = [{}, dict(synthesizer=True), dict(perceiver=True, bottleneck_dim=8), dict(rope=True)]
VARIANT_IDS = ['vanilla', 'synthesizer', 'perceiver', 'rope']


@pytest.mark.parametrize('kw', VARIANT_KW, ids=VARIANT_IDS)
def test_optimizer_groups_by_the_handout_s_names(kw):
    """The handout's trainer.py (2021-22, 2022-23 and 2024-25 alike) puts a parameter in the
    undecayed group when its name contains "bias" or "LayerNorm.weight", else in the decayed
    one. No name here contains "LayerNorm": LayerNorm weights, embeddings, pos_emb, the
    synthesizer's b2 and the perceiver's C are decayed."""
    gpt = tiny_gpt(**kw)
    groups = optim.optimizer_groups(gpt, 0.1)
    assert [g['weight_decay'] for g in groups] == [0.1, 0.0]
    names = {id(p): n for n, p in gpt.named_parameters()}
    decayed = [names[id(p)] for p in groups[0]['params']]
    plain = [names[id(p)] for p in groups[1]['params']]
    assert sorted(decayed + plain) == sorted(names.values())  # everything, once
    assert plain == [n for n, _ in gpt.named_parameters() if 'bias' in n]
    assert {'tok_emb.weight', 'blocks.0.ln1.weight', 'ln_f.weight', 'head.weight'} <= set(decayed)
    assert ('pos_emb' in decayed) == (not kw.get('rope'))
    if kw.get('synthesizer'):
        assert {'blocks.0.attn.w2', 'blocks.0.attn.b2'} <= set(decayed)
    if kw.get('perceiver'):
        assert 'down_block.C' in decayed


@pytest.mark.parametrize('kw', VARIANT_KW[:3], ids=VARIANT_IDS[:3])
def test_optimizer_groups_by_mingpt_s_rule(kw):
    """minGPT's rule (the CPU presets'): the matmul weights only."""
    gpt = tiny_gpt(**kw)
    groups = optim.optimizer_groups(gpt, 0.1, 'matmul')
    assert [g['weight_decay'] for g in groups] == [0.1, 0.0]
    ids = [id(p) for g in groups for p in g['params']]
    assert len(ids) == len(set(ids))  # nothing twice
    names = {id(p): n for n, p in gpt.named_parameters()}
    assert set(ids) == set(names)  # everything once
    decayed = {names[id(p)] for p in groups[0]['params']}
    plain = {names[id(p)] for p in groups[1]['params']}
    for n in decayed:
        assert n.endswith(DECAYED_SUFFIXES), n
    for n in plain:
        assert not n.endswith(DECAYED_SUFFIXES), n
        assert n.endswith(('.bias', 'ln1.weight', 'ln2.weight', 'ln_f.weight', 'tok_emb.weight',
                           'attn.b2')) or n in ('pos_emb', 'down_block.C'), n
    assert 'head.weight' in decayed and 'pos_emb' in plain and 'tok_emb.weight' in plain
    assert 'blocks.0.mlp.0.weight' in decayed and 'blocks.0.mlp.0.bias' in plain
    assert 'ln_f.weight' in plain and 'ln_f.bias' in plain
    if kw.get('synthesizer'):
        assert 'blocks.0.attn.w2' in decayed and 'blocks.0.attn.b2' in plain
    if kw.get('perceiver'):
        assert 'down_block.C' in plain and 'up_block.attn.key.weight' in decayed
    # the groups work as AdamW's
    torch.optim.AdamW(groups, lr=1e-3)


def test_optimizer_groups_refuse_a_parameter_no_rule_places():
    """A bare parameter added to a model without a weight-decay entry is named, not silently
    left undecayed (as minGPT's configure_optimizers asserts)."""
    gpt = tiny_gpt()
    gpt.blocks[1].attn.gate = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match=r'blocks\.1\.attn\.gate \(CausalSelfAttention\)'):
        optim.optimizer_groups(gpt, 0.1, 'matmul')
    type(gpt.blocks[1].attn).weight_decay = {'gate': False}
    try:
        groups = optim.optimizer_groups(gpt, 0.1, 'matmul')
    finally:
        del type(gpt.blocks[1].attn).weight_decay
    assert any(p is gpt.blocks[1].attn.gate for p in groups[1]['params'])


@pytest.mark.parametrize('variant', sorted(model.VARIANTS))
def test_variant_table_builds_the_variants_flags(variant):
    """model.config_for(name) sets the handout's flags for that variant and nothing else; the
    bottleneck is taken only by a variant that has one."""
    conf = model.config_for(variant, 20, BLOCK, bottleneck_dim=16, n_layer=4, n_head=2, n_embd=16)
    flags = {f: getattr(conf, f) for f in ('synthesizer', 'perceiver', 'rope')}
    assert flags == {f: f == variant for f in flags}
    assert conf.bottleneck_dim == (16 if variant == 'perceiver' else None)


@pytest.mark.parametrize('kw', [{}, dict(synthesizer=True), dict(perceiver=True, bottleneck_dim=16),
                                dict(perceiver=True, bottleneck_dim=32)],
                         ids=['vanilla', 'synthesizer', 'perceiver', 'perceiver-wide'])
def test_trimming_changes_neither_logits_nor_loss(kw):
    """Also for the perceiver cut below its bottleneck (21 columns < 32 slots)."""
    torch.manual_seed(0)
    gpt = tiny_gpt(**kw).eval()
    x, y = batch([9, 21, 3])
    tx, ty = batches.trim_padding(x, y, multiple=1)
    assert tx.shape[1] == 21
    with torch.no_grad():
        logits, loss = gpt(x, y)
        tlogits, tloss = gpt(tx, ty)
    torch.testing.assert_close(tlogits, logits[:, :tx.shape[1]], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(tloss, loss, atol=1e-6, rtol=1e-5)


# ---- the trainer: LR per step counts the full padded rows ---------------------------------------

class RecordingWriter:
    def __init__(self):
        self.scalars = {}

    def add_scalar(self, tag, value, step):
        self.scalars.setdefault(tag, []).append((step, value))


@pytest.mark.parametrize('kw', [{}, dict(perceiver=True, bottleneck_dim=48)], ids=['vanilla', 'perceiver'])
def test_trainer_lr_counts_padded_tokens(name_data, monkeypatch, kw):
    torch.manual_seed(0)
    gpt = tiny_gpt(vocab=len(name_data.stoi), n_layer=2, **kw)

    widths = []
    gpt.register_forward_pre_hook(lambda mod, args: widths.append(args[0].shape[1]))

    used_lrs = []
    real_adamw = torch.optim.AdamW

    class RecordingAdamW(real_adamw):
        def step(self, *a, **k):
            used_lrs.append(self.param_groups[0]['lr'])
            return super().step(*a, **k)

    monkeypatch.setattr(torch.optim, 'AdamW', RecordingAdamW)

    lr, warmup, final = 6e-4, 1500, 5200
    writer = RecordingWriter()
    conf = trainer.TrainerConfig(max_epochs=2, batch_size=8, learning_rate=lr, lr_decay=True,
                                 warmup_tokens=warmup, final_tokens=final, writer=writer)
    t = trainer.Trainer(gpt, name_data, None, conf)
    t.train()

    n = len(name_data)  # 20 examples: batches of 8, 8, 4 per epoch
    sizes = [8, 8, 4] * 2
    assert t.run.tokens == 2 * n * 127
    tokens_after = [127 * sum(sizes[:i + 1]) for i in range(len(sizes))]
    expected = [lr * handout_lr_mult(tok, warmup, final) for tok in tokens_after]
    logged = writer.scalars['train/lr']
    assert [s for s, _ in logged] == list(range(6))
    assert [v for _, v in logged] == pytest.approx(expected, rel=1e-12)
    # the optimizer stepped with: the initial lr, then the value set after each step
    assert used_lrs == pytest.approx([lr] + expected[:-1], rel=1e-12)
    # the schedule went through warmup, the cosine and the floor
    assert expected[0] == pytest.approx(lr * 8 * 127 / warmup)
    assert expected[2] < expected[1] < lr and expected[-1] == pytest.approx(0.1 * lr)
    # ... although the batches the model saw were trimmed
    assert len(widths) == 6 and max(widths) < 127
    assert all(w % 8 == 0 for w in widths)
    if kw:  # the perceiver's batches are cut below its 48 slots too
        assert max(widths) < 48
    losses = writer.scalars['train/loss']
    assert len(losses) == 6 and all(math.isfinite(v) for _, v in losses)


def test_trainer_without_decay_keeps_lr(name_data):
    torch.manual_seed(0)
    gpt = tiny_gpt(vocab=len(name_data.stoi), n_layer=1)
    writer = RecordingWriter()
    before = {k: v.clone() for k, v in gpt.state_dict().items()}
    conf = trainer.TrainerConfig(max_epochs=1, batch_size=16, learning_rate=1e-3, writer=writer)
    t = trainer.Trainer(gpt, name_data, None, conf)
    t.train()
    assert [v for _, v in writer.scalars['train/lr']] == [1e-3, 1e-3]
    assert t.run.tokens == 20 * 127
    changed = [k for k, v in gpt.state_dict().items() if not torch.equal(v, before[k])]
    assert 'head.weight' in changed and 'blocks.0.attn.mask' not in changed


# ---- presets: the handout's values in one place ---------------------------------------------------

def test_the_handout_preset_is_the_handouts_run_py():
    from engine import presets
    handout = presets.PRESETS['handout']
    assert presets.model_values('handout') == dict(n_layer=4, n_head=8, n_embd=256)
    conf = model.GPTConfig(256, presets.BLOCK_SIZE, **presets.model_values('handout'))
    assert (conf.embd_pdrop, conf.resid_pdrop, conf.attn_pdrop) == (0.1, 0.1, 0.1)
    assert presets.BLOCK_SIZE == 128 and presets.BOTTLENECK_DIM == 32
    common = dict(lr_decay=True, weight_decay=0.1, warmup_tokens=512 * 20,
                  final_tokens_per_example=200 * 128, num_workers=4,
                  shuffle=False, decay_rule='names', decay_share=None)  # (its trainer.py, above)
    assert handout['pretrain'] == dict(max_epochs=650, batch_size=128, learning_rate=6e-3, **common)
    assert handout['finetune_scratch'] == dict(max_epochs=75, batch_size=256, learning_rate=6e-4, **common)
    assert handout['finetune_pretrained'] == dict(max_epochs=10, batch_size=256, learning_rate=6e-4,
                                                  **common)
    # every other preset names the same settings, and finetunes a pretrained model as the handout
    for name, preset in presets.PRESETS.items():
        assert set(preset) == set(handout), name
        assert all(set(preset[s]) == set(handout[s]) for s in presets.HANDOUT), name
    assert presets.PRESETS['cpu-rehearsal']['finetune_pretrained'] == \
        {**handout['finetune_pretrained'], **presets.MINGPT_TRAINER}
    assert presets.rehearsal_lead('handout') is None  # the handout finetunes on the questions alone


def run_py_trainer_configs():
    """Every trainer.TrainerConfig(...) call in run.py, its keywords evaluated as run.py would
    (the default learning rates, a corpus of N examples, both finetuning epoch counts)."""
    import ast
    from support import SRC
    with open(os.path.join(SRC, 'run.py'), encoding='utf-8') as f:
        tree = ast.parse(f.read())
    names = {'args.pretrain_lr': 6e-3, 'args.finetune_lr': 6e-4, 'block_size': 128,
             'len(pretrain_dataset)': 'N', 'writer': 'writer'}
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == 'trainer.TrainerConfig':
            values = {}
            for kw in node.keywords:
                text = ast.unparse(kw.value)
                for name, value in names.items():
                    text = text.replace(name, repr(value))
                values[kw.arg] = text if 'N' in text or 'max_epochs' == text else eval(text)
            calls.append(values)
    return calls


def test_run_py_trains_with_the_handout_presets_values():
    """run.py writes the handout's TrainerConfig for each stage and edition; presets.HANDOUT
    (what the scripts and tests read without running run.py) holds the same values."""
    from engine import presets
    calls = run_py_trainer_configs()
    assert len(calls) == 3  # pretraining's two editions, finetuning's
    for edition, per_example in (('2024-25', 650), ('2021-23', 200)):
        want = presets.stage_values('handout', 'pretrain', edition)
        assert want.pop('final_tokens_per_example') == per_example * 128
        assert any(c['final_tokens'] == f"{per_example} * 'N' * 128" and
                   all(c[k] == v for k, v in want.items() if k in c) and
                   set(c) - set(want) <= {'final_tokens', 'writer'} for c in calls), edition
    finetune = next(c for c in calls if c['max_epochs'] == 'max_epochs')
    for stage in ('finetune_scratch', 'finetune_pretrained'):
        want = presets.stage_values('handout', stage)
        assert want.pop('final_tokens_per_example') == 200 * 128
        assert finetune['final_tokens'] == "200 * 'N' * 128"
        assert all(finetune[k] == v for k, v in want.items() if k in finetune and k != 'max_epochs')


def test_the_cpu_presets():
    """cpu-20min (main.sh's default without a GPU): mixed training of a 128-wide model in
    17 + 1 minutes (2 layers instead of 4 on a machine too slow for enough steps of 4),
    finetuning continuing the mix for one epoch; finetuning from scratch stays the handout's. cpu-45min: the same in 41 + 1 minutes. cpu-rehearsal: the handout's model
    without dropout, the rehearsal recipe in 38 + 5 minutes."""
    from engine import presets
    short, long = presets.PRESETS['cpu-20min'], presets.PRESETS['cpu-45min']
    rehearsal = presets.PRESETS['cpu-rehearsal']
    assert rehearsal['time_budget'] == {'pretrain': 38, 'finetune_pretrained': 5}
    assert rehearsal['model'] == dict(presets.MODEL, embd_pdrop=0.0, resid_pdrop=0.0, attn_pdrop=0.0)
    assert rehearsal['pretrain']['batch_size'] == 64
    assert presets.rehearsal_lead('cpu-rehearsal') == 'Where was '
    assert presets.mix('cpu-rehearsal') is None
    assert long['time_budget'] == {'pretrain': 41, 'finetune_pretrained': 1}
    assert {k: v for k, v in long.items() if k not in ('time_budget', 'under_load', 'pretrain')} == \
        {k: v for k, v in short.items() if k not in ('time_budget', 'under_load', 'pretrain')}
    # cpu-20min's few steps hold the peak rate until the last fifth; cpu-45min keeps the cosine
    assert short['pretrain'] == dict(long['pretrain'], decay_share=0.2)
    assert long['pretrain']['decay_share'] is None
    # only cpu-20min's runs were measured under load (its end-of-run line compares with them)
    assert long['under_load'] is None and short['under_load'] == presets.CPU_20MIN_UNDER_LOAD
    # (a setting the preset holds, its figures recomputed from the runs in test_results_figures)
    assert presets.under_load('cpu-20min')['runs']['idle']['steps'] == (2914, 3162)
    presets.under_load('cpu-20min')['runs']['idle']['steps'] = None  # a copy: the preset unchanged
    assert presets.under_load('cpu-20min')['runs']['idle']['steps'] == (2914, 3162)
    assert short['time_budget'] == {'pretrain': 17, 'finetune_pretrained': 1}
    assert presets.mix('cpu-20min') == dict(questions='birth_places_train.tsv',
                                            question_share=0.25, lead='Where was ')
    assert short['model'] == dict(presets.MODEL, n_embd=128, embd_pdrop=0.0, resid_pdrop=0.0,
                                  attn_pdrop=0.0)
    assert short['pretrain']['learning_rate'] == 3e-3 and short['pretrain']['batch_size'] == 64
    assert short['pretrain']['warmup_tokens'] == 30 * 64 * 127
    assert short['finetune_pretrained']['max_epochs'] == 1
    assert short['finetune_pretrained']['learning_rate'] == 6e-4
    assert short['finetune_scratch'] == presets.HANDOUT['finetune_scratch']
    assert presets.time_budget('cpu-20min', 'finetune_scratch') is None
    assert all(presets.mix(name) is None for name in ('handout', 'cpu-quick', 'cpu-rehearsal'))
    # a machine that fits fewer than 2,200 of its model's steps into the budget trains 2 layers
    assert presets.slow_machine('cpu-20min') == dict(model=dict(n_layer=2), below_steps=2200)
    assert all(presets.slow_machine(name) is None for name in ('handout', 'cpu-quick', 'cpu-rehearsal'))


def test_the_2024_edition_pretrains_to_650_epochs_of_tokens():
    """The RoPE edition's run.py: final_tokens = 650 x len(pretrain_dataset) x block_size for
    pretraining (200 x before), finetuning unchanged; other presets keep their own schedules."""
    from engine import presets
    for stage in presets.HANDOUT:
        old = presets.stage_values('handout', stage)
        new = presets.stage_values('handout', stage, '2024-25')
        want = 650 * 128 if stage == 'pretrain' else 200 * 128
        assert new == {**old, 'final_tokens_per_example': want}
        assert old == presets.HANDOUT[stage]
    assert presets.stage_values('cpu-rehearsal', 'pretrain', '2024-25') == \
        presets.stage_values('cpu-rehearsal', 'pretrain')
    assert presets.edition(variant='rope') == '2024-25'
    assert presets.edition(variant='perceiver') == '2021-23'


class RecordingDataset(torch.utils.data.Dataset):
    """A dataset that notes which examples the trainer asks for, in order."""

    def __init__(self, data):
        self.data, self.asked = data, []

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        self.asked.append(i)
        return self.data[i]


@pytest.mark.parametrize('shuffle', [False, True])
def test_batches_follow_the_dataset_s_order_as_the_handout_s_dataloader(name_data, shuffle):
    """The handout's DataLoader has no shuffle: every epoch takes the examples in their order.
    minGPT's (shuffle=True, the CPU presets') draws a fresh order each epoch."""
    torch.manual_seed(0)
    data = RecordingDataset(name_data)
    conf = trainer.TrainerConfig(max_epochs=2, batch_size=8, shuffle=shuffle)
    trainer.Trainer(tiny_gpt(vocab=len(name_data.stoi), n_layer=1), data, None, conf).train()
    first, second = data.asked[:len(data)], data.asked[len(data):]
    assert sorted(first) == sorted(second) == list(range(len(data)))
    assert (first == second == list(range(len(data)))) == (not shuffle)


def test_the_handout_preset_keeps_the_handout_s_trainer_and_cpu_presets_mingpt_s():
    """The TrainerConfig defaults are the handout trainer's; the CPU presets' pretraining and
    finetuning after it, tuned with minGPT's, keep minGPT's."""
    conf = trainer.TrainerConfig()
    for stage in ('pretrain', 'finetune_scratch', 'finetune_pretrained'):
        values = presets.stage_values('handout', stage)
        assert (values['shuffle'], values['decay_rule']) == (conf.shuffle, conf.decay_rule)
        for name in ('cpu-20min', 'cpu-45min', 'cpu-rehearsal'):
            values = presets.stage_values(name, stage)
            want = (False, 'names') if stage == 'finetune_scratch' else (True, 'matmul')
            assert (values['shuffle'], values['decay_rule']) == want, (name, stage)


def test_the_run_is_the_one_object_the_engines_loop_and_extras_share(name_data):
    """The Trainer keeps the starter's attributes and one engine object, its run (loop.Run):
    every extra is handed that run at every named point, and the schedule's numbers live in it
    (run.schedule), while the config keeps what was asked for."""
    conf = trainer.TrainerConfig(max_epochs=2, batch_size=8, learning_rate=1e-3, lr_decay=True,
                                 warmup_tokens=100, final_tokens=5000)
    t = trainer.Trainer(tiny_gpt(vocab=len(name_data.stoi), n_layer=1), name_data, None, conf)
    seen = []

    class Probe:
        def on_train_start(self, run):
            seen.append(('start', run))

        def on_step_end(self, run, epoch, it):
            seen.append(('step', run))

        def on_epoch_end(self, run, epoch):
            seen.append(('epoch', run))

        def on_train_end(self, run):
            seen.append(('end', run))
    t.run.callbacks.append(Probe())
    t.train()
    assert [p for p, _ in seen] == ['start'] + (['step'] * 3 + ['epoch']) * 2 + ['end']
    assert all(run is t.run for _, run in seen)
    assert set(vars(t)) == {'model', 'train_dataset', 'test_dataset', 'config', 'run', 'device'}
    assert (t.run.schedule.max_epochs, t.run.schedule.final_tokens) == (2, 5000)
    assert (conf.max_epochs, conf.final_tokens) == (2, 5000) and t.run.epochs_trained == 2
    # the starter's loop (engine off) has no run: the starter's attributes only
    plain = trainer.Trainer(tiny_gpt(vocab=len(name_data.stoi), n_layer=1), name_data, None,
                            trainer.TrainerConfig(engine=False))
    assert set(vars(plain)) == {'model', 'train_dataset', 'test_dataset', 'config', 'device'}
