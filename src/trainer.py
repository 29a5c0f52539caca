"""Handout file: the starter's trainer.py (names, results fixed: tests/test_fast_paths.py).

Simple training loop; Boilerplate that could apply to any arbitrary neural network,
so nothing in this file really has anything to do with GPT specifically.

Step for step the starter's loop (tested against it written out), faster at the same results:
padding columns trimmed, a CPU computing only what the loss needs, losses read back in groups.
What fits a run to a machine or makes it safe attaches at named points, as minGPT's later
trainer attaches callbacks (on_train_start, on_step_end, on_epoch_end, on_train_end; extras.py).
"""
import logging
import math
import time

import torch

from engine import cpu_load, distributed, extras, graphs, plan as planning
from engine.batches import (Batches, batch_indices, collate, steps_per_epoch, to_device,
                            trim_padding, workers_for)
from engine.budget import Schedule, cosine_progress
from engine.common import save_state_dict
from engine.devices import autocast as autocast_for
from engine.progress import LossNotFinite, Progress  # noqa: F401 (run.py: trainer.LossNotFinite)
from engine.weight_decay import matmul_groups

logger = logging.getLogger(__name__)


class TrainerConfig:
    # optimization parameters
    max_epochs = 10
    batch_size = 64
    learning_rate = 3e-4
    betas = (0.9, 0.95)
    grad_norm_clip = 1.0
    weight_decay = 0.1  # only applied on matmul weights
    # (whatever the comment above says, the starter decays by name: optimizer_groups; the CPU
    # presets keep minGPT's 'matmul' rule and a shuffle, with which they were tuned)
    decay_rule, shuffle = 'names', False
    # learning rate decay params: linear warmup followed by cosine decay to 10% of original
    lr_decay = False
    warmup_tokens = 375e6  # these default values are for GPT-1, but for our purposes they are overwritten by run.py
    final_tokens = 260e9  # (at what point we reach 10% of original LR)
    # checkpoint settings
    ckpt_path = None
    num_workers = 0  # for DataLoader (worker processes on a GPU)
    cpu_workers = 0  # worker processes on a CPU too (they take cores from the model: off unless asked)
    writer = None
    # Not in the handout: how the steps run (device, precision, compile, padding, log reads),
    # resume (resume_path every checkpoint_every epochs, checkpoint_seconds apart), the time
    # budget (engine/budget.py: seconds from start_time, and what may grow or follow), threads
    # (follow_load), runs measured under load (under_load: presets.py), decay_share (CPU recipes)
    device, compile = 'cpu', False
    precision = 'fp32'  # 'fp32', 'tf32' (GPU), 'bf16' (autocast), 'auto' (measured: engine/plan.py)
    path_cache = None  # where 'auto' remembers its measured choices (a JSON file), or None
    pad_multiple = 8  # trimmed lengths are rounded up to this (fewer shapes for compile/kernels)
    pack_multiple, pack_groups = 0, 1  # a GPU's packed positions and groups: fastpath.layout
    log_every = 1  # read losses back every N steps (a GPU sync); tensorboard still gets every step
    resume_path, resume, checkpoint_every, checkpoint_seconds = None, False, 0, 0
    time_budget, start_time, budget_may_grow, budget_after = None, None, False, 0
    follow_load, under_load, decay_share, smaller = False, None, None, None

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)


def lr_multiplier(tokens, plan):
    """The handout's schedule: linear warmup over warmup_tokens, then cosine down to a floor of
    10% at final_tokens; `tokens` counts every target position, padding included. `plan`: the
    run's budget.Schedule, or a TrainerConfig (the schedule it asks for)."""
    if tokens < plan.warmup_tokens:
        return float(tokens) / float(max(1, plan.warmup_tokens))
    progress = cosine_progress(tokens, plan)
    return max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))


def optimizer_groups(model, weight_decay, rule='names'):
    """AdamW's two groups, decayed and not. 'names', the handout's trainer: every parameter is
    decayed unless its name contains "bias" or "LayerNorm.weight" (this model has no such name:
    only its biases escape). 'matmul': minGPT's rule, which the CPU presets train with
    (weight_decay.matmul_groups)."""
    if rule == 'matmul':
        return matmul_groups(model, weight_decay)
    if rule != 'names':
        raise ValueError(f"optimizer_groups: rule must be 'names' or 'matmul', not {rule!r}")
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        escapes = 'bias' in name or 'LayerNorm.weight' in name
        (no_decay if escapes else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model, config, lr):
    groups = optimizer_groups(model, config.weight_decay, config.decay_rule)
    return torch.optim.AdamW(groups, lr=lr, betas=config.betas, fused='cuda' in str(config.device))


def train_step(model, optimizer, autocast, x, y, config, device):
    """One optimizer step on a global batch; returns the batch's mean loss (a device tensor)."""
    weight = None
    if distributed.active():  # this rank's rows, its loss weighted by its share of the targets
        x, y, weight = distributed.shard(x, y, device)
    x, y, packed = to_device(x, y, device, config)  # padding columns trimmed
    with autocast:  # (only what the loss needs: a CPU's way, or `packed` positions)
        _, loss = model(x, y, loss_only=True, packed=packed)
    if weight is not None:
        loss = loss * weight
    model.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)
    optimizer.step()

    loss = loss.detach()
    if weight is not None:
        loss = distributed.global_loss(loss)
    return loss


class Trainer:

    def __init__(self, model, train_dataset, test_dataset, config, plan=None, clock=None,
                 cpu_times=None):
        # plan: the machine measured before the Trainer (engine/plan.py; made in train() if None);
        # clock, cpu_times: what the extras read for time and the machine's load (tests: theirs)
        self.model = model
        self.train_dataset = train_dataset
        self.test_dataset = test_dataset
        self.config = config
        self.device = torch.device(config.device)
        self.model = self.model.to(self.device)
        self.tokens = self.step = 0
        self.distributed, self.rank = distributed.active(), distributed.rank()
        self.clock, self.cpu_times = clock or time.time, cpu_times or cpu_load.cpu_times
        self.plan = plan
        self.callbacks = extras.for_trainer(self)  # what attaches at the loop's named points

    def save_checkpoint(self):
        if self.config.ckpt_path is not None and self.rank == 0:
            save_state_dict(self.model, self.config.ckpt_path)

    def call(self, point, *args):
        """Ask every extra that acts at `point`; True when one of them asks to stop."""
        answers = [getattr(c, point)(self, *args) for c in self.callbacks if hasattr(c, point)]
        return any(answers)

    def train(self):
        config = self.config
        if self.plan is None:  # (a CPU preset's plan may train its slow machine's model instead)
            self.plan, self.model = planning.make(self.model, self.train_dataset, config,
                                                  train_step, make_optimizer, self.clock,
                                                  self.cpu_times, smaller=config.smaller)
        model = self.wrapped_model()
        self.optimizer = optimizer = make_optimizer(self.model, config, config.learning_rate)
        self.generator = torch.Generator().manual_seed(torch.initial_seed())
        self.schedule, self.precision = Schedule(config), self.plan.precision
        self.batches = Batches(self.train_dataset, workers_for(config, self.device),
                               config.batch_size, config.shuffle)
        self.steps_per_epoch = steps_per_epoch(len(self.train_dataset), config.batch_size)
        self.epochs_trained = self.start_epoch = self.start_it = 0
        one_step = graphs.steps(config, train_step)  # train_step, or its CUDA-graph replays
        self.progress = Progress(config.log_every, config.writer if self.rank == 0 else None,
                                 disable=self.rank != 0, lag=self.device.type == 'cuda')
        try:
            self.call('on_train_start')  # the plan's threads and epochs; resume
            autocast = autocast_for(self.device, self.precision)
            self.progress.start(self.steps_per_epoch * self.schedule.max_epochs, self.step, self.tokens)

            model.train()
            epoch = self.start_epoch
            while epoch < self.schedule.max_epochs:  # (a time budget may re-plan it as it goes)
                self.epoch_start_state = self.generator.get_state()
                batches = self.batches.draw(self.generator)  # (dataset indices, seed) each
                skip = self.start_it if epoch == self.start_epoch else 0
                for it, (x, y) in enumerate(self.batches.epoch(batches[skip:], self.generator), start=skip):
                    self.tokens += y.numel()  # the handout's (y >= 0).sum(): padding too
                    loss = one_step(model, optimizer, autocast, x, y, config, self.device)

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
                self.progress.epoch_end(self.tokens, saving=config.ckpt_path is not None)
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
            self.batches.close()  # the workers stop (what they built ahead is dropped)
            self.call('on_train_end')
            self.wrapped = self.plan.wrapped = None  # (a DDP wrapper holds the process group)

    def wrapped_model(self):
        """The model the steps call: DDP-wrapped under torchrun, compiled when asked (the plan's)."""
        self.wrapped = self.plan.wrapped if self.plan.wrapped is not None else \
            distributed.wrapped(self.model, self.device, self.config.compile)
        return self.wrapped

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
