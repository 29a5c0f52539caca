"""The autograder's part of grade.py: does a submission's CharCorruptionDataset meet the spec?

The submission's src/dataset.py runs in a child process (dataset_probe.py) in a sandbox folder:
a copy of its src/, a clean environment, its working directory and HOME in that folder, limits
on CPU time, address space and file size, and a wall-clock limit after which it is killed. The
child runs under bubblewrap (Debian's `bubblewrap`, the sandbox Flatpak uses; `sandbox_command`):
its own PID, mount, network, IPC and user namespaces, the interpreter and the probe read-only,
the sandbox folder the only writable place (with a /dev/shm of DISK_CAP; /dev read-only), no
/proc of the grader, and nothing it starts outlives it (--die-with-parent, a PID namespace whose
processes all end with it). Without bubblewrap, grade.py refuses to run submission code unless
told --no-sandbox. It is never imported into the grader. The child only reports what the
dataset returned; the properties are judged here, on that plain data.

The corpus is made up here from a seed (never wiki.txt, so a dataset that special-cases the real
data gains nothing): documents of 0 to 400 characters, with non-ASCII characters, and questions
for NameDataset in the handout's format. Where the handouts' text and their own examples or
slicing disagree (LENGTHS, a third ⁇ after the masked content), both readings pass and the
detail names the one followed.
"""
import contextlib
import functools
import json
import math
import os
import random
import shutil
import signal
import string
import subprocess
import sys
import threading

import user_sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, 'dataset_probe.py')
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, 'src'))
from engine import presets  # noqa: E402

MASK_CHAR = '\u2047'
PAD_CHAR = '\u25A1'
FAIL_PROBABILITY = 1e-6  # the chance that a correct dataset fails the masked-length test
PROPERTIES = {
    'vocab': 'PAD id 0, MASK id 1, then the corpus\'s characters sorted; itos inverts stoi',
    'tensors': 'x and y are 1-D LongTensors',
    'lengths': 'x and y have the handout\'s length',
    'shifted': 'y is x shifted by one',
    'two_masks': 'exactly two \u2047 in the masked string',
    'rearranged': 'prefix \u2047 suffix \u2047 masked_content, with prefix + masked_content + '
                  'suffix the document truncated',
    'pad_fill': 'the rest of the string is \u25A1, and no \u25A1 before it',
    'truncation_length': 'truncated length within [4, int(block_size*7/8)] (or the whole of a '
                         'shorter document), both ends drawn',
    'masked_length_mean': 'masked length 1/4 of the truncated length on average (within a band '
                          'of characters), and random',
    'name_dataset': 'NameDataset\'s x and y as the handout gives them',
}
MIN_DRAWS = 2000  # below it a correct dataset may miss an end of the truncation range (p > 1e-6)
DEFAULTS = dict(draws=40000, cpu_seconds=60, memory_mb=2048, wall_seconds=300, seed=0,
                masked_band=1.25)
REPORT_CAP = 96 << 20  # bytes of report read from the child; 40,000 draws take about 36 MB
FILE_CAP = 64 << 20  # the largest file the child may write (RLIMIT_FSIZE)


def make_corpus(seed, documents=300):
    """(corpus text, its documents): made-up words, in documents of every kind a corpus has: one
    of each length 0 to 3 (wiki.txt's last document is empty: split('\n') after its final
    newline), a fifth of them 4 to 111 characters (shorter than the longest truncation, as a
    third of wiki.txt is), the rest 150 to 400."""
    rng = random.Random(seed)
    letters = string.ascii_letters + 'éüñø'
    chars = letters + string.digits + " .,;?()'-\u2013"
    docs = [' '.join(chars)]  # every character at least once
    docs += [''.join(rng.choice(letters) for _ in range(n)) for n in range(4)]
    while len(docs) < documents:
        words = []
        target = rng.randint(4, 111) if rng.random() < 0.2 else rng.randint(150, 400)
        while sum(len(w) + 1 for w in words) < target:
            words.append(''.join(rng.choice(letters if rng.random() < 0.9 else chars)
                                 for _ in range(rng.randint(1, 10))))
        docs.append(' '.join(words)[:target])
    rng.shuffle(docs)
    return '\n'.join(docs), docs


def make_names(seed, count=60):
    """(NameDataset text, its (question, place) pairs), ASCII only as NameDataset keeps."""
    rng = random.Random(seed + 1)

    def word():
        return rng.choice(string.ascii_uppercase) + ''.join(
            rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
    pairs = [(f'Where was {word()} {word()} born?', word()) for _ in range(count)]
    return ''.join(f'{q}\t{p}\n' for q, p in pairs), pairs


def request_for(seed=DEFAULTS['seed'], draws=DEFAULTS['draws'],
                cpu_seconds=DEFAULTS['cpu_seconds'], memory_mb=DEFAULTS['memory_mb']):
    """(what dataset_probe.py is asked, the corpus's documents, the questions' pairs)."""
    corpus, docs = make_corpus(seed)
    names, pairs = make_names(seed)
    rng = random.Random(seed + 2)
    request = dict(corpus=corpus, block_size=presets.BLOCK_SIZE, seed=seed,
                   draws=[rng.randrange(len(docs)) for _ in range(draws)], names=names,
                   name_items=len(pairs), cpu_seconds=cpu_seconds, memory_mb=memory_mb)
    return request, docs, pairs


def _limit_files(cap=None):
    """In the probe's first process, before its exec: its file limits (and into `cap`'s
    cgroup)."""
    import resource
    if cap is not None:
        cap.join()
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_CAP, FILE_CAP))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # no POSIX message queue at all: one outlives its maker, and where /dev/mqueue is not mounted
    # no one can list it to remove it
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))


class NoSandbox(Exception):
    """bubblewrap cannot run here: why, in a sentence."""


def sandbox_problem():
    """None when bubblewrap runs here, else why not (missing, or refused by the kernel)."""
    bwrap = shutil.which('bwrap')
    if bwrap is None:
        return 'bubblewrap (bwrap) is not installed (Debian: apt-get install bubblewrap)'
    probe = subprocess.run(sandbox_command(['/bin/true'], '/'), capture_output=True, text=True)
    if probe.returncode != 0:
        return f'bubblewrap cannot start a sandbox here ({probe.stderr.strip()[:200]})'
    return None


@functools.lru_cache(maxsize=None)
def bwrap_sizes():
    """Whether this bubblewrap takes --size (0.5 and later)."""
    try:
        return '--size' in subprocess.run(['bwrap', '--help'], capture_output=True,
                                          text=True).stdout
    except OSError:
        return False


def sandbox_command(argv, folder):
    """argv run under bubblewrap: new PID, mount, network, IPC, UTS, cgroup and user namespaces;
    read-only the system's programs and libraries, this interpreter (its virtualenv and base
    installation) and the probe; writable `folder` only (also the working directory: TMPDIR and
    HOME point there); a /proc of its own; killed with its parent, in a session of its own."""
    cmd = ['bwrap', '--unshare-all', '--die-with-parent', '--new-session',
           '--proc', '/proc', '--dev', '/dev']
    if bwrap_sizes():  # its /dev/shm is memory: at most the disk cap of it (else half the RAM)
        cmd += ['--size', str(user_sandbox.DISK_CAP), '--tmpfs', '/dev/shm']
    # the /dev bubblewrap makes is a tmpfs of no size: read-only, its devices still work
    cmd += ['--remount-ro', '/dev']
    for top in ('/bin', '/lib', '/lib64', '/lib32', '/sbin'):
        if os.path.islink(top):  # merged /usr: /bin -> usr/bin
            cmd += ['--symlink', os.readlink(top), top]
        elif os.path.isdir(top):
            cmd += ['--ro-bind', top, top]
    for path in sorted({'/usr', '/etc/ld.so.cache', sys.prefix, sys.base_prefix, PROBE}):
        if os.path.exists(path):
            cmd += ['--ro-bind', path, path]
    if folder != '/':
        cmd += ['--bind', folder, folder, '--chdir', folder]
    # the root bubblewrap builds (with the folders above the mounts) read-only too
    return cmd + ['--remount-ro', '/', '--'] + argv


SANDBOXES = ('bubblewrap', 'user', None)  # None: the grader's own user (--no-sandbox)


def sandbox_kind(asked='auto'):
    """(The sandbox the dataset check runs in, None where it cannot run, and why not): asked
    'auto', bubblewrap where it runs, else another user (user_sandbox) where the grader is root;
    'none': the grader's own user."""
    if asked == 'none':
        return None, None
    why = sandbox_problem() if asked in ('auto', 'bubblewrap') else None
    if asked == 'bubblewrap' or (asked == 'auto' and why is None):
        return ('bubblewrap', None) if why is None else ('bubblewrap', why)
    other = user_sandbox.problem()
    if other is None:
        return 'user', None
    return 'user', other if why is None else f'{why}; and {other}'


def sandbox_name(kind):
    """How a report names the sandbox a check ran in."""
    if kind == 'user':
        hidden = user_sandbox.proc_hidden()
        return f'unprivileged user {user_sandbox.account().pw_name}, ' + (
            f'other processes hidden by {hidden}' if hidden else
            'no namespaces here: other processes\' command lines are visible to it')
    return {'bubblewrap': 'bubblewrap (namespaces)', None: 'none: the grader\'s own user'}[kind]


def run_probe(src, sandbox, request, wall_seconds=DEFAULTS['wall_seconds'], isolate='bubblewrap',
              hidden=()):
    """(report, None) from dataset_probe.py run on a copy of `src` in the folder `sandbox`, or
    (None, why it gave none). isolate: 'bubblewrap' (sandbox_command; True too), 'user'
    (user_sandbox: in a folder of its own under /tmp, `hidden` out of its reach), or None
    (False): as the grader's user, with the limits above only (grade.py --no-sandbox). Under
    either sandbox the memory of the probe's whole tree is capped (user_sandbox.MemoryCap)."""
    isolate = {True: 'bubblewrap', False: None}.get(isolate, isolate)
    os.makedirs(sandbox)
    cap = user_sandbox.MemoryCap((request['memory_mb'] << 20) + user_sandbox.BASE_MEMORY)
    if isolate == 'user':  # (Orphans: what the probe starts stays below the grader, to be ended)
        with user_sandbox.one_at_a_time(user_sandbox.account()), user_sandbox.Orphans(), cap:
            return _run_probe(src, sandbox, request, wall_seconds, isolate, hidden, cap)
    with cap if isolate else contextlib.nullcontext(cap):
        return _run_probe(src, sandbox, request, wall_seconds, isolate, hidden, cap)


def _run_probe(src, sandbox, request, wall_seconds, isolate, hidden, cap):
    user = folder = None
    watchdogs = []
    if isolate == 'user':
        user = user_sandbox.account()
        folder = user_sandbox.Folder(user, PROBE, src)
        work, probe = folder.work, folder.probe
    else:
        work, probe = sandbox, PROBE
        shutil.copytree(src, os.path.join(sandbox, 'src'), symlinks=True,
                        ignore=shutil.ignore_patterns('__pycache__'))
    with open(os.path.join(work, 'request.json'), 'w', encoding='utf-8') as f:
        json.dump(request, f)
    env = {'PATH': '/usr/bin:/bin', 'HOME': work, 'TMPDIR': work, 'LANG': 'C.UTF-8',
           'LC_ALL': 'C.UTF-8', 'OMP_NUM_THREADS': '1', 'MKL_NUM_THREADS': '1'}
    # -I's isolation less its -E (the environment is this one, built here): PYTHONHASHSEED fixed,
    # so that a dataset that draws from a set's order draws the same in every run
    env['PYTHONHASHSEED'] = '0'
    argv = [sys.executable, '-s', '-B'] + (['-P'] if sys.version_info >= (3, 11) else []) + \
        [probe, 'request.json']
    end = None
    # (a killed grader's journal says what its run left: the next one ends it)
    run = None if user is None else dict(folder=folder.root, cgroup=cap.path,
                                         since=user_sandbox.since_boot())
    try:
        with user_sandbox.Hidden(hidden if user is not None else (), run=run):  # (unhidden last)
            try:
                if user is not None:
                    proc, inside = user_sandbox.popen_as(user, argv, work, env, subprocess.PIPE,
                                                         functools.partial(_limit_files, cap))
                    uid = user.pw_uid
                    end = functools.partial(user_sandbox.end_started, user, spare=(proc.pid,))
                    watchdogs.append(user_sandbox.Watchdog(
                        lambda: user_measure(uid, work, proc.pid if inside else None), end))
                    tree = functools.partial(user_sandbox.started, uid)
                else:
                    inside = isolate == 'bubblewrap'
                    if inside:
                        argv = sandbox_command(argv, os.path.abspath(sandbox))
                    proc = subprocess.Popen(argv, cwd=sandbox, env=env, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                            start_new_session=True,
                                            preexec_fn=functools.partial(_limit_files, cap))
                    # (the folder is the only place bubblewrap lets it write; its processes
                    # descend)
                    watchdogs.append(user_sandbox.Watchdog(
                        lambda: bubblewrap_measure(proc.pid, sandbox), lambda: _kill_group(proc)))
                    tree = lambda: [proc.pid] + user_sandbox.below(  # noqa: E731
                        proc.pid, user_sandbox.process_table())
                watchdogs.append(user_sandbox.MemoryWatch(tree, cap, end or (
                    lambda: _kill_group(proc))))
                for watchdog in watchdogs:
                    watchdog.start()
                return _read_report(proc, request, wall_seconds, inside, watchdogs, end, cap)
            finally:
                for watchdog in watchdogs:
                    watchdog.stop()
                if user is not None:  # the processes it started, then its files, before unhiding
                    if end is not None:
                        end()
                    user_sandbox.remove_owned(user.pw_uid)
                    user_sandbox.remove_ipc(user.pw_uid)
    finally:
        if folder is not None:
            folder.close()


def user_measure(uid, work, init=None):
    """(bytes, files, processes, CPU seconds) of a probe run as another user, for its watchdog:
    its files in its folder and the shared ones (in a namespace, `init` the pid of unshare's
    first child: its own /dev/shm too), the memfd and removed files it holds open or mapped, and
    its System V shared memory (memory that no process limit counts)."""
    table = user_sandbox.process_table()
    pids = user_sandbox.started(uid, table)
    roots = (work,) + user_sandbox.SHARED_TMP
    if init is not None:
        roots += tuple(f'/proc/{p}/root/dev/shm' for p in user_sandbox.below(init, table)[:1])
    size, files = user_sandbox.owned(uid, roots, user_sandbox.FILES_CAP + 1)
    size += user_sandbox.held_open(pids, roots)
    size += sum(n for kind, _, n in user_sandbox.ipc_objects(uid) if kind == 'shm')
    return size, files, len(pids), user_sandbox.cpu_seconds(pids)


def bubblewrap_measure(pid, sandbox):
    """The same of a probe under bubblewrap (`pid`: bwrap's): its files in its folder and its
    own /dev/shm (the only places it can write), the memfd and removed files its processes (those
    below bwrap: its PID namespace's) hold, the System V shared memory of its IPC namespace, and
    their CPU time."""
    below = user_sandbox.below(pid, user_sandbox.process_table())
    inside = below[:1]  # bwrap's child: its /proc/PID/root is the sandbox's, its namespaces too
    roots = (sandbox,) + tuple(f'/proc/{p}/root/dev/shm' for p in inside)
    size, files = user_sandbox.owned(os.geteuid(), roots, user_sandbox.FILES_CAP + 1)
    size += user_sandbox.held_open(below, (sandbox, '/dev/shm'))
    size += sum(n for p in inside for kind, _, n in user_sandbox.ipc_objects(None, namespace_of=p)
                if kind == 'shm')
    return size, files, len(below), user_sandbox.cpu_seconds([pid] + below)


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _read_report(proc, request, wall_seconds, wrapped, watchdogs=(), end=None, cap=None):
    """(report, None) or (None, why) from the probe process `proc` (see run_probe); wrapped: it
    is bubblewrap or unshare, whose exit status is 128 + the signal that ended the probe; end():
    ends every process the probe may have left (its session's are killed in any case); cap: its
    MemoryCap."""
    chunks, size = [], [0]

    def read():  # at most REPORT_CAP bytes kept; the rest is read and dropped
        for chunk in iter(lambda: proc.stdout.read(1 << 16), b''):
            if size[0] <= REPORT_CAP:
                chunks.append(chunk)
            size[0] += len(chunk)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    why = None
    try:
        proc.wait(timeout=wall_seconds)
    except subprocess.TimeoutExpired:
        why = f'did not finish within {wall_seconds:g} s (an endless loop, or waiting forever?)'
    finally:
        try:  # whatever it started goes too
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if end is not None:  # (also what left the session: it may hold the report's pipe)
            end()
        proc.wait()
        reader.join(timeout=10)
    code = proc.returncode
    if wrapped and code > 128:
        code = 128 - code
    for watchdog in watchdogs:
        why = why or watchdog.why
    if why is None and cap is not None and cap.oom_killed():
        why = user_sandbox.memory_why(cap.limit)
    if why is None and code == -signal.SIGKILL and watchdogs and \
            watchdogs[0].cpu_seen >= request['cpu_seconds']:
        code = -signal.SIGXCPU  # SIGXCPU ignored: the hard CPU limit's SIGKILL followed it
    if why is None and code != 0:
        why = {-signal.SIGXCPU: f'used more than {request["cpu_seconds"]} s of CPU time (an '
                                'endless loop?)',
               -signal.SIGXFSZ: f'wrote a file larger than {FILE_CAP >> 20} MiB',
               -signal.SIGKILL: 'was killed (out of memory?)'}.get(
            code, f'ended with exit status {code} before its report')
    if why is None and size[0] > REPORT_CAP:
        why = f'wrote more than {REPORT_CAP >> 20} MiB where the report goes'
    if why is not None:
        return None, f'dataset.py {why}'
    try:
        report = json.loads(b''.join(chunks).decode('utf-8'))
        if not isinstance(report, dict):
            raise ValueError('not an object')
    except (ValueError, RecursionError):  # (RecursionError: a forged report nested too deep)
        return None, 'dataset.py\'s run gave an unreadable report (did it write to stdout\'s ' \
                     'descriptor itself?)'
    problem = report_problem(report, request)
    if problem is not None:
        return None, f'dataset.py\'s run gave a report that is not the probe\'s ({problem}): ' \
                     'did it write the report itself?'
    return report, None


def _is_int(v):
    return type(v) is int


def _tensor_problem(t):
    """None when t is as_ids' [dtype, shape, ids] (or [type name, None, None])."""
    if not (isinstance(t, list) and len(t) == 3 and isinstance(t[0], str)):
        return 'not [dtype, shape, ids]'
    if t[1] is None and t[2] is None:
        return None
    if not (isinstance(t[1], list) and all(_is_int(n) and n >= 0 for n in t[1])
            and isinstance(t[2], list) and all(_is_int(i) for i in t[2])):
        return 'a shape or ids that are not whole numbers'
    return None


def report_problem(report, request):
    """None when `report` has the form dataset_probe.draw writes and holds exactly the draws
    asked for, in the order asked; else the first deviation, in a phrase. The child writes the
    report, so nothing in it is trusted: a report that skips draws, reorders them or is shaped
    otherwise is the submission's failure, never the grader's error."""
    if 'error' in report:
        return None if isinstance(report['error'], str) else 'an error that is not text'
    if not (isinstance(report.get('stoi'), list) and all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and _is_int(e[1])
            for e in report['stoi'])):
        return 'stoi is not a list of [character, id]'
    if not (isinstance(report.get('itos'), list) and all(
            isinstance(e, list) and len(e) == 2 and _is_int(e[0]) and isinstance(e[1], str)
            for e in report['itos'])):
        return 'itos is not a list of [id, character]'
    if not _is_int(report.get('vocab_size')):
        return 'vocab_size is not a whole number'
    draws, asked = report.get('draws'), request['draws']
    if not isinstance(draws, list) or len(draws) != len(asked):
        return f'{len(draws) if isinstance(draws, list) else "no"} draws, {len(asked)} asked for'
    for k, (d, idx) in enumerate(zip(draws, asked)):
        if not (isinstance(d, list) and d and d[0] == idx and _is_int(d[0])):
            return f'draw {k} is not of document {idx}, as asked'
        if len(d) == 2 and isinstance(d[1], str):
            continue
        why = 'not [index, x, y]' if len(d) != 3 else _tensor_problem(d[1]) or _tensor_problem(d[2])
        if why:
            return f'draw {k}: {why}'
    if 'names_error' in report:
        return None if isinstance(report['names_error'], str) else 'a NameDataset error that is not text'
    names = report.get('names')
    if not isinstance(names, list) or not _is_int(report.get('names_length')):
        return 'no NameDataset items'
    for k, item in enumerate(names):
        if not (isinstance(item, list) and len(item) == 3 and item[0] == k
                and not _tensor_problem(item[1]) and not _tensor_problem(item[2])):
            return f'NameDataset item {k} is not [index, x, y] of item {k}'
    return None


def _short(text, n=90):
    return text if len(text) <= n else text[:n] + '…'


# x and y's lengths each handout allows: its comment says "of length self.block_size",
# its slicing gives block_size - 1. The 2021-22 synthesizer's w2 has block_size - 1 columns, so
# only 127 trains there; both train in 2022-23; the RoPE starter settled on 128.
LENGTHS = {'synthesizer': {127: 'block_size - 1, as its slicing gives'},
           'perceiver': {127: 'block_size - 1, as its slicing gives',
                         128: 'block_size, as its comment says; 2022-23 trains with either'},
           'rope': {128: 'block_size, as the 2024-25 starter'}}
SHORT = 4  # documents shorter than this: the spec is silent about them
FIXED_FROM, FIXED_DRAWS, FIXED_LENGTHS = 16, 5, 10  # the fixed-masked-length test, see fixed_lengths


def check(report, handout, docs, pairs, band=DEFAULTS['masked_band']):
    """({property: (passed, a failing example or the figure behind a pass)}, [warnings]) for a
    probe report. `handout` is the submission's (synthesizer, perceiver, rope; None when it could
    not be told: any handout's lengths pass). passed is None for a property that no draw lets us
    judge. Where the handout's text and its own examples disagree, both readings pass and the
    detail says which one the dataset follows. A draw that raises on a document shorter than 4
    characters is a warning (the spec is silent about them; the 2021-23 wiki.txt has an empty
    one) unless it raised on longer ones too; on any other document every draw property fails
    with the error."""
    if 'error' in report:
        return {name: (False, report['error']) for name in PROPERTIES}, []
    results, warnings = {}, []
    corpus_chars = sorted(set('\n'.join(docs)))
    want = [(PAD_CHAR, 0), (MASK_CHAR, 1)] + [(c, i + 2) for i, c in enumerate(corpus_chars)]
    stoi = {c: i for c, i in report.get('stoi', [])}
    itos = {i: c for i, c in report.get('itos', [])}
    wrong = [f'{c!r}: {stoi.get(c)} (expected {i})' for c, i in want if stoi.get(c) != i]
    if not wrong and len(stoi) != len(want):
        wrong = [f'{len(stoi)} entries in stoi, expected {len(want)}']
    if not wrong and any(itos.get(i) != c for c, i in stoi.items()):
        wrong = ['itos is not the inverse of stoi']
    if not wrong and report.get('vocab_size') != len(want):
        wrong = [f'vocab_size {report.get("vocab_size")}, expected {len(want)}']
    results['vocab'] = (not wrong, wrong[0] if wrong else f'{len(want)} ids')

    block_size = presets.BLOCK_SIZE
    lengths = LENGTHS.get(handout) or {n: why for e in LENGTHS.values() for n, why in e.items()}
    longest = int(block_size * 7 / 8)
    fails = {name: None for name in PROPERTIES
             if name not in ('vocab', 'name_dataset', 'masked_length_mean')}
    truncated, split = [], []  # (truncated length, document length); (masked, truncated)
    starts = []  # where the masked content starts, as a share of the truncated length
    seen_lengths, trailing = set(), 0  # x lengths; strings with a third ⁇ after the content
    paired = 0  # draws with two ⁇ (three with the examples' trailing one)
    short_errors, raised_on_long = {}, False

    def fail(name, idx, text):
        if fails[name] is None:
            fails[name] = f'document {idx}: {text}'

    def decode(ids):
        return ''.join(itos.get(i, '\ufffd') for i in ids)

    for draw in report.get('draws', []):
        idx = draw[0]
        if len(draw) == 2:  # [idx, error]: the dataset raised on this document
            if len(docs[idx]) < SHORT:
                short_errors.setdefault(len(docs[idx]), draw[1])
                continue
            for name in fails:
                fail(name, idx, draw[1])
            raised_on_long = True
            continue
        (xt, xs, x), (yt, ys, y) = draw[1], draw[2]
        if xt != 'torch.int64' or yt != 'torch.int64' or len(xs or []) != 1 or len(ys or []) != 1:
            fail('tensors', idx, f'x is {xt} {xs}, y is {yt} {ys}')
            continue
        seen_lengths.add(len(x))
        if len(x) != len(y) or len(x) not in lengths:
            fail('lengths', idx, f'len(x) {len(x)}, len(y) {len(y)}, expected '
                                 f'{" or ".join(map(str, sorted(lengths)))} '
                                 f'({handout or "any"} handout)')
        if x[1:] != y[:-1]:
            fail('shifted', idx, f'x[1:] {_short(decode(x[1:]))!r} != y[:-1] '
                                 f'{_short(decode(y[:-1]))!r}')
        s = decode(x + y[-1:])
        body = s.rstrip(PAD_CHAR)
        if PAD_CHAR in body:
            fail('pad_fill', idx, f'{_short(s)!r}')
        n = len(body) - body.count(MASK_CHAR)  # the truncated document's length
        doc_length = len(docs[idx])
        if not min(doc_length, SHORT) <= n <= min(doc_length, longest):
            fail('truncation_length', idx, f'truncated to {n} characters'
                 + (f' (the document has {doc_length})' if doc_length < longest else ''))
        truncated.append((n, doc_length))
        masks = s.count(MASK_CHAR)
        if masks == 3 and body.endswith(MASK_CHAR):  # the starter's examples: ⁇masked⁇□□
            trailing += 1
            body = body[:-1]
        elif masks != 2:
            fail('two_masks', idx, f'{masks} \u2047 in {_short(s)!r}')
            continue
        paired += 1
        prefix, suffix, content = body.split(MASK_CHAR)
        text = prefix + content + suffix
        if text != docs[idx][:len(text)]:
            fail('rearranged', idx, f'prefix + masked + suffix {_short(text)!r} is not the '
                                    f'start of the document {_short(docs[idx])!r}')
            continue
        if n >= SHORT:
            split.append((len(content), n, doc_length))
            starts.append(len(prefix) / n)

    for name, example in fails.items():
        results[name] = (example is None, example or 'every draw')
    if results['lengths'][0] and seen_lengths:
        results['lengths'] = (True, '; '.join(f'{n} ({lengths[n]})' for n in sorted(seen_lengths)))
    if results['two_masks'][0] and trailing:
        results['two_masks'] = (True, f'every draw; {trailing} of {paired} end the masked content '
                                      'with a third \u2047, as the starter\'s examples do')
    results['truncation_length'] = truncation_check(truncated, longest,
                                                    fails['truncation_length'])
    # judged only on strings that split into prefix, suffix and masked content
    if not paired:
        results['rearranged'] = (None, 'not judged: no draw has two \u2047')
    elif results['rearranged'][0] and starts:  # the spec leaves the start free: said, not judged
        results['rearranged'] = (True, f'every draw; the masked content starts at '
                                       f'{min(starts):.0%}..{max(starts):.0%} of the truncated '
                                       f'document (mean {sum(starts) / len(starts):.0%}; the spec '
                                       'leaves where free)')
    results['masked_length_mean'] = (masked_length_check(*zip(*split), band=band) if split else
                                     (None, 'not judged: no draw splits into prefix, suffix '
                                            'and masked content'))
    results['name_dataset'] = check_names(report, stoi, pairs, block_size)
    # (a dataset that raises on the other documents too fails there: short ones are no news)
    for length, error in sorted(short_errors.items()) if not raised_on_long else ():
        warnings.append(f'CharCorruptionDataset raised on a document of {length} characters '
                        f'({error}); the spec is silent about such documents'
                        + short_document_reason(length, handout))
    return {name: results[name] for name in PROPERTIES}, warnings


def short_document_reason(length, handout):
    """Why a dataset that raises on a document of `length` (< SHORT) characters matters to the
    submission's handout: the 2021-23 wiki.txt's last document is empty (its final newline), so
    that handout's pretraining would stop there; the 2024-25 file has no empty document, and
    neither file has one of 1 to 3 characters."""
    if length == 0 and handout in ('synthesizer', 'perceiver', None):
        return (', but its pretraining on the 2021-23 wiki.txt (whose last document is empty) '
                'would stop there')
    return f' (the {"2024-25 " if handout == "rope" else ""}wiki.txt has none)'


def truncation_check(truncated, longest, first_failure):
    """Every truncated length within [4, longest], or the whole document when it is shorter
    (else the first draw outside), and both ends drawn from the documents at least `longest`
    long: a dataset that can draw every length does, in thousands of draws."""
    if first_failure is not None:
        return False, first_failure
    full = [n for n, doc_length in truncated if doc_length >= longest]
    if not full:
        return False, 'no usable draw'
    lo, hi = min(full), max(full)
    if (lo, hi) != (SHORT, longest):
        return False, (f'lengths drawn span {lo}..{hi} in {len(full)} draws of long documents, '
                       f'not {SHORT}..{longest}')
    # the ends alone pass a dataset that draws a handful of lengths: a uniform draw shows about
    # `expected` distinct ones, and any draw spread over the range shows half as many
    span = longest - SHORT + 1
    expected = span * (1 - (1 - 1 / span) ** len(full))
    distinct = len(set(full))
    if distinct < expected / 2:
        return False, (f'only {distinct} distinct lengths in {len(full)} draws of long documents '
                       f'(a random length in {SHORT}..{longest} shows about {expected:.0f})')
    return True, f'{lo}..{hi}, {distinct} distinct lengths'


def bernstein_half_width(values, width, fail_probability=FAIL_PROBABILITY):
    """h such that the mean of `values` (independent draws, each within an interval `width`
    wide) strays from its expectation by more than h with probability below fail_probability:
    the empirical Bernstein bound (Maurer and Pontil 2009, theorem 4), applied to each side
    with half the probability. It shrinks with the sample's own variance, where Hoeffding's
    bound assumes the widest; n must be at least 2."""
    n = len(values)
    mean = sum(values) / n
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    log = math.log(4 / fail_probability)
    return math.sqrt(2 * variance * log / n) + 7 * width * log / (3 * (n - 1))


def fixed_lengths(masked, truncated):
    """The truncated lengths from FIXED_FROM on at which every draw masked the same number of
    characters (with at least FIXED_DRAWS draws each), and every one judged there."""
    by_length = {}
    for m, t in zip(masked, truncated):
        by_length.setdefault(t, []).append(m)
    judged = [t for t, ms in by_length.items() if t >= FIXED_FROM and len(ms) >= FIXED_DRAWS]
    fixed = sorted(t for t in judged if len(set(by_length[t])) == 1)
    return fixed, sorted(judged)


def fixed_short(masked, truncated, documents):
    """Below FIXED_FROM, where the spec leaves little room: the truncated lengths at which
    every draw cut from a longer document masked the same number of characters (2 draws or
    more), in runs of one value, as text ('4..7 always 1'; None: none). A whole short document
    is its own case (some datasets mask it by another rule): mixed in, it hid the lengths."""
    by_length = {}
    for m, t, d in zip(masked, truncated, documents):
        if t < FIXED_FROM and d > t:
            by_length.setdefault(t, []).append(m)
    fixed = [(t, ms[0]) for t, ms in sorted(by_length.items())
             if len(ms) >= 2 and len(set(ms)) == 1]
    runs = []  # [first, last, value]
    for t, m in fixed:
        if runs and runs[-1][1] == t - 1 and runs[-1][2] == m:
            runs[-1][1] = t
        else:
            runs.append([t, t, m])
    return ', '.join(f'{a}{f"..{b}" if b > a else ""} always {m}' + (' (empty masked content)'
                                                                    if m == 0 else '')
                     for a, b, m in runs) or None


def masked_length_check(masked, truncated, documents, band=DEFAULTS['masked_band']):
    """The masked length is a quarter of the truncated length on average, random: the mean gap
    (masked - truncated/4) over the draws, with its interval (bernstein_half_width), overlaps
    [-band, band] characters, so a dataset whose expected gap lies inside the band fails with
    probability below FAIL_PROBABILITY; and the length is not fixed at every truncated length
    from FIXED_FROM on (a formula like n // 4). Fixed at the shortest lengths is reported only
    (fixed_short): the spec leaves no room there (a 4-character document masks 1). `documents`:
    the length of each draw's document."""
    n = len(masked)
    gaps = [m - t / 4 for m, t in zip(masked, truncated)]
    gap = sum(gaps) / n
    half = bernstein_half_width(gaps, max(truncated)) if n >= 2 else math.inf
    figure = (f'mean gap masked - truncated/4 {gap:+.2f} characters, interval '
              f'[{gap - half:+.2f}, {gap + half:+.2f}], band \u00b1{band:g} ({n} draws)')
    fixed, judged = fixed_lengths(masked, truncated)
    short = fixed_short(masked, truncated, documents)
    if len(judged) >= FIXED_LENGTHS and fixed == judged:
        t = judged[len(judged) // 2]
        m = masked[truncated.index(t)]
        return False, (f'the masked length is fixed at every truncated length from {FIXED_FROM} '
                       f'on (e.g. always {m} at {t}): not random; {figure}')
    if short:
        figure += f'; masked length fixed at truncated lengths {short} (allowed)'
    return abs(gap) - half <= band, figure


def check_names(report, stoi, pairs, block_size):
    if 'names_error' in report:
        return False, report['names_error']
    got = report.get('names', [])
    if report.get('names_length') != len(pairs) or len(got) != len(pairs):
        return False, f'len(NameDataset) {report.get("names_length")}, expected {len(pairs)}'
    for i, (xt, _, x), (yt, _, y) in got:
        q, p = pairs[i]
        s = q + MASK_CHAR + p + MASK_CHAR
        s += PAD_CHAR * (block_size - len(s))
        want_x = [stoi.get(c) for c in s[:-1]]
        want_y = [stoi.get(c) for c in PAD_CHAR * (len(q) - 1) + s[len(q):]]
        if (xt, yt) != ('torch.int64', 'torch.int64') or x != want_x or y != want_y:
            return False, f'question {i} ({q!r}): x or y differ from the handout\'s'
    return True, f'{len(pairs)} questions'
