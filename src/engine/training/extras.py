"""Engine (free to change): the trainer's extras, chosen and ordered.

What a run attaches to the handout's loop at its named points, in the order they act there. The
machine is measured before the Trainer exists (plan.py); during training only the re-plan acts
(the threads at the load, the epochs at the pace), resume and the notes, and an epoch's re-plan comes
before the checkpoint that saves it; the epochs' clock comes next, and last, a command beside
others in its process hands on its turn (turns.py)."""
import sys

from engine.machine.budget import TimeBudget
from engine.training.checkpoint import Resumable
from engine.machine.cpu_load import FollowLoad, SawLoad, follows_load
from engine.machine.plan import budgeted
from engine.training.progress import EpochClock


class Notes:
    """Says the config's notes on stderr as training starts: after the plan and a resume, either
    of which may refuse the run in one error line, which the notes would otherwise precede."""

    def __init__(self, notes):
        self.notes = notes

    def on_train_start(self, run):
        if run.rank == 0:
            for line in self.notes:
                print(line, file=sys.stderr, flush=True)


def for_run(run):
    """The extras a run's config asks for; each is handed the run (loop.Run) at its points."""
    config = run.config
    extras = []
    if follows_load(config, run.device):
        extras.append(FollowLoad(times=run.cpu_times))
    if config.under_load is not None and run.device.type == 'cpu':
        extras.append(SawLoad(config.under_load, times=run.cpu_times))
    if budgeted(config):
        extras.append(TimeBudget(run.clock))
    if config.resume_path is not None:
        extras.append(Resumable())
    if config.notes:
        extras.append(Notes(config.notes))
    extras.append(EpochClock(run.clock))
    if config.turn is not None:  # beside other commands in this process: its turn ends
        extras.append(config.turn)
    return extras


def call(run, point, *args):
    """Ask every extra of the run that acts at `point`; True when one of them asks to stop."""
    answers = [getattr(c, point)(run, *args) for c in run.callbacks if hasattr(c, point)]
    return any(answers)
