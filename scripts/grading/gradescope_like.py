"""Run the autograder here as Gradescope runs it: its folder, its limits, its container's rules.

    python scripts/grading/gradescope_like.py SUBMISSION [--autograder autograder.zip]
        [--memory_mb 768] [--cpus 0.5] [--timeout 600] [--keep FOLDER] [-- GRADE.PY ARGS...]

SUBMISSION is what a student uploads (a zip, unzipped as Gradescope does, or a folder). The
autograder zip (default: one built now by gradescope.py from data/, without test answers) is
unpacked into a stand-in /autograder (ROOT/source), the submission into ROOT/submission, and
ROOT/source/run_autograder runs with AUTOGRADER_ROOT=ROOT, as root, under what Gradescope's
default Docker container imposes (its documentation: 768 MB of memory, half a virtual CPU, 10
minutes; Docker's defaults):

- a cgroup (v2, else v1's memory and cpu hierarchies) with that memory limit and CPU quota;
- Docker's default seccomp rule on namespaces: unshare, setns and clone with any CLONE_NEW* flag
  fail with EPERM, clone3 with ENOSYS (through libseccomp: Debian's python3-seccomp, loaded by
  /usr/bin/python3, which then execs the run);
- Docker's default capabilities only (setpriv --bounding-set): no CAP_SYS_ADMIN, no SYS_PTRACE;
- the time limit: every process of the cgroup killed when it passes.

It prints one line: the exit status, the wall time beside the limit, the peak memory (anonymous,
sampled every 0.2 s, and the cgroup's own peak, page cache included), the score, and the sandbox
the dataset check used. Exit status: grading's, 124 on the time limit, 2 when it cannot set up
(not root, no cgroups, no python3-seccomp: the line says which).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CGROUP = '/sys/fs/cgroup'
# Docker's default capabilities (moby's oci/caps/defaults.go); everything else is dropped
DOCKER_CAPS = ('chown', 'dac_override', 'fsetid', 'fowner', 'mknod', 'net_raw', 'setgid',
               'setuid', 'setfcap', 'setpcap', 'net_bind_service', 'sys_chroot', 'kill',
               'audit_write')
# Run by /usr/bin/python3 (where python3-seccomp is): Docker's default profile on namespaces
# for a container without CAP_SYS_ADMIN, loaded, then the rest of argv exec'd.
SECCOMP = '''
import errno, os, sys
import seccomp
CLONE_NEW = (0x00000080, 0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000,
             0x20000000, 0x40000000)  # time, ns, cgroup, uts, ipc, user, pid, net
f = seccomp.SyscallFilter(seccomp.ALLOW)
f.set_attr(seccomp.Attr.CTL_NNP, 0)  # (Docker sets no no_new_privs)
for name in ('unshare', 'setns'):
    f.add_rule(seccomp.ERRNO(errno.EPERM), name)
for flag in CLONE_NEW:
    f.add_rule(seccomp.ERRNO(errno.EPERM), 'clone', seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
f.add_rule(seccomp.ERRNO(errno.ENOSYS), 'clone3')
f.load()
os.execvp(sys.argv[1], sys.argv[1:])
'''


class SetupError(Exception):
    """Why the conditions cannot be made here, in a sentence."""


class Cgroup:
    """A cgroup with a memory limit and a CPU quota: v2 where the unified hierarchy has the
    memory and cpu controllers, else v1's memory and cpu hierarchies."""

    def __init__(self, memory_mb, cpus):
        name = f'a5-gradescope-like-{os.getpid()}'
        controllers = os.path.join(CGROUP, 'cgroup.controllers')
        self.v2 = os.path.exists(controllers) and {'memory', 'cpu'} <= set(open(controllers).read().split())
        try:
            if self.v2:
                self.dirs = [os.path.join(CGROUP, name)]
                os.mkdir(self.dirs[0])
                self.write('memory.max', str(memory_mb << 20))
                self.write('memory.swap.max', '0')
                self.write('cpu.max', f'{int(cpus * 100000)} 100000')
            else:
                self.dirs = [os.path.join(CGROUP, c, name) for c in ('memory', 'cpu')]
                for d in self.dirs:
                    os.mkdir(d)
                self.write('memory.limit_in_bytes', str(memory_mb << 20), 0)
                self.write('cpu.cfs_period_us', '100000', 1)
                self.write('cpu.cfs_quota_us', str(int(cpus * 100000)), 1)
        except OSError as e:
            self.remove()
            raise SetupError(f'cannot make a cgroup under {CGROUP} ({e.strerror}): run as root '
                             'where cgroups are writable')

    def write(self, name, value, which=0):
        with open(os.path.join(self.dirs[which], name), 'w') as f:
            f.write(value)

    def read(self, name, which=0):
        try:
            with open(os.path.join(self.dirs[which], name)) as f:
                return f.read()
        except OSError:
            return ''

    def join(self):
        """Put the calling process (a child before its exec) into the cgroup."""
        for d in self.dirs:
            with open(os.path.join(d, 'cgroup.procs'), 'w') as f:
                f.write(str(os.getpid()))

    def anonymous(self):
        """Bytes of anonymous memory the cgroup holds now."""
        key = 'anon' if self.v2 else 'total_rss'
        for line in self.read('memory.stat').splitlines():
            k, _, v = line.partition(' ')
            if k == key:
                return int(v)
        return 0

    def peak(self):
        """The cgroup's peak memory, page cache included (None where the kernel keeps none)."""
        value = self.read('memory.peak' if self.v2 else 'memory.max_usage_in_bytes').strip()
        return int(value) if value.isdigit() else None

    def kill_all(self):
        for _ in range(50):
            pids = [int(p) for p in self.read('cgroup.procs').split()]
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)

    def remove(self):
        for d in getattr(self, 'dirs', []):
            try:
                os.rmdir(d)
            except OSError:
                pass


def problem():
    """None where the conditions can be made here, else why not."""
    if os.geteuid() != 0:
        return 'run it as root (it makes a cgroup and drops capabilities as Docker does)'
    if not os.path.exists('/usr/bin/python3') or subprocess.run(
            ['/usr/bin/python3', '-c', 'import seccomp'], capture_output=True).returncode != 0:
        return 'no libseccomp for /usr/bin/python3 (Debian: apt-get install python3-seccomp)'
    if shutil.which('setpriv') is None:
        return 'no setpriv (util-linux)'
    return None


def lay_out(root, autograder, submission):
    """ROOT as Gradescope lays it out: source/ (the autograder zip), submission/, results/."""
    with zipfile.ZipFile(autograder) as z:
        z.extractall(os.path.join(root, 'source'))
    for name in ('run_autograder', 'setup.sh'):  # (zipfile keeps no modes)
        os.chmod(os.path.join(root, 'source', name), 0o755)
    target = os.path.join(root, 'submission')
    if zipfile.is_zipfile(submission):
        with zipfile.ZipFile(submission) as z:
            z.extractall(target)
    else:
        shutil.copytree(submission, target, symlinks=True)
    os.makedirs(os.path.join(root, 'results'))


def run(root, cgroup, timeout, grade_args, python=sys.executable):
    """(exit status, seconds, peak anonymous bytes) of run_autograder under the conditions."""
    caps = '-all,' + ','.join('+' + c for c in DOCKER_CAPS)
    argv = ['/usr/bin/python3', '-c', SECCOMP, 'setpriv', '--bounding-set', caps, '--',
            'bash', os.path.join(root, 'source', 'run_autograder'), *grade_args]
    env = dict(os.environ, AUTOGRADER_ROOT=root, PYTHON=python)
    peak, done = [0], threading.Event()

    def sample():
        while not done.wait(0.2):
            peak[0] = max(peak[0], cgroup.anonymous())
    sampler = threading.Thread(target=sample, daemon=True)
    start = time.time()
    proc = subprocess.Popen(argv, env=env, cwd=root, preexec_fn=cgroup.join,
                            stdin=subprocess.DEVNULL)
    sampler.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = 124
    finally:
        cgroup.kill_all()
        proc.wait()
        done.set()
        sampler.join()
    return code, time.time() - start, peak[0]


def build_autograder(out):
    """An autograder zip built now from data/ (no test answers)."""
    sys.path.insert(0, HERE)
    import gradescope
    gradescope.build(out)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog='python scripts/grading/gradescope_like.py',
                                 description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('submission', help='what a student uploads: a zip or a folder')
    ap.add_argument('--autograder', default=None,
                    help='the autograder zip (default: gradescope.py build, from data/)')
    ap.add_argument('--memory_mb', type=int, default=768, help='default %(default)s (Gradescope\'s)')
    ap.add_argument('--cpus', type=float, default=0.5, help='default %(default)s (Gradescope\'s)')
    ap.add_argument('--timeout', type=float, default=600, help='seconds (default %(default)s)')
    ap.add_argument('--keep', default=None, help='lay /autograder out here and keep it')
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index('--') if '--' in argv else len(argv)  # what follows -- is grade.py's
    args = ap.parse_args(argv[:cut])
    args.grade_args = argv[cut + 1:]
    why = problem()
    if why is None and not os.path.exists(args.submission):
        why = f'SUBMISSION {args.submission}: no such file or folder'
    if why is None and args.keep is not None and os.path.exists(args.keep):
        why = f'--keep {args.keep}: already there (it is written whole; name a new folder)'
    if why is not None:
        print(f'error: {why}', file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix='a5-gradescope-like-')
    cgroup = None
    try:
        root = args.keep or os.path.join(tmp, 'autograder')
        autograder = args.autograder or build_autograder(os.path.join(tmp, 'autograder.zip'))
        lay_out(root, autograder, args.submission)
        cgroup = Cgroup(args.memory_mb, args.cpus)
        code, seconds, anon = run(root, cgroup, args.timeout, args.grade_args)
        peak = cgroup.peak()
    except SetupError as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    finally:
        if cgroup is not None:
            cgroup.remove()
    try:
        with open(os.path.join(root, 'results', 'results.json'), encoding='utf-8') as f:
            results = json.load(f)
        scored = [t for t in results['tests'] if 'max_score' in t]
        score = f'score {results["score"]:g} of {sum(t["max_score"] for t in scored):g}'
        sandbox = results['output'].partition('ran in its sandbox: ')[2].split('. ')[0] or 'none'
    except (OSError, ValueError, KeyError):
        score, sandbox = 'no readable results.json', '?'
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f'gradescope-like ({args.memory_mb} MB, {args.cpus:g} CPU, no namespaces, Docker\'s '
          f'capabilities): exit {code}, {seconds:.0f} s of the {args.timeout:g} s limit; peak '
          f'memory {anon / 2**20:.0f} MiB anonymous'
          + (f' ({peak / 2**20:.0f} MiB with page cache)' if peak else '')
          + f'; {score}; dataset sandbox: {sandbox}', flush=True)
    return code


if __name__ == '__main__':
    sys.exit(main())
