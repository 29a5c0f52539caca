"""Engine (free to change): the CPU recipes' data and model.

Presets cpu-20min, cpu-45min and cpu-rehearsal. None of this is in the starter code, and none of
it runs under the handout's preset: run.py calls `fit_model` and stages.training calls
`training_data`, where a preset asks for a recipe. What each piece is for and what it reached:
docs/cpu-recipe.md.

- BornViewMix (cpu-20min, cpu-45min): pretraining, and finetuning after it, on short views of each
  wiki.txt line mixed with the training questions;
- LeadInDataset (cpu-rehearsal): finetuning also rehearses the corpus, led by "Where was ";
- the slow-machine model (cpu-20min, cpu-45min): where the run's plan (plan.py) times the
  preset's model and it fits too few steps into the budget here, a shallower one
  (presets.slow_machine).
"""
import copy
import random
import re

import torch
from torch.utils.data import ConcatDataset, Dataset

from engine import devices
from engine import distributed
from engine.command import inputs, params
from engine import presets


def training_data(args, stage, pretrain_dataset, data, schedule_length, questions=None):
    """(The training set, the length its schedule counts) of the recipe of args.preset for
    `stage` ('pretrain', 'finetune_pretrained', 'finetune_scratch'), where `data` and
    `schedule_length` are the handout's; `questions`: the handout's NameDataset, which reads the
    questions a pretraining mix holds."""
    mix = presets.mix(args.preset)
    lead = presets.rehearsal_lead(args.preset)
    if mix is not None and stage in ('pretrain', 'finetune_pretrained'):
        asked = data if stage == 'finetune_pretrained' else \
            inputs.read_finetune(args.finetune_corpus_path, pretrain_dataset, questions)
        data = mixed(pretrain_dataset, asked, mix, args)
        schedule_length = len(data)  # the handout's schedule counts the corpus's length; a mix, its own
    elif lead is not None and stage == 'finetune_pretrained':
        data = ConcatDataset([data, LeadInDataset(pretrain_dataset, lead)])
    return data, schedule_length


def mixed(pretrain_dataset, questions, mix, args):
    """The preset's mixed training set (BornViewMix), said out loud: it is not the handout's."""
    if distributed.rank() == 0:
        print(f'the {args.preset} preset trains on short views of '
              f'{inputs.shown(args.pretrain_corpus_path)} mixed with the questions of '
              f'{inputs.shown(args.finetune_corpus_path)} ({mix["question_share"]:.0%} of '
              f'each batch): not the handout\'s data (src/engine/presets.py)', flush=True)
    return BornViewMix(pretrain_dataset, questions, mix['question_share'], mix['lead'])


class LeadInDataset(Dataset):
    """The examples of the pretraining dataset with `lead` written before each: the lead's
    characters as inputs, PAD as their targets (the loss ignores them), the example cut back to
    its length.
    The CPU recipe (presets.py, cpu-rehearsal) finetunes on the pretraining corpus led by the
    question's opening "Where was " beside the questions. Its pretraining puts every name at
    position 0, where its facts are stored; this shows the model the same lines with the name
    where the question puts it."""
    def __init__(self, pretraining_dataset, lead):
        self.examples = pretraining_dataset
        # the NameDataset's length (block_size - 1), in every edition: batches mix the two
        self.length = pretraining_dataset.block_size - 1
        self.lead = torch.tensor([pretraining_dataset.stoi[c] for c in lead], dtype=torch.long)
        pad = pretraining_dataset.stoi[pretraining_dataset.PAD_CHAR]
        self.lead_targets = torch.full_like(self.lead, pad)

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, idx):
        x, y = self.examples[idx]
        x = torch.cat([self.lead, x])[:self.length]
        y = torch.cat([self.lead_targets, y])[:self.length]
        return x, y


MONTHS = frozenset('january february march april may june july august september october '
                   'november december'.split())
BORN = re.compile(r'\bborn\b', re.IGNORECASE)  # the word, not the end of "Osborn"
VIEW_CHARS = 40


def born_cut(sentence):
    """`sentence` from its first word "born" on (all of it where there is none)."""
    match = BORN.search(sentence)
    return sentence[match.start():] if match else sentence


def undated(text):
    """`text` without the words that hold a digit or name a month."""
    return ' '.join(w for w in text.split(' ') if not any(c.isdigit() for c in w)
                    and w.strip('.,;:()').lower() not in MONTHS)


def born_view(document, chars=VIEW_CHARS):
    """A short view of one corpus line `NAME. sentence`: the name, then the sentence from its
    first word "born" on (all of it where there is none), without the words that hold a digit or
    name a month, cut to its words within `chars` characters (None: not cut).
    Why (docs/cpu-recipe.md): a place that follows a date is learnt under the date, which no
    question holds; without the dates it follows the name, as in a question. Most places end
    within 40 characters of "born", and a batch costs its longest row. Only the line's words,
    "born" and the dates are looked at: never a place."""
    name, _, sentence = document.partition('. ')
    text = undated(born_cut(sentence))
    if chars is not None and len(text) > chars:
        text = text[:chars + 1].rsplit(' ', 1)[0]
    return f'{name} {text}'


class BornViewMix(Dataset):
    """Mixed training (Allen-Zhu and Li, Physics of Language Models 3.1): each example is, with
    probability `question_share`, a training question as the NameDataset gives it (loss on the
    answer only), else `lead` + the born_view of a random line of the pretraining corpus (the
    lead's targets PAD). The questions teach how a question reads a person's stored facts; the
    views store every person's, under the name where a question puts it.
    The CPU presets' pretraining (presets.py, cpu-20min and cpu-45min). Examples are drawn with
    `random`, which the trainer seeds for every batch; an epoch is as many examples as give
    each line one view on average."""
    def __init__(self, pretraining_dataset, questions, question_share, lead):
        self.lines = [line for line in pretraining_dataset.data if line.strip()]
        self.questions, self.share = questions, question_share
        self.stoi, self.pad = pretraining_dataset.stoi, pretraining_dataset.PAD_CHAR
        self.length = pretraining_dataset.block_size - 1  # the NameDataset's, in every edition
        self.lead = lead
        self.size = round(len(self.lines) / (1 - question_share))

    def __len__(self):
        return self.size

    def __getitem__(self, idx):
        if random.random() < self.share:
            return self.questions[random.randrange(len(self.questions))]
        text = self.lead + born_view(random.choice(self.lines)) + self.pad * self.length
        ids = torch.tensor([self.stoi[c] for c in text[:self.length + 1]], dtype=torch.long)
        x, y = ids[:-1], ids[1:].clone()
        y[:max(0, len(self.lead) - 1)] = self.stoi[self.pad]
        return x, y


def saved_state(args):
    """The model state the command starts from: a --resume checkpoint's, or finetune's and
    evaluate's --reading_params_path; None where there is none or it does not read (loading it
    says why, later)."""
    try:
        if args.resume:
            return torch.load(args.writing_params_path + '.ckpt', map_location='cpu',
                              weights_only=True)['model']
        if args.reading_params_path is not None and args.function != 'pretrain':
            return params.read_state(args.reading_params_path)
    except Exception:
        return None
    return None


def slow_model(args):
    """A CPU recipe's model for slow machines (presets.slow_machine), as the command would use
    it: 'trained' where the params or the checkpoint it reads are of that model's depth; 'may'
    where it pretrains afresh (its plan trains that model where the preset's fits too few steps
    into the budget here: plan.py); else None."""
    slow = presets.slow_machine(args.preset)
    if slow is None:
        return None
    saved = saved_state(args)
    if saved is not None:
        return 'trained' if params.layers_of(saved) == slow['model']['n_layer'] else None
    return 'may' if args.function == 'pretrain' else None


def fit_model(args, model, mconf, make, device, randoms):
    """(The model to train, or to read params into; the smaller one the plan may choose):
    run.py's `model`, make(mconf) built from the random states `randoms`, or where the command's
    slow_model is 'trained', the slow machine's model; the second is None, or where it is 'may',
    (build, below_steps): the run's plan builds the slow machine's model where the preset's
    fits fewer than below_steps steps into the budget here (plan.py), drawn from the same
    random states."""
    if args.slow_model is None:
        return model, None
    slow = presets.slow_machine(args.preset)

    def build():  # initialised as if it had been built first
        devices.set_random_states(randoms, device)
        conf = copy.copy(mconf)
        for key, value in slow['model'].items():
            setattr(conf, key, value)
        return make(conf).to(device)
    if args.slow_model == 'trained':
        return build(), None
    return model, (build, slow['below_steps'])
