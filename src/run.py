"""Pretrain, finetune or evaluate one of the assignment's models: the handout's run.py.

    python src/run.py pretrain vanilla wiki.txt --writing_params_path vanilla.pretrain.params
    python src/run.py finetune vanilla wiki.txt --reading_params_path vanilla.pretrain.params \
        --writing_params_path vanilla.finetune.params --finetune_corpus_path birth_places_train.tsv
    python src/run.py evaluate vanilla wiki.txt --reading_params_path vanilla.finetune.params \
        --eval_corpus_path birth_dev.tsv --outputs_path vanilla.pretrain.dev.predictions

Every flag of the handout editions (2021-22 synthesizer, 2022-23 perceiver, 2024-25 rope) works as
there, with the handout's values as defaults (see presets.py). Flags the handout does not have
only change how fast or how long a run is.
"""
import argparse
import json
import math
import os
import sys
import time

START = time.time()  # a --time_budget counts from here

import torch  # noqa: E402
from torch.utils.data import ConcatDataset  # noqa: E402

import checkpoint
import cpu_load
import cpu_paths
import dataset
import devices
import distributed
import inputs
import model
import presets
import trainer
import utils
from budget import steps_that_fit
from datafiles import resolve
from decode import greedy_complete
from utils import OneLineParser, UsageError

FUNCTIONS = ('pretrain', 'finetune', 'evaluate')
VARIANTS = tuple(model.VARIANTS)


def parse_args(argv=None):
    argp = OneLineParser(prog='python src/run.py', description=__doc__.split('\n')[0])
    argp.add_argument('function', choices=FUNCTIONS, help="Choose pretrain, finetune, or evaluate")
    argp.add_argument('variant', choices=VARIANTS, help="Choose vanilla, synthesizer, perceiver or rope")
    argp.add_argument('pretrain_corpus_path', default=None)
    argp.add_argument('--bottleneck_dim', type=int, default=presets.BOTTLENECK_DIM)
    argp.add_argument('--reading_params_path', default=None)
    argp.add_argument('--writing_params_path', default=None)
    argp.add_argument('--finetune_corpus_path', default=None)
    argp.add_argument('--eval_corpus_path', default=None)
    argp.add_argument('--outputs_path', default=None)
    argp.add_argument('--pretrain_lr', default=None, type=float, help='default 6e-3')
    argp.add_argument('--finetune_lr', default=None, type=float, help='default 6e-4')
    argp.add_argument('--tb_expt_name', help='debug string for tb log.', default='run')
    # not in the handout
    extra = argp.add_argument_group('not in the handout (unset, they change nothing)')
    extra.add_argument('--preset', choices=sorted(presets.PRESETS), default='handout',
                       help='named training schedule (presets.py); default: the handout\'s')
    extra.add_argument('--edition', choices=sorted(presets.EDITIONS), default=None,
                       help='the handout edition whose starter code to follow: 2021-23 '
                            '(synthesizer, perceiver) or 2024-25 (rope); default: the '
                            'variant\'s, else $%s, else this checkout\'s (src/edition.txt, set '
                            'by python src/presets.py --edition), else %s' % (
                                presets.EDITION_ENV, presets.DEFAULT_EDITION))
    extra.add_argument('--max_epochs', type=int, default=None)
    extra.add_argument('--time_budget', type=float, default=None, metavar='MINUTES',
                       help='pretrain/finetune: measure this machine\'s speed on the first steps, '
                            'then train the epochs (at most --max_epochs) that end within MINUTES, '
                            'the learning-rate schedule compressed to them')
    # run_all.py's share of a whole-run budget: too small for one epoch trains one, with a
    # warning, as a preset's budget does (the user's own --time_budget: an error)
    extra.add_argument('--time_budget_share', action='store_true', help=argparse.SUPPRESS)
    extra.add_argument('--batch_size', type=int, default=None)
    extra.add_argument('--seed', type=int, default=0, help='seeds python, torch (default 0)')
    extra.add_argument('--device', choices=('auto', 'cpu', 'cuda'), default='auto')
    extra.add_argument('--precision', choices=('auto', 'fp32', 'bf16'), default='auto',
                       help='auto: training on a CPU measures which is faster on this machine '
                            '(fp32, or bf16 autocast where the CPU has bf16 arithmetic; and the '
                            'attention path) and remembers it; on a GPU fp32 (bf16 was measured '
                            'diverging there); evaluation is fp32 unless bf16 is asked for')
    extra.add_argument('--compile', action='store_true',
                       help='torch.compile the model (GPU or CPU; the first steps compile)')
    extra.add_argument('--plain', '--plain_attention', action='store_true', dest='plain',
                       help='compute as the handout does (same results, slower): written-out '
                            'attention instead of scaled_dot_product_attention, every padded '
                            'position of a training batch, and nn.Dropout\'s random draws')
    extra.add_argument('--dropout', type=float, default=None,
                       help='embd/resid/attn dropout (the handout\'s is 0.1)')
    extra.add_argument('--resume', action='store_true',
                       help='continue an interrupted pretrain/finetune from WRITING_PARAMS_PATH.ckpt')
    extra.add_argument('--checkpoint_every', type=int, default=10,
                       help='write the resumable checkpoint WRITING_PARAMS_PATH.ckpt every N epochs '
                            '(and on Ctrl-C/SIGTERM); 0: only on Ctrl-C/SIGTERM')
    extra.add_argument('--num_workers', type=int, default=None,
                       help='DataLoader worker processes building the training batches (the '
                            'handout\'s 4 on a GPU; on a CPU none unless given: the same batches '
                            'either way)')
    extra.add_argument('--eval_batch_size', type=int, default=256)
    extra.add_argument('--strict', action='store_true',
                       help='evaluate: stop at a question with characters outside the vocabulary '
                            'instead of dropping them')
    return argp.parse_args(argv)


def check_args(args):
    """Every check of the command line, before any work: a UsageError for the first problem.
    Fills in args.edition and the resolved input paths (args.corpus_path, args.finetune_path,
    args.eval_path)."""
    if args.bottleneck_dim <= 0 or args.bottleneck_dim > presets.BLOCK_SIZE:
        raise UsageError(f'--bottleneck_dim must be from 1 to the block size {presets.BLOCK_SIZE}, '
                         f'not {args.bottleneck_dim}')
    if args.num_workers is not None and args.num_workers < 0:
        raise UsageError(f'--num_workers must be 0 or more, not {args.num_workers}')
    if args.checkpoint_every < 0:
        raise UsageError(f'--checkpoint_every must be 0 or more, not {args.checkpoint_every}')
    for flag in ('max_epochs', 'batch_size', 'eval_batch_size'):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            raise UsageError(f'--{flag} must be positive, not {value}')
    for flag in ('pretrain_lr', 'finetune_lr'):
        value = getattr(args, flag)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f'--{flag} must be a positive number, not {value:g}')
    if not -2 ** 63 <= args.seed < 2 ** 64:  # what torch.manual_seed takes
        raise UsageError(f'--seed must be from -2**63 to 2**64 - 1, not {args.seed}')
    args.corpus_path = resolve(args.pretrain_corpus_path, 'pretrain_corpus_path')
    needs = {'pretrain': ['writing_params_path'],
             'finetune': ['writing_params_path', 'finetune_corpus_path'],
             'evaluate': ['outputs_path', 'reading_params_path', 'eval_corpus_path']}
    for flag in needs[args.function]:
        if getattr(args, flag) is None:
            raise UsageError(f'{args.function} needs --{flag}')
    args.finetune_path = resolve(args.finetune_corpus_path, '--finetune_corpus_path') \
        if args.function == 'finetune' else None
    mix = presets.mix(args.preset)
    if args.function == 'pretrain' and mix is not None:  # the mix's questions
        args.finetune_path = resolve(args.finetune_corpus_path or mix['questions'],
                                     '--finetune_corpus_path')
    args.eval_path = resolve(args.eval_corpus_path, '--eval_corpus_path') \
        if args.function == 'evaluate' else None
    # no output may be an input, or another output (the resumable checkpoint beside the params)
    reads = [('pretrain_corpus_path', args.corpus_path),
             ('--finetune_corpus_path', args.finetune_path), ('--eval_corpus_path', args.eval_path),
             ('--reading_params_path',
              args.reading_params_path if args.function != 'pretrain' else None)]
    training = args.function != 'evaluate'
    inputs.check_outputs(
        [('--writing_params_path', args.writing_params_path if training else None),
         ('the checkpoint of --writing_params_path',
          args.writing_params_path + '.ckpt' if training and args.writing_params_path else None),
         ('--outputs_path', args.outputs_path if not training else None)], reads)

    if args.dropout is not None and not 0 <= args.dropout < 1:
        raise UsageError(f'--dropout must be in [0, 1), not {args.dropout}')
    args.edition, where = presets.edition_source(args.edition, args.variant)
    if args.variant not in presets.EDITIONS[args.edition]['variants']:
        raise UsageError(f'--edition {args.edition} has the variants '
                         f'{", ".join(presets.EDITIONS[args.edition]["variants"])}, not {args.variant}'
                         + ('' if where == '--edition' else f' (from {where})'))
    if args.time_budget is not None and args.function == 'evaluate':
        raise UsageError('--time_budget is for pretrain and finetune')
    if args.time_budget is not None and not 0 < args.time_budget <= utils.MAX_BUDGET_MINUTES:
        raise UsageError(f'--time_budget must be a positive number of minutes up to '
                         f'{utils.MAX_BUDGET_MINUTES} (a week), not {args.time_budget:g}')
    if args.resume and args.function == 'evaluate':
        raise UsageError('--resume is for pretrain and finetune')
    if args.resume and not os.path.isfile(args.writing_params_path + '.ckpt'):
        raise UsageError(f'--resume: no checkpoint {args.writing_params_path}.ckpt to resume from '
                         '(it is written every --checkpoint_every epochs and on Ctrl-C/SIGTERM)')
    if training:
        inputs.check_log_folder(tensorboard_dir(args))


def bottleneck_of(args):
    """--bottleneck_dim where the variant has one (the perceiver), else None."""
    return args.bottleneck_dim if 'bottleneck_dim' in model.VARIANTS[args.variant] else None


def describe_model(args):
    if bottleneck_of(args) is not None:
        return f'a perceiver model with bottleneck_dim {args.bottleneck_dim}'
    return f'a {args.variant} model'


def build_model(args, vocab_size, block_size, device, **changes):
    """The preset's model (with `changes` to its sizes)."""
    mconf = model.config_for(args.variant, vocab_size, block_size, args.bottleneck_dim,
                             **{**presets.model_values(args.preset), **changes},
                             fast_attention=not args.plain, skip_padding=not args.plain,
                             fast_dropout=not args.plain)
    if args.dropout is not None:
        mconf.embd_pdrop = mconf.resid_pdrop = mconf.attn_pdrop = args.dropout
    return model.GPT(mconf).to(device)


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


def model_for(args, data, vocab_size, block_size, device, clock=time.time, start=START):
    """The model to train, or to read params into: the preset's (build_model); for a preset
    with a model for slow machines (presets.slow_machine), that one where the params or the
    checkpoint resumed are of its depth, or where a budgeted pretraining's preset model fits
    fewer steps into the budget here than it asks for and than the slow model's rule names
    (steps_here, on `clock`)."""
    slow = presets.slow_machine(args.preset)
    if slow is None:
        return build_model(args, vocab_size, block_size, device)
    saved = saved_state(args)
    if saved is not None:
        smaller = inputs.layers_of(saved) == slow['model']['n_layer']
        return build_model(args, vocab_size, block_size, device, **(slow['model'] if smaller else {}))
    randoms = devices.random_states(device)  # the smaller model is initialised as if built first
    gpt = build_model(args, vocab_size, block_size, device)
    if args.function != 'pretrain':
        return gpt
    steps, step, minutes = steps_here(gpt, data, args, device, clock, start)
    if steps is None or steps >= slow['below_steps']:
        return gpt
    if distributed.rank() == 0:
        print(f'the {args.preset} preset: its {inputs.layers_of(gpt.state_dict())}-layer model fits '
              f'{steps:,} steps ({step:.3f} s each) into the {minutes:g} min of pretraining here, '
              f'fewer than {slow["below_steps"]:,}: pretraining a {slow["model"]["n_layer"]}-layer '
              'model instead (src/presets.py)', flush=True)
    devices.set_random_states(randoms, device)
    return build_model(args, vocab_size, block_size, device, **slow['model'])


def steps_here(gpt, data, args, device, clock, start):
    """(Steps of gpt's pretraining that fit into its time budget here, seconds per step, the
    budget in minutes), timed on a few steps (undone) in the precision and attention path the
    run would choose (cpu_paths.ChoosePaths); the fewest of any rank. The steps are None without
    a budget, or where it holds every step asked for (a short run: the budget changes nothing)."""
    tconf, minutes = trainer_config(args, 'pretrain', len(data), args.pretrain_lr, device, None,
                                    args.writing_params_path)
    if tconf.time_budget is None:
        return None, None, minutes
    probe = trainer.Trainer(gpt, data, None, tconf)
    probe.precision = tconf.precision
    probe.wrapped_model()
    cpu_paths.ChoosePaths().on_train_start(probe)
    steps, step = steps_that_fit(probe, start, clock)
    probe.wrapped = None  # (under torchrun: the DDP wrapper lets go of the model)
    steps = int(distributed.agree(steps, device, 'min'))
    asked = tconf.max_epochs * math.ceil(len(data) / tconf.batch_size)
    return (steps if steps < asked else None), step, minutes


def trainer_config(args, stage, pretrain_len, lr, device, writer, path):
    """(The TrainerConfig of `stage` for this command, its time budget in minutes or None)."""
    values = presets.stage_values(args.preset, stage, args.edition)
    final = values.pop('final_tokens_per_example') * pretrain_len
    budget = args.time_budget if args.time_budget is not None else presets.time_budget(args.preset, stage)
    for key in ('max_epochs', 'batch_size', 'num_workers'):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    if args.num_workers is not None:  # asked for: on a CPU too
        values['cpu_workers'] = args.num_workers
    if lr is not None:
        values['learning_rate'] = lr
    tconf = trainer.TrainerConfig(
        **values, final_tokens=final, writer=writer, device=device,
        precision=devices.pick_precision(args.precision, device, training=True,
                                         measure=presets.adapts(args.preset)),
        compile=args.compile, path_cache=cpu_paths.default_path_cache(),
        log_every=1 if device == 'cpu' else 25,
        follow_load=presets.adapts(args.preset) and cpu_load.follows(),
        resume_path=path + '.ckpt', resume=args.resume, checkpoint_every=args.checkpoint_every,
        time_budget=None if budget is None else budget * 60, start_time=START,
        budget_may_grow=args.time_budget is None or args.time_budget_share)
    return tconf, budget


def train(gpt, data, args, stage, pretrain_len, lr, device, writer, path):
    tconf, budget = trainer_config(args, stage, pretrain_len, lr, device, writer, path)
    if tconf.precision == 'bf16' and device.startswith('cuda') and distributed.rank() == 0:
        print('warning: --precision bf16 on a GPU: the handout\'s pretraining under it climbed back '
              'to a loss of 3.6 on an H100 where fp32 learned (results/h100-80gb-hbm3/README.md)',
              file=sys.stderr, flush=True)
    run = trainer.Trainer(gpt, data, None, tconf)
    run.train()
    if distributed.rank() == 0:
        # training is over: a first Ctrl-C/SIGTERM now waits until the params are on disk
        # (killing the process here would lose the whole finished run)
        with checkpoint.StopRequest():
            utils.save_state_dict(gpt, path)
            if os.path.exists(tconf.resume_path):  # finished: nothing left to resume
                os.remove(tconf.resume_path)
        write_record(args, path, device, stage=stage, precision=run.precision,
                     learning_rate=tconf.learning_rate, batch_size=tconf.batch_size,
                     weight_decay=tconf.weight_decay, decay_rule=tconf.decay_rule,
                     shuffle=tconf.shuffle, warmup_tokens=tconf.warmup_tokens,
                     final_tokens=run.schedule.final_tokens,
                     n_layer=inputs.layers_of(gpt.state_dict()),
                     time_budget_minutes=budget, epochs_asked=tconf.max_epochs,
                     epochs_planned=run.schedule.max_epochs, epochs_trained=run.epochs_trained,
                     steps=run.step)


def write_record(args, output, device, **used):
    """Beside `output` (the params or predictions written), `output`.run.json: the settings this
    command actually used (the preset's and the flags', and what the run chose or planned on the
    way), for whoever reads the output later. Not read back by any command."""
    record = dict(function=args.function, variant=args.variant, preset=args.preset,
                  edition=args.edition, commit=utils.source_commit(), torch=torch.__version__,
                  device=str(device), seed=args.seed,
                  reading_params_path=args.reading_params_path,
                  bottleneck_dim=bottleneck_of(args),
                  **used, seconds=round(time.time() - START, 1))

    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as f:
            json.dump(record, f, indent=1)
            f.write('\n')
    utils.atomic_write(output + '.run.json', write)


def predict(gpt, prompts, vocab, device, precision='fp32', batch_size=256):
    """The handout's greedy answers to inputs.read_questions' prompts, batched: one string per
    prompt ('' for a blank line)."""
    gpt.eval()
    mask_id = vocab.stoi[dataset.MASK_CHAR]
    questions = [p for p in prompts if p is not None]
    completions = iter(greedy_complete(gpt, questions, 32, stop_id=mask_id, stop_count=2,
                                       batch_size=batch_size, device=device,
                                       autocast=devices.autocast(device, precision)))
    predictions = []
    for prompt in prompts:
        if prompt is None:  # a blank line: nothing asked, nothing predicted
            predictions.append('')
            continue
        completion = ''.join([vocab.itos[int(i)] for i in next(completions)])
        predictions.append(completion.split(dataset.MASK_CHAR)[1])
    return predictions


def evaluate(gpt, args, gold_lines, prompts, vocab, device):
    """Greedy answers to inputs.read_evaluation's prompts, written to --outputs_path (one per
    line), scored against its gold lines as the handout's utils.evaluate_places scores them."""
    precision = devices.pick_precision(args.precision, device, training=False)
    predictions = predict(gpt, prompts, vocab, device, precision, args.eval_batch_size)

    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as fout:
            for pred in predictions:
                fout.write(pred + '\n')
    utils.atomic_write(args.outputs_path, write)
    total, correct = utils.score_places(gold_lines, predictions)
    write_record(args, args.outputs_path, device, precision=precision, eval_corpus_path=args.eval_path,
                 questions=len(predictions), correct=int(correct) if total > 0 else None)
    if total > 0:
        print('Correct: {} out of {}: {}%'.format(correct, total, correct / total * 100))
    else:
        print('Predictions written to {}; no targets provided'.format(args.outputs_path))


def tensorboard_dir(args):
    """The handout's folder for the run's tensorboard logs (2024-25: without bottleneck_dim),
    named with the learning rates the stages train at (the flags', else the preset's)."""
    name = f'{args.tb_expt_name}_{args.variant}'
    if args.edition == '2021-23':
        name += f'_{args.bottleneck_dim}'
    finetune = 'finetune_pretrained' if args.reading_params_path is not None else 'finetune_scratch'
    pretrain_lr, finetune_lr = (
        lr if lr is not None else presets.stage_values(args.preset, stage, args.edition)['learning_rate']
        for lr, stage in ((args.pretrain_lr, 'pretrain'), (args.finetune_lr, finetune)))
    return 'expt/%s/%s_pt_lr_%f_ft_lr_%f' % (args.function, name, pretrain_lr, finetune_lr)


def mixed(pretrain_dataset, questions, mix, args):
    """The preset's mixed training set (dataset.BornViewMix), said out loud: it is not the
    handout's."""
    if distributed.rank() == 0:
        print(f'the {args.preset} preset trains on short views of {args.pretrain_corpus_path} '
              f'mixed with the questions of {args.finetune_path} ({mix["question_share"]:.0%} of '
              f'each batch): not the handout\'s data (src/presets.py)', flush=True)
    return dataset.BornViewMix(pretrain_dataset, questions, mix['question_share'], mix['lead'])


def run(args):
    check_args(args)  # everything the run will need, before spending any time on it
    device = distributed.init(devices.pick_device(args.device))
    utils.set_seed(args.seed)

    pretrain_dataset = inputs.read_corpus(args.corpus_path, args.edition)

    # read and check the other inputs before building anything (none of this draws random numbers,
    # so the model's initialisation is the handout's)
    mix = presets.mix(args.preset)
    if args.function == 'finetune':
        finetune_dataset = inputs.read_finetune(args.finetune_path, pretrain_dataset)
        stage = 'finetune_pretrained' if args.reading_params_path is not None else 'finetune_scratch'
        lead = presets.rehearsal_lead(args.preset)
        # the handout's schedule counts the pretraining corpus's length; a mix, its own
        schedule_length = len(pretrain_dataset)
        if mix is not None and stage == 'finetune_pretrained':
            finetune_dataset = mixed(pretrain_dataset, finetune_dataset, mix, args)
            schedule_length = len(finetune_dataset)
        elif lead is not None and stage == 'finetune_pretrained':
            finetune_dataset = ConcatDataset([finetune_dataset,
                                              dataset.LeadInDataset(pretrain_dataset, lead)])
    elif args.function == 'pretrain':
        pretrain_data = pretrain_dataset if mix is None else mixed(
            pretrain_dataset, inputs.read_finetune(args.finetune_path, pretrain_dataset), mix, args)
    elif args.function == 'evaluate':
        prompts, gold_lines = inputs.read_evaluation(args.eval_path, pretrain_dataset.stoi,
                                                     args.strict)

    gpt = model_for(args, pretrain_data if args.function == 'pretrain' else None,
                    pretrain_dataset.vocab_size, pretrain_dataset.block_size, device)
    if distributed.rank() == 0 and args.variant != 'synthesizer':  # (2021-22's run.py does not)
        print('Model on device: ', next(gpt.parameters()).device)
    if args.reading_params_path is not None and args.function != 'pretrain':
        inputs.load_params(gpt, args.reading_params_path, describe_model(args), device)

    writer = None if distributed.rank() != 0 else utils.LazyWriter(tensorboard_dir(args))
    try:
        if args.function == 'pretrain':
            train(gpt, pretrain_data, args, 'pretrain', len(pretrain_data), args.pretrain_lr,
                  device, writer, args.writing_params_path)
        elif args.function == 'finetune':
            train(gpt, finetune_dataset, args, stage, schedule_length, args.finetune_lr,
                  device, writer, args.writing_params_path)
        elif distributed.rank() == 0:
            evaluate(gpt, args, gold_lines, prompts, pretrain_dataset, device)
    finally:  # also on an interrupt: the steps logged so far reach the events file
        if writer is not None:
            writer.close()


def main(argv=None):
    args = parse_args(argv)
    try:
        run(args)
    except UsageError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)
    except trainer.LossNotFinite as e:
        print(f'error: {e}; nothing was written (a lower learning rate may help)', file=sys.stderr)
        sys.exit(1)
    except checkpoint.TrainingInterrupted as e:
        print(f'\ninterrupted: checkpoint written to {e}; continue with the same command '
              'plus --resume', file=sys.stderr)
        sys.exit(130)


if __name__ == '__main__':
    main()
