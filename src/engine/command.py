"""Engine (free to change): what run.py's commands need beyond the starter's code.

run.py is the starters' flow; it calls this module on its lines marked [engine]: the flags the
handout does not have and every check of the command line before any work; the device and the
seeds; the model's and each training stage's settings from the preset (presets.py), the flags
typed and the machine; a CPU preset's data; the batched greedy answers; and what a finished stage
writes (the params saved whole, the run's record). What it needs of the handout's code (the
datasets, the model, the configs) is handed to it."""
import argparse
import copy
import json
import math
import os
import random
import shutil
import sys
import time

import torch

from engine import checkpoint
from engine import common
from engine import cpu_load
from engine import cpu_paths
from engine import cpu_recipe
from engine import datafiles
from engine import devices
from engine import distributed
from engine import inputs
from engine import paths
from engine import presets
from engine.common import UsageError
from engine.datafiles import resolve
from engine.decode import greedy_complete
from engine.progress import LossNotFinite

IMPORTED = time.time()  # (the run's record splits its time: the imports, then the rest)

# --pack_multiple's default under --compile graphs, in pretraining only: packing made the recorded
# pretraining step faster and the finetuning one slower (docs/gpu.md)
GPU_PACK_MULTIPLE = 512
FUNCTIONS = ('pretrain', 'finetune', 'evaluate')


def process_start():
    """When this process started (wall clock): a --time_budget counts from there, imports
    included. From /proc where there is one, else when this module was imported."""
    try:
        with open('/proc/self/stat') as f:
            ticks = int(f.read().rsplit(')', 1)[1].split()[19])
        with open('/proc/stat') as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith('btime'))
        started = boot + ticks / os.sysconf('SC_CLK_TCK')
        return started if started <= IMPORTED else IMPORTED
    except (OSError, ValueError, IndexError, StopIteration):
        return IMPORTED


def add_engine_flags(argp):
    """run.py's flags beyond the handout's (unset, the handout's run, but for the GPU defaults:
    docs/students.md), and errors of its parser as one line (common.OneLineParser's)."""
    argp.prog = 'python src/run.py'
    argp.error = lambda message: common.OneLineParser.error(argp, message)
    for action in argp._actions:  # (the handout's help names its own edition's variants)
        if action.dest == 'variant':
            action.help = 'Choose ' + ', '.join(presets.VARIANTS[:-1]) + ' or ' + presets.VARIANTS[-1]
    extra = argp.add_argument_group('not in the handout (unset, the handout\'s computation; '
                                    'on one GPU the step is recorded and packed, with other '
                                    'dropout draws: --compile, --pack_multiple)')
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
    extra.add_argument('--seed', type=int, default=None,
                       help='seeds python\'s and torch\'s random numbers (default: as the '
                            'edition\'s starter does: python 0, torch 1 (2021-23) or 0 (2024-25); '
                            'a CPU preset its own)')
    extra.add_argument('--device', choices=('auto', 'cpu', 'cuda', 'mps'), default='auto',
                       help='auto: a CUDA GPU where there is one, else Apple\'s MPS for the vanilla '
                            'model (as the 2024-25 starter; untested on Apple hardware), else the CPU')
    extra.add_argument('--precision', choices=('auto', 'fp32', 'tf32', 'bf16', 'fp16'),
                       default='auto',
                       help='auto: the handout\'s fp32, except that training a CPU recipe '
                            '(cpu-20min, cpu-45min, cpu-rehearsal) on a CPU measures which is '
                            'faster on this machine (fp32, or bf16 autocast where the CPU has bf16 '
                            'arithmetic; and the attention path) and remembers it; training on a '
                            'GPU without bf16 (a T4, a V100) fp16; on other GPUs fp32. '
                            'tf32 (a GPU\'s): fp32 with the matrix products on tensor cores. '
                            'bf16: autocast, on a GPU with the flash attention kernel (the '
                            'others stalled there). fp16: autocast to float16 with loss scaling '
                            '(torch.amp.GradScaler), the same kernels; not with --compile graphs')
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
    extra.add_argument('--replace', action='store_true',
                       help='write the outputs even where another live run is writing them now '
                            '(the last to finish wins); without it such a run refuses')
    extra.add_argument('--eval_batch_size', type=int, default=256)
    extra.add_argument('--strict', action='store_true',
                       help='evaluate: stop at a question with characters outside the vocabulary '
                            'instead of dropping them')


def parsed(argp, argv=None, args=None):
    """run.py's command line (`args`, else parsed from argv): with the time the process
    started (a budget counts from it) and `typed`, the flags given on it (a preset's value
    yields to a flag typed, never to a default)."""
    if args is None:
        args = argp.parse_args(argv)
    quiet = argparse.ArgumentParser(add_help=False)
    for action in argp._actions:
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            action = copy.copy(action)
            action.default, action.required = argparse.SUPPRESS, False
            quiet._add_action(action)
    given, _ = quiet.parse_known_args(sys.argv[1:] if argv is None else argv)
    args.typed, args.started = set(vars(given)), process_start()
    return args


def check_args(args):
    """Every check of the command line, before any work: a UsageError for the first problem.
    Fills in args.edition and the inputs' resolved paths (args.corpus_path, args.finetune_path,
    args.eval_path; the handout's flags point there too, so its lines open them)."""
    if args.function not in FUNCTIONS:
        raise UsageError(f'argument function: invalid choice: {args.function!r} (choose from '
                         f'{", ".join(FUNCTIONS)})')
    if args.variant not in presets.VARIANTS:
        raise UsageError(f'argument variant: invalid choice: {args.variant!r} (choose from '
                         f'{", ".join(presets.VARIANTS)})')
    if args.bottleneck_dim <= 0 or args.bottleneck_dim > presets.BLOCK_SIZE:
        raise UsageError(f'--bottleneck_dim must be from 1 to the block size {presets.BLOCK_SIZE}, '
                         f'not {args.bottleneck_dim}')
    where = devices.pick_device(args.device, args.variant)
    on_cpu = where != 'cuda'  # (what follows is a CUDA GPU's: graphs, tf32, packing)
    one_process = int(os.environ.get('WORLD_SIZE', '1')) == 1
    # fp16's loss scaler reads back whether a gradient overflowed: no whole-step CUDA graph
    fp16 = devices.pick_precision(args.precision, where,
                                  training=args.function != 'evaluate') == 'fp16'
    if args.compile == 'graphs' and fp16:
        raise UsageError('--compile graphs cannot record a step with fp16\'s loss scaling (it '
                         'reads back whether a gradient overflowed): --compile none, or '
                         '--precision fp32/bf16')
    if args.compile == 'auto':  # what measured fastest on a GPU (docs/gpu.md)
        args.compile = 'graphs' if not on_cpu and one_process and not args.plain and not fp16 \
            else 'none'
    if args.precision == 'tf32' and on_cpu:
        raise UsageError('--precision tf32 is a CUDA GPU\'s arithmetic (fp32 matrix products on '
                         'NVIDIA tensor cores); on a CPU use fp32 or bf16')
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
    if args.seed is not None and not -2 ** 63 <= args.seed < 2 ** 64:  # torch.manual_seed's
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
          args.outputs_path + '.run.json' if not training and args.outputs_path else None)], reads,
        {'--writing_params_path': 'params', '--outputs_path': 'predictions'})

    if args.dropout is not None and not 0 <= args.dropout < 1:
        raise UsageError(f'--dropout must be in [0, 1), not {args.dropout}')
    args.edition, where = presets.edition_source(args.edition, args.variant)
    args.edition_from = where
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
    claim_outputs(args, training)
    # a pipe gives its text once: the checks and the handout's lines read a copy of what came
    args.corpus_path, args.finetune_path, args.eval_path = (
        inputs.read_once(path, _INPUT_COPIES)
        for path in (args.corpus_path, args.finetune_path, args.eval_path))
    # the handout's lines open the inputs by these flags: where each one was found
    args.pretrain_corpus_path, args.finetune_corpus_path = args.corpus_path, args.finetune_path
    args.eval_corpus_path = args.eval_path
    text = inputs.read_text(args.corpus_path, 'pretrain_corpus_path')
    vocab = inputs.check_corpus(args.corpus_path, corpus_text(args, text))
    if args.finetune_path is not None:  # (also a pretraining mix's questions)
        inputs.check_finetune(args.finetune_path, vocab)
    if args.plain and args.function == 'evaluate':  # the handout's loop: what it cannot take
        inputs.check_plain_questions(args.eval_path, vocab)




_CLAIMS = []  # the outputs this command writes, claimed for it until it ends (finish)
_INPUT_COPIES = []  # folders holding what a pipe gave (inputs.read_once), removed at the end


def claim_outputs(args, training):
    """Each output this command writes claimed for it (paths.Claim): one that another live run
    is writing is a UsageError naming it, unless --replace. Rank 0 writes, and claims, alone."""
    if int(os.environ.get('RANK', '0')) != 0 or args.replace:  # (before the group is joined)
        return
    for flag, path in (('--writing_params_path', args.writing_params_path if training else None),
                       ('--outputs_path', args.outputs_path if not training else None)):
        if path is None:
            continue
        try:
            _CLAIMS.append(paths.Claim(path).take())
        except paths.Busy as e:
            finish()
            raise UsageError(f'{flag} {path}: another run (process {e}) is writing it now; wait '
                             'for it to end, or pass --replace to write it all the same')


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


def device(args):
    """The device the command runs on (--device; auto: a CUDA GPU, else MPS for the vanilla
    model as the 2024-25 starter chooses, else the CPU; under torchrun this rank's GPU), with
    the run's random numbers seeded (seeds) and its settings said where they are not the
    handout's (settings_line)."""
    where = distributed.init(devices.pick_device(args.device, args.variant))
    python_seed, torch_seed = seeds(args)
    random.seed(python_seed)
    torch.manual_seed(torch_seed)
    line = settings_line(args, torch.device(where).type)
    if line is not None and distributed.rank() == 0:
        print(line, flush=True)
    return where


def say_edition(args):
    """Where nobody chose the command's edition, say which it follows, as its work starts (on
    stderr: stdout keeps the starter's printed lines; a bad input's error stays the one line)."""
    note = presets.unchosen_note(args.edition_from)
    if note is not None and distributed.rank() == 0:
        print(note, file=sys.stderr, flush=True)


# the flags beyond the handout's that change what a run computes or draws (the others change
# where or how fast it runs, or what it refuses)
CHANGING = ('max_epochs', 'batch_size', 'seed', 'dropout', 'precision', 'compile',
            'pack_multiple', 'pack_groups', 'time_budget', 'time_budget_after', 'plain')
# environment variables that change a run's numbers: torch's threads (a CPU sums in another
# order), and where precision 'auto' remembers what it measured
NUMBERS_ENV = ('OMP_NUM_THREADS', cpu_load.FIXED, 'CS224N_PATH_CACHE')


def settings_line(args, device_type, environ=os.environ):
    """One line of the settings that make this run other than the handout's run of its edition:
    the edition where an environment variable chose it, a preset that is not the handout's, the
    flags typed that change what it computes, a GPU's defaults (the same function, other random
    draws than a CPU's), the environment variables that change its numbers. None for the
    handout's run: its printed lines stay the starter's."""
    parts, typed = [], getattr(args, 'typed', set())
    if getattr(args, 'edition_from', None) == presets.EDITION_ENV:
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
        packs = pack_multiple(args, args.function)
        if packs and 'pack_multiple' not in typed:
            defaults.append(f'--pack_multiple {packs}')
        if defaults:
            parts.append(f'a GPU\'s defaults {" ".join(defaults)} (the same function, other '
                         'dropout draws than eager steps: --compile none --pack_multiple 0)')
        if 'precision' not in typed and \
                devices.pick_precision(args.precision, 'cuda', training=True) == 'fp16':
            parts.append('--precision fp16, the default on a GPU without bf16 (autocast with '
                         'loss scaling; --precision fp32 computes as the handout does)')
    parts += [f'${name}={environ[name]}' for name in NUMBERS_ENV if environ.get(name)]
    return 'settings: ' + '; '.join(parts) if parts else None


_WRITERS = []  # the command's tensorboard writer, closed when it ends (finish)


def writer(args, make):
    """The tensorboard writer of a training command, make(log_dir) (common.LazyWriter: its
    folder made at the first scalar), in the edition's folder (tensorboard_dir); None where
    there is nothing to log (evaluate, ranks but 0)."""
    if args.function == 'evaluate' or distributed.rank() != 0:
        return None
    _WRITERS.append(make(tensorboard_dir(args)))
    return _WRITERS[-1]


def finish():
    """The command's end, however it ends: every scalar logged so far written to the events
    file (also after an interrupt), its outputs' claims let go, its copies of piped inputs gone."""
    while _WRITERS:
        _WRITERS.pop().close()
    while _CLAIMS:
        _CLAIMS.pop().release()
    while _INPUT_COPIES:
        shutil.rmtree(_INPUT_COPIES.pop(), ignore_errors=True)


def corpus_text(args, text):
    """The pretraining corpus as the command's edition ships it (wiki.txt with or without its
    last newline: datafiles.as_edition); any other text as it is."""
    return datafiles.as_edition(text, args.edition)


def model_config(args, mconf):
    """run.py's GPTConfig with the preset's sizes and dropout (a CPU preset's are not the
    handout's), --dropout, and --plain's handout arithmetic (no fused kernel, every position,
    nn.Dropout's draws)."""
    for key, value in presets.model_values(args.preset).items():
        setattr(mconf, key, value)
    mconf.fast_attention = mconf.skip_padding = mconf.fast_dropout = not args.plain
    if args.dropout is not None:
        mconf.embd_pdrop = mconf.resid_pdrop = mconf.attn_pdrop = args.dropout
    return mconf


def stage_of(args, function):
    """The preset's name of a training command's stage."""
    if function == 'pretrain':
        return 'pretrain'
    return 'finetune_pretrained' if args.reading_params_path is not None else 'finetune_scratch'


def training(args, function, data, tconf, device, writer, pretrain_dataset=None,
             questions=None):
    """(The training set, its TrainerConfig) of a training command: `data` and `tconf` the
    handout's (run.py's); a CPU preset's data where it has its own (cpu_recipe.training_data:
    not the handout's; `questions`, the handout's NameDataset, reads its questions), and
    trainer_config's settings. `pretrain_dataset`: the corpus's dataset, in finetuning."""
    args.stage = stage_of(args, function)
    vocab = pretrain_dataset if pretrain_dataset is not None else data
    length = len(vocab)  # the handout's schedule counts the pretraining corpus's examples
    if presets.recipe(args.preset):
        data, length = cpu_recipe.training_data(args, args.stage, vocab, data, length, questions)
    tconf = trainer_config(args, args.stage, tconf, length, device, writer)
    say_edition(args)
    return data, tconf


def pack_multiple(args, stage):
    """--pack_multiple for `stage`: the flag's, else GPU_PACK_MULTIPLE where it measured faster
    (pretraining's recorded steps), else 0 (every position)."""
    if args.pack_multiple is not None:
        return args.pack_multiple
    recorded_pretraining = stage == 'pretrain' and args.compile == 'graphs' and not args.plain
    return GPU_PACK_MULTIPLE if recorded_pretraining else 0


def trainer_config(args, stage, tconf, schedule_length, device, writer=None):
    """The TrainerConfig a stage trains with: run.py's (the handout's values), with a CPU
    preset's own values in their place (its final_tokens counting `schedule_length` examples),
    the flags typed (--max_epochs, --batch_size, --num_workers, the learning rates) and how this
    machine runs it (device, precision, compile, packing, resume, time budget)."""
    values = dict(vars(tconf))
    if args.preset != 'handout':
        preset = presets.stage_values(args.preset, stage, args.edition)
        values['final_tokens'] = preset.pop('final_tokens_per_example') * schedule_length
        values.update(preset)
    for key in ('max_epochs', 'batch_size', 'num_workers'):
        if getattr(args, key, None) is not None:
            values[key] = getattr(args, key)
    if args.num_workers is not None:  # asked for: on a CPU too
        values['cpu_workers'] = args.num_workers
    flag = 'pretrain_lr' if stage == 'pretrain' else 'finetune_lr'
    if flag in args.typed:
        values['learning_rate'] = getattr(args, flag)
    budget = args.time_budget if args.time_budget is not None else presets.time_budget(args.preset, stage)
    values.update(
        writer=writer, device=device,
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
        budget_after=args.time_budget_after, smaller=getattr(args, 'smaller', None))
    tconf = type(tconf)(**values)
    if tconf.precision == 'bf16' and device.startswith('cuda') and distributed.rank() == 0:
        print('note: --precision bf16 on a GPU attends with the flash kernel: under bf16 the '
              'handout\'s pretraining stopped learning with cuDNN\'s and the memory-efficient '
              'one, and followed fp32 with flash over its 650 epochs (docs/gpu.md)',
              file=sys.stderr, flush=True)
    return tconf


def write_record(args, output, device, seconds_before=0.0, **used):
    """Beside `output` (the params or predictions written), `output`.run.json: the settings this
    command actually used (the preset's and the flags', and what the run chose or planned on the
    way), for whoever reads the output later. Not read back by any command. seconds_before:
    what the interrupted calls of a resumed run spent (its seconds are all its calls')."""
    record = dict(function=args.function, variant=args.variant, preset=args.preset,
                  edition=args.edition, commit=common.source_commit(), torch=torch.__version__,
                  device=str(device), seed=dict(zip(('python', 'torch'), seeds(args))),
                  reading_params_path=args.reading_params_path,
                  bottleneck_dim=bottleneck_of(args),
                  **used, seconds=round(seconds_before + time.time() - args.started, 1))

    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as f:
            json.dump(record, f, indent=1)
            f.write('\n')
    common.atomic_write(output + '.run.json', write)


def phases(args, progress, before=0.0):
    """Seconds of the command so far: importing (torch's and ours), setting up (the data, the
    model, the device, the plan), training (the steps and what the epochs' ends do; with
    `before`, the interrupted calls' training) and after (the params written); where the parts
    of a short GPU stage go."""
    start, end = progress.start_time, progress.end_time
    if start is None or end is None or not args.started <= IMPORTED <= start <= end:
        return None
    return dict(imports=round(IMPORTED - args.started, 1), setup=round(start - IMPORTED, 1),
                training=round(before + end - start, 1), after=round(time.time() - end, 1))


def predict(gpt, prompts, vocab, device, precision='fp32', batch_size=256):
    """The handout's greedy answers to inputs.read_questions' prompts, batched: one string per
    prompt ('' for a blank line)."""
    gpt.eval()
    mask = inputs.mask_of(vocab.stoi)
    mask_id = vocab.stoi[mask]
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
        predictions.append(completion.split(mask)[1])
    return predictions




def tensorboard_dir(args):
    """The handout's folder for the run's tensorboard logs (2024-25: without bottleneck_dim),
    named with the learning rates the stages train at (the flags typed, else the preset's)."""
    name = f'{args.tb_expt_name}_{args.variant}'
    if args.edition == '2021-23':
        name += f'_{args.bottleneck_dim}'
    rates = []
    for flag, stage in (('pretrain_lr', 'pretrain'), ('finetune_lr', stage_of(args, 'finetune'))):
        typed = flag in args.typed or args.preset == 'handout'
        rates.append(getattr(args, flag) if typed else
                     presets.stage_values(args.preset, stage, args.edition)['learning_rate'])
    return 'expt/%s/%s_pt_lr_%f_ft_lr_%f' % (args.function, name, *rates)


def save_params(args, run):
    """The handout's torch.save(model.state_dict(), args.writing_params_path) at the end of
    training, written whole or not at all and never cut short by a first Ctrl-C (that would lose
    the finished run); the resumable checkpoint, nothing left to resume, removed; the run's
    record beside the params. `run`: the run that trained it (loop.Run: its model is the one
    trained, which a CPU preset's plan may have chosen)."""
    if distributed.rank() != 0:
        return
    path, tconf, gpt = args.writing_params_path, run.config, run.model
    with checkpoint.StopRequest():
        common.save_state_dict(gpt, path)
        if os.path.exists(tconf.resume_path):
            os.remove(tconf.resume_path)
    budget = None if tconf.time_budget is None else tconf.time_budget / 60
    earlier = run.before  # (a resumed run: its interrupted calls, whose seconds count too)
    write_record(args, path, run.device, seconds_before=earlier['seconds'],
                 stage=args.stage, precision=run.precision,
                 plan=run.plan.record(),
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
                 epoch_seconds=[round(t, 2) for t in run.epoch_seconds] or None,
                 phases=phases(args, run.progress, earlier['training']),
                 calls=earlier['calls'] + 1 if earlier['calls'] else None,
                 epoch_walls=[round(t, 3) for t in run.epoch_walls] or None,
                 others_share=run.others_share and round(run.others_share, 4))


def evaluate(gpt, args, vocab, device):
    """The handout's evaluation, batched: its greedy answers (utils.sample's, engine.decode's
    batches) to the questions of --eval_corpus_path (each line checked, blank lines answered
    blank), one a line in --outputs_path written whole or not at all, scored as
    utils.evaluate_places scores a well-formed file; the handout's printed line; the record."""
    prompts, gold_lines = inputs.read_evaluation(args.eval_path, vocab.stoi, args.strict)
    say_edition(args)
    precision = devices.pick_precision(args.precision, device, training=False)
    predictions = predict(gpt, prompts, vocab, device, precision, args.eval_batch_size)

    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as fout:
            for pred in predictions:
                fout.write(pred + '\n')
    common.atomic_write(args.outputs_path, write)
    total, correct = inputs.score_places(gold_lines, predictions)
    write_record(args, args.outputs_path, device, precision=precision,
                 eval_corpus_path=inputs.shown(args.eval_path), questions=len(predictions),
                 correct=int(correct) if total > 0 else None)
    if total > 0:
        print(f'Correct: {correct} out of {total}: {correct/total*100}%')
    else:
        print(f'Predictions written to {args.outputs_path}; no targets provided')


# What ends a command with one line instead of a traceback (run.py's except clause)
STOPS = (UsageError, LossNotFinite, checkpoint.TrainingInterrupted)


def report(e):
    """One line for a STOPS exception; the exit status."""
    if isinstance(e, UsageError):
        print(f'error: {e}', file=sys.stderr)
        return 2
    if isinstance(e, LossNotFinite):
        print(f'error: {e}; nothing was written (a lower learning rate may help)', file=sys.stderr)
        return 1
    print(f'\ninterrupted: checkpoint written to {e}; continue with the same command plus '
          '--resume', file=sys.stderr)
    return 130
