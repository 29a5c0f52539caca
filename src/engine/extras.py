"""Engine (free to change): the trainer's extras, chosen and ordered.

The trainer's extras (engine, not the handout): what a run attaches to the handout's loop at
its named points, in the order they act there. The machine is measured before the Trainer
exists (plan.py); during training only the re-plan acts (the threads at the load, the epochs at
the pace) and resume, and an epoch's re-plan comes before the checkpoint that saves it; the
epochs' clock comes last."""
from engine.budget import TimeBudget, budgeted
from engine.checkpoint import Resumable
from engine.cpu_load import FollowLoad, SawLoad
from engine.plan import follows
from engine.progress import EpochClock


def for_trainer(trainer):
    """The extras a Trainer's config asks for."""
    config = trainer.config
    extras = []
    if follows(config, trainer.device):
        extras.append(FollowLoad(times=trainer.cpu_times))
    if config.under_load is not None and trainer.device.type == 'cpu':
        extras.append(SawLoad(config.under_load, times=trainer.cpu_times))
    if budgeted(config):
        extras.append(TimeBudget(trainer.clock))
    if config.resume_path is not None:
        extras.append(Resumable())
    extras.append(EpochClock(trainer.clock))
    return extras
