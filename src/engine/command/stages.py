"""Engine (free to change): a command's stages set up: the device and the seeds, the settings
line, the model's config and each training stage's TrainerConfig.

Each takes the command (flags.Command: what check_args decided) and what run.py hands it of
the handout's code (its configs, its datasets): a preset's values where it has its own
(presets.py), the flags typed over them, and how this machine runs them."""
import os
import random
import sys

import torch

from engine.machine import cpu_load
from engine.machine import cpu_paths
from engine.command import cpu_recipe
from engine import datafiles
from engine import distributed
from engine import presets



def bottleneck_of(args):
    """--bottleneck_dim where the variant has one (the perceiver), else None."""
    return args.bottleneck_dim if args.variant == 'perceiver' else None


def describe_model(args):
    if bottleneck_of(args) is not None:
        return f'a perceiver model with bottleneck_dim {args.bottleneck_dim}'
    return f'a {args.variant} model'


def seeds(args):
    """(python's, torch's) seeds of the run: --seed for both where typed; else a CPU preset's
    own; else the edition's starter's: random.seed(0) in run.py and torch.manual_seed at the
    import of its model file, 1 in 2022-23, 0 in 2024-25 (2021-22 left torch unseeded: 2022-23's
    is one of its runs)."""
    if args.seed is not None:
        return args.seed, args.seed
    own = presets.seed(args.preset)
    if own is not None:
        return own, own
    return 0, presets.EDITIONS[args.edition]['torch_seed']


def start(args):
    """The command started where the handout's run.py picks its device: on the command's device
    (check_args's; under torchrun this rank's GPU, the process group joined), its random numbers
    seeded (seeds), its settings said where they are not the handout's (settings_line). Returns
    the device."""
    where = distributed.init(args.device)
    python_seed, torch_seed = seeds(args)
    random.seed(python_seed)
    torch.manual_seed(torch_seed)
    line = settings_line(args, torch.device(where).type)
    if line is not None and distributed.rank() == 0:
        print(line, flush=True)
    return where


def say_edition(args):
    """Say which edition the command follows, as its work starts (on stderr: stdout keeps the
    starter's printed lines; a bad input's error stays the one line). Training says it through
    its config's notes, once its plan and resume have passed."""
    if distributed.rank() == 0:
        print(presets.edition_note(args.edition, args.edition_from), file=sys.stderr, flush=True)


# the flags beyond the handout's that change what a run computes or draws (the others change
# where or how fast it runs, or what it refuses)
CHANGING = ('max_epochs', 'batch_size', 'seed', 'dropout', 'precision', 'compile',
            'row_groups', 'time_budget', 'time_budget_after', 'plain')
# environment variables that change a run's numbers: torch's threads (a CPU sums in another
# order), and where precision 'auto' remembers what it measured
NUMBERS_ENV = ('OMP_NUM_THREADS', cpu_load.FIXED, 'CS224N_PATH_CACHE')


def settings_line(args, device_type, environ=os.environ):
    """One line of the settings that make this run other than the handout's run of its edition:
    the edition where an environment variable chose it, a preset that is not the handout's, the
    flags typed that change what it computes, a GPU's defaults (the same function, other random
    draws than a CPU's), the environment variables that change its numbers. None for the
    handout's run: its printed lines stay the starter's."""
    parts, typed = [], args.typed
    if args.edition_from == presets.EDITION_ENV:
        parts.append(f'edition {args.edition} (from ${presets.EDITION_ENV})')
    if args.preset != 'handout':
        parts.append(f'preset {args.preset} (not the handout\'s settings)')
    for name in CHANGING:
        if name in typed:
            value = getattr(args, name)
            parts.append(f'--{name}' if value is True else
                         f'--{name} {"none" if value is False else value}')
    if device_type == 'cuda' and args.function != 'evaluate':
        defaults = []
        if args.compile == 'graphs' and 'compile' not in typed:
            defaults.append('--compile graphs')
        groups = row_groups(args, args.function)
        if groups > 1 and 'row_groups' not in typed:
            defaults.append(f'--row_groups {groups}')
        if defaults:
            parts.append(f'a GPU\'s defaults {" ".join(defaults)} (the same function, other '
                         'dropout draws than eager steps: --compile none --row_groups 1)')
        if 'precision' not in typed and args.precision == 'fp16':
            parts.append('--precision fp16, the default on a GPU without bf16 (autocast with '
                         'loss scaling; --precision fp32 computes as the handout does)')
    parts += [f'${name}={environ[name]}' for name in NUMBERS_ENV if environ.get(name)]
    return 'settings: ' + '; '.join(parts) if parts else None


def corpus_text(args, text):
    """The pretraining corpus as the command's edition ships it (wiki.txt with or without its
    last newline: datafiles.as_edition); any other text as it is."""
    return datafiles.as_edition(text, args.edition)


def model_config(args, mconf):
    """run.py's GPTConfig with the preset's sizes and dropout (a CPU preset's are not the
    handout's), --dropout, and --plain's handout arithmetic (no fused kernel, nn.Dropout's
    draws)."""
    for key, value in presets.model_values(args.preset).items():
        setattr(mconf, key, value)
    mconf.fast_attention = mconf.fast_dropout = not args.plain
    if args.dropout is not None:
        mconf.embd_pdrop = mconf.resid_pdrop = mconf.attn_pdrop = args.dropout
    return mconf


def stage_of(args, function):
    """The preset's name of a training command's stage."""
    if function == 'pretrain':
        return 'pretrain'
    return 'finetune_pretrained' if args.reading_params_path is not None else 'finetune_scratch'


def training(args, function, data, tconf, device, writer, pretrain_dataset=None,
             questions=None, smaller=None):
    """(The training set, its TrainerConfig) of the training command's stage (args.stage; run.py
    names its `function`): `data` and `tconf` the handout's (run.py's); a CPU preset's data
    where it has its own (cpu_recipe.training_data: not the handout's; `questions`, the
    handout's NameDataset, reads its questions), and trainer_config's settings.
    `pretrain_dataset`: the corpus's dataset, in finetuning; `smaller`: fit_model's."""
    vocab = pretrain_dataset if pretrain_dataset is not None else data
    length = len(vocab)  # the handout's schedule counts the pretraining corpus's examples
    if presets.recipe(args.preset):
        data, length = cpu_recipe.training_data(args, args.stage, vocab, data, length, questions)
    tconf = trainer_config(args, args.stage, tconf, length, device, writer, smaller)
    return data, tconf


def learning_rate(args, stage, otherwise):
    """The rate `stage` trains at: its flag (--pretrain_lr, --finetune_lr) where typed, which a
    preset's value yields to; else `otherwise` (a preset's own, or what run.py's TrainerConfig
    holds), or where that is None the flag's default (the handout's)."""
    flag = 'pretrain_lr' if stage == 'pretrain' else 'finetune_lr'
    return getattr(args, flag) if flag in args.typed or otherwise is None else otherwise


def row_groups(args, stage):
    """--row_groups for `stage`: the flag's; 1 under --plain (each batch in one call);
    presets.GPU's in pretraining's recorded steps; else 0 (the engine's choice by device:
    batches.groups_for)."""
    if args.row_groups is not None:
        return args.row_groups
    if args.plain:
        return 1
    recorded_pretraining = stage == 'pretrain' and args.compile == 'graphs'
    return presets.GPU['row_groups'] if recorded_pretraining else 0


def trainer_config(args, stage, tconf, schedule_length, device, writer=None, smaller=None):
    """The TrainerConfig a stage trains with: run.py's (the handout's values), with a CPU
    preset's own values in their place (its final_tokens counting `schedule_length` examples),
    the flags typed (--max_epochs, --batch_size, --num_workers, the learning rates) and how this
    machine runs it (device, the command's precision, compile, row groups, resume, time budget;
    `smaller`, a CPU recipe's model the plan may train instead: cpu_recipe.fit_model)."""
    values = dict(vars(tconf))
    if args.preset != 'handout':
        preset = presets.stage_values(args.preset, stage, args.edition)
        values['final_tokens'] = preset.pop('final_tokens_per_example') * schedule_length
        values.update(preset)
    for key in ('max_epochs', 'batch_size', 'num_workers'):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    if args.num_workers is not None:  # asked for: on a CPU too
        values['cpu_workers'] = args.num_workers
    values['learning_rate'] = learning_rate(args, stage, values['learning_rate'])
    budget = args.time_budget if args.time_budget is not None else presets.time_budget(args.preset, stage)
    values.update(
        writer=writer, device=device,
        precision=args.precision,
        compile=args.compile, row_groups=row_groups(args, stage),
        path_cache=cpu_paths.default_path_cache(),
        log_every=1 if device == 'cpu' else presets.GPU['log_every'],
        follow_load=presets.adapts(args.preset) and cpu_load.follows(),
        under_load=presets.under_load(args.preset) if stage == 'pretrain' else None,
        resume_path=args.writing_params_path + '.ckpt', resume=args.resume,
        checkpoint_every=args.checkpoint_every,
        checkpoint_seconds=0 if device == 'cpu' else presets.GPU['checkpoint_seconds'],
        time_budget=None if budget is None else budget * 60, start_time=args.started,
        budget_may_grow=args.time_budget is None or args.time_budget_share,
        budget_after=args.time_budget_after, smaller=smaller, turn=args.member,
        notes=(presets.edition_note(args.edition, args.edition_from),))
    tconf = type(tconf)(**values)
    if tconf.precision == 'bf16' and device.startswith('cuda') and distributed.rank() == 0:
        print('note: --precision bf16 on a GPU attends with the flash kernel: under bf16 the '
              'handout\'s pretraining stopped learning with cuDNN\'s and the memory-efficient '
              'one, and followed fp32 with flash over its 650 epochs (docs/gpu.md)',
              file=sys.stderr, flush=True)
    return tconf


def tensorboard_dir(args):
    """The handout's folder for the run's tensorboard logs (2024-25: without bottleneck_dim),
    named with the learning rates the stages train at (the flags typed, else the preset's)."""
    name = f'{args.tb_expt_name}_{args.variant}'
    if args.edition == '2021-23':
        name += f'_{args.bottleneck_dim}'
    rates = [learning_rate(args, stage, None if args.preset == 'handout' else
                           presets.stage_values(args.preset, stage, args.edition)['learning_rate'])
             for stage in ('pretrain', stage_of(args, 'finetune'))]
    return 'expt/%s/%s_pt_lr_%f_ft_lr_%f' % (args.function, name, *rates)
