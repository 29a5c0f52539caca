"""Engine (free to change): the training batches.

The handout's batches of the dataset, built so that every process that builds one (this one, a
DataLoader worker, a resumed run, another rank) builds the same, and cut to the columns that can
change the loss.

Each epoch is the dataset in its order (the handout's DataLoader does not shuffle) or, where a
preset asks, a fresh shuffle, cut into batches; each batch carries the seed of its examples'
random draws (CharCorruptionDataset draws its corruptions from Python's `random`). Worker
processes, when asked for, live for the whole run, not one epoch, and build the next epoch's
batches before it starts.
"""
import collections
import functools
import itertools
import random
import signal

import torch
from torch.utils.data import DataLoader, Sampler

from engine.fast.fastpath import row_groups


def trim_padding(x, y, multiple=1):
    """Drop the trailing columns whose targets are PAD (0) in every row. (Exact for all four
    variants: the model is causal and ignores PAD targets; the perceiver's bottleneck slots past
    the last column reach only positions after it.)"""
    used = (y != 0).any(dim=0).nonzero()
    keep = int(used[-1]) + 1 if len(used) else 1
    keep = min(x.size(1), -(-keep // multiple) * multiple)
    return x[:, :keep].contiguous(), y[:, :keep].contiguous()


def to_device(x, y, device, config):
    """(x, y, spans): a training batch as the step takes it. x and y trimmed to a multiple of
    config.pad_multiple columns (trim_padding; 0: as they are, a recorded step's own input
    tensors, engine/fast/graphs.py), their rows in groups by length (`spans`, counted while y is
    on the host: grouped), and on `device`, pinned after the trim (which copies) on a GPU, so
    that the copies overlap its work instead of waiting for it."""
    if config.pad_multiple:
        x, y = trim_padding(x, y, config.pad_multiple)
    spans = getattr(config, 'spans', None)  # (graphs.Given's: a recording's own)
    if spans is None:
        x, y, spans = grouped(x, y, groups_for(config, device, len(x)), config.pad_multiple or 1)
    if device.type == 'cuda' and not x.is_cuda:
        x, y = x.pin_memory(), y.pin_memory()
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True), spans


def groups_for(config, device, rows):
    """How many groups of rows a training step computes (fastpath.row_groups): config.row_groups
    where set (1: the batch whole); else on a CPU groups of at least 16 rows, at most 8 (fewer
    calls cost more than the columns they save: results/grouped-steps.md); on a GPU one (an
    eager step's small kernels wait on their launches: each group adds its own)."""
    if config.row_groups:
        return config.row_groups
    return max(1, min(8, rows // 16)) if device.type == 'cpu' else 1


def grouped(x, y, groups, width=1):
    """(x, y, spans): a batch on the host, its rows sorted by length where there are groups, and
    each group's (rows, columns), columns a multiple of `width` (fastpath.row_groups)."""
    order, spans = row_groups(y, groups, width)
    if order is not None:
        x, y = x[order], y[order]
    return x, y, spans


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
    """The (x, y) batches of the epochs, built in this process or, with `workers` > 0, by worker
    processes started once for the run. A worker builds a batch as collate does here, so the
    batches are the in-process ones, bit for bit. (Not pinned here: the trainer trims each
    batch, a copy, and pins that.)

    With workers, the batches after an epoch's are the next epoch's as the trainer's generator
    will draw them, handed to the workers as the epoch's last ones are: the workers build them
    while the epoch ends (its losses read back, its checkpoint), and the next epoch starts
    without waiting for its first batch, where the loader restarted each epoch would wait
    (scripts/dev/benchmark_loop.py). An epoch that asks for other batches (a resumed run's)
    restarts the loader: what was built ahead is dropped, never trained on."""

    across = True  # the next epoch's batches built ahead (benchmark_loop.py: False to compare)
    as_bytes = True  # workers send batches as bytes (benchmark_loop.py: False to compare)

    def __init__(self, dataset, workers=0, batch_size=1, shuffle=False):
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, shuffle
        self.loader = self.iterator = None
        self.sampler = _StreamSampler()  # what the workers build next: self.sampler.stream
        if workers > 0:
            # a generator of its own: the loader draws its workers' base seed from it, not from
            # torch's global one, whose next numbers are this run's dropout masks
            self.loader = DataLoader(_BatchDataset(dataset, self.as_bytes), batch_size=None,
                                     sampler=self.sampler,
                                     num_workers=workers,
                                     persistent_workers=True, prefetch_factor=4,
                                     worker_init_fn=_leave_stop_signals_to_the_run,
                                     generator=torch.Generator().manual_seed(0))

    def draw(self, generator):
        """An epoch's batches, (dataset indices, seed) each, drawn from `generator`."""
        return batch_indices(len(self.dataset), self.batch_size, generator, self.shuffle)

    def epoch(self, batches, generator=None):
        """The (x, y) of `batches`, in order; `generator` (the one that drew them, as it is
        after) draws the epochs after, which workers build ahead."""
        if self.loader is None:
            return (collate(self.dataset, *batch) for batch in batches)
        stream = self.sampler.stream
        if stream is None or not stream.starts_with(batches):
            following = None
            if self.across and generator is not None:
                copy = torch.Generator().set_state(generator.get_state())
                # (self.draw's call, not self.draw: the stream would hold the Batches, a cycle
                # that keeps the workers alive until a garbage collection)
                following = functools.partial(batch_indices, len(self.dataset), self.batch_size,
                                              copy, self.shuffle)
            self.sampler.stream = _Stream(batches, following)
            self.iterator = iter(self.loader)  # (a restart drops what was built ahead)
        return self._take(len(batches))

    def close(self):
        """Stop the workers (the run's end): what they built ahead is dropped. (Left building,
        they would keep the interpreter from exiting: they ignore SIGTERM.)"""
        if self.iterator is not None:
            self.iterator._shutdown_workers()
        self.loader = self.iterator = None

    def _take(self, n):
        for _ in range(n):
            batch = next(self.iterator)
            self.sampler.stream.out.popleft()  # the workers' batches come in the order handed out
            yield batch.tensors() if isinstance(batch, BatchBytes) else batch


def _leave_stop_signals_to_the_run(worker_id):
    """A worker ignores Ctrl-C and SIGTERM: sent to the whole process group (a terminal's Ctrl-C,
    GNU timeout, torchrun), they would end the workers first, and the loader's error about them
    would end the run before it wrote its resumable checkpoint. The workers end with the run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class _BatchDataset:
    """A dataset of whole batches for the DataLoader's workers: item (indices, seed) is
    collate(dataset, indices, seed), as bytes (to_bytes) where Batches.as_bytes says so."""

    def __init__(self, dataset, as_bytes):
        self.dataset, self.as_bytes = dataset, as_bytes

    def __getitem__(self, batch):
        x, y = collate(self.dataset, *batch)
        return to_bytes(x, y) if self.as_bytes else (x, y)


SMALL = (torch.uint8, torch.int16, torch.int32)  # what a batch's ids may travel as


def to_bytes(x, y):
    """A batch as a worker sends it: its ids as the bytes of the smallest integer type that
    holds them. (A tensor crosses processes as a shared-memory file descriptor passed over a
    socket, which costs the loop more than copying the bytes: scripts/dev/benchmark_loop.py
    measures both.) Batches that are not two id (int64) tensors of
    one shape go as they are."""
    if x.shape != y.shape or x.dtype != torch.long or y.dtype != torch.long:
        return x, y
    both = torch.stack([x, y])
    low, high = (int(both.min()), int(both.max())) if both.numel() else (0, 0)
    small = next((t for t in SMALL if torch.iinfo(t).min <= low and high <= torch.iinfo(t).max),
                 torch.long)
    return BatchBytes(tuple(both.shape), small, both.to(small).numpy().tobytes())


class BatchBytes(collections.namedtuple('BatchBytes', 'shape small data')):
    """A batch as a worker sends it (to_bytes): x and y stacked, their shape, the type the ids
    travel as, and their bytes."""

    def tensors(self):
        """(x, y) as they were sent, bit for bit."""
        both = torch.frombuffer(bytearray(self.data), dtype=self.small).view(self.shape).long()
        return both[0], both[1]


class _Stream:
    """The batches handed to the workers, in order: an epoch's, then, where `following` draws
    them (one epoch a call), those of the epochs after it."""

    def __init__(self, batches, following=None):
        self.ahead = collections.deque(batches)  # drawn, not yet handed to the workers
        self.out = collections.deque()  # handed to the workers, not yet taken by the loop
        self.following = following

    def __iter__(self):
        while self.ahead or self.draw():
            batch = self.ahead.popleft()
            self.out.append(batch)
            yield batch

    def draw(self):
        """Draw the next epoch's batches into `ahead`; False where none were drawn."""
        drawn = [] if self.following is None else self.following()
        self.ahead.extend(drawn)
        return bool(drawn)

    def starts_with(self, batches):
        """Whether the loop's next batches are `batches` (drawing epochs ahead to see)."""
        while len(self.out) + len(self.ahead) < len(batches) and self.draw():
            pass
        upcoming = itertools.islice(itertools.chain(self.out, self.ahead), len(batches))
        return len(self.out) + len(self.ahead) >= len(batches) and list(upcoming) == batches


class _StreamSampler(Sampler):
    """The DataLoader's sampler: the current stream's batches (a new stream, a new iteration)."""

    def __init__(self):
        self.stream = None

    def __iter__(self):
        return iter(self.stream)
