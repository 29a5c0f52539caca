"""Engine (free to change): run.py's command line: the flags beyond the handout's, the arguments
declared, and every check of them before any work.

run.py parses its own flags (the starter's); add_engine_flags adds the engine's, parsed() turns
the result into Args (the parser's flags and what ADDED declares, nothing else), and check_args
refuses a bad input in one line before anything is read or written, claims the outputs and
returns the Command: the run decided once (its paths, edition, device, precision, compile mode,
stage), which every later line reads and none writes onto."""
import argparse
import copy
import dataclasses
import math
import os
import sys
import time
import types
from typing import Any, Mapping, Optional, Union

from engine import common
from engine import devices
from engine.command import cpu_recipe
from engine.command import inputs
from engine.command import paths
from engine import presets
from engine.command import stages
from engine.common import UsageError
from engine.datafiles import resolve

IMPORTED = time.time()  # (the run's record splits its time: the imports, then the rest)
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
                                    'on one GPU the step is recorded and its rows grouped, with '
                                    'other dropout draws: --compile, --row_groups)')
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
    extra.add_argument('--row_groups', type=int, default=None, metavar='G',
                       help='training: a batch\'s rows sorted by length into G groups, the '
                            'model\'s forward called on each with the columns its rows need '
                            '(the positions after a row\'s last target change no loss: about '
                            'half of a pretraining batch; the same loss); default: on a CPU '
                            'groups of at least 16 rows, at most 8; on a GPU %d in pretraining '
                            'under --compile graphs, else 1 (the batch whole)'
                            % presets.GPU['row_groups'])
    extra.add_argument('--plain', '--plain_attention', action='store_true', dest='plain',
                       help='compute as the handout does (same results, slower): written-out '
                            'attention instead of scaled_dot_product_attention, each training '
                            'batch in one call, and nn.Dropout\'s random draws')
    extra.add_argument('--dropout', type=float, default=None,
                       help='embd/resid/attn dropout (the handout\'s is 0.1)')
    extra.add_argument('--resume', action='store_true',
                       help='continue an interrupted pretrain/finetune from WRITING_PARAMS_PATH.ckpt')
    extra.add_argument('--checkpoint_every', type=int, default=10,
                       help='write the resumable checkpoint WRITING_PARAMS_PATH.ckpt every N epochs '
                            '(on a GPU at most once every %d s) and on Ctrl-C/SIGTERM; 0: only on '
                            'Ctrl-C/SIGTERM' % presets.GPU['checkpoint_seconds'])
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


def parsed(argp, argv=None, args=None, member=None):
    """run.py's command line as Args (`args`, else parsed from argv), unchecked, with ADDED's:
    the flags typed, when it started, and the team `member` it runs as (or None)."""
    if args is None:
        args = argp.parse_args(argv)
    quiet = argparse.ArgumentParser(add_help=False)
    for action in argp._actions:
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            action = copy.copy(action)
            action.default, action.required = argparse.SUPPRESS, False
            quiet._add_action(action)
    given, _ = quiet.parse_known_args(sys.argv[1:] if argv is None else argv)
    values = dict(vars(args), typed=frozenset(vars(given)), member=member, held=paths.Held(),
                  started=process_start() if member is None else member.started)
    return Args(declared(argp), **values)


# What parsed() adds to run.py's parsed flags: every attribute of `args` a later line reads is
# one of the parser's flags or one of these (Args refuses any other).
ADDED = dict(
    typed='the flags typed on the command line (a preset\'s value yields to these alone)',
    started='when the process started, or the command\'s turn in a team (training/turns.py; '
            'wall clock): a --time_budget counts from it',
    member='the team member the command runs as (training/turns.py), or None: alone',
    held='what the command holds while it runs (paths.Held), let go as it ends (records.finish)',
)


class Args(argparse.Namespace):
    """run.py's `args` after parsed(), before check_args: the parser's flags and ADDED, nothing
    else (setting any other name is an AttributeError)."""
    __slots__ = ('_declared',)

    def __init__(self, declared, **values):
        object.__setattr__(self, '_declared', frozenset(declared))
        super().__init__(**values)

    def __setattr__(self, name, value):
        if name not in self._declared:
            raise AttributeError(f'args has no attribute {name!r}: the engine\'s additions are '
                                 'declared in engine/command/flags.py (ADDED)')
        super().__setattr__(name, value)


def declared(argp):
    """The names an Args of `argp` may hold: its flags' and ADDED's."""
    return {a.dest for a in argp._actions if not isinstance(a, argparse._HelpAction)} | set(ADDED)


@dataclasses.dataclass(frozen=True)
class Command:
    """run.py's command once checked (check_args returns it): what every later line reads, and
    nothing writes onto. The parser's flags as given (`flags`, read as attributes too:
    args.variant, args.preset, a student's own flag), and, under the names below, what
    check_args decided from them, once. The handout's lines read the corpus paths and the
    edition by their flags' names: there they are where each input was found."""
    flags: Mapping[str, Any]
    typed: frozenset  # the flags typed (a preset's value yields to these alone)
    started: float  # wall clock: a --time_budget counts from it (parsed())
    member: Any  # the team member the command runs as (training/turns.py), or None
    held: Any  # its claims, copies and writers while it runs (paths.Held), let go at its end
    edition: str  # '2021-23' or '2024-25'
    edition_from: str  # --edition, the variant, $CS224N_EDITION, src/edition.txt or the default
    pretrain_corpus_path: str  # where it was found (a pipe: a copy of what came)
    finetune_corpus_path: Optional[str]  # finetune's, or a pretraining mix's questions; else None
    eval_corpus_path: Optional[str]  # evaluate's, else None
    device: str  # 'cpu', 'cuda' or 'mps': --device, 'auto' decided (devices.pick_device)
    precision: str  # 'fp32', 'tf32', 'bf16', 'fp16', or 'auto': the run's plan measures it
    compile: Union[bool, str]  # False (eager), 'default', 'reduce-overhead' or 'graphs'
    stage: Optional[str]  # pretrain, finetune_scratch or finetune_pretrained (presets.py); None
    slow_model: Optional[str]  # a CPU recipe's model for slow machines: 'trained' (the params
    # or checkpoint read are of its depth), 'may' (pretraining: the plan may choose it), or None

    def __getattr__(self, name):  # the parser's other flags
        flags = self.__dict__.get('flags')
        if flags is None or name.startswith('__') or name not in flags:
            raise AttributeError(f'the command has no attribute {name!r}')
        return flags[name]

    @classmethod
    def of(cls, args, **decided):
        """The Command of parsed Args with `decided`; a field not given: the flag as parsed."""
        values = {f.name: decided.pop(f.name, getattr(args, f.name, None))
                  for f in dataclasses.fields(cls) if f.name != 'flags'}
        if decided:
            raise TypeError(f'Command has no field {sorted(decided)[0]!r}')
        flags = {k: v for k, v in vars(args).items() if k not in ADDED}
        return cls(flags=types.MappingProxyType(flags), **values)


def check_args(args):
    """Every check of the command line (parsed()'s Args), before any work: a UsageError for the
    first problem. Returns the Command: everything derived from the flags decided here, once
    (the inputs' paths, the edition, the device, the precision, the compile mode, the stage,
    a CPU recipe's slow-machine model), and its outputs claimed."""
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
    on_cpu = where != 'cuda'  # (what follows is a CUDA GPU's: graphs, tf32)
    one_process = int(os.environ.get('WORLD_SIZE', '1')) == 1
    training = args.function != 'evaluate'
    # the one place the precision is picked: the settings line, the steps and the records read it
    precision = devices.pick_precision(args.precision, where, training,
                                       measure=presets.adapts(args.preset))
    # fp16's loss scaler reads back whether a gradient overflowed: no whole-step CUDA graph
    fp16 = precision == 'fp16'
    if args.compile == 'graphs' and fp16:
        raise UsageError('--compile graphs cannot record a step with fp16\'s loss scaling (it '
                         'reads back whether a gradient overflowed): --compile none, or '
                         '--precision fp32/bf16')
    # A model trained as a thread of run_all --one_process shares the GPU's generator with the
    # others: a recorded step reads its dropout seed and offset from that generator's state, so
    # the members' replays would draw from each other's (no member has a state of its own).
    member = args.member is not None
    if args.compile == 'graphs' and member and not on_cpu:
        raise UsageError('--compile graphs cannot record a step of run_all --one_process: the '
                         'models\' recordings would draw their dropout from one generator state, '
                         'not each its own (--compile none, or run_all without --one_process)')
    compile_mode = args.compile
    if compile_mode == 'auto':  # what measured fastest on a GPU (docs/gpu.md)
        compile_mode = 'graphs' if not on_cpu and one_process and not member and not args.plain \
            and not fp16 else 'none'
    if args.precision == 'fp16' and where == 'cpu':
        raise UsageError('--precision fp16 is for GPUs without bf16 (float16 autocast with loss '
                         'scaling); a CPU has no fast float16 arithmetic: use fp32, or bf16 '
                         'where the CPU has it')
    if args.precision == 'tf32' and on_cpu:
        raise UsageError('--precision tf32 is a CUDA GPU\'s arithmetic (fp32 matrix products on '
                         'NVIDIA tensor cores); on a CPU use fp32 or bf16')
    if compile_mode == 'graphs' and (on_cpu or not one_process):
        raise UsageError('--compile graphs records CUDA graphs: it needs a GPU and one process '
                         '(not torchrun)')
    compile_mode = False if compile_mode == 'none' else compile_mode
    if args.row_groups is not None and args.row_groups < 1:
        raise UsageError(f'--row_groups must be 1 or more, not {args.row_groups}')
    if args.row_groups and args.row_groups > 1 and args.plain:
        raise UsageError('--row_groups and --plain contradict each other: --plain computes each '
                         'batch in one call')
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
    corpus_path = resolve(args.pretrain_corpus_path, 'pretrain_corpus_path')
    needs = {'pretrain': ['writing_params_path'],
             'finetune': ['writing_params_path', 'finetune_corpus_path'],
             'evaluate': ['outputs_path', 'reading_params_path', 'eval_corpus_path']}
    for flag in needs[args.function]:
        if getattr(args, flag) is None:
            raise UsageError(f'{args.function} needs --{flag}')
    finetune_path = resolve(args.finetune_corpus_path, '--finetune_corpus_path') \
        if args.function == 'finetune' else None
    mix = presets.mix(args.preset)
    if args.function == 'pretrain' and mix is not None:  # the mix's questions
        finetune_path = resolve(args.finetune_corpus_path or mix['questions'],
                                     '--finetune_corpus_path')
    eval_path = resolve(args.eval_corpus_path, '--eval_corpus_path') \
        if args.function == 'evaluate' else None
    # no output may be an input, or another output (the resumable checkpoint beside the params)
    reads = [('pretrain_corpus_path', corpus_path),
             ('--finetune_corpus_path', finetune_path), ('--eval_corpus_path', eval_path),
             ('--reading_params_path',
              args.reading_params_path if args.function != 'pretrain' else None)]
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
    edition, edition_from = presets.edition_source(args.edition, args.variant)
    if args.variant not in presets.EDITIONS[edition]['variants']:
        raise UsageError(f'--edition {edition} has the variants '
                         f'{", ".join(presets.EDITIONS[edition]["variants"])}, not {args.variant}'
                         + ('' if edition_from == '--edition' else f' (from {edition_from})'))
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
    stage = stages.stage_of(args, args.function) if training else None
    command = Command.of(args, edition=edition, edition_from=edition_from,
                         pretrain_corpus_path=corpus_path, finetune_corpus_path=finetune_path,
                         eval_corpus_path=eval_path, device=where, precision=precision,
                         compile=compile_mode, stage=stage,
                         slow_model=cpu_recipe.slow_model(args))
    if training:
        inputs.check_log_folder(stages.tensorboard_dir(command))
    claim_outputs(command, training)
    # a pipe gives its text once: the checks and the handout's lines read a copy of what came
    corpus_path, finetune_path, eval_path = (
        inputs.read_once(path, args.held.copies)
        for path in (corpus_path, finetune_path, eval_path))
    command = dataclasses.replace(command, pretrain_corpus_path=corpus_path,
                                  finetune_corpus_path=finetune_path, eval_corpus_path=eval_path)
    text = inputs.read_text(corpus_path, 'pretrain_corpus_path')
    vocab = inputs.check_corpus(corpus_path, stages.corpus_text(command, text))
    if finetune_path is not None:  # (also a pretraining mix's questions)
        inputs.check_finetune(finetune_path, vocab)
    if args.plain and args.function == 'evaluate':  # the handout's loop: what it cannot take
        inputs.check_plain_questions(eval_path, vocab)
    return command


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
            args.held.claims.append(paths.Claim(path).take())
        except paths.Busy as e:
            args.held.release()
            raise UsageError(f'{flag} {path}: another run (process {e}) is writing it now; wait '
                             'for it to end, or pass --replace to write it all the same')
