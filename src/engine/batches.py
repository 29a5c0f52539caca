"""Engine (free to change): the training batches.

The training batches: the handout's batches of the dataset, built so that every process that
builds one (this one, a DataLoader worker, a resumed run, another rank) builds the same, and cut
to the columns that can change the loss.

Each epoch is the dataset in its order (the handout's DataLoader does not shuffle) or, where a
preset asks, a fresh shuffle, cut into batches; each batch carries the seed of its examples'
random draws (CharCorruptionDataset draws its corruptions from Python's `random`). Worker
processes, when asked for, live for the whole run, not one epoch.
"""
import random
import signal

import torch
from torch.utils.data import DataLoader, Sampler


def trim_padding(x, y, multiple=1):
    """Drop the trailing columns whose targets are PAD (0) in every row. (Exact for all four
    variants: the model is causal and ignores PAD targets; the perceiver's down projection then
    uses only as many bottleneck slots as there are positions, see model.DownProjectBlock.)"""
    used = (y != 0).any(dim=0).nonzero()
    keep = int(used[-1]) + 1 if len(used) else 1
    keep = min(x.size(1), -(-keep // multiple) * multiple)
    return x[:, :keep].contiguous(), y[:, :keep].contiguous()


def to_device(x, y, device, multiple=1):
    """A training batch trimmed (trim_padding) and on `device`: pinned after the trim (which
    copies) on a GPU, so that the copies overlap its work instead of waiting for it. multiple 0:
    as it is (a recorded step's own input tensors, engine/graphs.py)."""
    if multiple:
        x, y = trim_padding(x, y, multiple)
    if device.type == 'cuda' and not x.is_cuda:
        x, y = x.pin_memory(), y.pin_memory()
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def batch_indices(n, batch_size, generator, shuffle=True):
    """One epoch's batches, (dataset indices, seed) each: the dataset in its order (shuffle
    False, the handout's) or a fresh shuffle, cut into batch_size pieces, and for each a seed of
    its examples' random draws. All from `generator`: a batch is the same whichever process
    builds it, and a resumed epoch draws the same."""
    order = torch.randperm(n, generator=generator).tolist() if shuffle else list(range(n))
    pieces = [order[i:i + batch_size] for i in range(0, n, batch_size)]
    seeds = torch.randint(2 ** 62, (len(pieces),), generator=generator).tolist()
    return list(zip(pieces, seeds))


def steps_per_epoch(n, batch_size):
    """The batches of an epoch of n examples (the last one may be short)."""
    return -(-n // batch_size)


def workers_for(config, device):
    """The batch-building processes a run starts: on a GPU the DataLoader's num_workers; on a
    CPU cpu_workers (they take cores from the model: none unless asked)."""
    return config.cpu_workers if device.type == 'cpu' else config.num_workers


def collate(dataset, indices, seed=None):
    """The examples at `indices`, stacked: (x, y). With `seed`, their random draws come from
    random.seed(seed), and the caller's `random` is left as it was."""
    if seed is None:
        xs, ys = zip(*(dataset[j] for j in indices))
        return torch.stack(xs), torch.stack(ys)
    state = random.getstate()
    random.seed(seed)
    try:
        return collate(dataset, indices)
    finally:
        random.setstate(state)


class Batches:
    """The (x, y) batches of one epoch's batch_indices, built in this process or, with
    `workers` > 0, by worker processes started once for the run. A worker builds a batch as
    collate does here, so the batches are the in-process ones, bit for bit. (Not pinned here:
    the trainer trims each batch, a copy, and pins that.)"""

    def __init__(self, dataset, workers=0):
        self.dataset = dataset
        self.loader = None
        self.epoch_batches = []  # the workers' sampler reads the current epoch's batches here
        if workers > 0:
            # a generator of its own: the loader draws its workers' base seed from it, not from
            # torch's global one, whose next numbers are this run's dropout masks
            self.loader = DataLoader(_BatchDataset(dataset), batch_size=None,
                                     sampler=_Refillable(self.epoch_batches),
                                     num_workers=workers,
                                     persistent_workers=True, prefetch_factor=4,
                                     worker_init_fn=_leave_stop_signals_to_the_run,
                                     generator=torch.Generator().manual_seed(0))

    @property
    def ahead(self):
        """Whether batches are built ahead of the model (by workers), not when it asks."""
        return self.loader is not None

    def epoch(self, batches):
        if self.loader is None:
            return (collate(self.dataset, *batch) for batch in batches)
        self.epoch_batches[:] = batches
        return iter(self.loader)


def _leave_stop_signals_to_the_run(worker_id):
    """A worker ignores Ctrl-C and SIGTERM: sent to the whole process group (a terminal's Ctrl-C,
    GNU timeout, torchrun), they would end the workers first, and the loader's error about them
    would end the run before it wrote its resumable checkpoint. The workers end with the run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class _BatchDataset:
    """A dataset of whole batches for the DataLoader's workers: item (indices, seed) is
    collate(dataset, indices, seed)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __getitem__(self, batch):
        return collate(self.dataset, *batch)


class _Refillable(Sampler):
    """A sampler over a list of batches the training loop refills each epoch."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(list(self.batches))

    def __len__(self):
        return len(self.batches)
