"""Engine (free to change): training under torchrun.

DistributedDataParallel: joining the process group, and the few numbers the ranks must agree on.
Every rank builds the same global batch (the examples and random corruptions of a one-process
run) and trains on its slice of the rows, weighted so that DDP's average gradient is the
one-process gradient exactly."""
import atexit
import contextlib
import os

import torch
import torch.distributed as dist


def init(device):
    """Under torchrun (WORLD_SIZE > 1): join the process group, NCCL on GPUs, gloo on CPUs.
    Returns the device this rank uses."""
    if int(os.environ.get('WORLD_SIZE', '1')) <= 1:
        return device
    # Destroying the group at exit, while the interpreter still runs, joins gloo's worker threads.
    # Left running, a worker can free the tensor of the last all_reduce once the shutdown has
    # begun; that takes the GIL, a thread asking for it then is ended inside the destructor, and
    # the rank aborts ('terminate called without an active exception': 3 runs in 40 of a 1-epoch
    # test on 2 CPU cores with 4 busy loops beside it; 0 in 80 since). For destroying to end the
    # threads, nothing else may hold the group: torch.distributed.nn (torch 2.13) binds it as a
    # default argument of its functions when first imported (DDP imports it), so it is imported
    # before the group exists. tests/engine/test_resume.py checks that no gloo thread is left.
    import torch.distributed.nn  # noqa: F401
    dist.init_process_group('nccl' if device == 'cuda' else 'gloo')
    atexit.register(dist.destroy_process_group)
    if device == 'cuda':
        local_rank = int(os.environ.get('LOCAL_RANK', '0'))
        torch.cuda.set_device(local_rank)
        device = f'cuda:{local_rank}'
    return device


def active():
    return dist.is_available() and dist.is_initialized()


def rank():
    """This process's rank (0 without torchrun): only rank 0 writes files and logs."""
    return dist.get_rank() if active() else 0


def world():
    return dist.get_world_size() if active() else 1


def agree(value, device, op):
    """`value` (a number) reduced over the ranks with `op` ('max', 'min', 'sum'); itself alone."""
    if not active():
        return value
    t = torch.tensor([float(value)], device=device)
    dist.all_reduce(t, op={'max': dist.ReduceOp.MAX, 'min': dist.ReduceOp.MIN,
                           'sum': dist.ReduceOp.SUM}[op])
    return t.item()


def gather(obj):
    """Every rank's `obj` (picklable), in rank order: [obj] without torchrun. All ranks call it."""
    if not active():
        return [obj]
    out = [None] * world()
    dist.all_gather_object(out, obj)
    return out


def shard(x, y, device):
    """This rank's rows of a global batch and the weight of its mean loss: its share of the
    batch's non-PAD targets times the number of ranks (the loss is a mean over the non-PAD targets
    of the whole batch, so DDP's gradient average then equals the one-process gradient). Every
    rank holds the whole batch (on the CPU), so the weight is counted here, a Python number: no
    copy to the device and no exchange between ranks per step."""
    n = world()
    total = int((y != 0).sum())
    x, y = x.tensor_split(n)[rank()], y.tensor_split(n)[rank()]
    weight = int((y != 0).sum()) * n / total if total else 0.0
    if len(x) == 0:  # a last batch smaller than the number of ranks: a dummy row, weight 0
        x, y, weight = x.new_ones(1, 1), y.new_ones(1, 1), 0.0
    return x, y, weight


def accumulating(model, accumulate):
    """Where `accumulate` (a step's backward that is not its last): DDP's no_sync on the model a
    step calls (compiled or not), so that its gradients add up here and the ranks exchange their
    sum once, after the step's last backward; elsewhere nothing."""
    while accumulate and model is not None:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            return model.no_sync()
        model = getattr(model, 'compiled', None) or getattr(model, '_orig_mod', None)
    return contextlib.nullcontext()


def global_loss(loss):
    """The global batch's mean loss from each rank's weighted one (see shard)."""
    loss = loss / world()
    dist.all_reduce(loss)
    return loss


class GraphedSteps(torch.nn.Module):
    """A model compiled with mode='reduce-overhead', as a training step calls it: on a GPU its
    steps replay CUDA graphs, whose outputs live in memory the next replay overwrites, while the
    trainer keeps each step's loss to read later. Each call opens a new step and hands out
    copies (a scalar loss: one small copy)."""

    def __init__(self, compiled):
        super().__init__()
        self.compiled = compiled

    def forward(self, *args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        out = self.compiled(*args, **kwargs)
        return tuple(t.clone() if torch.is_tensor(t) else t for t in out)


def wrapped(model, device, compile=False):
    """The model a training step calls: DDP-wrapped under torchrun, compiled when asked
    (compile: True or 'default', or 'reduce-overhead': CUDA graphs on a GPU as well; 'graphs'
    compiles nothing). Any other value is a caller's mistake: flags.check_args resolves
    'auto', and an unresolved one compiled the model unasked."""
    if compile not in (False, None, True, 'default', 'reduce-overhead', 'graphs'):
        raise ValueError(f'wrapped: compile must be False, True, \'default\', '
                         f'\'reduce-overhead\' or \'graphs\', not {compile!r}')
    if active():
        # broadcast_buffers=False: the buffers (causal masks, RoPE tables) never change, so
        # re-sending them before every forward pass is wasted traffic
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == 'cuda' else None,
            broadcast_buffers=False)
    if compile and compile != 'graphs':  # (graphs: engine/fast/graphs.py records the whole step)
        # A step's groups of rows have the columns their rows need (fastpath.row_groups): a
        # graph for any width, or it would recompile for every new one.
        graphs = compile == 'reduce-overhead'
        model = torch.compile(model, dynamic=True if device.type == 'cpu' else None,
                              mode='reduce-overhead' if graphs else None)
        if graphs:
            model = GraphedSteps(model)
    return model
