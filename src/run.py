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
import atexit
import os
import sys
import tempfile
import time

START = time.time()  # a --time_budget counts from here

import torch
from torch.utils.data import ConcatDataset

import dataset
import model
import presets
import trainer
import utils
from datafiles import resolve
from decode import greedy_complete
from utils import OneLineParser, UsageError

FUNCTIONS = ('pretrain', 'finetune', 'evaluate')
VARIANTS = ('vanilla', 'synthesizer', 'perceiver', 'rope')


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
                            'variant\'s, else $%s, else %s' % (presets.EDITION_ENV,
                                                               presets.DEFAULT_EDITION))
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
                            'attention path) and remembers it; on a GPU bf16 where it has it; '
                            'evaluation is fp32 unless bf16 is asked for')
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


RANK = 0  # this process's rank under torchrun (0 otherwise): only rank 0 writes files and logs


def pick_device(name):
    if name == 'auto':
        name = 'cuda' if torch.cuda.is_available() else 'cpu'
    if name == 'cuda' and not torch.cuda.is_available():
        raise UsageError('--device cuda: no CUDA device is available')
    return name


def init_distributed(device):
    """Under torchrun (WORLD_SIZE > 1): join the process group, NCCL on GPUs, gloo on CPUs.
    Returns the device this rank uses."""
    global RANK
    if int(os.environ.get('WORLD_SIZE', '1')) <= 1:
        return device
    import torch.distributed as dist
    # Destroying the group at exit, while the interpreter still runs, joins gloo's worker threads.
    # Left running, a worker can free the tensor of the last all_reduce once the shutdown has
    # begun; that takes the GIL, a thread asking for it then is ended inside the destructor, and
    # the rank aborts ('terminate called without an active exception': 3 runs in 40 of a 1-epoch
    # test on 2 CPU cores with 4 busy loops beside it; 0 in 80 since). For destroying to end the
    # threads, nothing else may hold the group: torch.distributed.nn (torch 2.13) binds it as a
    # default argument of its functions when first imported (DDP imports it), so it is imported
    # before the group exists. tests/test_reliability.py checks that no gloo thread is left.
    import torch.distributed.nn  # noqa: F401
    dist.init_process_group('nccl' if device == 'cuda' else 'gloo')
    atexit.register(dist.destroy_process_group)
    RANK = dist.get_rank()
    if device == 'cuda':
        local_rank = int(os.environ.get('LOCAL_RANK', '0'))
        torch.cuda.set_device(local_rank)
        device = f'cuda:{local_rank}'
    return device


def bf16_supported(device):
    if device == 'cuda':
        return torch.cuda.is_bf16_supported()
    return trainer.cpu_has_bf16()


def pick_precision(name, device, training):
    """auto: in training on a CPU the trainer measures which is faster here (and which attention
    path: Trainer._choose_paths); on a GPU bf16 where it has it; evaluation fp32."""
    if name == 'auto':
        if training and torch.device(device).type == 'cpu':
            return 'auto'
        return 'bf16' if training and bf16_supported(device) else 'fp32'
    return name


def path_cache():
    """The file that remembers precision 'auto''s measured choices, per machine."""
    root = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.environ.get('CS224N_PATH_CACHE') or os.path.join(root, 'cs224n-mingpt', 'cpu_paths.json')


def check_writable(path, flag):
    """Fail before hours of training, not after, when an output cannot be written. The outputs
    are written as a temporary file in the same folder, renamed over the old one (atomic_write),
    so that is what is tried here; os.access alone says yes to root on read-only mounts."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f'{flag} {path} is a directory')
    if not os.path.isdir(folder):
        why = 'is not a directory' if os.path.exists(folder) else 'does not exist'
        raise UsageError(f'{flag} {path}: {folder} {why}')
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix='.write-test-')
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise UsageError(f'{flag} {path}: directory {folder} is not writable ({e.strerror})')


def require(args, *flags):
    for flag in flags:
        if getattr(args, flag) is None:
            raise UsageError(f'{args.function} needs --{flag}')


def describe_params(state):
    if 'down_block.C' in state:
        return f'a perceiver model with bottleneck_dim {state["down_block.C"].shape[1]}'
    if any(k.endswith('attn.w2') for k in state):
        return 'a synthesizer model'
    if any(k.endswith('attn.rope_cache') for k in state):
        return 'a rope model'
    return 'a vanilla model'


def describe_model(args):
    if args.variant == 'perceiver':
        return f'a perceiver model with bottleneck_dim {args.bottleneck_dim}'
    return f'a {args.variant} model'


def load_params(gpt, path, args, device):
    """Load a params file into gpt. weights_only: a params file is data, never code to run;
    map_location: params trained on a GPU load on a machine without one."""
    if os.path.isdir(path):
        raise UsageError(f'--reading_params_path {path} is a directory, not a params file')
    if not os.path.isfile(path):
        raise UsageError(f'--reading_params_path {path}: file not found')
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # not a torch file, truncated, or not a plain state_dict
        raise UsageError(f'--reading_params_path {path}: not a readable params file '
                         f'({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ""})')
    if isinstance(state, dict) and {'model', 'optimizer', 'epoch'} <= set(state):
        raise UsageError(f'--reading_params_path {path} is a --resume checkpoint, not a params '
                         'file: continue that run with --resume, or read its finished params')
    if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
        raise UsageError(f'--reading_params_path {path}: not a state_dict of tensors')
    expected = gpt.state_dict()
    mismatch = set(state) != set(expected) or any(
        tuple(state[k].shape) != tuple(v.shape) for k, v in expected.items())
    if mismatch:
        found, wanted = describe_params(state), describe_model(args)
        if found == wanted:  # same variant, other sizes (vocabulary, block size, widths)
            found += (' of other sizes (its keys or shapes differ: another corpus, or trained '
                      'with another --preset?)')
        raise UsageError(f'--reading_params_path {path}: params are {found}, you asked for {wanted}')
    gpt.load_state_dict(state)


def build_model(args, vocab_size, block_size, device):
    mconf = model.GPTConfig(vocab_size, block_size, **presets.model_values(args.preset),
                            fast_attention=not args.plain, skip_padding=not args.plain,
                            fast_dropout=not args.plain)
    if args.dropout is not None:
        mconf.embd_pdrop = mconf.resid_pdrop = mconf.attn_pdrop = args.dropout
    if args.variant == 'synthesizer':
        mconf.synthesizer = True
    elif args.variant == 'perceiver':
        mconf.perceiver = True
        mconf.bottleneck_dim = args.bottleneck_dim
    elif args.variant == 'rope':
        mconf.rope = True
    return model.GPT(mconf).to(device)


def train(gpt, data, args, stage, pretrain_len, lr, device, writer, path):
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
        precision=pick_precision(args.precision, device, training=True), compile=args.compile,
        path_cache=path_cache(),
        log_every=1 if device == 'cpu' else 25,
        resume_path=path + '.ckpt', resume=args.resume, checkpoint_every=args.checkpoint_every,
        time_budget=None if budget is None else budget * 60, start_time=START,
        budget_may_grow=args.time_budget is None or args.time_budget_share)
    trainer.Trainer(gpt, data, None, tconf).train()
    if RANK == 0:
        # training is over: a first Ctrl-C/SIGTERM now waits until the params are on disk
        # (killing the process here would lose the whole finished run)
        with trainer.StopRequest():
            utils.save_state_dict(gpt, path)
            if os.path.exists(tconf.resume_path):  # finished: nothing left to resume
                os.remove(tconf.resume_path)


def read_corpus(corpus_path, edition=None):
    """The pretraining corpus's CharCorruptionDataset (which also gives every stage its
    vocabulary); a file that is not UTF-8, is empty or holds a reserved character is an error
    naming it."""
    text = read_text(corpus_path, 'pretrain_corpus_path')
    if not text.strip():
        raise UsageError(f'pretrain_corpus_path {corpus_path} is empty')
    try:
        return dataset.CharCorruptionDataset(text, presets.BLOCK_SIZE, edition)
    except UsageError as e:  # the reserved characters: say which file, and which line
        line = next((f' line {i}' for i, s in enumerate(text.split('\n'), 1)
                     if dataset.MASK_CHAR in s or dataset.PAD_CHAR in s), '')
        raise UsageError(f'pretrain_corpus_path {corpus_path}{line}: {e}')


def read_text(path, flag, lines=False):
    """The text of the file given by `flag` (lines=True: its lines, line ends kept as they are);
    a file that is not UTF-8 is an error naming it."""
    try:
        with open(path, encoding='utf-8', newline='' if lines else None) as f:
            return list(f) if lines else f.read()
    except UnicodeDecodeError as e:
        raise UsageError(f'{flag} {path}: not UTF-8 text ({e.reason} at byte {e.start})')


def read_questions(path, stoi, strict):
    """The handout's prompts: each line's text before the tab (for an input file without gold
    places that keeps the line's '\\n', which the handout feeds to the model too), + ⁇.

    Checked before any time is spent on the model, so a bad file clobbers no old predictions:
    every non-blank line is `question<TAB>place` or (an input file without gold places) every one
    is a bare question. CRLF line ends read as LF. A blank line has no question: its entry is
    None and it gets an empty prediction, so the predictions file still has one line per input
    line. Characters outside the pretraining vocabulary are dropped with a warning naming the
    line (the handout would stop with a KeyError), or are an error with `strict`."""
    lines = read_text(path, '--eval_corpus_path', lines=True)
    if not any(line.strip() for line in lines):
        raise UsageError(f'--eval_corpus_path {path} has no questions (the file is empty)')
    prompts = []
    gold = None  # whether the file's lines have a place column: the first non-blank line says
    for lineno, line in enumerate(lines, 1):
        line = line.replace('\r\n', '\n')
        if not line.strip():
            prompts.append(None)
            continue
        tabs = line.count('\t')
        if tabs > 1:
            raise UsageError(f'--eval_corpus_path {path} line {lineno}: expected '
                             f'"question<TAB>place" or a bare question, found {tabs} tabs')
        if gold is None:
            gold, first = tabs == 1, lineno
        elif gold != (tabs == 1):
            raise UsageError(f'--eval_corpus_path {path} line {lineno}: '
                             + ('no tab, but line {} has "question<TAB>place"' if gold else
                                'has a tab, but line {} is a bare question').format(first))
        question = line.split('\t')[0] + dataset.MASK_CHAR
        unknown = sorted(set(question) - set(stoi))
        if unknown:
            if strict:
                raise UsageError(f'--eval_corpus_path {path} line {lineno}: character '
                                 f'{unknown[0]!r} is not in the pretraining vocabulary')
            print(f'warning: {path} line {lineno}: dropped characters outside the '
                  f'vocabulary: {"".join(unknown)!r}', file=sys.stderr)
        prompts.append([stoi[c] for c in question if c in stoi])
    return prompts


def evaluate(gpt, args, corpus, prompts, vocab, device):
    """Greedy answers to read_questions' prompts, written to --outputs_path (one per line)."""
    gpt.eval()
    precision = pick_precision(args.precision, device, training=False)
    autocast = torch.autocast(torch.device(device).type, dtype=torch.bfloat16,
                              enabled=precision == 'bf16')
    mask_id = vocab.stoi[dataset.MASK_CHAR]
    questions = [p for p in prompts if p is not None]
    completions = iter(greedy_complete(gpt, questions, 32, stop_id=mask_id, stop_count=2,
                                       batch_size=args.eval_batch_size, device=device,
                                       autocast=autocast))
    predictions = []
    for prompt in prompts:
        if prompt is None:  # a blank line: nothing asked, nothing predicted
            predictions.append('')
            continue
        completion = ''.join([vocab.itos[int(i)] for i in next(completions)])
        predictions.append(completion.split(dataset.MASK_CHAR)[1])

    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as fout:
            for pred in predictions:
                fout.write(pred + '\n')
    utils.atomic_write(args.outputs_path, write)
    total, correct = utils.evaluate_places(corpus, predictions)
    if total > 0:
        print('Correct: {} out of {}: {}%'.format(correct, total, correct / total * 100))
    else:
        print('Predictions written to {}; no targets provided'.format(args.outputs_path))


class LazyWriter:
    """A SummaryWriter made at the first scalar logged: a run stopped before training (a time
    budget too small for one epoch) leaves no log folder behind."""

    def __init__(self, log_dir):
        self.log_dir, self.writer = log_dir, None

    def add_scalar(self, *args):
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter  # a slow import
            self.writer = SummaryWriter(log_dir=self.log_dir)
        self.writer.add_scalar(*args)

    def close(self):
        if self.writer is not None:
            self.writer.close()


def tensorboard_dir(args):
    """The handout's folder for the run's tensorboard logs (2024-25: without bottleneck_dim)."""
    name = f'{args.tb_expt_name}_{args.variant}'
    if args.edition == '2021-23':
        name += f'_{args.bottleneck_dim}'
    return 'expt/%s/%s_pt_lr_%f_ft_lr_%f' % (
        args.function, name,
        args.pretrain_lr if args.pretrain_lr is not None else presets.HANDOUT['pretrain']['learning_rate'],
        args.finetune_lr if args.finetune_lr is not None else presets.HANDOUT['finetune_scratch']['learning_rate'])


def run(args):
    # check everything the run will need before spending any time on it
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
    corpus_path = resolve(args.pretrain_corpus_path, 'pretrain_corpus_path')
    if args.function == 'pretrain':
        require(args, 'writing_params_path')
    elif args.function == 'finetune':
        require(args, 'writing_params_path', 'finetune_corpus_path')
    else:
        require(args, 'outputs_path', 'reading_params_path', 'eval_corpus_path')
    for flag in ('writing_params_path', 'outputs_path'):
        if getattr(args, flag) is not None:
            check_writable(getattr(args, flag), '--' + flag)
    finetune_path = resolve(args.finetune_corpus_path, '--finetune_corpus_path') \
        if args.function == 'finetune' else None
    eval_path = resolve(args.eval_corpus_path, '--eval_corpus_path') \
        if args.function == 'evaluate' else None

    if args.dropout is not None and not 0 <= args.dropout < 1:
        raise UsageError(f'--dropout must be in [0, 1), not {args.dropout}')
    explicit = args.edition is not None
    args.edition = presets.edition(args.edition, args.variant)
    if args.variant not in presets.EDITIONS[args.edition]['variants']:
        raise UsageError(f'--edition {args.edition} has the variants '
                         f'{", ".join(presets.EDITIONS[args.edition]["variants"])}, not {args.variant}'
                         + ('' if explicit else f' (from {presets.EDITION_ENV})'))
    if args.time_budget is not None and args.function == 'evaluate':
        raise UsageError('--time_budget is for pretrain and finetune')
    if args.time_budget is not None and not args.time_budget > 0:
        raise UsageError(f'--time_budget must be a positive number of minutes, not {args.time_budget:g}')
    if args.resume and args.function == 'evaluate':
        raise UsageError('--resume is for pretrain and finetune')
    if args.resume and not os.path.isfile(args.writing_params_path + '.ckpt'):
        raise UsageError(f'--resume: no checkpoint {args.writing_params_path}.ckpt to resume from '
                         '(it is written every --checkpoint_every epochs and on Ctrl-C/SIGTERM)')
    device = init_distributed(pick_device(args.device))
    utils.set_seed(args.seed)

    pretrain_dataset = read_corpus(corpus_path, args.edition)

    # read and check the other inputs before building anything (none of this draws random numbers,
    # so the model's initialisation is the handout's)
    if args.function == 'finetune':
        tsv = read_text(finetune_path, '--finetune_corpus_path')
        try:
            finetune_dataset = dataset.NameDataset(pretrain_dataset, tsv)
        except UsageError as e:
            raise UsageError(f'--finetune_corpus_path {finetune_path}: {e}')
        if len(finetune_dataset) == 0:
            raise UsageError(f'--finetune_corpus_path {finetune_path} has no examples')
        stage = 'finetune_pretrained' if args.reading_params_path is not None else 'finetune_scratch'
        lead = presets.rehearsal_lead(args.preset)
        if lead is not None and stage == 'finetune_pretrained':
            finetune_dataset = ConcatDataset([finetune_dataset,
                                              dataset.LeadInDataset(pretrain_dataset, lead)])
    elif args.function == 'evaluate':
        prompts = read_questions(eval_path, pretrain_dataset.stoi, args.strict)

    gpt = build_model(args, pretrain_dataset.vocab_size, pretrain_dataset.block_size, device)
    if args.reading_params_path is not None and args.function != 'pretrain':
        load_params(gpt, args.reading_params_path, args, device)

    writer = None if RANK != 0 else LazyWriter(tensorboard_dir(args))
    try:
        if args.function == 'pretrain':
            train(gpt, pretrain_dataset, args, 'pretrain', len(pretrain_dataset), args.pretrain_lr,
                  device, writer, args.writing_params_path)
        elif args.function == 'finetune':
            train(gpt, finetune_dataset, args, stage, len(pretrain_dataset), args.finetune_lr,
                  device, writer, args.writing_params_path)
        elif RANK == 0:
            evaluate(gpt, args, eval_path, prompts, pretrain_dataset, device)
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
    except trainer.TrainingInterrupted as e:
        print(f'\ninterrupted: checkpoint written to {e}; continue with the same command '
              'plus --resume', file=sys.stderr)
        sys.exit(130)


if __name__ == '__main__':
    main()
