"""Small helpers shared by the scripts in src/: the handout's utils (set_seed, top_k_logits,
sample, evaluate_places) plus what makes bad input one clear error line (OneLineParser,
UsageError), atomic writes, the tensorboard writer and the checkout's commit."""
import argparse
import os
import random
import subprocess
import tempfile

import torch
from torch.nn import functional as F


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line, `error: <what> (see <prog> --help)`, exit status 2."""
    def error(self, message):
        self.exit(2, f'error: {message} (see {self.prog} --help)\n')


MAX_BUDGET_MINUTES = 7 * 24 * 60  # a time budget longer than a week is a typo, not a plan


class UsageError(Exception):
    """Bad input from the user (a path, a flag, a file's contents). run.py prints
    `error: <message>` on one line and exits with status 2; no traceback."""


def set_seed(seed):
    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def top_k_logits(logits, k):
    v, ix = torch.topk(logits, k)
    out = logits.clone()
    out[out < v[:, [-1]]] = -float('Inf')
    return out


@torch.no_grad()
def sample(model, x, steps, temperature=1.0, sample=False, top_k=None):
    """The handout's decoding loop: take a conditioning sequence of indices in x (of shape (b,t))
    and predict the next token in the sequence, feeding the predictions back into the model each
    time. Clearly the sampling has quadratic complexity unlike an RNN that is only linear, and has
    a finite context window of block_size, unlike an RNN that has an infinite context window.
    Evaluation uses the equivalent batched decoder in decode.py; this one stays as the reference."""
    block_size = model.get_block_size()
    model.eval()
    for k in range(steps):
        x_cond = x if x.size(1) <= block_size else x[:, -block_size:]  # crop context if needed
        logits, _ = model(x_cond)
        # pluck the logits at the final step and scale by temperature
        logits = logits[:, -1, :] / temperature
        # optionally crop probabilities to only the top k options
        if top_k is not None:
            logits = top_k_logits(logits, top_k)
        # apply softmax to convert to probabilities
        probs = F.softmax(logits, dim=-1)
        # sample from the distribution or take the most likely
        if sample:
            ix = torch.multinomial(probs, num_samples=1)
        else:
            _, ix = torch.topk(probs, k=1, dim=-1)
        # append to the sequence and continue
        x = torch.cat((x, ix), dim=1)
    return x


def evaluate_places(filepath, predicted_places):
    """ Computes percent of correctly predicted birth places.

    Arguments:
      filepath: path to a file with our name, birth place data.
      predicted_places: a list of strings representing the
          predicted birth place of each person.

    Returns: (total, correct), floats
    """
    with open(filepath, encoding='utf-8') as fin:
        lines = [[field.strip() for field in x.rstrip('\r\n').split('\t')] for x in fin]
    return score_places(lines, predicted_places)


def score_places(lines, predicted_places):
    """evaluate_places on a file's lines already read and split at the tab (stripped fields;
    [''] for a blank line)."""
    # One prediction per line of the file. Beyond the handout (which fails on them with an
    # IndexError): an empty file and blank lines have no gold place and are not counted, and
    # each line has a gold place or not by itself (the handout's x.strip() would take the tab of
    # a line with an empty name or place, and judged the whole file by its first line).
    asked = [x for x in lines if x != ['']]
    if not any(len(x) > 1 for x in asked):
        print('No gold birth places provided; returning (0,0)')
        return (0, 0)
    assert len(lines) == len(predicted_places), (len(lines), len(predicted_places))
    rows = [(x, pred) for x, pred in zip(lines, predicted_places) if x != ['']]
    true_places = [x[1] if len(x) > 1 else None for x, _ in rows]
    total = len(true_places)
    correct = len(list(filter(lambda x: x[0] == x[1],
                              zip(true_places, [pred for _, pred in rows]))))
    return (float(total), float(correct))


def atomic_write(path, write):
    """Call write(tmp_path), then rename the finished file over `path`: an interrupted run leaves
    the old file or the new one, never a truncated one. The temporary file has the final file's
    name (in a temporary folder beside it) because torch.save records that name in the archive:
    the bytes are then the same as a direct torch.save(obj, path) writes."""
    path = os.path.abspath(os.fspath(path))
    folder = tempfile.mkdtemp(dir=os.path.dirname(path), prefix='.tmp-')
    tmp = os.path.join(folder, os.path.basename(path))
    try:
        write(tmp)
        # on disk before the rename, so that a machine that goes down right after it cannot
        # leave an empty file under the final name (the rename itself is atomic)
        with open(tmp, 'rb') as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
        os.rmdir(folder)


class LazyWriter:
    """A tensorboard SummaryWriter made at the first scalar logged: a run stopped before training
    (a time budget too small for one epoch) leaves no log folder behind."""

    def __init__(self, log_dir):
        self.log_dir, self.writer = log_dir, None

    def add_scalar(self, *args):
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter  # a slow import
            self.writer = SummaryWriter(log_dir=self.log_dir)
        self.writer.add_scalar(*args)

    def close(self):
        if self.writer is not None:
            self.writer.close()


def save_state_dict(model, path):
    """torch.save(model.state_dict(), path), atomically. Compiled or DDP-wrapped models are
    unwrapped so the keys stay the handout's."""
    model = getattr(model, 'module', model)
    model = getattr(model, '_orig_mod', model)
    atomic_write(path, lambda tmp: torch.save(model.state_dict(), tmp))


COMMIT_ENV = 'A5_COMMIT'  # the commit of a copied working tree without .git (gpu_check --commit)


def source_commit(repo=None):
    """The commit of the checkout `repo` (default: this code's), with '+uncommitted changes' when
    tracked files differ, else $A5_COMMIT (a copy of the tree without .git, as on a lent GPU
    machine), else 'unknown'."""
    repo = repo or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        rev = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=repo, text=True,
                             capture_output=True)
        if rev.returncode == 0 and rev.stdout.strip():
            dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'],
                                   cwd=repo, text=True, capture_output=True).stdout.strip()
            return rev.stdout.strip() + ('+uncommitted changes' if dirty else '')
    except OSError:
        pass
    return os.environ.get(COMMIT_ENV) or 'unknown'


def state_difference(saved, expected, saved_name='there'):
    """The first difference in keys or shapes between two state_dicts, in a phrase (`saved` is
    "there", `expected` "here"), or None when they match."""
    for key in sorted(set(saved) | set(expected)):
        if key not in saved or key not in expected:
            return f'{key} only {"here" if key in expected else saved_name}'
        a, b = tuple(saved[key].shape), tuple(expected[key].shape)
        if a != b:
            return f'{key} is {"x".join(map(str, a))} there, {"x".join(map(str, b))} here'
    return None
