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
  the memory of its whole tree is capped (MemoryCap: a cgroup where the grader can make one, else
  the sum over its processes, watched); a watchdog ends the run when the user's files in its
  folder and the shared temporary folders pass DISK_CAP or FILES_CAP;
- runs, where the kernel allows (root, util-linux's unshare and setpriv), in a PID and mount
  namespace of its own: its /proc shows its own processes only (other graders' command lines
  name their submissions), its /dev/shm is a tmpfs of DISK_CAP, and everything in it ends with
  the grader; elsewhere (a container that refuses namespaces) the probe dies with the grader and
  the next grader ends what it left;
- ends with the processes the probe started killed, until none is left: while a probe runs the
  grader is their child subreaper (`Orphans`), so a process that detaches itself (a new
  session, a double fork) is still below the grader, and the grader ends the processes of the
  user below it (`end_started`), never the account's others; then every file of the user in the
  folders anyone may write in (SHARED_TMP) and every System V IPC object it owns are removed.
  While it runs, its files there (however deep), the removed and memfd files it holds open or
  mapped and its System V shared memory count towards its caps; it may make no POSIX message
  queue (spec_check's limits). Two graders on one machine take turns, whatever their TMPDIR
  (`one_at_a_time`, at a lock in a folder of the grader's own: state_folder), and what a killed
  grader left (modes changed, its probe's processes, cgroup and folder) is ended by the next,
  from a journal it applies only where it is the grader's own file.

In the namespace it has no network (a network namespace of its own, loopback down); without one
it keeps the network, and nothing the user can read is worth sending. bubblewrap stays the first
choice where it runs (spec_check).
"""
import contextlib
import ctypes
import fcntl
import functools
import itertools
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


class Unsafe(Exception):
    """The grader's own state (its folder, lock or journal) is not the grader's alone: why, in
    one line, and what to do."""


# Where graders on one machine meet, whatever their TMPDIR: the first of these whose parent the
# grader can write in. The folder is made 0700 and must be the grader's own and closed to others:
# a probe's user could otherwise plant a journal or hold the lock (the temporary folder is
# everyone's).
STATE_FOLDERS = ('/run/a5probe', '/var/lib/a5probe', '/tmp/a5probe-state')


def not_own(st, open_bits, kind):
    """Why a file of lstat/fstat `st` is not the grader's alone (None where it is): `kind` the
    type it must be (stat.S_ISDIR or S_ISREG), none of `open_bits` set in its mode."""
    if not kind(st.st_mode):
        return 'is not a ' + ('folder' if kind is stat.S_ISDIR else 'regular file')
    if st.st_uid != os.geteuid():
        return f'belongs to uid {st.st_uid}, not to the grader\'s ({os.geteuid()})'
    if stat.S_IMODE(st.st_mode) & open_bits:
        return f'has mode {stat.S_IMODE(st.st_mode):04o}: others may write to it'
    return None


def state_folder(candidates=None):
    """The folder of the graders' lock and journal (made where missing); Unsafe where it is
    not the grader's alone, or where no candidate can be written."""
    for path in STATE_FOLDERS if candidates is None else candidates:
        parent = os.path.dirname(path)
        if not (os.path.isdir(parent) and os.access(parent, os.W_OK)):
            continue
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            continue
        why = not_own(os.lstat(path), 0o077, stat.S_ISDIR)
        if why is not None:
            raise Unsafe(f'the grader\'s state folder {path} {why}: a probe may have made it; '
                         f'remove it (rm -r {path}) and grade again')
        return path
    raise Unsafe(f'none of {", ".join(STATE_FOLDERS)} can be made: the grader has nowhere of its '
                 'own for its lock and journal')


def journal_path(folder=None):
    """The journal of the modes Hidden changed (and the run it hid them for), kept on disk while
    they are changed: a grader killed meanwhile leaves them for the next one to put back."""
    return os.path.join(folder or state_folder(), 'hidden-modes.json')


class Hidden:
    """With it: `paths` (files or folders) readable by their owner only; after, their modes as
    they were. Other users cannot list or enter a folder of mode 0700, nor read a file of 0600.
    Held under one_at_a_time: the modes are written to the journal first (with `run`: the probe's
    folder, cgroup and start, what a killed run leaves), and a journal left by a grader killed
    while it held them is put back (and its run's leftovers ended) before anything is hidden
    again. A journal that is not the grader's own is refused (Unsafe), never applied."""

    def __init__(self, paths, journal=None, run=None):
        self.paths = sorted({os.path.abspath(p) for p in paths if p and os.path.exists(p)})
        self.journal, self.run = journal, run

    def __enter__(self):
        self.modes, self.written = {}, False
        if not self.paths and self.run is None:  # (bubblewrap's runs: nothing hidden or held)
            return self
        if self.journal is None:
            self.journal = journal_path()
        restore_journal(self.journal)
        for p in self.paths:
            if not os.path.islink(p):
                self.modes[p] = stat.S_IMODE(os.lstat(p).st_mode)
        if self.modes or self.run is not None:
            write_journal(self.journal, {'modes': self.modes, **(self.run or {})})
            self.written = True
        for p, mode in self.modes.items():
            os.chmod(p, mode & 0o700)
        return self

    def __exit__(self, *exc):
        for p, mode in self.modes.items():
            os.chmod(p, mode)
        if self.written:
            os.remove(self.journal)


def write_journal(path, record):
    fd = os.open(path + '.tmp', os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, 'w', encoding='utf-8') as f:
        os.fchmod(f.fileno(), 0o600)  # (a .tmp left by a killed grader keeps its old mode)
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + '.tmp', path)


def read_own(path, cap=1 << 24):
    """The text of `path` where it is the grader's own regular file, closed to others; None
    where there is none; Unsafe where it is not the grader's (a link, another owner, open
    modes): it would be applied with the grader's rights."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Unsafe(f'{path}: {e.strerror}: not the grader\'s own file; remove it once you have '
                     'checked it')
    with os.fdopen(fd, 'rb') as f:
        why = not_own(os.fstat(f.fileno()), 0o077, stat.S_ISREG)
        if why is not None:
            raise Unsafe(f'{path} {why}: not applied; remove it (rm {path}) once you have checked '
                         'what it names')
        return f.read(cap).decode('utf-8', errors='replace')


def restore_journal(path):
    """Put back the modes a killed grader's Hidden left changed (its journal), if any, and end
    what its run left: the probe user's processes started since it began, its cgroup, its
    folder."""
    text = read_own(path)
    if text is None:
        return
    try:
        record = json.loads(text)
    except ValueError:
        record = {}
    if not isinstance(record, dict):
        record = {}
    # (a journal of the graders before the run's record: its modes alone)
    modes = record.get('modes', {}) if 'modes' in record or 'since' in record else record
    for p, mode in (modes.items() if isinstance(modes, dict) else ()):
        if isinstance(p, str) and isinstance(mode, int) and os.path.lexists(p) \
                and not os.path.islink(p):
            os.chmod(p, mode & 0o7777)
    end_leftovers(record)
    os.remove(path)


def end_leftovers(record):
    """End what a killed grader's run (its journal `record`) left: its cgroup with every
    process in it, else (no cgroup could be made) the probe user's processes started since the
    run began (killed until none is left); its probe folder; its user's files and IPC."""
    user, since, cgroup = account(), record.get('since'), record.get('cgroup')
    if isinstance(cgroup, str) and os.path.basename(cgroup).startswith('a5probe-'):
        MemoryCap.remove(cgroup)
    elif user is not None and isinstance(since, (int, float)):
        kill_until_gone(lambda: [p for p, (_, uid, state) in process_table().items()
                                 if uid == user.pw_uid and state != 'Z' and started_at(p) >= since])
    folder = record.get('folder')
    if isinstance(folder, str) and os.path.basename(folder).startswith('a5probe-') and \
            not os.path.islink(folder) and os.path.isdir(folder) and \
            os.lstat(folder).st_uid == os.geteuid():
        remove(folder)
    if user is not None:
        remove_owned(user.pw_uid)
        remove_ipc(user.pw_uid)


def since_boot():
    """Seconds since the machine started (the clock of a process's start in /proc)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def started_at(pid):
    """When `pid` started, in seconds since boot (inf where it has ended)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return int(f.read().rsplit(')', 1)[1].split()[19]) / os.sysconf('SC_CLK_TCK')
    except (OSError, ValueError, IndexError):
        return float('inf')


@contextlib.contextmanager
def one_at_a_time(user, folder=None, say=None):
    """Held while a probe runs as `user`: an exclusive lock on a file of the grader's, 0600, in
    the one place every grader of the machine looks (state_folder, whatever its TMPDIR): they
    take turns. A grader that must wait says once for whom (say: a function of a line, stderr by
    default); a lock held by a process of another user (a descriptor that leaked to it) is
    refused (Unsafe), since it may never be let go."""
    path = os.path.join(folder or state_folder(), f'probe-{user.pw_uid}.lock')
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    try:
        st = os.fstat(fd)
        why = not_own(st, 0o077, stat.S_ISREG)
        if why is not None:
            raise Unsafe(f'the grader\'s lock {path} {why}: remove it (rm {path}) and grade again')
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            line = waiting_for(path, st)
            (say or (lambda text: print(text, file=sys.stderr, flush=True)))(line)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.write(fd, f'{os.getpid()}\n'.encode())
        yield
    finally:
        os.close(fd)


def lock_holders(st):
    """The pids /proc/locks names as holding a lock on the file of fstat `st`."""
    key = f'{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}'
    try:
        with open('/proc/locks') as f:
            rows = [line.split() for line in f]
    except OSError:
        return []
    # (a row with '->' is a process waiting for the lock, not holding it)
    return [int(row[4]) for row in rows if len(row) > 5 and row[5] == key and '->' not in row]


def holding_open(path):
    """The pids of the processes that hold `path` open."""
    found = []
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if any(os.readlink(f'/proc/{name}/fd/{fd}') == path
                   for fd in os.listdir(f'/proc/{name}/fd')):
                found.append(int(name))
    return found


def described(pid):
    """`pid` as a line names it: its pid, command and user."""
    try:
        with open(f'/proc/{pid}/comm') as f:
            comm = f.read().strip()
        uid = os.stat(f'/proc/{pid}').st_uid
    except OSError:
        return f'pid {pid}'
    try:
        who = pwd.getpwuid(uid).pw_name
    except KeyError:
        who = f'uid {uid}'
    return f'pid {pid} ({comm!r}, user {who})'


def waiting_for(path, st):
    """The line a grader says before it waits for the lock at `path` (fstat `st`); Unsafe where
    a process of another user holds it."""
    holders = lock_holders(st)
    alive = [p for p in holders if os.path.exists(f'/proc/{p}')]
    ended = [p for p in holders if p not in alive]
    openers = [p for p in holding_open(path) if p != os.getpid()]
    foreign = [p for p in alive + openers
               if os.path.exists(f'/proc/{p}') and os.stat(f'/proc/{p}').st_uid != os.geteuid()]
    if foreign:
        raise Unsafe(f'the grader\'s lock {path} is held by {described(foreign[0])}, not a '
                     f'grader: end it (kill {foreign[0]}) and grade again')
    if alive:
        return (f'waiting for the dataset check\'s lock ({path}): {described(alive[0])}, another '
                'grader of this machine, is running a probe (probes run one at a time)')
    if ended:
        return (f'waiting for the dataset check\'s lock ({path}): its holder, pid {ended[0]}, '
                'has ended, but ' + (', '.join(described(p) for p in openers) or
                                     'a process it started') + ' still holds it open')
    return f'waiting for the dataset check\'s lock ({path}), held by another grader'


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


def started(uid, table=None):
    """The live processes of `uid` below this process (the grader): under Orphans, every process
    a probe started, however it detached itself, and no other process of the account. table:
    process_table() where the caller has read it already."""
    table = process_table() if table is None else table
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


def kill_until_gone(find, rounds=50, after=None):
    """SIGKILL every process find() names, round after round until it names none (one may start
    another meanwhile); after(): called after each round. True when none is left."""
    for _ in range(rounds):
        pids = find()
        if not pids:
            return True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
        if after is not None:
            after()
    return not find()


def end_started(user, spare=()):
    """Every process of `user` the probe started (`started`) killed, until none is left; those
    handed to this process (Orphans) reaped, but `spare` (the probe itself: its Popen waits for
    it). True when none is left."""
    def reap():
        for pid, (ppid, uid, state) in process_table().items():
            if ppid == os.getpid() and uid == user.pw_uid and state == 'Z' and pid not in spare:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
    return kill_until_gone(lambda: started(user.pw_uid), after=reap)


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
        if self.ident is not None:  # (started)
            self.join(timeout=10)


def pss(pids):
    """Bytes of memory the processes `pids` hold, each page shared among n of them counted 1/n
    (proportional set size: forked children sharing torch's pages are not counted n times)."""
    total = 0
    for pid in pids:
        try:
            with open(f'/proc/{pid}/smaps_rollup') as f:
                total += next(int(line.split()[1]) for line in f if line.startswith('Pss:')) << 10
        except (OSError, StopIteration, ValueError, IndexError):
            continue
    return total


class MemoryWatch(Watchdog):
    """Ends the run when its memory passed `cap` (a MemoryCap), looked at every 0.05 s: in a
    cgroup, once the kernel has killed a process of it for the cap (a survivor would wait on);
    else when the processes `pids()` names hold more than the cap together (a process that
    allocates as fast as memory takes it passes the cap by at most what it writes in that time;
    each process alone is held to the cap by its own RLIMIT_AS)."""

    def __init__(self, pids, cap, kill, every=0.05):
        super().__init__(None, kill, every)
        self.pids, self.cap = pids, cap

    def run(self):
        while not self.done.wait(self.every):
            if self.cap.oom_killed() if self.cap.path is not None else \
                    pss(self.pids()) > self.cap.limit:
                self.why = memory_why(self.cap.limit)
                self.kill()
                return


def memory_why(limit):
    return (f'used more than {(limit - BASE_MEMORY) >> 20} MiB of memory (all its processes '
            f'together, beyond the {BASE_MEMORY >> 20} MiB the interpreter and torch are given)')


BASE_MEMORY = 512 << 20  # the probe's interpreter with torch imported (about 220 MiB resident)


def _write(path, text):
    with open(path, 'w') as f:
        f.write(text)


def _read(path):
    with open(path) as f:
        return f.read()


class MemoryCap:
    """The memory of a probe's whole tree held to `limit` bytes by the kernel: a cgroup of its
    own (cgroup v2's memory controller, else v1's memory hierarchy), which the probe's first
    process joins before its exec (`join`), so that all it starts is in it; past the cap the
    kernel kills in it (`oom_killed` says so). `path` None where the grader may make no cgroup
    (not root, or a container's read-only /sys/fs/cgroup): MemoryWatch then sums the tree.
    The cgroup is made inside the grader's own, so that the limits the grader runs under (a
    container's, a service's) hold its probe too. Cgroups a killed grader left (its pid in their
    name) are removed on the way in."""

    ROOTS = ('/sys/fs/cgroup', '/sys/fs/cgroup/unified', '/sys/fs/cgroup/memory')
    made = itertools.count()

    def __init__(self, limit):
        self.limit, self.path = limit, None

    def __enter__(self):
        name = f'a5probe-{os.getpid()}-{next(MemoryCap.made)}'
        for root in self.ROOTS:
            try:
                self.path = self._make(root, name)
            except OSError:
                self.path = None
            if self.path is not None:
                self._sweep(os.path.dirname(self.path))
                break
        return self

    @staticmethod
    def own(root):
        """The folder of this process's own cgroup in the hierarchy mounted at `root` (v2's, or
        v1's memory one), from /proc/self/cgroup; None where it is not there."""
        version2 = os.path.exists(os.path.join(root, 'cgroup.controllers'))
        with open('/proc/self/cgroup') as f:
            for line in f:
                number, controllers, path = line.rstrip('\n').split(':', 2)
                if (number == '0' and controllers == '') if version2 else \
                        'memory' in controllers.split(','):
                    folder = os.path.join(root, path.lstrip('/'))
                    return folder if os.path.isdir(folder) else None
        return None

    def _make(self, root, name):
        parent = self.own(root)
        if parent is None:
            return None
        if os.path.exists(os.path.join(root, 'cgroup.controllers')):  # v2
            control = os.path.join(parent, 'cgroup.subtree_control')
            if 'memory' not in _read(control).split():
                # (a cgroup that holds processes may hand its controllers to children only at
                # the root: elsewhere the memory controller must have been handed down already)
                if os.path.realpath(parent) != os.path.realpath(root) or \
                        'memory' not in _read(os.path.join(root, 'cgroup.controllers')).split():
                    return None
                _write(control, '+memory')
            files = {'memory.max': self.limit, 'memory.swap.max': 0, 'memory.oom.group': 1}
        elif os.path.exists(os.path.join(root, 'memory.limit_in_bytes')):  # v1
            files = {'memory.limit_in_bytes': self.limit, 'memory.memsw.limit_in_bytes': self.limit}
        else:
            return None
        path = os.path.join(parent, name)
        os.mkdir(path, 0o700)
        try:
            for i, (key, value) in enumerate(files.items()):
                if i == 0 or os.path.exists(os.path.join(path, key)):
                    with contextlib.suppress(OSError) if i else contextlib.nullcontext():
                        _write(os.path.join(path, key), str(value))
        except OSError:
            os.rmdir(path)
            raise
        return path

    @staticmethod
    def _sweep(root):
        """Remove the cgroups of graders that have ended."""
        with contextlib.suppress(OSError):
            for name in os.listdir(root):
                parts = name.split('-')
                if len(parts) == 3 and parts[0] == 'a5probe' and parts[1].isdigit() and \
                        not os.path.exists(f'/proc/{parts[1]}'):
                    MemoryCap.remove(os.path.join(root, name))

    def join(self):
        """In the probe's first process, before its exec: into the cgroup."""
        if self.path is not None:
            _write(os.path.join(self.path, 'cgroup.procs'), str(os.getpid()))

    def oom_killed(self):
        """Whether the kernel killed a process of the cgroup for passing the cap."""
        if self.path is None:
            return False
        for name in ('memory.events', 'memory.oom_control'):
            with contextlib.suppress(OSError, ValueError):
                for line in _read(os.path.join(self.path, name)).splitlines():
                    if line.startswith('oom_kill ') and int(line.split()[1]) > 0:
                        return True
        return False  # (a kernel before 4.13 counts none: "killed (out of memory?)" then)

    def __exit__(self, *exc):
        if self.path is not None:
            MemoryCap.remove(self.path)

    @staticmethod
    def remove(path):
        """Kill every process in the cgroup `path` until none is left, then remove it."""
        def inside():
            try:
                return [int(p) for p in _read(os.path.join(path, 'cgroup.procs')).split()]
            except (OSError, ValueError):  # (gone already)
                return []
        kill_until_gone(inside, rounds=100)
        with contextlib.suppress(OSError):
            os.rmdir(path)


PR_SET_PDEATHSIG = 1
# pid 1 of the probe's namespace: /dev/shm a tmpfs of the disk cap (the machine's is memory no
# cap counts), then the probe as its child, not exec'd (the kernel ignores SIGXCPU and
# SIGXFSZ sent to a namespace's pid 1); its exit status 128 + a signal that ended the probe
NAMESPACE_INIT = ('if [ -d /dev/shm ]; then mount -t tmpfs -o size={size},mode=1777,nosuid,nodev '
                  'tmpfs /dev/shm || exit 125; fi; "$@"; exit $?')


def namespaced(user, argv):
    """argv run as `user` in a PID, mount and network namespace of its own (util-linux's unshare
    and setpriv): no network, not even loopback; /proc shows its own processes only (other graders' command lines name their
    submissions), everything in it ends with its first process, which ends with the grader
    (--kill-child; setpriv's --pdeathsig ends the probe with its parent)."""
    return ['unshare', '--pid', '--net', '--fork', '--mount-proc', '--kill-child', '--',
            '/bin/sh', '-c', NAMESPACE_INIT.format(size=DISK_CAP), 'sh', 'setpriv', f'--reuid={user.pw_uid}',
            f'--regid={user.pw_gid}', '--clear-groups', '--pdeathsig', 'KILL', '--', *argv]


@functools.lru_cache(maxsize=None)
def pid_namespace():
    """Whether namespaced() runs here (root, util-linux, a kernel that allows namespaces)."""
    if os.geteuid() != 0 or not (shutil.which('unshare') and shutil.which('setpriv')):
        return False
    user = account()
    if user is None:
        return False
    try:
        return subprocess.run(namespaced(user, ['/bin/true']), stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def proc_hidden():
    """How /proc hides other processes from the probe: 'a PID namespace of its own', '/proc
    mounted with hidepid', or None (every process's command line is readable)."""
    if pid_namespace():
        return 'a PID namespace of its own'
    try:
        with open('/proc/self/mountinfo') as f:
            for line in f:
                fields = line.split()
                if fields[4] == '/proc' and any(o in fields[-1].split(',') for o in (
                        'hidepid=2', 'hidepid=invisible', 'hidepid=4', 'hidepid=ptraceable')):
                    return '/proc mounted with hidepid'
    except (OSError, IndexError):
        pass
    return None


def parent_death():
    """This process killed when the thread that started it ends (prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def popen_as(user, argv, cwd, env, stdout, more_limits=None):
    """argv started as `user`, with _limits (and `more_limits`, which runs as root: spec_check's
    puts it in its MemoryCap's cgroup), in a session of its own: in a PID and mount namespace of its own where one can be had (namespaced),
    else a plain child of the grader, killed when the grader ends (the next grader ends what it
    started: end_leftovers). Returns (the Popen, whether it is namespaced)."""
    inside = pid_namespace()

    def child():  # as root, between the fork and the exec
        _limits()
        if more_limits is not None:
            more_limits()
        if not inside:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
        parent_death()  # (after the change of user, which clears it)
    return subprocess.Popen(namespaced(user, argv) if inside else argv, cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=child), inside
