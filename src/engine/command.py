"""Engine (free to change): what run.py's commands need beyond the starter's code.

What run.py's commands need beyond the starter's code: engine, not the handout (free to
change; run.py calls it at named points). The flags the handout does not have and every check of
the command line before any work; the model a command builds and each training stage's
TrainerConfig, from the preset (presets.py); the batched greedy answers; and what a finished
stage writes beside its output (the params saved safely, the run's record)."""
import argparse
import json
import math
import os
import sys
import time

import torch

from engine import checkpoint
from engine import common
from engine import cpu_load
from engine import cpu_paths
import dataset
from engine import devices
from engine import distributed
from engine import inputs
import model
from engine import presets
import trainer
import utils
from engine.common import UsageError
from engine.datafiles import resolve
from engine.decode import greedy_complete

IMPORTED = time.time()  # (run.py's START is before the imports: the run's record splits its time)

# --pack_multiple's default under --compile graphs, in pretraining only: on an H100 packing made
# the recorded pretraining step 1.4-1.5x faster and the finetuning one slower (docs/gpu.md)
GPU_PACK_MULTIPLE = 512


def add_engine_flags(argp):
    """run.py's flags beyond the handout's: unset, they change nothing."""
    extra = argp.add_argument_group('not in the handout (unset, they change nothing)')
    extra.add_argument('--preset', choices=sorted(presets.PRESETS), default='handout',
                       help='named training schedule (presets.py); default: the handout\'s')
    extra.add_argument('--edition', choices=sorted(presets.EDITIONS), default=None,
                       help='the handout edition whose starter code to follow: 2021-23 '
                            '(synthesizer, perceiver) or 2024-25 (rope); default: the '
                            'variant\'s, else $%s, else this checkout\'s (src/edition.txt, set '
                            'by python src/engine/presets.py --edition), else %s' % (
                                presets.EDITION_ENV, presets.DEFAULT_EDITION))
    extra.add_argument('--max_epochs', type=int, default=None)
    extra.add_argument('--time_budget', type=float, default=None, metavar='MINUTES',
                       help='pretrain/finetune: measure this machine\'s speed on the first steps, '
                            'then train the epochs (at most --max_epochs) that end within MINUTES, '
                            'the learning-rate schedule compressed to them')
    # run_all.py's share of a whole-run budget: too small for one epoch trains one, with a
    # warning, as a preset's budget does (the user's own --time_budget: an error)
    extra.add_argument('--time_budget_share', action='store_true', help=argparse.SUPPRESS)
    # main.sh's: the budget also holds EPOCHS epochs at this run's pace after its training (the
    # finetuning that follows), kept at its end as the pace is measured (budget.py)
    extra.add_argument('--time_budget_after', type=float, default=0.0, metavar='EPOCHS',
                       help=argparse.SUPPRESS)
    extra.add_argument('--batch_size', type=int, default=None)
    extra.add_argument('--seed', type=int, default=0, help='seeds python, torch (default 0)')
    extra.add_argument('--device', choices=('auto', 'cpu', 'cuda'), default='auto')
    extra.add_argument('--precision', choices=('auto', 'fp32', 'tf32', 'bf16'), default='auto',
                       help='auto: the handout\'s fp32, except that training a CPU recipe '
                            '(cpu-20min, cpu-45min, cpu-rehearsal) on a CPU measures which is '
                            'faster on this machine (fp32, or bf16 autocast where the CPU has bf16 '
                            'arithmetic; and the attention path) and remembers it; on a GPU fp32. '
                            'tf32 (a GPU\'s): fp32 with the matrix products on tensor cores. '
                            'bf16: autocast, on a GPU with the flash attention kernel (the '
                            'others stalled there)')
    extra.add_argument('--compile', nargs='?', const='default', default='auto',
                       choices=('auto', 'none', 'default', 'reduce-overhead', 'graphs'),
                       help='auto (default): graphs when training on one GPU (one process, not '
                            '--plain), else none. default: torch.compile the model (GPU or CPU; '
                            'the first steps compile); reduce-overhead: on a GPU its steps also '
                            'replay CUDA graphs (one recorded per batch shape); graphs (a GPU\'s): '
                            'nothing compiled, the whole training step (forward, backward, AdamW) '
                            'recorded as a CUDA graph per batch shape and replayed; none: eager '
                            'steps')
    extra.add_argument('--pack_multiple', type=int, default=None, metavar='N',
                       help='training on a GPU: compute only the positions that can change the '
                            'loss, as a CPU does (about half of a pretraining batch; the same '
                            'loss, other dropout masks), packed into a number of positions '
                            'rounded up to a multiple of N (a few shapes for --compile graphs); '
                            '0: every position; default: %d in pretraining under --compile '
                            'graphs, else 0' % GPU_PACK_MULTIPLE)
    extra.add_argument('--pack_groups', type=int, default=1, metavar='G',
                       help='with packing (--pack_multiple): the rows sorted by length and '
                            'attention computed in G groups of them, each over the columns its '
                            'rows need (about half of the attention\'s work with 4 groups; the '
                            'same loss; a few more CUDA graphs); default 1: every column')
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
                            '(on a GPU at most once every %d s) and on Ctrl-C/SIGTERM; 0: only on '
                            'Ctrl-C/SIGTERM' % checkpoint.GPU_SECONDS)
    extra.add_argument('--num_workers', type=int, default=None,
                       help='DataLoader worker processes building the training batches (the '
                            'handout\'s 4 on a GPU; on a CPU none unless given: the same batches '
                            'either way)')
    extra.add_argument('--eval_batch_size', type=int, default=256)
    extra.add_argument('--strict', action='store_true',
                       help='evaluate: stop at a question with characters outside the vocabulary '
                            'instead of dropping them')


def check_args(args):
    """Every check of the command line, before any work: a UsageError for the first problem.
    Fills in args.edition and the resolved input paths (args.corpus_path, args.finetune_path,
    args.eval_path)."""
    if args.bottleneck_dim <= 0 or args.bottleneck_dim > presets.BLOCK_SIZE:
        raise UsageError(f'--bottleneck_dim must be from 1 to the block size {presets.BLOCK_SIZE}, '
                         f'not {args.bottleneck_dim}')
    on_cpu = devices.pick_device(args.device) == 'cpu'
    one_process = int(os.environ.get('WORLD_SIZE', '1')) == 1
    if args.compile == 'auto':  # what the H100 loans measured fastest (docs/gpu.md)
        args.compile = 'graphs' if not on_cpu and one_process and not args.plain else 'none'
    if args.precision == 'tf32' and on_cpu:
        raise UsageError('--precision tf32 is a GPU\'s arithmetic (fp32 matrix products on NVIDIA '
                         'tensor cores); on a CPU use fp32 or bf16')
    if args.compile == 'graphs' and (on_cpu or not one_process):
        raise UsageError('--compile graphs records CUDA graphs: it needs a GPU and one process '
                         '(not torchrun)')
    args.compile = False if args.compile == 'none' else args.compile
    if args.pack_multiple is not None and args.pack_multiple < 0:
        raise UsageError(f'--pack_multiple must be 0 or more, not {args.pack_multiple}')
    if args.pack_multiple and args.plain:
        raise UsageError('--pack_multiple and --plain contradict each other: --plain computes '
                         'every position')
    if args.pack_multiple and args.compile in ('default', 'reduce-overhead'):
        raise UsageError(f'--pack_multiple runs eager steps or --compile graphs, not '
                         f'--compile {args.compile} (a new size would recompile)')
    if args.pack_multiple and on_cpu:
        raise UsageError('--pack_multiple is a GPU\'s: a CPU computes only the positions that '
                         'can change the loss already, in its own groups')
    if args.pack_groups < 1:
        raise UsageError(f'--pack_groups must be 1 or more, not {args.pack_groups}')
    if args.pack_groups > 1 and not any(pack_multiple(args, stage) for stage in
                                        ('pretrain', 'finetune_pretrained')):
        raise UsageError('--pack_groups groups the rows of a packed step: it needs packing '
                         '(on a GPU: --pack_multiple N, or --compile graphs in pretraining)')
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
         ('the run record of --writing_params_path',
          args.writing_params_path + '.run.json' if training and args.writing_params_path else None),
         ('--outputs_path', args.outputs_path if not training else None),
         ('the run record of --outputs_path',
          args.outputs_path + '.run.json' if not training and args.outputs_path else None)], reads)

    if args.dropout is not None and not 0 <= args.dropout < 1:
        raise UsageError(f'--dropout must be in [0, 1), not {args.dropout}')
    args.edition, where = presets.edition_source(args.edition, args.variant)
    if args.variant not in presets.EDITIONS[args.edition]['variants']:
        raise UsageError(f'--edition {args.edition} has the variants '
                         f'{", ".join(presets.EDITIONS[args.edition]["variants"])}, not {args.variant}'
                         + ('' if where == '--edition' else f' (from {where})'))
    if args.time_budget is not None and args.function == 'evaluate':
        raise UsageError('--time_budget is for pretrain and finetune')
    if args.time_budget is not None and not 0 < args.time_budget <= common.MAX_BUDGET_MINUTES:
        raise UsageError(f'--time_budget must be a positive number of minutes up to '
                         f'{common.MAX_BUDGET_MINUTES} (a week), not {args.time_budget:g}')
    if args.time_budget_after and args.time_budget is None:
        raise UsageError('--time_budget_after needs --time_budget (the budget that holds it)')
    if not 0 <= args.time_budget_after <= 100:  # (nan fails too)
        raise UsageError(f'--time_budget_after must be a number of epochs from 0 to 100, not '
                         f'{args.time_budget_after:g}')
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


def model_config(args, vocab_size, block_size, **changes):
    """The GPTConfig of args.variant with the preset's sizes (and `changes` to them), the flags'
    dropout and attention path."""
    mconf = model.config_for(args.variant, vocab_size, block_size, args.bottleneck_dim,
                             **{**presets.model_values(args.preset), **changes},
                             fast_attention=not args.plain, skip_padding=not args.plain,
                             fast_dropout=not args.plain)
    if args.dropout is not None:
        mconf.embd_pdrop = mconf.resid_pdrop = mconf.attn_pdrop = args.dropout
    return mconf


def build_model(args, vocab_size, block_size, device, **changes):
    """The preset's model (with `changes` to its sizes) on `device`."""
    return model.GPT(model_config(args, vocab_size, block_size, **changes)).to(device)




def pack_multiple(args, stage):
    """--pack_multiple for `stage`: the flag's, else GPU_PACK_MULTIPLE where it measured faster
    (pretraining's recorded steps), else 0 (every position)."""
    if args.pack_multiple is not None:
        return args.pack_multiple
    recorded_pretraining = stage == 'pretrain' and args.compile == 'graphs' and not args.plain
    return GPU_PACK_MULTIPLE if recorded_pretraining else 0


def trainer_config(args, stage, pretrain_len, device, writer=None):
    """(The TrainerConfig of `stage` ('pretrain', 'finetune_scratch', 'finetune_pretrained') for
    this command, its time budget in minutes or None): the preset's values, the flags' where
    given; final_tokens counts `pretrain_len` examples, as the handout's schedule does."""
    values = presets.stage_values(args.preset, stage, args.edition)
    lr = args.pretrain_lr if stage == 'pretrain' else args.finetune_lr
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
        compile=args.compile, pack_multiple=pack_multiple(args, stage),
        pack_groups=args.pack_groups,
        path_cache=cpu_paths.default_path_cache(),
        log_every=1 if device == 'cpu' else 25,
        follow_load=presets.adapts(args.preset) and cpu_load.follows(),
        under_load=presets.under_load(args.preset) if stage == 'pretrain' else None,
        resume_path=args.writing_params_path + '.ckpt', resume=args.resume,
        checkpoint_every=args.checkpoint_every,
        checkpoint_seconds=0 if device == 'cpu' else checkpoint.GPU_SECONDS,
        time_budget=None if budget is None else budget * 60, start_time=args.started,
        budget_may_grow=args.time_budget is None or args.time_budget_share,
        budget_after=args.time_budget_after)
    if tconf.precision == 'bf16' and device.startswith('cuda') and distributed.rank() == 0:
        print('note: --precision bf16 on a GPU attends with the flash kernel: under bf16 the '
              'handout\'s pretraining stopped learning with cuDNN\'s and the memory-efficient '
              'one on an H100, and followed fp32 with flash over its 650 epochs '
              '(results/h100-80gb-hbm3/README.md)',
              file=sys.stderr, flush=True)
    return tconf, budget




def write_record(args, output, device, **used):
    """Beside `output` (the params or predictions written), `output`.run.json: the settings this
    command actually used (the preset's and the flags', and what the run chose or planned on the
    way), for whoever reads the output later. Not read back by any command."""
    record = dict(function=args.function, variant=args.variant, preset=args.preset,
                  edition=args.edition, commit=common.source_commit(), torch=torch.__version__,
                  device=str(device), seed=args.seed,
                  reading_params_path=args.reading_params_path,
                  bottleneck_dim=bottleneck_of(args),
                  **used, seconds=round(time.time() - args.started, 1))

    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as f:
            json.dump(record, f, indent=1)
            f.write('\n')
    common.atomic_write(output + '.run.json', write)


def phases(args, progress):
    """Seconds of the command so far: importing (torch's and ours), setting up (the data, the
    model, the device, the plan), training (the steps and what the epochs' ends do) and after
    (the params written); where the parts of a short GPU stage go."""
    start, end = progress.start_time, progress.end_time
    if start is None or end is None or not args.started <= IMPORTED <= start <= end:
        return None
    return dict(imports=round(IMPORTED - args.started, 1), setup=round(start - IMPORTED, 1),
                training=round(end - start, 1), after=round(time.time() - end, 1))


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


def save_params(gpt, args, device, run, tconf, budget, stage):
    """The handout's torch.save(model.state_dict(), args.writing_params_path) at the end of
    training, written whole or not at all and never cut short by a first Ctrl-C (that would lose
    the finished run); the resumable checkpoint, nothing left to resume, removed; the run's
    record beside the params."""
    if distributed.rank() != 0:
        return
    path = args.writing_params_path
    with checkpoint.StopRequest():
        common.save_state_dict(gpt, path)
        if os.path.exists(tconf.resume_path):
            os.remove(tconf.resume_path)
    write_record(args, path, device, stage=stage, precision=run.precision, plan=run.plan.record(),
                 learning_rate=tconf.learning_rate, batch_size=tconf.batch_size,
                 weight_decay=tconf.weight_decay, decay_rule=tconf.decay_rule,
                 shuffle=tconf.shuffle, compile=tconf.compile or None,
                 pack_multiple=tconf.pack_multiple or None,
                 pack_groups=tconf.pack_groups if tconf.pack_multiple and tconf.pack_groups > 1
                 else None,
                 warmup_tokens=tconf.warmup_tokens,
                 final_tokens=run.schedule.final_tokens, decay_share=tconf.decay_share,
                 n_layer=inputs.layers_of(gpt.state_dict()),
                 time_budget_minutes=budget, time_budget_after=tconf.budget_after or None,
                 epochs_asked=tconf.max_epochs,
                 epochs_planned=run.schedule.max_epochs, epochs_trained=run.epochs_trained,
                 steps=run.step, tokens=run.tokens,
                 epoch_seconds=[round(t, 2) for t in getattr(run, 'epoch_seconds', [])] or None,
                 phases=phases(args, run.progress),
                 epoch_walls=[round(t, 3) for t in getattr(run, 'epoch_walls', [])] or None,
                 others_share=getattr(run, 'others_share', None) and round(run.others_share, 4))


def write_predictions(args, predictions, gold_lines, device, precision):
    """--outputs_path, one prediction a line (written whole or not at all), scored against
    inputs.read_evaluation's gold lines as utils.evaluate_places scores them, and its record;
    returns (total, correct)."""
    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as fout:
            for pred in predictions:
                fout.write(pred + '\n')
    common.atomic_write(args.outputs_path, write)
    total, correct = utils.score_places(gold_lines, predictions)
    write_record(args, args.outputs_path, device, precision=precision,
                 eval_corpus_path=args.eval_path, questions=len(predictions),
                 correct=int(correct) if total > 0 else None)
    return total, correct
