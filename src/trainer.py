"""
Simple training loop; Boilerplate that could apply to any arbitrary neural network,
so nothing in this file really has anything to do with GPT specifically.

The optimisation is the handout's step for step (AdamW, grad clipping, the token-counted warmup
and cosine LR schedule, the same batches per epoch). What differs is only how fast each step runs:
- batches are drawn in-process, or by workers started once per run (batches.py: the same
  batches either way);
- trailing columns that are padding in every row of a batch are dropped before the forward pass
  (batches.trim_padding: exact, the model is causal and the loss ignores PAD targets). The LR
  schedule still counts the full block of tokens per row, as the handout does;
- optional bf16 autocast, fused AdamW and torch.compile on a GPU (compile on a CPU too);
- loss values are read back from the device in groups, not after every step.

Extras beyond the handout attach to the loop at three named points (as minGPT's later trainer
attaches callbacks): on_train_start (before the first epoch), on_step_end (after each step) and
on_epoch_end (after each epoch; True stops the run), then on_train_end. Each lives in its own
module: precision 'auto' on a CPU (cpu_paths.ChoosePaths), threads that follow the machine's
load (cpu_load.FollowLoad), resume and stop
(checkpoint.Resumable), the time budget (budget.TimeBudget); the ranks of torchrun share the
work through distributed.py.
"""
import logging
import math
import time

import torch
from tqdm import tqdm

import distributed
from batches import Batches, batch_indices, collate, trim_padding
from budget import TimeBudget
from checkpoint import Resumable
from common import save_state_dict
from cpu_load import FollowLoad, cpu_times
from cpu_paths import ChoosePaths
from devices import autocast as autocast_for, random_states, set_random_states

logger = logging.getLogger(__name__)


class TrainerConfig:
    # optimization parameters
    max_epochs = 10
    batch_size = 64
    learning_rate = 3e-4
    betas = (0.9, 0.95)
    grad_norm_clip = 1.0
    weight_decay = 0.1  # only applied on matmul weights
    # The handout's trainer, whatever the comment above says, decays every parameter whose name
    # contains neither "bias" nor "LayerNorm.weight": this model's LayerNorms are ln1/ln2/ln_f, so
    # their weights, the embeddings and pos_emb are decayed too ('names'); 'matmul' is minGPT's
    # rule, which the comment describes (optimizer_groups). Its DataLoader does not shuffle.
    # The CPU presets, tuned with minGPT's choices, keep them (presets.MINGPT_TRAINER).
    decay_rule = 'names'
    shuffle = False
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
    clock = None  # what the time budget and the measured steps read (time.time; tests drive their own)
    cpu_times = None  # what 'auto' reads to tell a busy machine (cpu_paths.cpu_times; tests drive their own)
    follow_load = False  # on a CPU, torch's thread count follows the other processes' load (cpu_load.FollowLoad)

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)


def lr_multiplier(tokens, plan):
    """The handout's schedule: linear warmup over warmup_tokens, then cosine down to a floor of
    10% at final_tokens. `tokens` counts every target position seen so far, padding included.
    `plan`: the run's Schedule, or a TrainerConfig (the schedule it asks for)."""
    if tokens < plan.warmup_tokens:
        return float(tokens) / float(max(1, plan.warmup_tokens))
    progress = cosine_progress(tokens, plan)
    return max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))


def cosine_progress(tokens, plan):
    """How far along the cosine `tokens` are: 0 at the end of the warmup, 1 at final_tokens.
    Where a time budget re-planned the epochs mid-run (budget.py), the rest of the cosine is laid
    over them: plan.relaid = (t0, p0, t1, p1) takes progress p0 at t0 on to p1 at t1."""
    relaid = getattr(plan, 'relaid', None)
    if relaid is not None and tokens >= relaid[0]:
        t0, p0, t1, p1 = relaid
        return p0 + (min(tokens, t1) - t0) * (p1 - p0) / max(1.0, t1 - t0)
    return float(tokens - plan.warmup_tokens) / float(max(1, plan.final_tokens - plan.warmup_tokens))


class Schedule:
    """The run's plan, apart from its configuration (which keeps what was asked for): the epochs
    to train, where the cosine ends, and where it was laid anew. It starts as the config asks; a
    time budget (budget.py) re-plans it, a resumed run (checkpoint.py) restores it."""

    def __init__(self, config):
        self.max_epochs = config.max_epochs
        self.warmup_tokens = config.warmup_tokens
        self.final_tokens = config.final_tokens
        self.asked = (config.max_epochs, config.final_tokens)  # what a budget's plans scale
        self.relaid = None  # (t0, p0, t1, p1): a budget re-planned the epochs, see cosine_progress

    def state_dict(self):
        # the keys resumable checkpoints have held since budgets could re-plan
        return {'max_epochs': self.max_epochs, 'final_tokens': self.final_tokens,
                'budget_asked': self.asked, 'relaid': self.relaid}

    def load_state_dict(self, state):
        self.max_epochs, self.final_tokens = state['max_epochs'], state['final_tokens']
        asked, relaid = state.get('budget_asked'), state.get('relaid')
        self.asked = tuple(asked) if asked is not None else (self.max_epochs, self.final_tokens)
        self.relaid = tuple(relaid) if relaid is not None else None


def optimizer_groups(model, weight_decay, rule='names'):
    """AdamW's two groups, decayed and not, by `rule`.

    'names', the handout's trainer: every parameter is decayed unless its name contains "bias" or
    "LayerNorm.weight" (this model has no such name: only its biases escape).
    'matmul', minGPT's configure_optimizers: a Linear's weight is decayed, its bias is not, nor are
    LayerNorm and Embedding parameters. A parameter held by a module of its own (the position
    table, the synthesizer's w2 and b2, the perceiver's basis C) is placed by that module's
    `weight_decay` table {name: decayed?}; a parameter no rule places is an error, so a new one
    cannot silently go without decay."""
    if rule not in ('names', 'matmul'):
        raise ValueError(f"optimizer_groups: rule must be 'names' or 'matmul', not {rule!r}")
    decay, no_decay = [], []
    if rule == 'names':
        for name, p in model.named_parameters():
            escapes = 'bias' in name or 'LayerNorm.weight' in name
            (no_decay if escapes else decay).append(p)
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": no_decay, "weight_decay": 0.0}]
    for module_name, module in model.named_modules():
        declared = getattr(module, 'weight_decay', {})
        for name, p in module.named_parameters(recurse=False):
            if isinstance(module, torch.nn.Linear):
                decayed = name == 'weight'
            elif isinstance(module, (torch.nn.LayerNorm, torch.nn.Embedding)):
                decayed = False
            elif name in declared:
                decayed = declared[name]
            else:
                where = f'{module_name}.{name}' if module_name else name
                raise ValueError(f'optimizer_groups: no weight-decay rule places parameter {where} '
                                 f'({type(module).__name__}): name it in that module\'s '
                                 '`weight_decay` table')
            (decay if decayed else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


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
        self.distributed = distributed.active()
        self.rank = distributed.rank()
        self.clock = config.clock or time.time
        # the extras, in the order they act at each point: the precision is chosen before the
        # budget times steps, and an epoch's re-plan comes before the checkpoint that saves it
        self.callbacks = [ChoosePaths()]
        if config.follow_load and self.device.type == 'cpu' and not self.distributed \
                and config.cpu_workers == 0:  # (workers' CPU time would read as other processes')
            self.callbacks.append(FollowLoad(times=config.cpu_times or cpu_times))
        if config.time_budget is not None:
            self.callbacks.append(TimeBudget(self.clock))
        if config.resume_path is not None:
            self.callbacks.append(Resumable())

    def save_checkpoint(self):
        if self.config.ckpt_path is not None and self.rank == 0:
            save_state_dict(self.model, self.config.ckpt_path)

    def call(self, point, *args):
        """Ask every extra that acts at `point`; True when one of them asks to stop."""
        answers = [getattr(c, point)(self, *args) for c in self.callbacks if hasattr(c, point)]
        return any(answers)

    def train(self):
        config = self.config
        model = self.wrapped_model()
        self.optimizer = optimizer = torch.optim.AdamW(
            optimizer_groups(self.model, config.weight_decay, config.decay_rule),
            lr=config.learning_rate, betas=config.betas, fused=self.device.type == 'cuda')
        self.generator = torch.Generator().manual_seed(torch.initial_seed())
        self.schedule = Schedule(config)
        self.precision = config.precision  # 'auto' is resolved by cpu_paths.ChoosePaths
        self.epochs_trained = 0
        workers = config.cpu_workers if self.device.type == 'cpu' else config.num_workers
        self.batches = Batches(self.train_dataset, workers)
        self.steps_per_epoch = math.ceil(len(self.train_dataset) / config.batch_size)
        self.start_epoch = self.start_it = 0
        self.progress = Progress(config.log_every, config.writer if self.rank == 0 else None,
                                 disable=self.rank != 0)
        try:
            self.call('on_train_start')  # precision 'auto', resume, the time budget's plan
            autocast = autocast_for(self.device, self.precision)
            self.progress.start(self.steps_per_epoch * self.schedule.max_epochs, self.step, self.tokens)

            model.train()
            epoch = self.start_epoch
            while epoch < self.schedule.max_epochs:  # (a time budget may re-plan it as it goes)
                self.epoch_start_state = self.generator.get_state()
                batches = batch_indices(len(self.train_dataset), config.batch_size, self.generator,
                                        config.shuffle)
                skip = self.start_it if epoch == self.start_epoch else 0
                for it, (x, y) in enumerate(self.batches.epoch(batches[skip:]), start=skip):
                    loss = self._step(model, optimizer, autocast, x, y)

                    # decay the learning rate based on our progress (after the step, as the handout)
                    if config.lr_decay:
                        lr = config.learning_rate * lr_multiplier(self.tokens, self.schedule)
                        for param_group in optimizer.param_groups:
                            param_group['lr'] = lr
                    else:
                        lr = config.learning_rate

                    self.progress.log(self.step, loss, lr, epoch, it, self.tokens)
                    self.step += 1
                    self.call('on_step_end', epoch, it)  # a stop request: checkpoint, interrupt
                self.progress.flush(self.tokens)
                if self.test_dataset is not None:
                    self.evaluate_loss(self.test_dataset, autocast)
                    model.train()
                self.save_checkpoint()
                self.epochs_trained = epoch + 1
                if self.call('on_epoch_end', epoch):  # budget re-plan or stop; periodic checkpoint
                    break
                epoch += 1
        finally:
            self.progress.close(self.tokens)
            self.call('on_train_end')
            self.wrapped = None  # the DDP wrapper holds the process group: let it go with the run

    def wrapped_model(self):
        """The model the steps call: DDP-wrapped under torchrun, compiled when asked."""
        model = self.model
        if self.distributed:
            # broadcast_buffers=False: the buffers (causal masks, RoPE tables) never change,
            # so re-sending them before every forward pass is wasted traffic
            model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == 'cuda' else None,
                broadcast_buffers=False)
        if self.config.compile:
            # On a CPU, model.packed_loss packs each batch to its own number of positions: a
            # graph for any size, or it would recompile for every new size.
            model = torch.compile(model, dynamic=True if self.device.type == 'cpu' else None)
        self.wrapped = model
        return model

    def _step(self, model, optimizer, autocast, x, y):
        """One optimizer step on a global batch; returns the batch's mean loss (a device tensor)."""
        config, device = self.config, self.device
        self.tokens += y.numel()  # the handout's (y >= 0).sum(): every position, padding too
        weight = None
        if self.distributed:  # this rank's rows, its loss weighted by its share of the targets
            x, y, weight = distributed.shard(x, y, device)
        x, y = trim_padding(x, y, config.pad_multiple)
        if device.type == 'cuda':  # pinned after the trim (which copies): the copies to the GPU
            x, y = x.pin_memory(), y.pin_memory()  # then overlap its work instead of waiting
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)

        with autocast:
            _, loss = model(x, y, loss_only=True)  # (a CPU computes only what the loss needs)
        if weight is not None:
            loss = loss * weight

        model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.grad_norm_clip)
        optimizer.step()

        loss = loss.detach()
        if weight is not None:
            loss = distributed.global_loss(loss)
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

    def schedule_progress(self, tokens):
        return cosine_progress(tokens, self.schedule)

    def timed_steps(self, precision, warm, timed, ahead=False, stop=None):
        """For the extras that measure this machine (cpu_paths, budget): seconds of each of
        `timed` training steps in `precision` (after `warm` untimed ones) on the first batches of
        a fixed shuffle of this dataset. The steps change nothing: they use an optimizer of their
        own (lr 0), and the weights, the random states and the token count are put back. ahead:
        the batches are built before the clock starts (workers build them ahead of the model);
        stop(times): True ends the timing early."""
        config, raw_model = self.config, self.model
        weights = {k: v.clone() for k, v in raw_model.state_dict().items()}
        rng = random_states(self.device)
        groups = optimizer_groups(raw_model, config.weight_decay, config.decay_rule)
        optimizer = torch.optim.AdamW(groups, lr=0.0, betas=config.betas,
                                      fused=self.device.type == 'cuda')
        order = batch_indices(len(self.train_dataset), config.batch_size,
                              torch.Generator().manual_seed(0))
        times, tokens = [], self.tokens
        for i in range(warm + timed):
            batch = order[i % len(order)]
            if ahead:
                ready = collate(self.train_dataset, *batch)
            start = self.clock()
            x, y = ready if ahead else collate(self.train_dataset, *batch)
            loss = self._step(self.wrapped, optimizer, autocast_for(self.device, precision), x, y)
            float(loss)  # waits for the device
            if i >= warm:
                times.append(self.clock() - start)
                if stop is not None and stop(times):
                    break
        raw_model.load_state_dict(weights)
        self.tokens = tokens
        set_random_states(rng, self.device)
        return times


class LossNotFinite(Exception):
    """The training loss became inf or nan: the run stops (nothing more is trained or saved)."""


class Progress:
    """The handout's logging: the progress bar's `epoch E iter I: train loss L. lr LR` and the
    tensorboard scalars train/loss and train/lr every step. Losses stay on the device until
    log_every steps have gathered (reading one back waits for the GPU), then are read together."""

    def __init__(self, log_every, writer, disable):
        self.log_every, self.writer, self.disable = log_every, writer, disable
        self.pbar = None
        self.pending = []  # (step, loss tensor, lr) not yet read back from the device

    def start(self, total, initial, tokens):
        self.pbar = tqdm(total=total, initial=initial, unit='step', dynamic_ncols=True,
                         disable=self.disable)
        self.start_time, self.start_tokens = time.time(), tokens

    def set_total(self, total):
        self.pbar.total = total

    def log(self, step, loss, lr, epoch, it, tokens):
        self.pending.append((step, loss, lr))
        self.epoch, self.it = epoch, it
        if len(self.pending) >= self.log_every:
            self.flush(tokens)

    def flush(self, tokens):
        if not self.pending:
            return
        losses = torch.stack([loss for _, loss, _ in self.pending]).float().cpu().tolist()
        for (step, _, lr), loss in zip(self.pending, losses):
            if not math.isfinite(loss):  # nothing after it could be saved as a model
                self.pending.clear()
                raise LossNotFinite(f'the training loss became {loss} at step {step + 1} '
                                    f'(learning rate {lr:g})')
        for (step, _, lr), loss in zip(self.pending, losses):
            if self.writer is not None:
                self.writer.add_scalar('train/loss', loss, step)
                self.writer.add_scalar('train/lr', lr, step)
        self.pbar.set_description(f"epoch {self.epoch+1} iter {self.it}: train loss {losses[-1]:.5f}. "
                                  f"lr {self.pending[-1][2]:e}")
        self.pbar.update(len(self.pending))
        tok_s = (tokens - self.start_tokens) / max(time.time() - self.start_time, 1e-9)
        self.pbar.set_postfix_str(f'{tok_s:,.0f} tok/s', refresh=False)
        self.pending.clear()

    def close(self, tokens):
        if self.pbar is not None:
            self.flush(tokens)
            self.pbar.close()
