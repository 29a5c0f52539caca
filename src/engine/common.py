"""Engine (free to change): one-line errors, whole-or-nothing writes, shared helpers.

The engine's shared pieces (not the handout's): bad input as one clear error line
(UsageError, OneLineParser), files written whole or not at all (atomic_write, WriteFailed,
save_state_dict), the tensorboard writer made at the first scalar, the params' key/shape
comparison and the checkout's commit."""
import argparse
import errno
import os
import subprocess
import tempfile


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line, `error: <what> (see <prog> --help)`, exit status 2."""
    def error(self, message):
        self.exit(2, f'error: {message} (see {self.prog} --help)\n')


MAX_BUDGET_MINUTES = 7 * 24 * 60  # a time budget longer than a week is a typo, not a plan


class UsageError(Exception):
    """Bad input from the user (a path, a flag, a file's contents). run.py prints
    `error: <message>` on one line and exits with status 2; no traceback."""


class WriteFailed(UsageError):
    """A file the command writes could not be written (a full disk, a folder made read-only
    meanwhile): one line, like bad input, and the file it would replace is as it was."""


def atomic_write(path, write):
    """Call write(tmp_path), then rename the finished file over `path`: an interrupted run leaves
    the old file or the new one, never a truncated one. The temporary file has the final file's
    name (in a temporary folder beside it) because torch.save records that name in the archive:
    the bytes are then the same as a direct torch.save(obj, path) writes."""
    given, path = path, os.path.abspath(os.fspath(path))
    try:
        folder = tempfile.mkdtemp(dir=os.path.dirname(path), prefix='.tmp-')
    except OSError as e:
        raise WriteFailed(f'cannot write {given}: {e.strerror or e}') from e
    tmp = os.path.join(folder, os.path.basename(path))
    try:
        write(tmp)
        # on disk before the rename, so that a machine that goes down right after it cannot
        # leave an empty file under the final name (the rename itself is atomic)
        with open(tmp, 'rb') as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:  # (torch.save's own error on a full disk is a RuntimeError: below)
        raise WriteFailed(f'cannot write {given}: {e.strerror or e} (nothing replaced: '
                          'what was there is as it was)') from e
    except RuntimeError as e:
        # torch's writer words a full disk many ways ("file write failed", "unexpected pos",
        # "iostream error"): the file system says whether that is what happened
        if not disk_full(folder):
            raise
        raise WriteFailed(f'cannot write {given}: {os.strerror(errno.ENOSPC)} (nothing '
                          'replaced: what was there is as it was)') from e
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
        os.rmdir(folder)


def disk_full(folder, room=1 << 20):
    """Whether the file system of `folder` has less than `room` bytes left for this user (a
    writer that failed there ran out of space, whatever its error says)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < room


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
    import torch  # (here: the grader's torch-free scripts use this module's other pieces)
    model = getattr(model, 'module', model)
    model = getattr(model, '_orig_mod', model)
    atomic_write(path, lambda tmp: torch.save(model.state_dict(), tmp))


COMMIT_ENV = 'A5_COMMIT'  # the commit of a copied working tree without .git (gpu_check --commit)


def source_commit(repo=None):
    """$A5_COMMIT where it is set (gpu_check's --commit: a copied tree may carry a stale .git),
    else the commit of the checkout `repo` (default: this code's), with '+uncommitted changes'
    when tracked files differ, else 'unknown'."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    repo = repo or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        rev = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=repo, text=True,
                             capture_output=True)
        if rev.returncode == 0 and rev.stdout.strip():
            dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'],
                                   cwd=repo, text=True, capture_output=True).stdout.strip()
            return rev.stdout.strip() + ('+uncommitted changes' if dirty else '')
    except OSError:
        pass
    return 'unknown'


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
