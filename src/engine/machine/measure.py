"""Engine (free to change): timing training steps on this machine.

The handout's step, run and undone: what the run's plan (plan.py) measures before the Trainer
exists."""
import torch

from engine import distributed
from engine.fast.batches import batch_indices, collate
from engine.devices import autocast, random_states, set_random_states


def median(values):
    return sorted(values)[len(values) // 2]  # one slow step is no trend


class StepTimer:
    """Times `step` (the handout's, loop.train_step) of `model` on the first batches of a
    fixed shuffle of `dataset`, changing nothing: the steps use an optimizer of their own
    (`optimizer(model, config, 0.0)`: lr 0), and the weights and the random states are put back."""

    def __init__(self, model, dataset, config, device, step, optimizer, clock):
        self.dataset, self.config, self.device = dataset, config, torch.device(device)
        self.step, self.optimizer, self.clock = step, optimizer, clock
        self.use(model)

    def use(self, model):
        """Time `model` from now on; `wrapped` is the model its steps call (DDP under torchrun,
        compiled when asked), which the trainer can take over rather than compile it again."""
        self.model = model
        self.wrapped = distributed.wrapped(model, self.device, self.config.compile)

    def times(self, precision, warm, timed, ahead=False, stop=None):
        """Seconds of each of the `timed` steps in `precision`, after `warm` untimed ones.
        ahead: the batches are built before the clock starts (workers build them ahead of the
        model); stop(times): True ends the timing early."""
        weights = {k: v.clone() for k, v in self.model.state_dict().items()}
        rng = random_states(self.device)
        optimizer = self.optimizer(self.model, self.config, 0.0)
        order = batch_indices(len(self.dataset), self.config.batch_size,
                              torch.Generator().manual_seed(0))
        times = []
        for i in range(warm + timed):
            batch = order[i % len(order)]
            if ahead:
                ready = collate(self.dataset, *batch)
            start = self.clock()
            x, y = ready if ahead else collate(self.dataset, *batch)
            loss = self.step(self.wrapped, optimizer, autocast(self.device, precision), x, y,
                             self.config, self.device)
            float(loss)  # waits for the device
            if i >= warm:
                times.append(self.clock() - start)
                if stop is not None and stop(times):
                    break
        self.model.load_state_dict(weights)
        set_random_states(rng, self.device)
        return times
