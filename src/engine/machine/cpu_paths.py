"""Engine (free to change): precision 'auto' on a CPU, measured and remembered.

The ways of training a model on a CPU that compute the same function (fp32, or bf16 autocast where
the CPU has bf16 arithmetic; for attention without dropout, the fused kernel or the written-out
math) are timed for a few steps of this run's model and batch (by the run's plan, plan.py), the
fastest is kept, its figures go into the plan's line, and the choice is remembered with its
figures for this machine and run shape. Measured, not guessed: machines differ even in which precision is the faster
(docs/speed.md, "Figures behind the code").

A timing is only as good as the moment it was taken: a choice measured while other processes held
the CPUs is used for that run and not remembered, and a remembered choice is checked against a
few steps of each later run (its figure and the steps' within a factor AGREE, else every
candidate is measured again).
"""
import json
import os
import platform
import sys

import torch

from engine import distributed
from engine.common import WriteFailed, atomic_write
from engine.machine.cpu_load import busy
from engine.devices import bf16_supported
from engine.machine.measure import median

PATH_CACHE_FORMAT = 'cs224n-minGPT measured CPU paths, 2'  # 2: each choice with its figures
OLD_FORMATS = ('cs224n-minGPT measured CPU paths, 1',)  # choices without figures: measured anew
AGREE = 1.5  # a remembered figure and this run's check of it further apart: measure again


def default_path_cache():
    """The file that remembers the measured choices, per machine ($CS224N_PATH_CACHE, else the
    user's cache folder)."""
    root = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.environ.get('CS224N_PATH_CACHE') or os.path.join(root, 'cs224n-mingpt', 'cpu_paths.json')


def attention_paths(model):
    """The attention paths training `model` on a CPU can take: the fused kernel (True) and the
    written-out math (False), both computing the same function; only the math ([None]: nothing
    to choose) when attention has dropout or the plain path is asked for (the kernel has no CPU
    dropout of its own: see attention.CausalSelfAttention.cpu_math)."""
    layers = [m for m in model.modules() if hasattr(m, 'cpu_kernel')]  # (CausalSelfAttention's)
    if not layers or not all(m.flash and m.attn_drop.p == 0 for m in layers):
        return [None]
    return [True, False]


def set_attention_path(model, kernel, unset_only=False):
    """Training on a CPU: attention through the fused kernel (True or None) or the written-out
    math (False); unset_only: only in the layers whose path is still None."""
    for m in model.modules():
        if hasattr(m, 'cpu_kernel') and not (unset_only and m.cpu_kernel is not None):
            m.cpu_kernel = kernel


def cpu_candidates(model):
    """The ways of training `model` on this CPU that compute the same function, as (precision,
    attention kernel) pairs: fp32, and bf16 autocast where the CPU has bf16 arithmetic; for
    attention without dropout, the fused kernel (True) or the written-out math (False)."""
    precisions = ['fp32', 'bf16'] if bf16_supported('cpu') else ['fp32']
    return [(p, k) for p in precisions for k in attention_paths(model)]


def cpu_model():
    """The CPU's model name, as /proc/cpuinfo gives it (else platform's)."""
    try:
        with open('/proc/cpuinfo') as f:
            return next(line.split(':', 1)[1].strip() for line in f if line.startswith('model name'))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def path_cache_key(model, batch_size, example_length):
    """What a measured choice holds for: this machine (CPU model, cores, threads, torch) and
    this run's shape (the model's parameters and attention paths, the batch)."""
    n = sum(p.numel() for p in model.parameters())
    return (f'{cpu_model()} | {os.cpu_count()} cores, {torch.get_num_threads()} threads | torch '
            f'{torch.__version__} | {type(model).__name__} {n} parameters, attention paths '
            f'{attention_paths(model)} | batch {batch_size} x {example_length}')


def path_name(choice):
    precision, kernel = choice
    return precision + {None: '', True: ' + attention kernel', False: ' + attention math'}[kernel]


def read_path_cache(path):
    """{key: {'choice': [precision, kernel], 'seconds': {path name: seconds per step}}} from the
    cache file; a missing file is empty, so is one of an older format (its choices have no
    figures to check), an unreadable or foreign one is ignored with a warning (and rewritten
    after the next measurement)."""
    if path is None or not os.path.exists(path):
        return {}
    try:
        with open(path, encoding='utf-8') as f:
            data = json.load(f)
        if isinstance(data, dict) and data.get('format') in OLD_FORMATS:
            return {}
        if not (isinstance(data, dict) and data.get('format') == PATH_CACHE_FORMAT
                and isinstance(data.get('choices'), dict)):
            raise ValueError('not this program\'s cache')
        return data['choices']
    except (OSError, ValueError) as e:
        print(f'warning: ignoring the cache of measured choices {path} ({e})', file=sys.stderr)
        return {}


def write_path_cache(path, choices):
    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as f:
            json.dump({'format': PATH_CACHE_FORMAT, 'choices': choices}, f, indent=1)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        atomic_write(path, write)
    except (OSError, WriteFailed) as e:  # a cache is a convenience: the run goes on without it
        print(f'warning: could not write the cache of measured choices {path} ({e})', file=sys.stderr)


def remembered(entry, candidates):
    """(choice, its remembered seconds per step) from a cache entry, or None when the entry is not
    one of this run's candidates with its figure."""
    try:
        choice = tuple(entry['choice'])
        seconds = float(entry['seconds'][path_name(choice)])
    except (TypeError, KeyError, ValueError):
        return None
    return (choice, seconds) if choice in candidates and seconds > 0 else None


def time_path(timer, choice, timed=3):
    """Median seconds per step of `choice` (after one untimed step) on a measure.StepTimer."""
    set_attention_path(timer.model, choice[1])
    return median(timer.times(choice[0], warm=1, timed=timed))


def choose(timer, candidates, cache_path, meter, check=True, remember=True):
    """(choice, how it was made; None where nothing was measured or remembered) for training
    timer.model: the remembered one if this run's steps agree with its figure (check=False, a
    run too short for the choice to matter: taken unchecked), else the fastest measured now,
    remembered (where `remember`) only if the machine was not busy while it was measured
    (`meter`, a cpu_load.LoadMeter started before the plan's steps)."""
    key = path_cache_key(timer.model, timer.config.batch_size, len(timer.dataset[0][1]))
    cache = read_path_cache(cache_path)
    found, note = remembered(cache.get(key), candidates), ''
    if found is not None:
        choice, then = found
        if not check:
            return choice, (f'cached for this machine in {cache_path}: {then:.3f} s per step '
                            'then; not timed for one epoch')
        now = time_path(timer, choice)
        if max(now, then) <= AGREE * min(now, then):
            return choice, (f'cached for this machine in {cache_path}: {then:.3f} s per '
                            f'step then, {now:.3f} s now')
        note = f'; the cached {path_name(choice)} took {then:.3f} s per step then, {now:.3f} s now'
    if not check:
        return candidates[0], None
    seconds = {c: time_path(timer, c) for c in candidates}
    choice = min(candidates, key=seconds.get)
    how = 'measured, median of 3 steps: ' + ', '.join(
        f'{path_name(c)} {seconds[c]:.3f} s' for c in candidates) + note
    others = meter.others()
    if busy(others):
        how += (f'; not remembered: other processes used {others:.0%} of the CPUs while it '
                'was measured')
    elif remember and cache_path is not None:
        cache[key] = {'choice': list(choice),
                      'seconds': {path_name(c): round(s, 6) for c, s in seconds.items()}}
        write_path_cache(cache_path, cache)
    return choice, how


def plan_path(plan, model, device, saved=None):
    """The attention path of the run's plan (plan.py) set on `model`, where it is decided: a
    resumed run's (`saved`, its checkpoint's plan) where the precision is 'auto'; told bf16
    (nothing measured), the written-out math where no path is set (under bf16 the faster where
    it was measured). Returns the candidates 'auto' chooses among (choose_path), else []."""
    candidates = []
    if plan.precision == 'auto':
        if saved is not None:
            plan.precision, plan.kernel = saved['precision'], saved.get('kernel')
            plan.how = 'as the interrupted run chose it (its checkpoint)'
        else:
            candidates = cpu_candidates(model)
    set_plan_path(plan, model, device)
    return candidates


def set_plan_path(plan, model, device):
    """The CPU attention path the plan chose (plan.kernel) set on `model`; under bf16 with no
    path chosen, the written-out math where no path is set."""
    if plan.kernel is not None:
        set_attention_path(model, plan.kernel)
    elif plan.precision == 'bf16' and device.type == 'cpu':
        set_attention_path(model, False, unset_only=True)


def choose_path(plan, timer, candidates, config, meter, one_epoch):
    """precision 'auto' on a CPU resolved, the attention path set on the model: the only
    candidate; under torchrun the rule (the ranks must agree: bf16 where the CPU has it, the
    model's own path); else measured or remembered (choose)."""
    if len(candidates) == 1 or distributed.active():
        choice = candidates[0] if len(candidates) == 1 else (candidates[-1][0], None)
    else:
        choice, plan.how = choose(timer, candidates, config.path_cache, meter,
                                  check=not one_epoch, remember=distributed.rank() == 0)
    plan.precision, plan.kernel = choice
    set_attention_path(timer.model, plan.kernel)

