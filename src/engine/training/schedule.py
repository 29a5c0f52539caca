"""Engine (free to change): the learning-rate schedule.

The handout's: a linear warmup, then a cosine down to a floor of 10% at final_tokens, read from
the tokens trained (padding counted). A run's Schedule holds its numbers (the epochs, where the
cosine ends, where it was laid anew): a time budget (machine/budget.py) fits them to the machine
and may re-lay the rest of the cosine as the epochs run; a CPU recipe may hold the peak longer
(decay_share)."""
import math


def lr_multiplier(tokens, plan):
    """The handout's schedule: linear warmup over warmup_tokens, then cosine down to a floor of
    10% at final_tokens; `tokens` counts every target position, padding included. `plan`: the
    run's Schedule (below), or a TrainerConfig (the schedule it asks for)."""
    if tokens < plan.warmup_tokens:
        return float(tokens) / float(max(1, plan.warmup_tokens))
    progress = cosine_progress(tokens, plan)
    return max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))


def schedule_progress(tokens, plan):
    """How far along the schedule `tokens` are: 0 at the end of the warmup, 1 at final_tokens.
    Where a time budget re-planned the epochs mid-run (machine/budget.py), the rest of the
    schedule is laid over them: plan.relaid = (t0, p0, t1, p1) takes progress p0 at t0 on to p1
    at t1."""
    relaid = getattr(plan, 'relaid', None)
    if relaid is not None and tokens >= relaid[0]:
        t0, p0, t1, p1 = relaid
        return p0 + (min(tokens, t1) - t0) * (p1 - p0) / max(1.0, t1 - t0)
    return float(tokens - plan.warmup_tokens) / float(max(1, plan.final_tokens - plan.warmup_tokens))


def cosine_progress(tokens, plan):
    """The progress the handout's cosine (lr_multiplier) turns into the learning rate:
    the schedule's own, or with plan.decay_share (a CPU recipe's) the progress at which that
    cosine gives the peak rate held until the last decay_share of the schedule, then a straight
    line down to the floor. A run that gets few steps spends more of them at the peak (measured:
    docs/cpu-recipe.md, E23-E26); the handout's line stays as it is."""
    progress = schedule_progress(tokens, plan)
    share = getattr(plan, 'decay_share', None)
    if not share:
        return progress
    rate = min(1.0, max(0.0, (1.0 - progress) / share))  # the straight line, 1 before it starts
    return math.acos(2.0 * rate - 1.0) / math.pi  # 0.5 * (1 + cos(pi * this)) == rate


class Schedule:
    """The one home of the run's schedule numbers (its configuration keeps what was asked for):
    the epochs to train, where the cosine ends, and where it was laid anew. It starts as the
    plan made them fit a time budget (plan.py), else as the config asks; the budget re-plans it
    as the epochs run (TimeBudget), a resumed run restores it (checkpoint.py)."""

    def __init__(self, config, plan=None):
        planned = plan is not None and plan.epochs is not None
        self.max_epochs = plan.epochs if planned else config.max_epochs
        self.final_tokens = plan.final_tokens if planned else config.final_tokens
        self.warmup_tokens = config.warmup_tokens
        self.decay_share = getattr(config, 'decay_share', None)  # see cosine_progress
        self.relaid = None  # (t0, p0, t1, p1): a budget re-planned the epochs, see cosine_progress

    def progress(self, tokens):
        """schedule_progress on this schedule (the time budget, which re-lays it, reads it so)."""
        return schedule_progress(tokens, self)

    def state_dict(self):
        # the keys resumable checkpoints have held since budgets could re-plan
        return {'max_epochs': self.max_epochs, 'final_tokens': self.final_tokens,
                'relaid': self.relaid}

    def load_state_dict(self, state):
        self.max_epochs, self.final_tokens = state['max_epochs'], state['final_tokens']
        relaid = state.get('relaid')
        self.relaid = tuple(relaid) if relaid is not None else None
