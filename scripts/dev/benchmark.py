"""Plain (handout-equivalent) path vs this code's fast path, measured side by side in one run.

    python scripts/dev/benchmark.py                      # CPU: results/benchmarks-<machine kind>.md
    python scripts/dev/benchmark.py --device cuda       # e.g. results/benchmarks-nvidia-h100-80gb-hbm3.md
    python scripts/dev/benchmark.py --compile ...       # a column for the fast path under torch.compile
    python scripts/dev/benchmark.py --rounds 3 ...      # plain and fast take turns 3 times (medians)

Training: tokens/s as the handout counts them (batch x 127 per step, padding included), the
handout's model with its dropout of 0.1 and its batch sizes (--preset: another preset's model and
pretraining/finetuning batch sizes, e.g. the CPU recipe's).
  plain: fp32, the written-out attention math, full 127-column batches, nn.Dropout, a DataLoader
         with 4 workers created every epoch (its start-up is measured and spread over one epoch's
         steps), a loss .item() every step;
  fast:  trainer.Trainer as run.py configures it (batches built in process on a CPU, by 4
         DataLoader workers on a GPU, timed after the first step; trailing padding dropped,
         scaled_dot_product_attention (on a CPU with dropout the written-out math:
         CausalSelfAttention.cpu_math), on a CPU the precision and attention path precision 'auto' measures fastest
         on this machine, fp32 on a GPU (run.py's default there), fused AdamW on CUDA,
         fastpath.Dropout's cheaper draws on a CPU).
Evaluation: the 500 dev questions, the handout's one-question `utils.sample` loop on the plain
model vs decode.greedy_complete on the fast one (the same weights), with a check that the
predictions are identical.

Model FLOP utilisation (MFU): the FLOPs that training must do, over the time a step took, over the
device's peak for the path's precision (fp32 for plain, the fast path's own). The FLOPs are the
forward and backward matrix products of each example computed up to its last non-PAD target, the
least any path computes for the handout's loss (padding is not counted as work), counted by
torch.utils.flop_counter on the plain model. Peaks of known GPUs are built in (dense, no sparsity);
for other devices give --peak_tflops.
"""
import argparse
import math
import os
import re
import sys
import time

import torch
from torch.utils.data import DataLoader, Subset

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'src'))
from engine.machine import cpu_paths  # noqa: E402
import dataset  # noqa: E402
from engine import devices  # noqa: E402
import model  # noqa: E402
from engine import presets  # noqa: E402
from engine.training import optim  # noqa: E402
import trainer  # noqa: E402
import utils  # noqa: E402
from engine.datafiles import resolve  # noqa: E402
from engine.fast.decode import greedy_complete  # noqa: E402
from engine.devices import bf16_supported  # noqa: E402
from engine.fast.flops import mfu, needed_lengths, peaks_of, training_flops  # noqa: E402


def build(variant, vocab, fast, preset='handout'):
    conf = model.config_for(variant, vocab, presets.BLOCK_SIZE, 64, **presets.model_values(preset),
                            fast_attention=fast, fast_dropout=fast)
    return model.GPT(conf)


def sync(device):
    if device == 'cuda':
        torch.cuda.synchronize()


def epoch_after_epoch(loader):
    """The loader's batches, a new epoch whenever one ends: more steps than an epoch holds
    (wiki.txt's 2,937 lines are 23 batches of 128)."""
    while True:
        yield from loader


def plain_steps(gpt, data, batch, steps, device):
    """The handout's Trainer loop body, fp32, for `steps` steps; returns seconds per step."""
    gpt.to(device).train()
    opt = torch.optim.AdamW(optim.optimizer_groups(gpt, 0.1), lr=6e-4, betas=(0.9, 0.95))
    loader = DataLoader(data, batch_size=batch, shuffle=True, num_workers=0)
    it = epoch_after_epoch(loader)
    times = []
    for i in range(steps + 1):  # the first step warms up
        x, y = next(it)
        start = time.perf_counter()
        _, loss = gpt(x.to(device), y.to(device))
        gpt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(gpt.parameters(), 1.0)
        opt.step()
        loss.item()
        sync(device)
        if i:
            times.append(time.perf_counter() - start)
    return sum(times) / len(times)


def worker_startup(data, batch):
    """Seconds until the first batch of a new DataLoader with the handout's 4 workers."""
    start = time.perf_counter()
    next(iter(DataLoader(data, batch_size=batch, shuffle=True, num_workers=4)))
    return time.perf_counter() - start


def fast_steps(gpt, data, batch, steps, device, compile_model, path=None, precision='auto',
               row_groups=0):
    """trainer.Trainer on `steps` batches (after a warm-up run); returns seconds per step, the
    precision and the CPU attention path taken (cpu_paths.path_name's kernel: True, False, None).
    path: a CPU candidate (precision, attention kernel) to force; None: the default.
    precision, row_groups: run.py's --precision, --row_groups (0: the device's choice)."""
    # the warm-up run makes run.py's default choice: on a CPU, precision 'auto' measures the
    # candidates (and attention paths) and keeps the fastest; the timed run takes that choice
    precision = devices.pick_precision(precision, device, training=True)
    if path is not None:
        precision = path[0]
        cpu_paths.set_attention_path(gpt, path[1])
    # on a GPU, run.py's 4 DataLoader workers build the batches (their start-up, once per run,
    # is not timed: the clock runs from the end of the first step to the end of the last)
    conf = dict(max_epochs=1, batch_size=batch, learning_rate=6e-4, lr_decay=True,
                warmup_tokens=10240, final_tokens=1e9, device=device, precision=precision,
                compile=compile_model, log_every=1 if device == 'cpu' else 25,
                num_workers=0 if device == 'cpu' else 4, row_groups=row_groups)
    warm = trainer.TrainerConfig(**conf)
    trainer.Trainer(gpt, Subset(data, range(batch)), None, warm).train()
    conf['precision'] = precision = warm.precision
    n = min(len(data), batch * (steps + 1))
    if compile_model and compile_model != 'graphs':
        # the timed run's batches once beforehand (a trainer's batches follow torch's seed, the
        # same for both runs): every batch width is compiled before the clock runs, or the timed
        # steps would include a recompile for each width not met in the warm-up
        trainer.Trainer(gpt, Subset(data, range(n)), None, trainer.TrainerConfig(**conf)).train()
    steps = math.ceil(n / batch) - 1
    first, last = 0, steps  # the clock runs from the end of the first step to the end of the last
    if compile_model == 'graphs':
        # --compile graphs records each shape anew in every Trainer (its first batch eager, its
        # second recorded), and groups of rows (row_groups) a few widths a shape: the batches
        # twice, the second epoch timed (its steps replay the first's recordings)
        conf['max_epochs'] = 2
        first, last = steps, 2 * steps + 1
    timed = trainer.Trainer(gpt, Subset(data, range(n)), None, trainer.TrainerConfig(**conf))
    clock = StepClock(device, last, first)
    timed.run.callbacks.append(clock)
    timed.train()
    kernel = next((m.cpu_kernel for m in gpt.modules() if hasattr(m, 'cpu_kernel')), None)
    per_step = (clock.marks[-1] - clock.marks[0]) / (last - first)
    return per_step, precision, kernel if device == 'cpu' else None


class StepClock:
    """A trainer extra: the time at the end of step `first` and of step `last`, counted from 0
    over the whole run (the device waited for at both, nowhere between)."""

    def __init__(self, device, last, first=0):
        self.device, self.first, self.last, self.marks = device, first, last, []
        self.step = 0

    def on_step_end(self, trainer, epoch, it):
        if self.step in (self.first, self.last):
            sync(self.device)
            self.marks.append(time.perf_counter())
        self.step += 1


def against_candidates(variant, wiki, batch, args, default, rounds=3):
    """A table row: pretraining `variant` with each CPU candidate forced, the candidates taking
    turns for `rounds` rounds (a machine's pace drifts: on a 2-core VM one configuration once
    measured 14% apart in two runs of one benchmark), each one's median beside the
    candidate the default chose (`default`): the chosen one's speed over the fastest's."""
    candidates = cpu_paths.cpu_candidates(build(variant, wiki.vocab_size, True, args.preset))
    if len(candidates) == 1:  # nothing to choose: it is the default's
        return [variant, f'{cpu_paths.path_name(candidates[0])} only', cpu_paths.path_name(default),
                '1.00x (the only one)']
    seconds = {path: [] for path in candidates}
    for _ in range(rounds):
        for path in candidates:
            utils.set_seed(0)
            t, *_ = fast_steps(build(variant, wiki.vocab_size, True, args.preset), wiki, batch,
                               args.steps, 'cpu', False, path=path)
            seconds[path].append(t)
    median_of = {path: median(ts) for path, ts in seconds.items()}
    tokens = batch * (presets.BLOCK_SIZE - 1)
    return [variant, ', '.join(f'{cpu_paths.path_name(c)} {tokens / t:,.0f} tok/s'
                               for c, t in median_of.items()),
            cpu_paths.path_name(default), f'{min(median_of.values()) / median_of[default]:.2f}x']


def median(values):
    return sorted(values)[len(values) // 2]


def flops_per_example(variant, vocab, lengths, preset):
    """Mean FLOPs of training on one example (forward + backward) computed over `lengths`
    positions, counted once per distinct length on the plain fp32 model."""
    return training_flops(build(variant, vocab, False, preset), lengths)


def peak_tflops(device, given):
    """{'fp32': ..., 'bf16': ...} for the device, or {} when unknown (then no MFU column)."""
    if given:
        return dict(zip(('fp32', 'bf16'), given))
    return peaks_of(torch.cuda.get_device_name()) if device == 'cuda' else {}


def evaluation(plain_gpt, gpt, vocab, device, limit):
    """The handout's loop on plain_gpt, batched decoding on gpt (the same weights, fast paths)."""
    path = resolve('birth_dev.tsv', 'birth_dev.tsv')
    questions = [line.split('\t')[0] + dataset.MASK_CHAR
                 for line in open(path, encoding='utf-8')][:limit]
    prompts = [[vocab.stoi[c] for c in q] for q in questions]
    plain_gpt.to(device).eval()
    gpt.to(device).eval()

    def answer(ids):
        return ''.join(vocab.itos[int(i)] for i in ids).split(dataset.MASK_CHAR)[1]

    start = time.perf_counter()
    plain = [answer(utils.sample(plain_gpt, torch.tensor([p], device=device), 32, sample=False)[0])
             for p in prompts]
    sync(device)
    t_plain = time.perf_counter() - start
    start = time.perf_counter()
    fast = [answer(ids) for ids in greedy_complete(gpt, prompts, 32, stop_id=vocab.stoi[dataset.MASK_CHAR],
                                                   device=device)]
    sync(device)
    t_fast = time.perf_counter() - start
    return t_plain, t_fast, plain == fast, len(prompts)


def machine(device):
    if device == 'cuda':
        return f'{torch.cuda.get_device_name()}, torch {torch.__version__}'
    return (f'{cpu_paths.cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, CPU capability '
            f'{torch.backends.cpu.get_cpu_capability()}, bf16 arithmetic: {bf16_supported("cpu")}')


def machine_kind(device):
    """A file-name word for the kind of machine: the GPU's name, or the CPU's model and the
    arithmetic it offers (what decides which path is fastest), e.g. amd-epyc-avx2."""
    if device == 'cuda':
        name = torch.cuda.get_device_name()
    else:
        name = f'{cpu_paths.cpu_model()} {torch.backends.cpu.get_cpu_capability()}'
        name += ' bf16' if devices.cpu_has_bf16() and 'bf16' not in name.lower() else ''
    return re.sub(r'[^a-z0-9]+', '-', name.lower().replace('(r)', '').replace('(tm)', '')).strip('-')


def main():
    ap = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--device', default='cpu', choices=('cpu', 'cuda'))
    ap.add_argument('--steps', type=int, default=3,
                    help='timed steps per training measurement (the fast path\'s: at most one '
                         'epoch\'s, less its first)')
    ap.add_argument('--rounds', type=int, default=1,
                    help='plain and fast take turns this many times per row (medians)')
    ap.add_argument('--variants', nargs='+', default=list(model.VARIANTS), choices=list(model.VARIANTS))
    ap.add_argument('--eval_questions', type=int, default=500)
    ap.add_argument('--preset', choices=sorted(presets.PRESETS), default='handout',
                    help='the model and training batch sizes measured (default: the handout\'s)')
    ap.add_argument('--compile', nargs='?', const='default', default=False,
                    choices=('default', 'reduce-overhead', 'graphs'),
                    help='also measure the fast path under torch.compile (another column); '
                         'reduce-overhead: with CUDA graphs on a GPU; graphs (a GPU\'s): the '
                         'whole step recorded, nothing compiled (run.py --compile\'s modes)')
    ap.add_argument('--precision', choices=('auto', 'fp32', 'tf32', 'bf16', 'fp16'), default='auto',
                    help='the fast and compiled columns\' arithmetic (run.py --precision; the '
                         'plain column is the handout\'s fp32)')
    ap.add_argument('--row_groups', type=int, default=0, metavar='G',
                    help='also measure the fast path (and the compiled one) with each batch\'s '
                         'rows in G groups by length (run.py --row_groups G): more columns')
    ap.add_argument('--peak_tflops', type=float, nargs=2, metavar=('FP32', 'BF16'),
                    help='the device\'s dense peak TFLOP/s, for the MFU column (built in for '
                         'known GPUs)')
    ap.add_argument('--out', default=None,
                    help='the report (default results/benchmarks-<machine kind>[-<preset>].md, '
                         'e.g. benchmarks-amd-epyc-avx2.md)')
    args = ap.parse_args()
    if args.precision == 'tf32' and args.device == 'cpu':
        ap.error('--precision tf32 is a GPU\'s (fp32 matrix products on tensor cores)')
    if args.compile == 'graphs' and args.device == 'cpu':
        ap.error('--compile graphs records CUDA graphs: a GPU\'s (--device cuda)')
    if args.row_groups < 0:
        ap.error('--row_groups: a number of groups, 1 or more')
    if args.out is None:
        preset = '' if args.preset == 'handout' else f'-{args.preset}'
        args.out = os.path.join(REPO, 'results', f'benchmarks-{machine_kind(args.device)}{preset}.md')
    utils.set_seed(0)

    wiki = dataset.CharCorruptionDataset(open(resolve('wiki.txt', 'wiki.txt'), encoding='utf-8').read(),
                                         presets.BLOCK_SIZE)
    names = dataset.NameDataset(wiki, open(resolve('birth_places_train.tsv', 'tsv'), encoding='utf-8').read())
    rows = []
    peaks = peak_tflops(args.device, args.peak_tflops)
    lengths = {stage: needed_lengths(data) for stage, data in (('pretrain', wiki), ('finetune', names))}
    shares = {stage: sum(n) / (len(n) * (presets.BLOCK_SIZE - 1)) for stage, n in lengths.items()}
    batches = {stage: presets.stage_values(args.preset, key)['batch_size']
               for stage, key in (('pretrain', 'pretrain'), ('finetune', 'finetune_pretrained'))}
    against = []  # on a CPU: the default's pretraining speed beside every candidate's
    for stage, data, variants in (('pretrain', wiki, args.variants), ('finetune', names, ['vanilla'])):
        batch = batches[stage]
        startup = worker_startup(data, batch)
        per_epoch = math.ceil(len(data) / batch)
        for variant in variants:
            flops = batch * flops_per_example(variant, wiki.vocab_size, lengths[stage], args.preset)
            # the plain path's work: every example over all its columns
            work = batch * flops_per_example(variant, wiki.vocab_size,
                                             [presets.BLOCK_SIZE - 1], args.preset) / flops
            plains, fasts = [], []
            for _ in range(args.rounds):  # taking turns: a drift in the machine's pace hits both
                utils.set_seed(0)
                plains.append(plain_steps(build(variant, wiki.vocab_size, False, args.preset), data,
                                          batch, args.steps, args.device) + startup / per_epoch)
                utils.set_seed(0)
                t_fast, precision, kernel = fast_steps(build(variant, wiki.vocab_size, True,
                                                             args.preset),
                                                       data, batch, args.steps, args.device, False,
                                                       precision=args.precision)
                fasts.append(t_fast)
            t_plain, t_fast = median(plains), median(fasts)
            tokens = batch * (presets.BLOCK_SIZE - 1)
            row = [f'{stage} {variant}', f'{tokens / t_plain:,.0f} tok/s',
                   f'{tokens / t_fast:,.0f} tok/s ({cpu_paths.path_name((precision, kernel))})',
                   f'{t_plain / t_fast:.2f}x', f'{work:.2f}x']
            mfus = [mfu(flops, t_plain, 'fp32', peaks), mfu(flops, t_fast, precision, peaks)]
            for _, compile_model, row_groups in later_columns(args):
                if compile_model in ('default', 'reduce-overhead'):
                    import torch._dynamo
                    torch._dynamo.reset()  # each row compiles afresh, within dynamo's cache limits
                utils.set_seed(0)
                t, *_ = fast_steps(build(variant, wiki.vocab_size, True, args.preset), data, batch,
                                   args.steps, args.device, compile_model,
                                   precision=args.precision, row_groups=row_groups)
                row.append(f'{tokens / t:,.0f} tok/s: {t_plain / t:.2f}x plain, '
                           f'{t_fast / t:.2f}x fast')
                mfus.append(mfu(flops, t, precision, peaks))
            rows.append(row + mfus)
            print(rows[-1], flush=True)
            write_report(args, rows, against, peaks, shares, batches)
            if args.device == 'cpu' and stage == 'pretrain':
                against.append(against_candidates(variant, wiki, batch, args, (precision, kernel)))
                print(against[-1], flush=True)
                write_report(args, rows, against, peaks, shares, batches)
    utils.set_seed(0)
    gpt = build('vanilla', wiki.vocab_size, True, args.preset)
    plain_gpt = build('vanilla', wiki.vocab_size, False, args.preset)
    plain_gpt.load_state_dict(gpt.state_dict())
    t_plain, t_fast, same, n = evaluation(plain_gpt, gpt, wiki, args.device, args.eval_questions)
    rows.append([f'evaluate vanilla, {n} dev questions', f'{t_plain:.1f} s', f'{t_fast:.2f} s',
                 f'{t_plain / t_fast:.1f}x (predictions identical: {same})']
                + [''] * (len(rows[-1]) - 4))
    print(rows[-1], flush=True)

    write_report(args, rows, against, peaks, shares, batches, final=True)


def later_columns(args):
    """The columns after the fast one, (name, compile, row_groups) each: the fast path
    compiled (--compile), in --row_groups groups of rows, or both."""
    name = {'default': 'torch.compile', 'reduce-overhead': 'torch.compile reduce-overhead',
            'graphs': 'the step recorded (--compile graphs)'}.get(args.compile)
    columns = [(f'fast + {name}', args.compile, 0)] if args.compile else []
    if args.row_groups:
        grouped = f'rows in {args.row_groups} groups'
        columns.append((f'fast, {grouped}', False, args.row_groups))
        if args.compile:
            columns.append((f'fast + {name}, {grouped}', args.compile, args.row_groups))
    return columns


def write_report(args, rows, against, peaks, shares, batches, final=False):
    """The report as it stands, written to args.out whole (replacing the last): after every
    row, so a run stopped by a time limit still leaves the rows it measured."""
    later = [name for name, _, _ in later_columns(args)]
    columns = (['measurement', 'plain (handout)', 'fast (this code)', 'ratio', 'work ratio'] + later
               + ['MFU plain', 'MFU fast'] + [f'MFU {c}' for c in later])
    cmd = 'python scripts/dev/benchmark.py ' + ' '.join(sys.argv[1:])
    lines = ['# Benchmark: handout-equivalent path vs fast path', '',
             f'- machine: {machine(args.device)}', f'- command: `{cmd.strip()}`',
             f'- date: {time.strftime("%Y-%m-%d", time.gmtime())}',
             f'- model: preset `{args.preset}`, ' + ', '.join(
                 f'{k}={v}' for k, v in presets.model_values(args.preset).items())
             + f'; batch sizes: pretrain {batches["pretrain"]}, finetune {batches["finetune"]}',
             f'- training: {args.steps} timed steps per measurement after a warm-up, plain and '
             f'fast taking turns {args.rounds} time(s) per row (medians); plain includes the '
             'per-epoch start-up of 4 DataLoader workers, spread over one epoch\'s steps',
             '- positions the loss needs (up to the last non-PAD target of each row), as a share of '
             'the padded rows the plain path computes (the fast path computes them, and in its '
             'groups of rows a few more: results/grouped-steps.md): '
             + ', '.join(f'{k} {v:.0%}' for k, v in shares.items()),
             '- work ratio: the FLOPs of the plain path (every example over all 127 columns) over '
             'those of each example up to its last non-PAD target (the least any path computes for '
             'the loss): what skipping work alone can give a path computing at the plain path\'s '
             'FLOP/s; a larger speed-up needs faster arithmetic or fewer other costs',
             '- evaluation: randomly initialised model (no early stopping helps: every question runs '
             'all 32 steps unless it emits two ⁇)',
             '- MFU: FLOPs of the positions that can change the loss (forward + backward, counted by '
             'torch.utils.flop_counter), per second, over the dense peak of the path\'s precision: '
             + (', '.join(f'{k} {v:g} TFLOP/s' for k, v in peaks.items()) or
                'not known for this device (give --peak_tflops)'), '',
             '| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
    lines += ['| ' + ' | '.join(row) + ' |' for row in rows]
    if not final:
        lines += ['', '(unfinished: the rows measured so far)']
    if against:
        lines += ['', '## The default against every candidate (pretraining, this CPU)', '',
                  'Each way of training that computes the same function on this machine '
                  '(cpu_paths.cpu_candidates: fp32; bf16 autocast where the CPU has bf16 arithmetic; '
                  'without attention dropout, the fused attention kernel or the written-out math), '
                  'forced and timed like the fast column, taking turns for 3 rounds (medians), '
                  'and the one the default (`--precision auto`, which measures them itself) chose. '
                  'Target: the chosen one at 0.95x the fastest or better.', '',
                  '| variant | candidates (median of 3 rounds) | default chose | chosen / fastest |',
                  '|---|---|---|---|']
        lines += ['| ' + ' | '.join(row) + ' |' for row in against]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines) + '\n')
    os.replace(tmp, args.out)
    if final:
        print('\n'.join(lines))


if __name__ == '__main__':
    main()
