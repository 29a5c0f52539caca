"""Engine (free to change): timing a trainer's steps on this machine.

Timing a trainer's steps on this machine (engine, not the handout): what precision 'auto'
(cpu_paths) and the time budget (budget) measure, with steps that change nothing."""
import torch

from engine.batches import batch_indices, collate
from engine.devices import autocast, random_states, set_random_states


def timed_steps(trainer, precision, warm, timed, ahead=False, stop=None):
    """For the extras that measure this machine (cpu_paths, budget): seconds of each of the
    `timed` training steps in `precision` (after `warm` untimed ones) on the first batches of
    a fixed shuffle of the trainer's dataset. The steps change nothing: they use an optimizer of their
    own (lr 0), and the weights, the random states and the token count are put back. ahead:
    the batches are built before the clock starts (workers build them ahead of the model);
    stop(times): True ends the timing early."""
    raw_model = trainer.model
    weights = {k: v.clone() for k, v in raw_model.state_dict().items()}
    rng = random_states(trainer.device)
    optimizer = trainer.make_optimizer(lr=0.0)
    order = batch_indices(len(trainer.train_dataset), trainer.config.batch_size,
                          torch.Generator().manual_seed(0))
    times, tokens = [], trainer.tokens
    for i in range(warm + timed):
        batch = order[i % len(order)]
        if ahead:
            ready = collate(trainer.train_dataset, *batch)
        start = trainer.clock()
        x, y = ready if ahead else collate(trainer.train_dataset, *batch)
        loss = trainer._step(trainer.wrapped, optimizer, autocast(trainer.device, precision), x, y)
        float(loss)  # waits for the device
        if i >= warm:
            times.append(trainer.clock() - start)
            if stop is not None and stop(times):
                break
    raw_model.load_state_dict(weights)
    trainer.tokens = tokens
    set_random_states(rng, trainer.device)
    return times
