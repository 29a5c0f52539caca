"""The autograder's part of grade.py: does a submission's CharCorruptionDataset meet the spec?

The submission's src/dataset.py runs in a child process (dataset_probe.py) in a sandbox folder:
a copy of its src/, a clean environment, its working directory and HOME in that folder, limits
on CPU time, address space and file size, and a wall-clock limit after which its whole process
group is killed. It is never imported into the grader. The child only reports what the dataset
returned; the properties are judged here, on that plain data.

The corpus is made up here from a seed (never wiki.txt, so a dataset that special-cases the real
data gains nothing): documents longer than the longest truncation, with non-ASCII characters,
and questions for NameDataset in the handout's format.
"""
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

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, 'dataset_probe.py')
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'src'))
import presets  # noqa: E402

MASK_CHAR = '\u2047'
PAD_CHAR = '\u25A1'
FAIL_PROBABILITY = 1e-6  # the chance that a correct dataset fails the masked-length test
PROPERTIES = {
    'vocab': 'PAD id 0, MASK id 1, then the corpus\'s characters sorted; itos inverts stoi',
    'tensors': 'x and y are 1-D LongTensors',
    'lengths': 'x and y have the edition\'s length',
    'shifted': 'y is x shifted by one',
    'two_masks': 'exactly two \u2047 in the masked string',
    'rearranged': 'prefix \u2047 suffix \u2047 masked_content, with prefix + masked_content + '
                  'suffix the document truncated',
    'pad_fill': 'the rest of the string is \u25A1, and no \u25A1 before it',
    'truncation_length': 'truncated length within [4, int(block_size*7/8)], both ends drawn',
    'masked_length_mean': 'masked length 1/4 of the truncated length on average',
    'name_dataset': 'NameDataset\'s x and y as the handout gives them',
}
DEFAULTS = dict(draws=10000, cpu_seconds=60, memory_mb=2048, wall_seconds=300, seed=0)
REPORT_CAP = 64 << 20  # bytes of report read from the child; a real one is about 10 MB
FILE_CAP = 64 << 20  # the largest file the child may write (RLIMIT_FSIZE)


def make_corpus(seed, documents=300):
    """(corpus text, its documents): made-up words in lines of 150-400 characters."""
    rng = random.Random(seed)
    letters = string.ascii_letters + 'éüñø'
    chars = letters + string.digits + " .,;?()'-\u2013"
    docs = [' '.join(chars)]  # every character at least once
    while len(docs) < documents:
        words = []
        target = rng.randint(150, 400)
        while sum(len(w) + 1 for w in words) < target:
            words.append(''.join(rng.choice(letters if rng.random() < 0.9 else chars)
                                 for _ in range(rng.randint(1, 10))))
        docs.append(' '.join(words)[:target])
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


def _limit_files():
    import resource
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_CAP, FILE_CAP))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_probe(src, sandbox, request, wall_seconds=DEFAULTS['wall_seconds']):
    """(report, None) from dataset_probe.py run on a copy of `src` in the folder `sandbox`, or
    (None, why it gave none)."""
    os.makedirs(sandbox)
    shutil.copytree(src, os.path.join(sandbox, 'src'), symlinks=True,
                    ignore=shutil.ignore_patterns('__pycache__'))
    with open(os.path.join(sandbox, 'request.json'), 'w', encoding='utf-8') as f:
        json.dump(request, f)
    env = {'PATH': '/usr/bin:/bin', 'HOME': sandbox, 'TMPDIR': sandbox, 'LANG': 'C.UTF-8',
           'LC_ALL': 'C.UTF-8', 'OMP_NUM_THREADS': '1', 'MKL_NUM_THREADS': '1'}
    proc = subprocess.Popen([sys.executable, '-I', '-B', PROBE, 'request.json'], cwd=sandbox,
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=_limit_files)
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
        proc.wait()
        reader.join(timeout=10)
    if why is None and proc.returncode != 0:
        why = {-signal.SIGXCPU: f'used more than {request["cpu_seconds"]} s of CPU time (an '
                                'endless loop?)',
               -signal.SIGXFSZ: f'wrote a file larger than {FILE_CAP >> 20} MiB',
               -signal.SIGKILL: 'was killed (out of memory?)'}.get(
            proc.returncode, f'ended with exit status {proc.returncode} before its report')
    if why is None and size[0] > REPORT_CAP:
        why = f'wrote more than {REPORT_CAP >> 20} MiB where the report goes'
    if why is not None:
        return None, f'dataset.py {why}'
    try:
        report = json.loads(b''.join(chunks).decode('utf-8'))
        if not isinstance(report, dict):
            raise ValueError('not an object')
    except ValueError:
        return None, 'dataset.py\'s run gave an unreadable report (did it write to stdout\'s ' \
                     'descriptor itself?)'
    return report, None


def _short(text, n=90):
    return text if len(text) <= n else text[:n] + '…'


def check(report, edition, docs, pairs):
    """{property: (passed, a failing example or a figure)} for a probe report. passed is None
    for a property that no draw lets us judge (the masked length, when no string has two
    \u2047); every property fails, with the reason, when the dataset could not be built or
    drawn from."""
    if 'error' in report:
        return {name: (False, report['error']) for name in PROPERTIES}
    results = {}
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
    length = block_size - 1 + presets.EDITIONS[edition]['extra_pad']
    longest = int(block_size * 7 / 8)
    fails = {name: None for name in PROPERTIES
             if name not in ('vocab', 'name_dataset', 'masked_length_mean')}
    truncated, split = [], []  # every usable draw's truncated length; (masked, truncated)
    paired = 0  # draws with two \u2047

    def fail(name, idx, text):
        if fails[name] is None:
            fails[name] = f'document {idx}: {text}'

    def decode(ids):
        return ''.join(itos.get(i, '\ufffd') for i in ids)

    for idx, (xt, xs, x), (yt, ys, y) in report.get('draws', []):
        if xt != 'torch.int64' or yt != 'torch.int64' or len(xs or []) != 1 or len(ys or []) != 1:
            fail('tensors', idx, f'x is {xt} {xs}, y is {yt} {ys}')
            continue
        if len(x) != length or len(y) != length:
            fail('lengths', idx, f'len(x) {len(x)}, len(y) {len(y)}, expected {length} '
                                 f'({edition} edition)')
        if x[1:] != y[:-1]:
            fail('shifted', idx, f'x[1:] {_short(decode(x[1:]))!r} != y[:-1] '
                                 f'{_short(decode(y[:-1]))!r}')
        s = decode(x + y[-1:])
        body = s.rstrip(PAD_CHAR)
        if PAD_CHAR in body:
            fail('pad_fill', idx, f'{_short(s)!r}')
        n = len(body) - body.count(MASK_CHAR)  # the truncated document's length
        if not 4 <= n <= longest:
            fail('truncation_length', idx, f'truncated to {n} characters')
        truncated.append(n)
        if s.count(MASK_CHAR) != 2:
            fail('two_masks', idx, f'{s.count(MASK_CHAR)} \u2047 in {_short(s)!r}')
            continue
        paired += 1
        prefix, suffix, content = body.split(MASK_CHAR)
        text = prefix + content + suffix
        if text != docs[idx][:len(text)]:
            fail('rearranged', idx, f'prefix + masked + suffix {_short(text)!r} is not the '
                                    f'start of the document {_short(docs[idx])!r}')
            continue
        split.append((len(content), n))

    for name, example in fails.items():
        results[name] = (example is None, example or 'every draw')
    results['truncation_length'] = truncation_check(truncated, longest,
                                                    fails['truncation_length'])
    # judged only on strings that split into prefix, suffix and masked content
    if not paired:
        results['rearranged'] = (None, 'not judged: no draw has two \u2047')
    results['masked_length_mean'] = (masked_mean_check(*zip(*split)) if split else
                                     (None, 'not judged: no draw splits into prefix, suffix '
                                            'and masked content'))
    results['name_dataset'] = check_names(report, stoi, pairs, block_size)
    return {name: results[name] for name in PROPERTIES}


def truncation_check(truncated, longest, first_failure):
    """Every truncated length within [4, longest] (else the first draw outside), and both ends
    drawn: a dataset that can draw every length does, in thousands of draws."""
    if first_failure is not None:
        return False, first_failure
    if not truncated:
        return False, 'no usable draw'
    lo, hi = min(truncated), max(truncated)
    if (lo, hi) != (4, longest):
        return False, f'lengths drawn span {lo}..{hi} in {len(truncated)} draws, not 4..{longest}'
    return True, f'{lo}..{hi}'


def masked_mean_check(masked, truncated):
    """Mean of (masked - truncated/4) near 0. Each term lies in an interval as wide as the
    truncated length, so Hoeffding's inequality bounds the chance that a dataset whose masked
    length averages a quarter strays by t: 2 exp(-2 N t^2 / W^2) = FAIL_PROBABILITY."""
    n = len(masked)
    width = max(truncated)
    tolerance = width * math.sqrt(math.log(2 / FAIL_PROBABILITY) / (2 * n))
    gap = sum(m - t / 4 for m, t in zip(masked, truncated)) / n
    figure = (f'mean masked {sum(masked) / n:.2f} vs truncated/4 {sum(truncated) / n / 4:.2f} '
              f'characters (tolerance {tolerance:.2f}, {n} draws)')
    return abs(gap) <= tolerance, figure


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
