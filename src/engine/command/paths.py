"""Engine (free to change): where a command may write.

Every output path is checked, before any work, against the command's other paths. Standard
library only (collect_submission's module uses it too).

An output must be a path to a regular file (or to nothing yet) in a folder that exists and can be
written, and must not be the same file as anything the command reads or writes besides it (a
symlink, `./` or `..` spelling of an input is the input: paths are compared resolved and, where
both exist, by device and inode), nor a file of another kind than it (params over a question
file: kind_problem). Each check returns the reason in words, or None.
"""
import fcntl
import os
import shutil
import tempfile
import zipfile


def same_file(a, b):
    """Whether paths a and b name the same file (both existing: same device and inode)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return os.path.realpath(a) == os.path.realpath(b)


def folder_problem(folder):
    """Why files cannot be written in `folder`, or None. Tried by writing one, as the outputs
    are written (a temporary file renamed into place): os.access says yes to root on read-only
    mounts."""
    if not os.path.isdir(folder):
        return f'{folder} {"is not a directory" if os.path.exists(folder) else "does not exist"}'
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix='.write-test-')
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        return f'directory {folder} is not writable ({e.strerror})'
    return None


def name_problem(path):
    """Why the file system cannot hold a file or folder named as `path`'s last part, or None:
    its name must fit the folder's file system (PC_NAME_MAX bytes, 255 on most)."""
    name = os.path.basename(os.path.normpath(path))
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(folder) and folder != os.path.dirname(folder):
        folder = os.path.dirname(folder)
    try:
        limit = os.pathconf(folder, 'PC_NAME_MAX')
    except (OSError, ValueError):
        limit = 255
    size = len(os.fsencode(name))
    if size > limit:
        return f'its name is {size} bytes long, more than the {limit} its file system allows'
    return None


def torch_saved(path, head):
    """Whether the file at `path` (its first bytes `head`) is a file torch.save wrote: its zip,
    whose records sit under one folder beside a data.pkl (a submission's zip has none), or the
    pickle it wrote before torch 1.6."""
    if head.startswith(b'\x80'):
        return True
    try:
        with zipfile.ZipFile(path) as z:
            return any(name.endswith('/data.pkl') for name in z.namelist())
    except Exception:  # (not a zip, or a damaged one)
        return False


def kind_problem(path, kind):
    """Why a `kind` output ('params', 'predictions' or 'zip') must not replace the file at `path`,
    or None: nothing there, or a file of its own kind (a command run again replaces its own
    output). A mistyped path that names a question file, a zip or a params file would lose it."""
    try:
        with open(path, 'rb') as f:
            head = f.read(4096)
    except OSError:  # nothing there (what else is wrong with it, output_problem says)
        return None
    lose = f'; writing {"a " if kind == "zip" else ""}{kind} there would lose it'
    if not head:
        return None
    if torch_saved(path, head):
        return None if kind == 'params' else 'exists and is a params file' + lose
    if kind == 'params':
        return 'exists and is not a params file' + lose
    if kind == 'zip':
        return None if head.startswith(b'PK\x03\x04') else 'exists and is not a zip' + lose
    if b'\0' in head:
        return 'exists and is not a predictions file (not text)' + lose
    if all(b'\t' in line for line in head.split(b'\n')[:-1] or [head]):  # every whole line read
        return 'exists and is not a predictions file (tab-separated questions)' + lose
    return None


def output_problem(path, others=(), kind=None):
    """Why `path` cannot be written as an output, or None. `others`: (name, path) of everything
    else the command reads or writes (None paths are skipped); `kind`: what the output is
    ('params', 'predictions', 'zip'), so that it replaces no file of another kind
    (kind_problem)."""
    if path is None or path == '':
        return 'is an empty path'
    if path.endswith(('/', os.sep)) or os.path.basename(path) in ('.', '..'):
        return 'names a folder, not a file'
    if os.path.isdir(path):
        return 'is a directory'
    if os.path.lexists(path) and not os.path.isfile(path):
        return 'exists and is not a regular file'
    too_long = name_problem(path)
    if too_long is not None:
        return too_long
    folder = folder_problem(os.path.dirname(os.path.abspath(path)))
    if folder is not None:
        return folder
    for name, other in others:
        if other is not None and other != '' and same_file(path, other):
            return f'is the same file as {name} {other}'
    return None if kind is None else kind_problem(path, kind)


def out_folder_problem(folder):
    """Why `folder` cannot be (made into) a folder of outputs, or None: it must be a folder, or
    not exist yet under a folder that can be written."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        return 'is not a directory'
    existing = os.path.abspath(folder)
    while not os.path.exists(existing):
        too_long = name_problem(existing)
        if too_long is not None:
            return f'its folder {os.path.basename(existing)[:24]}...: {too_long}'
        existing = os.path.dirname(existing)
    return folder_problem(existing)


class Busy(Exception):
    """Another live process is writing the output (its pid, where it said)."""


class Claim:
    """A live run's claim on an output it will write: an exclusive lock on a hidden file beside
    it (.NAME.lock, holding the run's pid), taken before any work and let go (the file removed)
    when the run ends; a second run that would write the same output finds it taken. A lock,
    not the file's existence, so that a run that died leaves nothing in the way."""

    def __init__(self, path):
        folder, name = os.path.split(os.path.abspath(path))
        self.path = os.path.join(folder, f'.{name}.lock')
        self.fd = None

    def take(self):
        """Busy (with the other run's pid) where another live process holds the claim."""
        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode('ascii', 'replace').strip()
                os.close(fd)
                raise Busy(holder or 'unknown')
            try:  # the file may have been removed by the run that let it go just now
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    os.ftruncate(fd, 0)
                    os.write(fd, f'{os.getpid()}\n'.encode())
                    self.fd = fd
                    return self
            except FileNotFoundError:
                pass
            os.close(fd)
        raise Busy('unknown')

    def release(self):
        if self.fd is not None:
            try:
                os.remove(self.path)
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None


class Held:
    """What one command holds while it runs, let go when it ends (records.finish), however it
    ends: its outputs' claims, the folders holding its copies of piped inputs, its tensorboard
    writers. The command's own (parsed() makes it, the command carries it), so that commands run
    as threads of one process (training/turns.py) each let go only of what they took."""

    def __init__(self):
        self.claims, self.copies, self.writers = [], [], []

    def release(self):
        """Every scalar logged written (the writers closed), the claims let go, the copies gone."""
        while self.writers:
            self.writers.pop().close()
        while self.claims:
            self.claims.pop().release()
        while self.copies:
            shutil.rmtree(self.copies.pop(), ignore_errors=True)
