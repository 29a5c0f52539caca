"""Engine (free to change): the trainer's extras, chosen and ordered.

The trainer's extras (engine, not the handout): what a run attaches to the handout's loop at
its named points, in the order they act there. The precision is chosen before the budget times
steps, and an epoch's re-plan comes before the checkpoint that saves it."""
from engine.budget import TimeBudget
from engine.checkpoint import Resumable
from engine.cpu_load import FollowLoad
from engine.cpu_paths import ChoosePaths


def for_trainer(trainer):
    """The extras a Trainer's config asks for."""
    config = trainer.config
    extras = [ChoosePaths()]
    if config.follow_load and trainer.device.type == 'cpu' and not trainer.distributed \
            and config.cpu_workers == 0:  # (workers' CPU time would read as other processes')
        extras.append(FollowLoad(times=trainer.cpu_times))
    # a preset's budget over one epoch changes nothing (too small, it still trains that epoch):
    # nothing to measure; the user's own --time_budget is measured (too small, it is an error)
    if config.time_budget is not None and not (config.max_epochs == 1 and config.budget_may_grow):
        extras.append(TimeBudget(trainer.clock))
    if config.resume_path is not None:
        extras.append(Resumable())
    return extras
