"""Engine (free to change): the training loop the handout's Trainer runs by default.

TrainerConfig.engine (the default) runs this loop in place of the starter's: its steps, one
for one (tested against the starter's loop: tests/test_fast_paths.py), faster at the same
results (padding columns trimmed, a CPU computing only what the loss needs, losses read back in
groups) and able to resume. What fits a run to a machine or makes it safe
attaches at named points, as minGPT's later trainer attaches callbacks (on_train_start,
on_step_end, on_epoch_end, on_train_end: extras.py).

The Trainer object (trainer.py) is handed in and holds the run's state; nothing here imports a
handout file.
"""
import math
import time

import torch

from engine import cpu_load, distributed, extras, graphs, plan as planning
from engine.batches import (Batches, batch_indices, collate, steps_per_epoch, to_device,
                            trim_padding, workers_for)
from engine.budget import Schedule, cosine_progress
from engine.common import save_state_dict
from engine.devices import autocast as autocast_for
from engine.progress import Progress
from engine.weight_decay import matmul_groups


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


def attach(trainer, plan=None, clock=None, cpu_times=None):
    """The engine's part of Trainer.__init__: the model on config.device, and the extras that
    attach at the loop's named points. plan: the machine measured before the Trainer
    (engine/plan.py; made in train() if None); clock, cpu_times: what the extras read for time
    and the machine's load (tests: theirs)."""
    trainer.device = torch.device(trainer.config.device)
    trainer.model = trainer.model.to(trainer.device)
    trainer.tokens = trainer.step = 0
    trainer.distributed, trainer.rank = distributed.active(), distributed.rank()
    trainer.clock, trainer.cpu_times = clock or time.time, cpu_times or cpu_load.cpu_times
    trainer.plan = plan
    trainer.callbacks = extras.for_trainer(trainer)


def save(trainer, model):
    """The checkpoint, written whole or not at all, by one process of a distributed run."""
    if trainer.rank == 0:
        save_state_dict(model, trainer.config.ckpt_path)


def call(trainer, point, *args):
    """Ask every extra that acts at `point`; True when one of them asks to stop."""
    answers = [getattr(c, point)(trainer, *args) for c in trainer.callbacks if hasattr(c, point)]
    return any(answers)


def train(trainer):
    """Trainer.train: the starter's epochs and steps, at the named points the extras act."""
    config = trainer.config
    if trainer.plan is None:  # (a CPU preset's plan may train its slow machine's model instead)
        trainer.plan, trainer.model = planning.make(trainer.model, trainer.train_dataset, config,
                                                    train_step, make_optimizer, trainer.clock,
                                                    trainer.cpu_times, smaller=config.smaller)
    model = wrapped_model(trainer)
    trainer.optimizer = optimizer = make_optimizer(trainer.model, config, config.learning_rate)
    trainer.generator = torch.Generator().manual_seed(torch.initial_seed())
    trainer.schedule, trainer.precision = Schedule(config), trainer.plan.precision
    trainer.batches = Batches(trainer.train_dataset, workers_for(config, trainer.device),
                              config.batch_size, config.shuffle)
    trainer.steps_per_epoch = steps_per_epoch(len(trainer.train_dataset), config.batch_size)
    trainer.epochs_trained = trainer.start_epoch = trainer.start_it = 0
    one_step = graphs.steps(config, train_step)  # train_step, or its CUDA-graph replays
    trainer.progress = Progress(config.log_every, config.writer if trainer.rank == 0 else None,
                                disable=trainer.rank != 0, lag=trainer.device.type == 'cuda')
    try:
        call(trainer, 'on_train_start')  # the plan's threads and epochs; resume
        autocast = autocast_for(trainer.device, trainer.precision)
        trainer.progress.start(trainer.steps_per_epoch * trainer.schedule.max_epochs,
                               trainer.step, trainer.tokens)

        model.train()
        epoch = trainer.start_epoch
        while epoch < trainer.schedule.max_epochs:  # (a time budget may re-plan it as it goes)
            trainer.epoch_start_state = trainer.generator.get_state()
            batches = trainer.batches.draw(trainer.generator)  # (dataset indices, seed) each
            skip = trainer.start_it if epoch == trainer.start_epoch else 0
            for it, (x, y) in enumerate(trainer.batches.epoch(batches[skip:], trainer.generator),
                                        start=skip):
                trainer.tokens += y.numel()  # the handout's (y >= 0).sum(): padding too
                loss = one_step(model, optimizer, autocast, x, y, config, trainer.device)

                # decay the learning rate based on our progress (after the step, as the handout)
                if config.lr_decay:
                    lr = config.learning_rate * lr_multiplier(trainer.tokens, trainer.schedule)
                    for param_group in optimizer.param_groups:
                        param_group['lr'] = lr
                else:
                    lr = config.learning_rate

                trainer.progress.log(trainer.step, loss, lr, epoch, it, trainer.tokens)
                trainer.step += 1
                call(trainer, 'on_step_end', epoch, it)  # a stop request: checkpoint, interrupt
            trainer.progress.epoch_end(trainer.tokens, saving=config.ckpt_path is not None)
            if trainer.test_dataset is not None:
                evaluate_loss(trainer, trainer.test_dataset, autocast)
                model.train()
            trainer.save_checkpoint()
            trainer.epochs_trained = epoch + 1
            if call(trainer, 'on_epoch_end', epoch):  # budget re-plan or stop; periodic checkpoint
                break
            epoch += 1
    finally:
        trainer.progress.close(trainer.tokens)
        trainer.batches.close()  # the workers stop (what they built ahead is dropped)
        call(trainer, 'on_train_end')
        trainer.wrapped = trainer.plan.wrapped = None  # (a DDP wrapper holds the process group)


def wrapped_model(trainer):
    """The model the steps call: DDP-wrapped under torchrun, compiled when asked (the plan's)."""
    trainer.wrapped = trainer.plan.wrapped if trainer.plan.wrapped is not None else \
        distributed.wrapped(trainer.model, trainer.device, trainer.config.compile)
    return trainer.wrapped


@torch.no_grad()
def evaluate_loss(trainer, dataset, autocast):
    trainer.model.eval()
    losses = []
    generator = torch.Generator().manual_seed(0)
    for batch in batch_indices(len(dataset), trainer.config.batch_size, generator):
        x, y = trim_padding(*collate(dataset, *batch))
        with autocast:
            _, loss = trainer.model(x.to(trainer.device), y.to(trainer.device))
        losses.append(float(loss))
    print("test loss: %f" % (sum(losses) / max(1, len(losses))))
