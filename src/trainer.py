"""
Simple training loop; Boilerplate that could apply to any arbitrary neural network,
so nothing in this file really has anything to do with GPT specifically.

The optimisation is the handout's step for step (AdamW, grad clipping, the token-counted warmup
and cosine LR schedule, the same batches per epoch). What differs is only how fast each step runs:
- batches are drawn in-process (or by workers started once per run, not once per epoch; the
  same batches either way: each carries the seed of its examples' random draws);
- trailing columns that are padding in every row of a batch are dropped before the forward pass.
  This is exact: the model is causal, so no earlier position sees them, and their targets are
  PAD, which the loss ignores. The LR schedule still counts the full block of tokens per row, as
  the handout does;
- optional bf16 autocast, fused AdamW and torch.compile on a GPU (compile on a CPU too);
- loss values are read back from the device in groups, not after every step.
Beyond the handout: a resumable checkpoint (every N epochs and on Ctrl-C/SIGTERM),
DistributedDataParallel under torchrun, both reproducing the uninterrupted one-process run, and a
time budget (the number of epochs that fit, measured on this machine; see Trainer._plan).
"""
import json
import math
import os
import platform
import random
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Sampler
from tqdm import tqdm

from utils import UsageError, atomic_write, save_state_dict


class TrainerConfig:
    # optimization parameters
    max_epochs = 10
    batch_size = 64
    learning_rate = 3e-4
    betas = (0.9, 0.95)
    grad_norm_clip = 1.0
    weight_decay = 0.1  # only applied on matmul weights
    # learning rate decay params: linear warmup followed by cosine decay to 10% of original
    lr_decay = False
    warmup_tokens = 375e6  # these default values are for GPT-1, but for our purposes they are overwritten by run.py
    final_tokens = 260e9  # (at what point we reach 10% of original LR)
    # checkpoint settings
    ckpt_path = None
    num_workers = 0  # for DataLoader (worker processes on a GPU)
    cpu_workers = 0  # worker processes on a CPU too (they take cores from the model: off unless asked)
    writer = None
    # Not in the handout: how the steps are computed, not what they compute.
    device = 'cpu'  # 'cpu', 'cuda' or a torch.device
    precision = 'fp32'  # 'fp32', 'bf16' (autocast), or 'auto': on a CPU the faster, measured
    path_cache = None  # where 'auto' remembers its measured choices (a JSON file), or None
    compile = False  # torch.compile the model
    pad_multiple = 8  # trimmed lengths are rounded up to this (fewer shapes for compile/kernels)
    log_every = 1  # read losses back every N steps (a GPU sync); tensorboard still gets every step
    resume_path = None  # where the resumable checkpoint (model, optimizer, schedule, RNG) goes
    resume = False  # continue from resume_path
    checkpoint_every = 0  # write resume_path every N epochs (0: only on Ctrl-C / SIGTERM)
    time_budget = None  # seconds: train as many epochs (up to max_epochs) as end within it
    start_time = None  # when the budget's clock started (time.time()); None: when train() starts
    budget_may_grow = False  # a budget too small for one epoch trains one (a preset's), not an error (a flag's)

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)


def lr_multiplier(tokens, config):
    """The handout's schedule: linear warmup over warmup_tokens, then cosine down to a floor of
    10% at final_tokens. `tokens` counts every target position seen so far, padding included."""
    if tokens < config.warmup_tokens:
        return float(tokens) / float(max(1, config.warmup_tokens))
    progress = float(tokens - config.warmup_tokens) / float(max(1, config.final_tokens - config.warmup_tokens))
    return max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))


def optimizer_groups(model, weight_decay):
    """Weight decay on the matmul weights (Linear weights, the synthesizer's w2); none on biases,
    LayerNorm weights, embeddings, the position table or the perceiver's basis C."""
    decay, no_decay = [], []
    for module_name, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            matmul = (isinstance(module, torch.nn.Linear) and name == 'weight') or name == 'w2'
            (decay if matmul else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def trim_padding(x, y, multiple=1):
    """Drop the trailing columns whose targets are PAD (0) in every row. (Exact for all three
    variants: the model is causal and ignores PAD targets; the perceiver's down projection then
    uses only as many bottleneck slots as there are positions, see model.DownProjectBlock.)"""
    used = (y != 0).any(dim=0).nonzero()
    keep = int(used[-1]) + 1 if len(used) else 1
    keep = min(x.size(1), -(-keep // multiple) * multiple)
    return x[:, :keep].contiguous(), y[:, :keep].contiguous()


def batch_indices(n, batch_size, generator):
    """One epoch's batches, (dataset indices, seed) each: a fresh shuffle cut into batch_size
    pieces, and for each a seed of its examples' random draws (CharCorruptionDataset draws its
    corruptions from Python's `random`). All from `generator`: a batch is the same whichever
    process builds it (this one, or a DataLoader worker), and a resumed epoch draws the same."""
    order = torch.randperm(n, generator=generator).tolist()
    pieces = [order[i:i + batch_size] for i in range(0, n, batch_size)]
    seeds = torch.randint(2 ** 62, (len(pieces),), generator=generator).tolist()
    return list(zip(pieces, seeds))


def collate(dataset, indices, seed=None):
    """The examples at `indices`, stacked: (x, y). With `seed`, their random draws come from
    random.seed(seed), and the caller's `random` is left as it was."""
    if seed is None:
        xs, ys = zip(*(dataset[j] for j in indices))
        return torch.stack(xs), torch.stack(ys)
    state = random.getstate()
    random.seed(seed)
    try:
        return collate(dataset, indices)
    finally:
        random.setstate(state)


def epochs_that_fit(seconds, epoch_seconds):
    """Whole epochs of `epoch_seconds` within `seconds`, 5% kept for epoch ends, saves, noise."""
    return int(0.95 * seconds // epoch_seconds)


# ---- precision 'auto' on a CPU: the machine's measured choice, remembered --------------------------

def cpu_has_bf16():
    """Whether this CPU has bf16 arithmetic (AVX-512-BF16 or AMX): bf16 is a candidate there."""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def attention_paths(model):
    """The CPU attention paths `model` can train through (model.GPT.cpu_attention_paths), or
    [None] for a model without a choice."""
    return model.cpu_attention_paths() if hasattr(model, 'cpu_attention_paths') else [None]


def cpu_candidates(model):
    """The ways of training `model` on this CPU that compute the same function, as (precision,
    attention kernel) pairs: fp32, and bf16 autocast where the CPU has bf16 arithmetic; for
    attention without dropout, the fused kernel (True) or the written-out math (False)."""
    precisions = ['fp32', 'bf16'] if cpu_has_bf16() else ['fp32']
    return [(p, k) for p in precisions for k in attention_paths(model)]


def cpu_model():
    """The CPU's model name, as /proc/cpuinfo gives it (else platform's)."""
    try:
        with open('/proc/cpuinfo') as f:
            return next(line.split(':', 1)[1].strip() for line in f if line.startswith('model name'))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def path_cache_key(model, batch_size, example_length):
    """What a measured choice holds for: this machine (CPU model, cores, threads, torch) and
    this run's shape (the model's parameters and attention paths, the batch)."""
    n = sum(p.numel() for p in model.parameters())
    return (f'{cpu_model()} | {os.cpu_count()} cores, {torch.get_num_threads()} threads | torch '
            f'{torch.__version__} | {type(model).__name__} {n} parameters, attention paths '
            f'{attention_paths(model)} | batch {batch_size} x {example_length}')


def path_name(choice):
    precision, kernel = choice
    return precision + {None: '', True: ' + attention kernel', False: ' + attention math'}[kernel]


PATH_CACHE_FORMAT = 'cs224n-minGPT measured CPU paths, 1'


def read_path_cache(path):
    """{key: [precision, kernel]} from the cache file; a missing file is empty, an unreadable
    or foreign one is ignored with a warning (and rewritten after the next measurement)."""
    if path is None or not os.path.exists(path):
        return {}
    try:
        with open(path, encoding='utf-8') as f:
            data = json.load(f)
        if not (isinstance(data, dict) and data.get('format') == PATH_CACHE_FORMAT
                and isinstance(data.get('choices'), dict)):
            raise ValueError('not this program\'s cache')
        return data['choices']
    except (OSError, ValueError) as e:
        print(f'warning: ignoring the cache of measured choices {path} ({e})', file=sys.stderr)
        return {}


def write_path_cache(path, choices):
    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as f:
            json.dump({'format': PATH_CACHE_FORMAT, 'choices': choices}, f, indent=1)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        atomic_write(path, write)
    except OSError as e:  # a cache is a convenience: the run goes on without it
        print(f'warning: could not write the cache of measured choices {path} ({e})', file=sys.stderr)


class TrainingInterrupted(Exception):
    """Ctrl-C or SIGTERM: a resumable checkpoint has been written (its path is the message)."""


class StopRequest:
    """Turns the first SIGINT/SIGTERM into a flag the loop checks after each step (so the
    checkpoint is written between steps); a second Ctrl-C stops at once."""

    def __init__(self, enabled=True):
        self.requested = False
        self.previous = {}
        self.enabled = enabled  # without a checkpoint to write, signals keep their usual effect

    def __enter__(self):
        if self.enabled and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


class Trainer:

    def __init__(self, model, train_dataset, test_dataset, config):
        self.model = model
        self.train_dataset = train_dataset
        self.test_dataset = test_dataset
        self.config = config
        self.device = torch.device(config.device)
        self.model = self.model.to(self.device)
        self.tokens = 0
        self.step = 0
        self.last_loss = float('nan')
        # torchrun: every rank builds the same global batch (so the examples, and the random
        # corruptions drawn for them, are those of a one-process run) and trains on its slice
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world = dist.get_world_size() if self.distributed else 1

    def save_checkpoint(self):
        if self.config.ckpt_path is not None and self.rank == 0:
            save_state_dict(self.model, self.config.ckpt_path)

    # ---- resumable state -------------------------------------------------------------------

    def _save_resume(self, optimizer, epoch, it, generator_state):
        """Everything needed to continue exactly where the run stands: before batch `it` of
        `epoch`, whose shuffle is drawn from generator_state."""
        if self.rank != 0 or self.config.resume_path is None:
            return
        state = {
            'model': self.model.state_dict(), 'optimizer': optimizer.state_dict(),
            'tokens': self.tokens, 'step': self.step, 'epoch': epoch, 'it': it,
            'generator': generator_state, 'python_random': random.getstate(),
            'torch_rng': torch.get_rng_state(),
            'cuda_rng': torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            'batch_size': self.config.batch_size, 'max_epochs': self.config.max_epochs,
            'final_tokens': self.config.final_tokens,
        }
        atomic_write(self.config.resume_path, lambda tmp: torch.save(state, tmp))

    def _load_resume(self, optimizer, generator):
        path = self.config.resume_path
        try:
            state = torch.load(path, map_location=self.device, weights_only=True)
            self.model.load_state_dict(state['model'])
        except Exception as e:
            raise UsageError(f'--resume: cannot read the checkpoint {path} '
                             f'({type(e).__name__}: {str(e)[:120]})')
        if state['batch_size'] != self.config.batch_size:
            raise UsageError(f'--resume: {path} was written with batch size {state["batch_size"]}, '
                             f'this run has {self.config.batch_size}')
        optimizer.load_state_dict(state['optimizer'])
        if self.config.time_budget is not None and 'final_tokens' in state:
            # a budgeted run continues the plan it made, not a new one
            self.config.max_epochs, self.config.final_tokens = state['max_epochs'], state['final_tokens']
        self.tokens, self.step = state['tokens'], state['step']
        generator.set_state(state['generator'])
        random.setstate(state['python_random'])
        torch.set_rng_state(state['torch_rng'])
        if state['cuda_rng'] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state['cuda_rng'])
        return state['epoch'], state['it']

    # ---- batches ---------------------------------------------------------------------------

    def _loader(self, dataset):
        """Worker processes that live for the whole run: on a GPU with num_workers > 0, on a CPU
        with cpu_workers > 0 (a small CPU's cores are better spent on the model). The loop refills
        their sampler each epoch with its (indices, seed) batches, and a worker builds a batch
        as collate does here, so the batches are the in-process ones, bit for bit."""
        workers = self.config.cpu_workers if self.device.type == 'cpu' else self.config.num_workers
        if workers == 0:
            return None, None
        epoch_batches = []
        # a generator of its own: the loader draws its workers' base seed from it, not from
        # torch's global one, whose next numbers are this run's dropout masks
        loader = DataLoader(_Batches(dataset), batch_size=None, sampler=_Refillable(epoch_batches),
                            num_workers=workers, pin_memory=self.device.type == 'cuda',
                            persistent_workers=True, prefetch_factor=4,
                            generator=torch.Generator().manual_seed(0))
        return loader, epoch_batches

    def _batches(self, dataset, batches, loader, epoch_batches):
        if loader is None:
            return (collate(dataset, *batch) for batch in batches)
        epoch_batches[:] = batches
        return iter(loader)

    # ---- the loop --------------------------------------------------------------------------

    def train(self):
        config, device = self.config, self.device
        raw_model = self.model
        model = raw_model
        if self.distributed:
            model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == 'cuda' else None)
        if config.compile:
            # On a CPU, model.packed_loss packs each batch to its own number of positions: a
            # graph for any size, or it would recompile for every new size.
            model = torch.compile(model, dynamic=True if device.type == 'cpu' else None)

        optimizer = torch.optim.AdamW(optimizer_groups(raw_model, config.weight_decay),
                                      lr=config.learning_rate, betas=config.betas,
                                      fused=device.type == 'cuda')
        if config.precision == 'auto':
            if device.type == 'cpu':
                self._choose_paths(model, raw_model)
            else:
                config.precision = 'bf16' if torch.cuda.is_bf16_supported() else 'fp32'
        autocast = self._autocast(config.precision)

        generator = torch.Generator().manual_seed(torch.initial_seed())
        start_epoch = start_it = 0
        clock = config.start_time if config.start_time is not None else time.time()
        if config.resume:
            start_epoch, start_it = self._load_resume(optimizer, generator)
        loader, epoch_batches = self._loader(self.train_dataset)
        steps_per_epoch = math.ceil(len(self.train_dataset) / config.batch_size)
        if config.time_budget is not None and not config.resume:
            self._plan(model, raw_model, steps_per_epoch, loader, clock)
        pbar = tqdm(total=steps_per_epoch * config.max_epochs, initial=self.step, unit='step',
                    dynamic_ncols=True, disable=self.rank != 0)
        pending = []  # (step, loss tensor, lr) not yet read back from the device
        start_time, start_tokens = time.time(), self.tokens

        def flush(epoch, it):
            if not pending:
                return
            losses = torch.stack([loss for _, loss, _ in pending]).float().cpu().tolist()
            for (step, _, lr), loss in zip(pending, losses):
                if config.writer is not None and self.rank == 0:
                    config.writer.add_scalar('train/loss', loss, step)
                    config.writer.add_scalar('train/lr', lr, step)
            self.last_loss = losses[-1]
            pbar.set_description(f"epoch {epoch+1} iter {it}: train loss {losses[-1]:.5f}. lr {pending[-1][2]:e}")
            pbar.update(len(pending))
            tok_s = (self.tokens - start_tokens) / max(time.time() - start_time, 1e-9)
            pbar.set_postfix_str(f'{tok_s:,.0f} tok/s', refresh=False)
            pending.clear()

        model.train()
        with StopRequest(enabled=config.resume_path is not None) as stop:
            for epoch in range(start_epoch, config.max_epochs):
                if epoch >= config.max_epochs:  # a time budget's re-plan (_replan) shortened the run
                    break
                epoch_start = generator.get_state()
                batches = batch_indices(len(self.train_dataset), config.batch_size, generator)
                skip = start_it if epoch == start_epoch else 0
                it = skip - 1
                for it, (x, y) in enumerate(self._batches(self.train_dataset, batches[skip:],
                                                          loader, epoch_batches), start=skip):
                    loss = self._step(model, raw_model, optimizer, autocast, x, y)

                    # decay the learning rate based on our progress (after the step, as the handout)
                    if config.lr_decay:
                        lr = config.learning_rate * lr_multiplier(self.tokens, config)
                        for param_group in optimizer.param_groups:
                            param_group['lr'] = lr
                    else:
                        lr = config.learning_rate

                    pending.append((self.step, loss, lr))
                    self.step += 1
                    if len(pending) >= config.log_every:
                        flush(epoch, it)
                    if self._stop_requested(stop):
                        flush(epoch, it)
                        self._save_resume(optimizer, epoch, it + 1, epoch_start)
                        pbar.close()
                        raise TrainingInterrupted(config.resume_path)
                flush(epoch, it)
                if epoch == 0 and config.time_budget is not None and not config.resume:
                    self._replan(clock, time.time() - start_time)  # (before a resume point saves it)
                    pbar.total = steps_per_epoch * config.max_epochs
                if self.test_dataset is not None:
                    self.evaluate_loss(self.test_dataset, autocast)
                    model.train()
                self.save_checkpoint()
                if config.checkpoint_every and (epoch + 1) % config.checkpoint_every == 0 \
                        and epoch + 1 < config.max_epochs:
                    self._save_resume(optimizer, epoch + 1, 0, generator.get_state())
                if self._out_of_time(clock, time.time() - start_time, epoch + 1 - start_epoch,
                                     epoch + 1):
                    break
        pbar.close()

    # ---- the time budget ---------------------------------------------------------------------

    def _timed_steps(self, model, raw_model, precision, warm, timed, ahead=False, stop=None):
        """Seconds of each of `timed` training steps in `precision` (after `warm` untimed ones) on
        the first batches of a fixed shuffle of this dataset. The steps change nothing: they
        use an optimizer of their own (lr 0), and the weights, the random states and the token
        count are put back. ahead: the batches are built before the clock starts (workers build
        them ahead of the model); stop(times): True ends the timing early."""
        config = self.config
        weights = {k: v.clone() for k, v in raw_model.state_dict().items()}
        rng = (torch.get_rng_state(), random.getstate(),
               torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
        optimizer = torch.optim.AdamW(optimizer_groups(raw_model, config.weight_decay), lr=0.0,
                                      betas=config.betas, fused=self.device.type == 'cuda')
        order = batch_indices(len(self.train_dataset), config.batch_size,
                              torch.Generator().manual_seed(0))
        times, tokens = [], self.tokens
        for i in range(warm + timed):
            batch = order[i % len(order)]
            if ahead:
                ready = collate(self.train_dataset, *batch)
            start = time.perf_counter()
            x, y = ready if ahead else collate(self.train_dataset, *batch)
            loss = self._step(model, raw_model, optimizer, self._autocast(precision), x, y)
            float(loss)  # waits for the device
            if i >= warm:
                times.append(time.perf_counter() - start)
                if stop is not None and stop(times):
                    break
        raw_model.load_state_dict(weights)
        self.tokens = tokens
        torch.set_rng_state(rng[0])
        random.setstate(rng[1])
        if rng[2] is not None:
            torch.cuda.set_rng_state_all(rng[2])
        return times

    def _autocast(self, precision):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=precision == 'bf16')

    def _plan(self, model, raw_model, steps_per_epoch, loader, clock):
        """Fix max_epochs to what ends within time_budget: time a few training steps of this
        model on batches of this dataset (on this machine, with this run's settings), then keep
        the epochs that fit, the learning-rate schedule laid over them (final_tokens scaled by
        the same factor as the epochs: the cosine keeps its shape, compressed). The measured
        steps change nothing (_timed_steps), so a budgeted run is the run of its planned
        --max_epochs."""
        config = self.config
        # past 3 timed steps, stop once the measuring costs 2% of the budget
        times = self._timed_steps(
            model, raw_model, config.precision, warm=3 if config.compile else 2, timed=10,
            ahead=loader is not None,
            stop=lambda t: len(t) >= 3 and time.time() - clock > 0.02 * config.time_budget)
        step = sorted(times)[len(times) // 2]  # the median: one slow step is no trend
        if self.distributed:  # every rank plans the same epochs: the slowest rank's
            t = torch.tensor([step], device=self.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            step = float(t)
        epoch_seconds = step * steps_per_epoch
        left = config.time_budget - (time.time() - clock)
        fit = epochs_that_fit(left, epoch_seconds)
        if fit < 1:
            too_small = (f'{config.time_budget / 60:g} min is too small for one epoch: an epoch '
                         f'takes about {epoch_seconds / 60:.2f} min here ({steps_per_epoch} steps '
                         f'of {step:.3f} s)')
            if not config.budget_may_grow:
                raise UsageError('--time_budget ' + too_small)
            if self.rank == 0:  # a preset's budget (or run_all's share) on a slow machine: still params
                print(f'warning: the time budget of {too_small}; training one epoch', flush=True)
            fit = 1
        self._asked = config.max_epochs, config.final_tokens  # what _train_epochs scales
        epochs = min(fit, config.max_epochs)
        if self.rank == 0:
            print(f'time budget {config.time_budget / 60:g} min: {epochs} epochs of {steps_per_epoch} '
                  f'steps ({step:.3f} s per step measured, {epoch_seconds:.1f} s per epoch) -> about '
                  f'{epochs * epoch_seconds / 60:.1f} min'
                  + ('' if epochs < config.max_epochs else f' (all {epochs}: the most asked for)'),
                  flush=True)
        self._train_epochs(epochs)

    def _train_epochs(self, epochs):
        """Train `epochs` of the max_epochs asked for, the learning-rate schedule laid over them
        (final_tokens scaled by the same factor: the cosine keeps its shape, compressed)."""
        asked, asked_final = self._asked
        self.config.final_tokens = asked_final * epochs / asked if epochs < asked else asked_final
        self.config.max_epochs = epochs

    # ---- precision 'auto' on a CPU: measured, not guessed --------------------------------------

    def _choose_paths(self, model, raw_model):
        """precision 'auto' in training on a CPU: time a few steps of this model and batch in each
        way of computing the same function the machine offers (fp32, or bf16 autocast where the
        CPU has bf16 arithmetic; for attention without dropout, the fused kernel or the
        written-out math), keep the fastest, print the figures in one line, and remember the
        choice for this machine and run shape in config.path_cache (later runs skip measuring).
        bf16 is not always the faster: on one Intel Xeon with AVX-512-BF16 its matrix products
        ran slower than fp32's."""
        config = self.config
        candidates = cpu_candidates(raw_model)
        if len(candidates) == 1 or self.distributed:  # (ranks must agree: no measuring there)
            choice, how = candidates[0] if len(candidates) == 1 else (candidates[-1][0], None), None
        else:
            key = path_cache_key(raw_model, config.batch_size, len(self.train_dataset[0][1]))
            cache = read_path_cache(config.path_cache)
            choice = cache.get(key)
            if choice in [list(c) for c in candidates]:
                choice, how = tuple(choice), f'cached for this machine in {config.path_cache}'
            else:
                seconds = {}
                for precision, kernel in candidates:
                    raw_model.set_cpu_attention_path(kernel)
                    times = self._timed_steps(model, raw_model, precision, warm=1, timed=3)
                    seconds[precision, kernel] = sorted(times)[1]
                choice = min(candidates, key=seconds.get)
                how = 'measured, median of 3 steps: ' + ', '.join(
                    f'{path_name(c)} {seconds[c]:.3f} s' for c in candidates)
                if config.path_cache is not None and self.rank == 0:
                    cache[key] = list(choice)
                    write_path_cache(config.path_cache, cache)
        config.precision = choice[0]
        if hasattr(raw_model, 'set_cpu_attention_path'):
            raw_model.set_cpu_attention_path(choice[1])
        if how is not None and self.rank == 0:
            print(f'auto: {path_name(choice)} ({how})', flush=True)

    def _replan(self, clock, epoch_seconds):
        """After the first epoch: the epochs that fit at the pace it ran, the schedule laid over
        them from here on. The few steps _plan timed can mislead (their batches shorter or
        longer than the average, none of the per-step logging or the epoch's end, a machine
        busier or idler then than later); a whole epoch says more. The first epoch keeps the lr
        of the first plan (near the top of the cosine either way)."""
        config = self.config
        left = config.time_budget - (time.time() - clock)
        epochs = min(1 + max(epochs_that_fit(left, epoch_seconds), 0), self._asked[0])
        if self.distributed:  # every rank trains the same epochs: the fewest any rank can
            t = torch.tensor([float(epochs)], device=self.device)
            dist.all_reduce(t, op=dist.ReduceOp.MIN)
            epochs = int(t.item())
        if epochs == config.max_epochs:
            return
        if self.rank == 0:
            print(f'\ntime budget: the first epoch took {epoch_seconds:.1f} s: {epochs} epochs '
                  f'instead of {config.max_epochs} -> about {epochs * epoch_seconds / 60:.1f} min',
                  flush=True)
        self._train_epochs(epochs)

    def _out_of_time(self, clock, spent, epochs_done, epoch):
        """With a time budget: whether another epoch, at the pace so far, would end past it (the
        machine got slower than planned). The run then ends early, its schedule unfinished."""
        config = self.config
        if config.time_budget is None or epoch >= config.max_epochs:
            return False
        late = time.time() - clock + spent / epochs_done > config.time_budget
        if self.distributed:
            flag = torch.tensor([float(late)], device=self.device)
            dist.all_reduce(flag)
            late = bool(flag.item())
        if late and self.rank == 0:
            print(f'\ntime budget: stopping after epoch {epoch} of {config.max_epochs} (the epochs '
                  'ran slower than measured)', flush=True)
        return late

    def _stop_requested(self, stop):
        if not self.distributed:
            return stop.requested
        flag = torch.tensor([float(stop.requested)], device=self.device)
        dist.all_reduce(flag)  # every rank stops at the same step
        return bool(flag.item())

    def _step(self, model, raw_model, optimizer, autocast, x, y):
        """One optimizer step on a global batch; returns the batch's mean loss (a device tensor)."""
        config, device = self.config, self.device
        self.tokens += y.numel()  # the handout's (y >= 0).sum(): every position, padding too
        weight = None
        if self.distributed:
            # This rank's rows. The loss is a mean over the non-PAD targets of the whole batch:
            # weight this rank's mean by its share of them, so DDP's gradient average equals the
            # one-process gradient exactly.
            x, y = x.tensor_split(self.world)[self.rank], y.tensor_split(self.world)[self.rank]
            count = torch.tensor(float((y != 0).sum()), device=device)
            total = count.clone()
            dist.all_reduce(total)
            weight = count * self.world / total
            if len(x) == 0:  # a last batch smaller than the number of ranks: a dummy row, weight 0
                x, y, weight = x.new_ones(1, 1), y.new_ones(1, 1), torch.zeros_like(weight)
        x, y = trim_padding(x, y, config.pad_multiple)
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)

        with autocast:
            logits, loss = model(x, y)
        if weight is not None:
            loss = loss * weight

        model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(raw_model.parameters(), config.grad_norm_clip)
        optimizer.step()

        loss = loss.detach()
        if weight is not None:
            loss = loss / self.world
            dist.all_reduce(loss)
        return loss

    @torch.no_grad()
    def evaluate_loss(self, dataset, autocast):
        self.model.eval()
        losses = []
        generator = torch.Generator().manual_seed(0)
        for batch in batch_indices(len(dataset), self.config.batch_size, generator):
            x, y = trim_padding(*collate(dataset, *batch))
            with autocast:
                _, loss = self.model(x.to(self.device), y.to(self.device))
            losses.append(float(loss))
        print("test loss: %f" % (sum(losses) / max(1, len(losses))))


class _Batches:
    """A dataset of whole batches for the DataLoader's workers: item (indices, seed) is
    collate(dataset, indices, seed)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __getitem__(self, batch):
        return collate(self.dataset, *batch)


class _Refillable(Sampler):
    """A sampler over a list of batches the training loop refills each epoch."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(list(self.batches))

    def __len__(self):
        return len(self.batches)
