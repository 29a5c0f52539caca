"""Runs a submission's src/dataset.py and reports what its datasets give, for grade.py.

    python -I dataset_probe.py REQUEST.json    (working directory: the sandbox folder)

Run only by spec_check.run_probe, in a child process whose working directory is a temporary
sandbox holding a copy of the submission's src/, with a clean environment and resource limits.
It imports the submission's dataset module (never the grader's), builds
CharCorruptionDataset(corpus, block_size) as the autograder does (no edition argument), draws the
requested examples, builds NameDataset on the requested questions, and writes everything as one
JSON object to the file descriptor it was started with as stdout. It judges nothing: the grader
checks the properties on this plain data, so a dataset.py that writes to that descriptor itself
can only make its own report unreadable.
"""
import importlib.util
import json
import os
import random
import resource
import sys
import traceback

import torch  # before the limits: the import itself needs more address space than a dataset

try:  # seeded too: some datasets draw with numpy's generator
    import numpy
except ImportError:
    numpy = None


def limit_resources(cpu_seconds, memory_mb):
    """From here on: `cpu_seconds` more of CPU time (SIGXCPU ends the process) and `memory_mb`
    more of address space (allocations beyond it raise MemoryError)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (spent + cpu_seconds, spent + cpu_seconds + 1))
    try:
        with open('/proc/self/statm') as f:
            now = int(f.read().split()[0]) * os.sysconf('SC_PAGE_SIZE')
    except OSError:
        now = 4 << 30
    cap = now + (memory_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def as_ids(t):
    """A tensor as [dtype, shape, ids]; anything else as its type's name."""
    if not torch.is_tensor(t):
        return [type(t).__name__, None, None]
    flat = t.reshape(-1).tolist() if t.numel() < 100000 else []
    return [str(t.dtype), list(t.shape), flat]


def error(stage, e):
    tail = traceback.format_exception(type(e), e, e.__traceback__)[-1].strip()
    return {'error': f'{stage}: {tail[:300]}'}


def probe(request):
    """The report on the submission's src/dataset.py (imported from the working directory)."""
    try:
        sys.path.insert(0, os.path.abspath('src'))
        # the file itself: `import dataset` would take a package src/dataset/ beside it
        spec = importlib.util.spec_from_file_location('dataset', os.path.join('src', 'dataset.py'))
        dataset = importlib.util.module_from_spec(spec)
        sys.modules['dataset'] = dataset
        spec.loader.exec_module(dataset)
    except BaseException as e:  # SystemExit too: a module that exits on import
        return error('import dataset', e)
    return draw(request, dataset)


def seed_all(seed):
    """Python's, torch's and numpy's generators, each seeded with `seed`."""
    random.seed(seed)
    torch.manual_seed(seed)
    if numpy is not None:
        numpy.random.seed(seed % 2**32)


def draw(request, dataset):
    """The report on the module `dataset`: its vocabulary, the requested draws ([idx, x, y], or
    [idx, error] for a draw that raised), its NameDataset's items."""
    out = {}
    seed_all(request['seed'])  # (a dataset may draw in its constructor too)
    try:
        ds = dataset.CharCorruptionDataset(request['corpus'], request['block_size'])
        out['stoi'] = sorted((str(k), int(v)) for k, v in ds.stoi.items())
        out['itos'] = sorted((int(k), str(v)) for k, v in ds.itos.items())
        out['vocab_size'] = int(getattr(ds, 'vocab_size', -1))
        out['length'] = len(ds)
    except BaseException as e:
        return error('CharCorruptionDataset(corpus, block_size)', e)
    seed_all(request['seed'])
    draws = []
    for idx in request['draws']:  # a draw that raises is [idx, the error]; the others go on
        try:
            item = ds[idx]
            if item is None:  # an empty starter's __getitem__: the student's problem, named
                draws.append([idx, f'CharCorruptionDataset[{idx}] returned None, not (x, y): '
                                   'its __getitem__ returns nothing (not written yet?)'])
                continue
            x, y = item
            draws.append([idx, as_ids(x), as_ids(y)])
        except MemoryError:
            raise
        except BaseException as e:  # SystemExit too
            draws.append([idx, error(f'CharCorruptionDataset[{idx}]', e)['error']])
    out['draws'] = draws
    try:
        names = dataset.NameDataset(ds, request['names'])
        out['names'] = [[i, as_ids(x), as_ids(y)] for i, (x, y) in
                        ((i, names[i]) for i in range(min(len(names), request['name_items'])))]
        out['names_length'] = len(names)
    except BaseException as e:
        out['names_error'] = error('NameDataset', e)['error']
    return out


def main():
    with open(sys.argv[1], encoding='utf-8') as f:
        request = json.load(f)
    report = os.fdopen(os.dup(1), 'w', encoding='utf-8')
    # the submission's prints go nowhere: megabytes of them cost nothing and cannot be mistaken
    # for the report
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    torch.set_num_threads(1)
    limit_resources(request['cpu_seconds'], request['memory_mb'])
    try:
        result = probe(request)
    except MemoryError:
        result = {'error': f'MemoryError: needed more than {request["memory_mb"]} MB'}
    json.dump(result, report)
    report.close()
    os._exit(0)  # no exit handlers of the submission's


if __name__ == '__main__':
    main()
