"""Engine (free to change): the whole training step replayed from CUDA graphs (--compile graphs).

A step of the handout's model launches a few hundred small kernels. torch.compile's CUDA graphs
(--compile reduce-overhead) replay them, but compiling costs more than a short run saves
(docs/gpu.md). Here the step itself is recorded, with no compiler: forward, backward, gradient
clipping and AdamW,
once per batch shape, then replayed. What a recording fixes is made to hold:

- shapes: each batch is trimmed to a multiple of WIDTH columns and padded to the batch size with
  rows of PAD (0) targets, which the loss ignores, so a stage has a handful of shapes (the
  handout's pretraining one or two); with --row_groups, times the columns of its groups of rows
  (each a multiple of WIDTH);
- addresses: a replay reads the graph's own input tensors, so each batch is copied into them;
- the learning rate, which the handout's loop sets as a float after every step: AdamW reads it
  from a device tensor during the recording, and each replay first copies the float into it.

A shape's first batch is an eager step (AdamW's state and the libraries' workspaces exist before
anything is recorded); its second is recorded, then replayed, like every later one. Where a
recording fails (an operation this torch or GPU cannot record), the run goes on with eager
steps, saying so once: the step is an optimisation, not the assignment.
"""
import functools
import sys

import torch

from engine.fast.batches import grouped, groups_for, trim_padding

WIDTH = 32  # columns are padded to a multiple of this: at most block_size / WIDTH shapes


def steps(config, step):
    """The trainer's step: `step` (train_step), or its replays under --compile graphs."""
    if config.compile == 'graphs' and config.precision == 'fp16':  # (run.py refuses it first)
        raise ValueError('--compile graphs cannot record fp16\'s loss-scaled step')
    return CapturedSteps(step) if config.compile == 'graphs' else step


class Given:
    """The trainer's config, except that train_step takes the batch as it is (the recorded
    shape, already on the device: batches.to_device trims nothing for pad_multiple 0) in the
    recording's own groups of rows (`spans`: fastpath.row_groups')."""
    pad_multiple = 0

    def __init__(self, config, spans):
        self.config, self.spans = config, spans

    def __getattr__(self, name):
        return getattr(self.config, name)


class CudaGraphs:
    """torch's CUDA graphs, as CapturedSteps records and replays steps (tests use a stand-in)."""

    def __init__(self):
        self.stream = torch.cuda.Stream()

    def eager(self, step):
        """A step on a side stream, as torch asks of what runs before a recording."""
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            loss = step()
        torch.cuda.current_stream().wait_stream(self.stream)
        return loss

    def record(self, step, optimizer):
        """(replay, loss): the step recorded (not run), and the tensor each replay writes its
        loss into. Each graph keeps its own memory: shapes replay in any order."""
        for group in optimizer.param_groups:  # AdamW refuses a recording otherwise
            group['capturable'] = True
        graph = torch.cuda.CUDAGraph()
        try:
            # other threads may use CUDA meanwhile (a DataLoader's pinning thread, other models
            # of one process: training/turns.py): only this thread's calls must keep off
            with torch.cuda.graph(graph, capture_error_mode='thread_local'):
                loss = step()
        finally:
            for group in optimizer.param_groups:
                group['capturable'] = False
        return graph.replay, loss


class CapturedSteps:
    """Called as loop.train_step is (and returning the same: the batch's mean loss, a device
    tensor of its own); `step` is train_step itself."""

    def __init__(self, step):
        self.step, self.graphs = step, CudaGraphs()
        self.recorded = {}  # shape -> (replay, input x, input y, loss)
        self.seen = set()  # shapes that took their eager step
        self.lrs = None  # one device tensor per AdamW group, read by every recording
        self.failed = None  # why a recording failed: every step eager from then on

    def __call__(self, model, optimizer, autocast, x, y, config, device):
        if self.failed:
            return self.step(model, optimizer, autocast, x, y, config, device)
        batch = x, y
        x, y = self.shaped(x, y, config.batch_size)
        # a recording's shapes: the batch's, and its groups' rows and columns (the rows then
        # sorted by length)
        x, y, spans = grouped(x, y, groups_for(config, device, len(x)), WIDTH)
        shape = (tuple(x.shape), spans)
        if shape not in self.recorded:
            if shape not in self.seen:
                self.seen.add(shape)
                return self.graphs.eager(lambda: self.step(model, optimizer, autocast, x, y,
                                                           Given(config, spans), device))
            try:
                self.recorded[shape] = self.record(model, optimizer, autocast, x, y,
                                                   Given(config, spans), device)
            except RuntimeError as e:  # (torch.cuda.graph's errors: nothing of the step ran)
                self.failed = (str(e).strip() or type(e).__name__).splitlines()[0][:200]
                print(f'note: --compile graphs could not record the training step ({self.failed}); '
                      'eager steps from here on', file=sys.stderr, flush=True)
                return self(model, optimizer, autocast, *batch, config, device)
        replay, xs, ys, loss = self.recorded[shape]
        if xs.is_cuda:  # pinned, so that the copies wait for nothing
            x, y = x.pin_memory(), y.pin_memory()
        xs.copy_(x, non_blocking=True)
        ys.copy_(y, non_blocking=True)
        for group, lr in zip(optimizer.param_groups, self.lrs):
            lr.fill_(group['lr'])  # the rate the loop set after the last step
        replay()
        return loss.clone()  # the next replay overwrites `loss`; the loop keeps this one a while

    def record(self, model, optimizer, autocast, x, y, config, device):
        """(replay, input x, input y, loss) of a new recording of `step` for x's shape (and
        config's groups of rows: a Given)."""
        xs, ys = x.to(device), y.to(device)
        if self.lrs is None:
            self.lrs = [torch.tensor(float(g['lr']), device=device) for g in optimizer.param_groups]
        step = functools.partial(self.with_lr_tensors, model, optimizer, autocast, xs, ys,
                                 config, device)
        replay, loss = self.graphs.record(step, optimizer)
        return replay, xs, ys, loss

    def with_lr_tensors(self, model, optimizer, autocast, x, y, config, device):
        """train_step with AdamW reading each group's rate from self.lrs (then the floats back)."""
        floats = [g['lr'] for g in optimizer.param_groups]
        for group, lr in zip(optimizer.param_groups, self.lrs):
            group['lr'] = lr
        try:
            return self.step(model, optimizer, autocast, x, y, config, device)
        finally:
            for group, lr in zip(optimizer.param_groups, floats):
                group['lr'] = lr

    @staticmethod
    def shaped(x, y, rows):
        """The batch trimmed to a multiple of WIDTH columns (the targets' last non-PAD one) and
        padded with PAD rows to `rows`: the loss and every gradient are those of the batch."""
        x, y = trim_padding(x, y, WIDTH)
        if len(x) < rows:
            x = torch.cat([x, x.new_zeros(rows - len(x), x.size(1))])
            y = torch.cat([y, y.new_zeros(rows - len(y), y.size(1))])
        return x, y
