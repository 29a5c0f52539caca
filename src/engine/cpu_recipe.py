"""Engine (free to change): the CPU recipes' data and model.

The CPU recipes' data and model (presets cpu-20min, cpu-45min, cpu-rehearsal): engine, not
the handout. None of this is in the starter code, and none of it runs under the handout's preset:
run.py calls `prepare` once, where a preset asks for a recipe. What each piece is for and what it
reached: docs/cpu-recipe.md.

- BornViewMix (cpu-20min, cpu-45min): pretraining, and finetuning after it, on short views of each
  wiki.txt line mixed with the training questions;
- LeadInDataset (cpu-rehearsal): finetuning also rehearses the corpus, led by "Where was ";
- the slow-machine model (cpu-20min, cpu-45min): where a few timed steps say the preset's model
  fits too few steps into the budget here, a shallower one (presets.slow_machine).
"""
import math
import random
import re
import time

import torch
from torch.utils.data import ConcatDataset, Dataset

from engine import command
from engine import devices
from engine import distributed
from engine import inputs
from engine import presets
import trainer
from engine.budget import steps_that_fit
from engine.cpu_paths import ChoosePaths
from dataset import PAD_CHAR


def prepare(args, stage, pretrain_dataset, data, schedule_length, device, clock=time.time):
    """(The training set, the length its schedule counts, the model) of the recipe of
    args.preset for `stage` ('pretrain', 'finetune_pretrained', 'finetune_scratch'; None to
    evaluate), where `data` and `schedule_length` are the handout's. `clock` times the steps
    that choose the slow-machine model (tests drive their own)."""
    mix = presets.mix(args.preset)
    lead = presets.rehearsal_lead(args.preset)
    if mix is not None and stage in ('pretrain', 'finetune_pretrained'):
        questions = data if stage == 'finetune_pretrained' else \
            inputs.read_finetune(args.finetune_path, pretrain_dataset)
        data = mixed(pretrain_dataset, questions, mix, args)
        schedule_length = len(data)  # the handout's schedule counts the corpus's length; a mix, its own
    elif lead is not None and stage == 'finetune_pretrained':
        data = ConcatDataset([data, LeadInDataset(pretrain_dataset, lead)])
    gpt = model_for(args, data if stage == 'pretrain' else None, pretrain_dataset.vocab_size,
                    pretrain_dataset.block_size, device, clock)
    return data, schedule_length, gpt


def mixed(pretrain_dataset, questions, mix, args):
    """The preset's mixed training set (BornViewMix), said out loud: it is not the handout's."""
    if distributed.rank() == 0:
        print(f'the {args.preset} preset trains on short views of {args.pretrain_corpus_path} '
              f'mixed with the questions of {args.finetune_path} ({mix["question_share"]:.0%} of '
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
        self.lead_targets = torch.full_like(self.lead, pretraining_dataset.stoi[PAD_CHAR])

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
        self.stoi = pretraining_dataset.stoi
        self.length = pretraining_dataset.block_size - 1  # the NameDataset's, in every edition
        self.lead = lead
        self.size = round(len(self.lines) / (1 - question_share))

    def __len__(self):
        return self.size

    def __getitem__(self, idx):
        if random.random() < self.share:
            return self.questions[random.randrange(len(self.questions))]
        text = self.lead + born_view(random.choice(self.lines)) + PAD_CHAR * self.length
        ids = torch.tensor([self.stoi[c] for c in text[:self.length + 1]], dtype=torch.long)
        x, y = ids[:-1], ids[1:].clone()
        y[:max(0, len(self.lead) - 1)] = self.stoi[PAD_CHAR]
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
            return inputs.read_state(args.reading_params_path)
    except Exception:
        return None
    return None


def model_for(args, data, vocab_size, block_size, device, clock=time.time):
    """The model to train, or to read params into: the preset's (command.build_model); for a
    preset with a model for slow machines (presets.slow_machine), that one where the params or
    the checkpoint resumed are of its depth, or where a budgeted pretraining's preset model fits
    fewer steps into the budget here than it asks for and than the slow model's rule names
    (steps_here, on `clock`)."""
    slow = presets.slow_machine(args.preset)
    if slow is None:
        return command.build_model(args, vocab_size, block_size, device)
    saved = saved_state(args)
    if saved is not None:
        smaller = inputs.layers_of(saved) == slow['model']['n_layer']
        return command.build_model(args, vocab_size, block_size, device,
                                   **(slow['model'] if smaller else {}))
    randoms = devices.random_states(device)  # the smaller model is initialised as if built first
    gpt = command.build_model(args, vocab_size, block_size, device)
    if args.function != 'pretrain':
        return gpt
    steps, step, minutes, chosen = steps_here(gpt, data, args, device, clock)
    if steps is None or steps >= slow['below_steps']:
        if chosen is not None:  # measured once: the run trains in the precision (and, set on
            args.precision = chosen  # the model, the attention path) the probe chose
        return gpt
    if distributed.rank() == 0:
        print(f'the {args.preset} preset: its {inputs.layers_of(gpt.state_dict())}-layer model fits '
              f'{steps:,} steps ({step:.3f} s each) into the {minutes:g} min of pretraining here, '
              f'fewer than {slow["below_steps"]:,}: pretraining a {slow["model"]["n_layer"]}-layer '
              'model instead (src/engine/presets.py)', flush=True)
    devices.set_random_states(randoms, device)
    return command.build_model(args, vocab_size, block_size, device, **slow['model'])


def steps_here(gpt, data, args, device, clock):
    """(Steps of gpt's pretraining that fit into its time budget here, seconds per step, the
    budget in minutes, the precision chosen), timed on a few steps (undone) in the precision and
    attention path the run would choose (cpu_paths.ChoosePaths, which sets the path on gpt); the
    fewest of any rank. The steps are None without a budget (nothing timed, nothing chosen), or
    where it holds every step asked for (a short run: the budget changes nothing)."""
    tconf, minutes = command.trainer_config(args, 'pretrain', len(data), device)
    if tconf.time_budget is None:
        return None, None, minutes, None
    probe = trainer.Trainer(gpt, data, None, tconf)
    probe.precision = tconf.precision
    probe.wrapped_model()
    ChoosePaths().on_train_start(probe)
    steps, step = steps_that_fit(probe, args.started, clock)
    probe.wrapped = None  # (under torchrun: the DDP wrapper lets go of the model)
    steps = int(distributed.agree(steps, device, 'min'))
    asked = tconf.max_epochs * math.ceil(len(data) / tconf.batch_size)
    return (steps if steps < asked else None), step, minutes, probe.precision
