"""Engine (free to change): the training loop the handout's Trainer runs by default.

TrainerConfig.engine (the default) runs this loop in place of the starter's: its steps, one
for one (tested against the starter's loop: tests/engine/test_fast_paths.py), faster at the same
results (padding columns trimmed, each batch's rows in groups by length, every group through the
model's own forward on the columns its rows need, losses read back in groups) and able to
resume. What fits a run to a machine or makes it safe
attaches at named points, as minGPT's later trainer attaches callbacks (on_train_start,
on_step_end, on_epoch_end, on_train_end: extras.py).

The run's state is one object (Run), which the Trainer (trainer.py) makes and hands in;
nothing here imports a handout file.
"""
import time

import torch

from engine import distributed, presets
from engine.fast import graphs
from engine.machine import cpu_load, plan as planning
from engine.training import extras
from engine.fast.batches import (Batches, batch_indices, collate, steps_per_epoch, to_device,
                            trim_padding, workers_for)
from engine.training.schedule import Schedule, lr_multiplier  # noqa: F401 (tests read it here)
from engine.common import save_state_dict
from engine.devices import autocast as autocast_for
from engine.training.progress import Progress
from engine.training.optim import make_optimizer


class Settings:
    """The engine's settings of a run, the defaults under the handout's TrainerConfig (its base
    class): its own settings are the starter's, these say how the engine runs them."""
    # engine: this loop (False: the starter's own, in trainer.py). cpu_workers: DataLoader worker
    # processes on a CPU too (they take its cores). decay_rule, shuffle, decay_share: the
    # handout trainer's (presets.HANDOUT_TRAINER: by name, in order, the cosine from the warmup)
    engine, cpu_workers = True, 0
    decay_rule, shuffle, decay_share = (presets.HANDOUT_TRAINER[key] for key in
                                        ('decay_rule', 'shuffle', 'decay_share'))
    # how the steps run: the device, 'fp32', 'tf32' (a GPU's), 'bf16' or 'fp16' (autocast; fp16
    # with loss scaling) or 'auto'
    # (measured: plan.py, remembered in path_cache), compiled or not, trimmed lengths rounded up
    # to pad_multiple (fewer shapes), the groups of rows a step computes (batches.groups_for; 0:
    # by device), the losses read back every log_every steps (a GPU sync; tensorboard still gets
    # every step)
    device, precision, path_cache, compile = 'cpu', 'fp32', None, False
    pad_multiple, row_groups, log_every = 8, 0, 1
    # resume (resume_path every checkpoint_every epochs, checkpoint_seconds apart); the time
    # budget (budget.py: seconds from start_time, and what may grow or follow); threads that
    # follow the load; runs measured under load (presets.py); a CPU recipe's model for slow
    # machines
    resume_path, resume, checkpoint_every, checkpoint_seconds = None, False, 0, 0
    time_budget, start_time, budget_may_grow, budget_after = None, None, False, 0
    follow_load, under_load, smaller = False, None, None
    # the team member the command runs as beside others in its process (turns.py), or None
    turn = None
    # lines for stderr once the run's checks are passed, as its first step begins (the edition
    # it follows: a refused run's error stays its only line)
    notes = ()


def train_step(model, optimizer, autocast, x, y, config, device):
    """One optimizer step on a global batch; returns the batch's mean loss (a device tensor).

    The batch's rows come in groups by length (to_device: fastpath.row_groups), and the model's
    own forward computes each group on the columns its rows need. Each group's loss, a mean
    over its targets, is weighted by its share of the batch's targets: the weighted losses add
    up to the batch's mean loss, and their gradients, accumulated group by group, to its
    gradient."""
    weight = None
    if distributed.active():  # this rank's rows, its loss weighted by its share of the targets
        x, y, weight = distributed.shard(x, y, device)
    x, y, spans = to_device(x, y, device, config)
    targets = (y != 0).sum()  # (on the device: nothing read back)
    model.zero_grad(set_to_none=True)
    scaler = autocast.scaler  # fp16's loss scaling; disabled, the starter's three lines
    total, start = torch.zeros((), device=x.device), 0
    last = max((g for g, (_, columns) in enumerate(spans) if columns), default=0)
    for g, (rows, columns) in enumerate(spans):
        # (contiguous: the handout's loss views the targets flat)
        xg = x[start:start + rows, :columns].contiguous()
        yg = y[start:start + rows, :columns].contiguous()
        start += rows
        if not columns:  # no target in the group: nothing it computes reaches the loss
            continue
        with distributed.accumulating(model, g < last):  # the ranks exchange the last only
            with autocast:
                _, loss = model(xg, yg)
            loss = loss * ((yg != 0).sum() / targets)
            if weight is not None:
                loss = loss * weight
            scaler.scale(loss).backward()
        total = total + loss.detach()
    scaler.unscale_(optimizer)  # the clipping sees the true gradients
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)
    scaler.step(optimizer)  # skipped where an fp16 gradient overflowed
    scaler.update()

    if weight is not None:
        total = distributed.global_loss(total)
    return total


class Run:
    """A training run's state: what the loop, its extras (extras.py) and the run's record
    (records.save_params) share, the one object they are handed. Made by the Trainer from its
    model, datasets and config (the model moved to config.device); plan: the machine measured
    before (engine/machine/plan.py; made when training starts if None); clock, cpu_times: what the
    extras read for time and the machine's load (tests: their own); save_checkpoint: the
    Trainer's, called after every epoch as the starter's loop calls it."""

    def __init__(self, model, train_dataset, test_dataset, config, save_checkpoint, plan=None,
                 clock=None, cpu_times=None):
        self.config = config
        self.device = torch.device(config.device)
        self.model = model.to(self.device)
        self.train_dataset, self.test_dataset = train_dataset, test_dataset
        self.save_checkpoint = save_checkpoint
        self.tokens = self.step = 0
        self.distributed, self.rank = distributed.active(), distributed.rank()
        self.clock, self.cpu_times = clock or time.time, cpu_times or cpu_load.cpu_times
        self.plan = plan
        self.callbacks = extras.for_run(self)
        # set when training starts (train): the run's schedule, optimizer, batches and log
        self.schedule = self.precision = self.optimizer = self.generator = None
        self.scaler = None  # fp16's loss scaler (devices.autocast), kept in the checkpoint
        self.batches = self.progress = self.wrapped = None
        self.steps_per_epoch = self.epochs_trained = self.start_epoch = self.start_it = 0
        self.epoch_start_state = None
        # the record's figures the extras measure: each epoch's seconds as the budget paced them
        # and on the wall clock, the share of the CPUs other processes used
        self.epoch_seconds, self.epoch_walls, self.others_share = [], [], None
        # what the interrupted calls before this one spent (checkpoint.spent; a resume sets it)
        self.before = dict(calls=0, seconds=0.0, training=0.0)


def save(run, model):
    """The checkpoint, written whole or not at all, by one process of a distributed run."""
    if run.rank == 0:
        save_state_dict(model, run.config.ckpt_path)


def train(run):
    """Trainer.train: the starter's epochs and steps, at the named points the extras act."""
    config = run.config
    if run.plan is None:  # (a CPU preset's plan may train its slow machine's model instead)
        run.plan, run.model = planning.make(run.model, run.train_dataset, config,
                                            train_step, make_optimizer, run.clock,
                                            run.cpu_times, smaller=config.smaller)
    # the model the steps call: DDP-wrapped under torchrun, compiled when asked (the plan's)
    model = run.wrapped = run.plan.wrapped if run.plan.wrapped is not None else \
        distributed.wrapped(run.model, run.device, config.compile)
    run.optimizer = optimizer = make_optimizer(run.model, config, config.learning_rate)
    run.generator = torch.Generator().manual_seed(torch.initial_seed())
    run.schedule, run.precision = Schedule(config, run.plan), run.plan.precision
    run.batches = Batches(run.train_dataset, workers_for(config, run.device),
                              config.batch_size, config.shuffle)
    run.steps_per_epoch = steps_per_epoch(len(run.train_dataset), config.batch_size)
    run.epochs_trained = run.start_epoch = run.start_it = 0
    one_step = graphs.steps(config, train_step)  # train_step, or its CUDA-graph replays
    autocast = autocast_for(run.device, run.precision)
    run.scaler = autocast.scaler
    try:
        extras.call(run, 'on_train_start')  # the plan's threads and epochs; resume
        run.progress = Progress(config.log_every, config.writer if run.rank == 0 else None,
                                disable=run.rank != 0, lag=run.device.type == 'cuda')
        run.progress.start(run.steps_per_epoch * run.schedule.max_epochs, run.step, run.tokens)

        model.train()
        epoch = run.start_epoch
        while epoch < run.schedule.max_epochs:  # (a time budget may re-plan it as it goes)
            run.epoch_start_state = run.generator.get_state()
            batches = run.batches.draw(run.generator)  # (dataset indices, seed) each
            skip = run.start_it if epoch == run.start_epoch else 0
            for it, (x, y) in enumerate(run.batches.epoch(batches[skip:], run.generator),
                                        start=skip):
                run.tokens += y.numel()  # the handout's (y >= 0).sum(): padding too
                loss = one_step(model, optimizer, autocast, x, y, config, run.device)

                # decay the learning rate based on our progress (after the step, as the handout)
                if config.lr_decay:
                    lr = config.learning_rate * lr_multiplier(run.tokens, run.schedule)
                    for param_group in optimizer.param_groups:
                        param_group['lr'] = lr
                else:
                    lr = config.learning_rate

                run.progress.log(run.step, loss, lr, epoch, it, run.tokens)
                run.step += 1
                extras.call(run, 'on_step_end', epoch, it)  # a stop request: checkpoint, interrupt
            run.progress.epoch_end(run.tokens, saving=config.ckpt_path is not None)
            if run.test_dataset is not None:
                evaluate_loss(run, run.test_dataset, autocast)
                model.train()
            run.save_checkpoint()
            run.epochs_trained = epoch + 1
            if extras.call(run, 'on_epoch_end', epoch):  # budget re-plan or stop; periodic checkpoint
                break
            epoch += 1
    finally:
        if run.progress is not None:  # (None: an extra refused the run as it started)
            run.progress.close(run.tokens)
        run.batches.close()  # the workers stop (what they built ahead is dropped)
        extras.call(run, 'on_train_end')
        run.wrapped = run.plan.wrapped = None  # (a DDP wrapper holds the process group)


@torch.no_grad()
def evaluate_loss(run, dataset, autocast):
    run.model.eval()
    losses = []
    generator = torch.Generator().manual_seed(0)
    for batch in batch_indices(len(dataset), run.config.batch_size, generator):
        x, y = trim_padding(*collate(dataset, *batch))
        with autocast:
            _, loss = run.model(x.to(run.device), y.to(run.device))
        losses.append(float(loss))
    print("test loss: %f" % (sum(losses) / max(1, len(losses))))
