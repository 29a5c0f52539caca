"""The dataset check's sandbox where bubblewrap cannot create namespaces: another user.

Gradescope runs the autograder in a Docker container whose default seccomp profile refuses every
new namespace (bubblewrap's maintainers say it needs seccomp=unconfined there). The grader runs as
root there, so it can do what Gradescope's own advice for student code is: run it as an
unprivileged user. That user is USER, an account of its own: the autograder's setup.sh creates
it, and a grader run as root elsewhere creates it the first time it needs it (or, where it cannot,
refuses with the command that does). Never a shared account such as `nobody`, whose processes
belong to other services. The user:

- runs the probe from a folder of its own (a scratch folder under /tmp, 0711, its `work/` the
  user's and the only place it is told to write), the probe script copied in, read-only to it;
- cannot read what the grader hides for the run (`hidden`: the held-out answers, the grader's
  files, the results folder): their modes are set by the grader itself, whatever modes they
  were unpacked with, and put back afterwards;
- has limits: RLIMIT_NPROC (processes of the user), RLIMIT_NOFILE, no core files, no new
  privileges (setuid programs stay unprivileged); the probe adds CPU time, memory and file size;
  a watchdog ends the run when the user's files in its folder and the shared temporary folders
  pass DISK_CAP or FILES_CAP;
- ends with the processes the probe started killed, until none is left: while a probe runs the
  grader is their child subreaper (`Orphans`), so a process that detaches itself (a new
  session, a double fork) is still below the grader, and the grader ends the processes of the
  user below it (`end_started`), never the account's others; then every file of the user in the
  folders anyone may write in (SHARED_TMP) and every System V IPC object it owns are removed.
  While it runs, its files there (however deep), the removed and memfd files it holds open or
  mapped and its System V shared memory count towards its caps; it may make no POSIX message
  queue (spec_check's limits). Two graders on one machine take turns, whatever their TMPDIR
  (`one_at_a_time`), and the modes a killed grader left changed are put back by the next.

It does not take the network away (no namespaces: nothing to take it with); nothing the user can
read is worth sending. bubblewrap stays the first choice where it runs (spec_check).
"""
import contextlib
import ctypes
import fcntl
import json
import os
import pwd
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

USER = 'a5probe'
MAKE_USER = ['useradd', '--system', '--no-create-home', '--shell', '/usr/sbin/nologin', USER]
PROCESSES = 64  # RLIMIT_NPROC of the user: a fork bomb stops there
OPEN_FILES = 256
DISK_CAP = 256 << 20  # bytes of the user's files, in its folder and the shared temporary ones
FILES_CAP = 20000
# every folder any user may write in (besides the probe's own): watched while the probe runs,
# and what the user left there removed after it
SHARED_TMP = tuple(p for p in ('/tmp', '/var/tmp', '/dev/shm', '/run/lock', '/dev/mqueue')
                   if os.path.isdir(p) and not os.path.islink(p))
IPC = {'shm': ('-m', 1, 3), 'sem': ('-s', 1, None), 'msg': ('-q', 1, 3)}  # ipcrm flag, columns
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 36, 37, 38


def account():
    """The passwd entry of USER, or None where there is no such account (or it is root's)."""
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        return None
    return entry if entry.pw_uid != 0 else None


def make_account():
    """USER's entry, the account created first where it is missing and this is root (one note
    on stderr says so); None where it is missing and cannot be created."""
    if account() is None and os.geteuid() == 0 and shutil.which(MAKE_USER[0]):
        made = subprocess.run(MAKE_USER, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if made.returncode == 0:
            print(f'note: made the account {USER} for the grader\'s user sandbox (userdel {USER} '
                  'removes it)', file=sys.stderr, flush=True)
    return account()


def needed():
    """The paths the probe runs on: this Python (its executable, prefixes) and torch."""
    import torch
    return [os.path.realpath(sys.executable), sys.prefix, sys.base_prefix,
            os.path.dirname(torch.__file__)]


def needed_inside(folder):
    """The first path the probe runs on that lies inside `folder` (hiding it would hide that),
    or None."""
    top = os.path.realpath(folder)
    for path in needed():
        real = os.path.realpath(path)
        if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
            return path
    return None


def problem(make=True):
    """None where this sandbox can run here (USER made where it is missing, unless `make` is
    false: the tests look without changing the machine), else why not, in a sentence."""
    if os.geteuid() != 0:
        return 'the grader is not root, so it cannot run the probe as another user'
    user = make_account() if make else account()
    if user is None:
        return (f'there is no account {USER} to run the probe as, and it could not be made '
                f'(as root: {" ".join(MAKE_USER)})' if make else
                f'there is no account {USER} to run the probe as (bash scripts/setup.sh --test '
                f'makes it as root: {" ".join(MAKE_USER)})')
    for path in needed():  # (where the probe runs and imports torch from)
        closed = closed_folder(path, user)
        if closed is not None:
            return (f'user {user.pw_name} cannot reach this Python ({path}): {closed} is closed '
                    'to other users (chmod o+x on it lets them through without listing it)')
    return None


def closed_folder(path, user):
    """The first folder on the way to `path` that `user` may not enter, or None."""
    parts = os.path.abspath(path).split(os.sep)
    for i in range(2, len(parts) + 1):
        folder = os.sep.join(parts[:i])
        try:
            st = os.stat(folder)
        except OSError:
            return folder
        if not stat.S_ISDIR(st.st_mode):
            break
        bit = (stat.S_IXUSR if st.st_uid == user.pw_uid else
               stat.S_IXGRP if st.st_gid == user.pw_gid else stat.S_IXOTH)
        if not st.st_mode & bit:
            return folder
    return None


# Where graders on one machine meet, whatever their TMPDIR: root's own folder for run-time state
# (a probe's user cannot write there), else the temporary folder.
MEETING = '/run' if os.path.isdir('/run') and os.access('/run', os.W_OK) else tempfile.gettempdir()
# the modes Hidden changed, kept on disk while they are changed: a grader killed meanwhile leaves
# them for the next one to put back
JOURNAL = os.path.join(MEETING, 'a5probe-hidden-modes.json')


class Hidden:
    """With it: `paths` (files or folders) readable by their owner only; after, their modes as
    they were. Other users cannot list or enter a folder of mode 0700, nor read a file of 0600.
    Held under one_at_a_time: the modes are written to JOURNAL first, and a journal left by a
    grader killed while it held them is put back before anything is hidden again."""

    def __init__(self, paths, journal=None):
        self.paths = sorted({os.path.abspath(p) for p in paths if p and os.path.exists(p)})
        self.journal = JOURNAL if journal is None else journal

    def __enter__(self):
        self.modes = {}
        if not self.paths:  # (bubblewrap's runs: nothing hidden, no lock held, nothing touched)
            return self
        restore_journal(self.journal)
        for p in self.paths:
            if not os.path.islink(p):
                self.modes[p] = stat.S_IMODE(os.lstat(p).st_mode)
        if self.modes:
            write_journal(self.journal, self.modes)
        for p, mode in self.modes.items():
            os.chmod(p, mode & 0o700)
        return self

    def __exit__(self, *exc):
        for p, mode in self.modes.items():
            os.chmod(p, mode)
        if self.modes:
            os.remove(self.journal)


def write_journal(path, modes):
    fd = os.open(path + '.tmp', os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, 'w', encoding='utf-8') as f:
        json.dump(modes, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + '.tmp', path)


def restore_journal(path):
    """Put back the modes a killed grader's Hidden left changed (its journal), if any."""
    try:
        with open(path, encoding='utf-8') as f:
            modes = json.load(f)
    except FileNotFoundError:
        return
    except (OSError, ValueError):
        modes = {}
    for p, mode in (modes.items() if isinstance(modes, dict) else ()):
        if isinstance(p, str) and isinstance(mode, int) and os.path.lexists(p) \
                and not os.path.islink(p):
            os.chmod(p, mode & 0o7777)
    os.remove(path)


@contextlib.contextmanager
def one_at_a_time(user):
    """Held while a probe runs as `user`: an exclusive lock on a file of root's, 0600, in the one
    place every grader of the machine looks (MEETING, whatever its TMPDIR): they take turns."""
    path = os.path.join(MEETING, f'a5probe-{user.pw_uid}.lock')
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _limits():
    """In the child, before it becomes the user: limits it cannot raise again, no new privileges."""
    resource.setrlimit(resource.RLIMIT_NPROC, (PROCESSES, PROCESSES))
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), 'prctl(PR_SET_NO_NEW_PRIVS)')


def process_table():
    """{pid: (parent pid, real uid, state)} of every process /proc shows."""
    table = {}
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open(f'/proc/{name}/status') as f:
                fields = dict(line.split(':', 1) for line in f if ':' in line)
            table[int(name)] = (int(fields['PPid']), int(fields['Uid'].split()[0]),
                                fields['State'].split()[0])
        except (OSError, KeyError, ValueError, IndexError):
            continue
    return table


def below(pid, table):
    """The pids of `table` that descend from `pid`."""
    children = {}
    for p, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(p)
    found, stack = [], [pid]
    while stack:
        kids = children.get(stack.pop(), [])
        found += kids
        stack += kids
    return found


def started(uid):
    """The live processes of `uid` below this process (the grader): under Orphans, every process
    a probe started, however it detached itself, and no other process of the account."""
    table = process_table()
    return [p for p in below(os.getpid(), table) if table[p][1] == uid and table[p][2] != 'Z']


class Orphans:
    """While it is held, this process is a child subreaper: a process below it whose parent
    ends is handed to it, not to init, so what a probe starts stays below the grader
    (`started`). Put back as it was after."""

    def __enter__(self):
        self.libc = ctypes.CDLL(None, use_errno=True)
        before = ctypes.c_int(0)
        self.libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0)
        self.before = before.value
        if self.libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), 'prctl(PR_SET_CHILD_SUBREAPER)')
        return self

    def __exit__(self, *exc):
        self.libc.prctl(PR_SET_CHILD_SUBREAPER, self.before, 0, 0, 0)


def end_started(user, spare=(), rounds=50):
    """Every process of `user` the probe started (`started`) killed, until none is left; those
    handed to this process (Orphans) reaped, but `spare` (the probe itself: its Popen waits for
    it). True when none is left."""
    for _ in range(rounds):
        pids = started(user.pw_uid)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
        table = process_table()
        for pid, (ppid, uid, state) in table.items():
            if ppid == os.getpid() and uid == user.pw_uid and state == 'Z' and pid not in spare:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
    return not started(user.pw_uid)


def owned(uid, roots, limit):
    """(bytes, files) of `uid`'s files under `roots` (in a shared folder only the user's own
    entries, with all below them), stopping at `limit` files. GNU find walks them: it opens each
    folder relative to its parent, so files below a chain of folders deeper than the path-length
    limit count too (a walk by absolute paths cannot open them)."""
    roots = [r for r in roots if os.path.isdir(r)]
    total = count = 0
    if not roots:
        return total, count
    walk = ['find', *roots, '-xdev', '-mindepth', '1', '(', '!', '-uid', str(uid), '-prune', ')',
            '-o', '-printf', '%b\\n']  # (%b: 512-byte blocks, what the file takes on disk)
    with subprocess.Popen(walk, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL) as find:
        for line in find.stdout:
            total += int(line) * 512
            count += 1
            if count >= limit:
                find.kill()
                break
    return total, count


def entries_of(folder, uid):
    """(path, lstat) of each entry of `folder` that `uid` owns; none where it cannot be read."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid == uid:
            yield e.path, st


def ipc_objects(uid, namespace_of=None):
    """[(kind, id, bytes)] of the System V IPC objects (shared memory, semaphores, message
    queues) `uid` owns (None: anyone): they outlive the processes that made them. namespace_of:
    a pid whose IPC namespace to look in (bubblewrap's own, which /proc/sysvipc shows only to a
    reader inside it), read from a thread that joins that namespace for the look (root only;
    [] where it cannot, or where that is this process's namespace)."""
    if namespace_of is not None:
        found = []
        look = threading.Thread(target=_look_inside, args=(namespace_of, uid, found))
        look.start()
        look.join()
        return found
    found = []
    for kind, (_, id_column, bytes_column) in IPC.items():
        try:
            with open(f'/proc/sysvipc/{kind}') as f:
                header = f.readline().split()
                for line in f:
                    row = line.split()
                    if uid is None or int(row[header.index('uid')]) == uid:
                        size = int(row[bytes_column]) if bytes_column is not None else 0
                        found.append((kind, int(row[id_column]), size))
        except (OSError, ValueError, IndexError):
            continue
    return found


CLONE_NEWIPC = 0x08000000


def _look_inside(pid, uid, found):
    """In this thread only (a namespace is a thread's own): join `pid`'s IPC namespace, then
    list its objects into `found`."""
    try:
        if os.readlink(f'/proc/{pid}/ns/ipc') == os.readlink('/proc/self/ns/ipc'):
            return  # (no namespace of its own: its objects are the machine's, looked at so)
        fd = os.open(f'/proc/{pid}/ns/ipc', os.O_RDONLY)
    except OSError:
        return
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWIPC) != 0:
            return
    finally:
        os.close(fd)
    found.extend(ipc_objects(uid))


def remove_ipc(uid):
    """Remove every System V IPC object `uid` owns."""
    for kind, ident, _ in ipc_objects(uid):
        subprocess.run(['ipcrm', IPC[kind][0], str(ident)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def held_open(pids, roots=SHARED_TMP):
    """Bytes of the files the processes `pids` hold that no walk of a folder finds: memfd files
    (memfd_create: memory with no name in any folder) and files removed from `roots` (a file in
    /dev/shm is memory), held by an open descriptor or only mapped into memory."""
    total, seen = 0, set()
    for pid in pids:
        for link, target in held_files(pid):
            if not (target.startswith('/memfd:') or target.endswith(' (deleted)')
                    and target.startswith(tuple(roots))):
                continue
            try:
                st = os.stat(link)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def held_files(pid):
    """(a /proc link to the file, its path as the process names it) of each file `pid` holds
    open, and of each one it maps (closed or not: /proc/PID/map_files, which only root reads)."""
    base = f'/proc/{pid}'
    try:
        fds = os.listdir(f'{base}/fd')
        with open(f'{base}/maps') as f:
            maps = [line.split(None, 5) for line in f]
    except OSError:
        return
    for fd in fds:
        try:
            yield f'{base}/fd/{fd}', os.readlink(f'{base}/fd/{fd}')
        except OSError:
            continue
    for row in maps:
        if len(row) == 6 and row[4] != '0':  # a file's mapping: address range ... inode path
            yield f'{base}/map_files/{row[0]}', row[5].rstrip('\n')


def remove_owned(uid, roots=SHARED_TMP):
    """Remove what `uid` left directly in the shared temporary folders (with what is under it)."""
    for top in roots:
        for path, _ in entries_of(top, uid):
            remove(path)


def remove(path):
    """rm -rf: also a tree too deep for Python's recursion (shutil.rmtree raises there)."""
    subprocess.run(['rm', '-rf', '--one-file-system', '--', path], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Folder:
    """The probe's folder: FOLDER (0711, root's) holding the probe script (0644) and work/ (the
    user's, 0700), removed with everything in it at the end."""

    def __init__(self, user, probe, src):
        self.root = tempfile.mkdtemp(prefix='a5probe-')
        os.chmod(self.root, 0o711)
        self.probe = os.path.join(self.root, 'dataset_probe.py')
        shutil.copyfile(probe, self.probe)
        os.chmod(self.probe, 0o644)
        self.work = os.path.join(self.root, 'work')
        shutil.copytree(src, os.path.join(self.work, 'src'), symlinks=True,
                        ignore=shutil.ignore_patterns('__pycache__'))
        for top, dirs, files in os.walk(self.work):
            for name in [top] + [os.path.join(top, n) for n in dirs + files]:
                os.lchown(name, user.pw_uid, user.pw_gid)
        os.chmod(self.work, 0o700)

    def close(self):
        remove(self.root)


def hide_command_line():
    """Blank this process's command line as /proc shows it (every user may read
    /proc/PID/cmdline: the grader's names the submissions and where the results go). Python
    keeps its own copy (sys.argv). True where it was blanked."""
    try:
        with open('/proc/self/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end (proc(5))
    except (OSError, ValueError, IndexError):
        return False
    if not 0 < start < end:
        return False
    ctypes.memset(start, 0, end - start)
    return True


def cpu_seconds(pids):
    """The CPU time (user + system) the live processes `pids` have used, in seconds."""
    total = 0
    for pid in pids:
        try:
            with open(f'/proc/{pid}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf('SC_CLK_TCK')


class Watchdog(threading.Thread):
    """Ends the run (`kill()`) when measure() says its files pass DISK_CAP bytes or FILES_CAP
    files, or its processes PROCESSES; `why` says so. measure(): (bytes, files, processes, the
    CPU seconds its processes have used), the most CPU seen kept in `cpu_seen` (a process the
    CPU limit kills with SIGKILL, its SIGXCPU ignored, is told from one killed for memory)."""

    def __init__(self, measure, kill, every=0.5):
        super().__init__(daemon=True)
        self.measure, self.kill, self.every = measure, kill, every
        self.why, self.done, self.cpu_seen = None, threading.Event(), 0.0

    def run(self):
        while not self.done.wait(self.every):
            size, files, processes, cpu = self.measure()
            self.cpu_seen = max(self.cpu_seen, cpu)
            self.why = (f'wrote more than {DISK_CAP >> 20} MiB (all its files together, shared '
                        'memory included)'
                        if size > DISK_CAP else
                        f'made more than {FILES_CAP:,} files' if files > FILES_CAP else
                        f'started more than {PROCESSES} processes' if processes > PROCESSES
                        else None)
            if self.why is not None:
                self.kill()
                return

    def stop(self):
        self.done.set()
        self.join(timeout=10)


def popen_as(user, argv, cwd, env, stdout, more_limits=None):
    """argv started as `user`, with _limits (and `more_limits`), in a session of its own."""
    def limits():
        _limits()
        if more_limits is not None:
            more_limits()
    return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                            preexec_fn=limits)
