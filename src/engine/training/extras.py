"""Engine (free to change): the trainer's extras, chosen and ordered.

What a run attaches to the handout's loop at its named points, in the order they act there. The
machine is measured before the Trainer exists (plan.py); during training only the re-plan acts
(the threads at the load, the epochs at the pace) and resume, and an epoch's re-plan comes
before the checkpoint that saves it; the epochs' clock comes next, and last, a command beside
others in its process hands on its turn (turns.py)."""
from engine.machine.budget import TimeBudget, budgeted
from engine.training.checkpoint import Resumable
from engine.machine.cpu_load import FollowLoad, SawLoad
from engine.machine.plan import follows
from engine.training.progress import EpochClock
from engine.training import turns


def for_run(run):
    """The extras a run's config asks for; each is handed the run (loop.Run) at its points."""
    config = run.config
    extras = []
    if follows(config, run.device):
        extras.append(FollowLoad(times=run.cpu_times))
    if config.under_load is not None and run.device.type == 'cpu':
        extras.append(SawLoad(config.under_load, times=run.cpu_times))
    if budgeted(config):
        extras.append(TimeBudget(run.clock))
    if config.resume_path is not None:
        extras.append(Resumable())
    extras.append(EpochClock(run.clock))
    member = turns.current()
    if member is not None:  # beside other commands in this process: its turn ends
        extras.append(member)
    return extras
