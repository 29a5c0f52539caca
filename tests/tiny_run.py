"""The tiny corpus, people and flags the command-line reliability tests share
(test_bad_input.py, test_resume.py): a ~30-line corpus, batch 8, fp32 on the CPU."""
import os

import torch

import model
from support import PEOPLE

FAST = ['--batch_size', '8', '--precision', 'fp32', '--device', 'cpu']
ENV = dict(os.environ, PYTHONIOENCODING='utf-8', PYTHONUNBUFFERED='1')
ENV.pop('WORLD_SIZE', None)

PEOPLE = PEOPLE[:31]
CORPUS = '\n'.join([f'{n}. {n} was born in {p} .' for n, p in PEOPLE]
                   + ['Where was he born? Nobody knows, said the writer.']) + '\n'
DOCUMENTS = 33  # the lines of CORPUS and the empty one after its last newline: batches 4*8 + 1
VOCAB = len(set(CORPUS)) + 2
TRAIN, DEV = PEOPLE[:16], PEOPLE[16:24]
# (an earlier run's params, as far as a look at the file goes: torch.save's older pickle starts so)
OLD_PARAMS = b'\x80 old params: must survive every failed run\n'
OLD_PREDICTIONS = b'old predictions: must survive every failed run\n'


def tsv(rows, end='\n'):
    return ''.join(f'Where was {n} born?\t{p}{end}' for n, p in rows)


assert len(CORPUS.split('\n')) == DOCUMENTS


def corpus_gpt(**extra):
    """A GPT of the handout's sizes over CORPUS's vocabulary, seeded (torch 0)."""
    torch.manual_seed(0)
    return model.GPT(model.GPTConfig(VOCAB, 128, n_layer=4, n_head=8, n_embd=256, **extra))


def stage_config(args, stage, length, device='cpu'):
    """The TrainerConfig run.py trains `stage` with ('pretrain', 'finetune_scratch',
    'finetune_pretrained'): its handout values (run.py's own TrainerConfig for the edition,
    which presets.HANDOUT mirrors: tests/engine/test_schedule.py), through stages.trainer_config, for a
    pretraining corpus of `length` examples."""
    from engine import presets
    from engine.command import stages
    import trainer
    values = presets.stage_values('handout', stage, args.edition)
    per_example = values.pop('final_tokens_per_example')
    keep = ('max_epochs', 'batch_size', 'learning_rate', 'lr_decay', 'warmup_tokens', 'num_workers')
    tconf = trainer.TrainerConfig(**{k: values[k] for k in keep}, final_tokens=per_example * length)
    return stages.trainer_config(args, stage, tconf, length, device)


def checked(argv, folder, monkeypatch, member=None):
    """run.py's flags.Command for `argv` as check_args decides it (run as `member` of a team,
    where given), in `folder` (the current one from here on) with CORPUS as its wiki.txt; its
    outputs' claims let go."""
    import run
    from engine.command import flags, records
    (folder / 'wiki.txt').write_text(CORPUS, encoding='utf-8')
    monkeypatch.chdir(folder)
    args = flags.parsed(run.argp, argv, member=member)
    try:
        return flags.check_args(args)
    finally:
        records.finish(args)


def command(argv, **decided):
    """run.py's flags.Command for `argv` without check_args's look at files: the CPU, eager
    steps, edition 2021-23 and the precision the flag names (a CPU recipe's 'auto': its plan
    measures) unless `decided` gives them; the stage and the slow machine's model as check_args
    decides them."""
    import run
    from engine import devices, presets
    from engine.command import cpu_recipe, flags, stages
    args = run.parse_args(argv)
    training = args.function != 'evaluate'
    values = dict(edition='2021-23', edition_from='--edition', device='cpu', compile=False,
                  precision=devices.pick_precision(args.precision, 'cpu', training,
                                                   measure=presets.adapts(args.preset)),
                  stage=stages.stage_of(args, args.function) if training else None,
                  slow_model=cpu_recipe.slow_model(args))
    values.update(decided)
    return flags.Command.of(args, **values)


def preset_model(args, vocab, block, device='cpu', **changes):
    """The model run.py builds for the command `args` (the variant's GPTConfig, the preset's
    sizes), with `changes` to its config, and the slow machine's model where the preset offers
    one: (model, smaller), cpu_recipe.fit_model's."""
    from engine import devices
    from engine.command import cpu_recipe, stages
    randoms = devices.random_states(device)
    mconf = stages.model_config(args, model.config_for(args.variant, vocab, block,
                                                        args.bottleneck_dim))
    for key, value in changes.items():
        setattr(mconf, key, value)
    gpt = model.GPT(mconf).to(device)
    return cpu_recipe.fit_model(args, gpt, mconf, model.GPT, device, randoms)
