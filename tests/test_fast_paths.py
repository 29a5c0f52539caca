"""The fast paths compute what the handout computes.

- Evaluation: decode.greedy_complete with early stopping gives the same prediction strings as the
  handout's one-question loop (utils.sample(model, x, 32, sample=False), split on ⁇, [1]), for
  every variant, prompts of many lengths, and prompts long enough for the uncached fallback.
- Training: trainer.Trainer (in-process batches, trimmed padding, scaled_dot_product_attention)
  and a plain handout loop written out here (full batches, written-out attention), same seed,
  same batches, dropout 0: the loss curves agree within float noise in fp32 and within a small
  tolerance in bf16.
"""
import pytest
import torch

import dataset
import model
import trainer
import utils
from decode import greedy_complete

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
VARIANTS = {'vanilla': {}, 'synthesizer': {'synthesizer': True},
            'perceiver': {'perceiver': True, 'bottleneck_dim': 8}}


def tiny(vocab, overrides, fast=True, dropout=0.1, block_size=128):
    conf = model.GPTConfig(vocab, block_size, n_layer=3, n_head=2, n_embd=32, fast_attention=fast,
                           **overrides)
    conf.embd_pdrop = conf.resid_pdrop = conf.attn_pdrop = dropout
    return model.GPT(conf)


@pytest.fixture(scope='module')
def data():
    utils.set_seed(0)
    pre = dataset.CharCorruptionDataset(CORPUS, 128)
    return pre, dataset.NameDataset(pre, TSV)


def handout_prediction(gpt, vocab, question):
    x = torch.tensor([[vocab.stoi[c] for c in question + '⁇']])
    completion = ''.join(vocab.itos[int(i)] for i in utils.sample(gpt, x, 32, sample=False)[0])
    return completion.split('⁇')[1]


@pytest.mark.parametrize('name', VARIANTS)
def test_early_stopping_batched_decoding_gives_the_handouts_predictions(data, name):
    pre, names = data
    utils.set_seed(1)
    gpt = tiny(pre.vocab_size, VARIANTS[name])
    # a few finetuning steps, so the model emits varied text and some closing ⁇
    conf = trainer.TrainerConfig(max_epochs=15, batch_size=3, learning_rate=3e-3)
    trainer.Trainer(gpt, names, None, conf).train()
    questions = [line.split('\t')[0] for line in TSV.splitlines()]
    questions += ['Where was Ada born?', 'Who?', 'Where was Marie Curie born? ' * 3]
    if name != 'synthesizer':  # (the handout's loop itself fails there: w2 has 127 columns)
        questions.append('Ada Lovelace was born in ' * 5)  # 125 + 1 + 32 > 128: uncached path
    prompts = [[pre.stoi[c] for c in q + '⁇'] for q in questions]
    mask = pre.stoi['⁇']
    got = [''.join(pre.itos[i] for i in ids).split('⁇')[1]
           for ids in greedy_complete(gpt, prompts, 32, stop_id=mask, batch_size=4)]
    want = [handout_prediction(gpt, pre, q) for q in questions]
    assert got == want
    assert len(set(want)) > 1  # the check means something: the answers differ


def plain_losses(gpt, data, lr, batches):
    """The handout's training loop (fp32, full-length batches, no trimming)."""
    opt = torch.optim.AdamW(trainer.optimizer_groups(gpt, 0.1), lr=lr, betas=(0.9, 0.95))
    gpt.train()
    losses = []
    for indices in batches:
        x, y = trainer.collate(data, indices)
        _, loss = gpt(x, y)
        gpt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(gpt.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


class LossLog:
    def __init__(self):
        self.values = []

    def add_scalar(self, tag, value, step):
        if tag == 'train/loss':
            self.values.append(value)


@pytest.mark.parametrize('name', VARIANTS)
@pytest.mark.parametrize('precision,tolerance', [('fp32', 1e-4), ('bf16', 3e-2)])
def test_fast_training_matches_the_plain_loop(data, name, precision, tolerance):
    pre, names = data
    epochs, batch, lr = 3, 4, 1e-3
    # the batches the Trainer will draw: its generator is seeded from torch's seed
    utils.set_seed(5)
    g = torch.Generator().manual_seed(torch.initial_seed())
    batches = [b for _ in range(epochs) for b in trainer.batch_indices(len(names), batch, g)]

    utils.set_seed(5)
    fast = tiny(pre.vocab_size, VARIANTS[name], fast=True, dropout=0.0)
    log = LossLog()
    conf = trainer.TrainerConfig(max_epochs=epochs, batch_size=batch, learning_rate=lr,
                                 precision=precision, writer=log,
                                 min_len=8 if name == 'perceiver' else 0)
    trainer.Trainer(fast, names, None, conf).train()

    utils.set_seed(5)
    plain = tiny(pre.vocab_size, VARIANTS[name], fast=False, dropout=0.0)
    want = plain_losses(plain, names, lr, batches)

    assert len(log.values) == len(want)
    rel = max(abs(a - b) / abs(b) for a, b in zip(log.values, want))
    assert rel < tolerance, (log.values, want)
    assert want[-1] < want[0]  # it trained
