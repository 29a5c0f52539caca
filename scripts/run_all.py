"""The whole assignment in one command, then a results report.

    python scripts/run_all.py                         # handout schedule, outputs in runs/all-handout/
    python scripts/run_all.py --preset cpu-quick --out runs/quick
    python scripts/run_all.py --report-only --out results/h100   # rebuild the report
    python scripts/run_all.py --side_by_side 7 --one_process -- --precision bf16

Stages (each the handout's commands, file names as the handout's):
  london            London baseline on the dev set
  vanilla-nopretrain  finetune from scratch -> vanilla.model.params, vanilla.nopretrain.{dev,test}.predictions
  vanilla           pretrain -> finetune -> vanilla.pretrain.{dev,test}.predictions
  synthesizer       the same with synthesizer attention
  perceiver         the same with --bottleneck_dim 64 --pretrain_lr 6e-4 (the perceiver handout
                    text's commands; its starter's scripts/run_perceiver.sh types 6e-3: READINGS)
  rope              the same with RoPE (the 2024-25 edition's commands and settings)
  perceiver-starter the perceiver at its starter script's rate (6e-3), files perceiver-starter.*;
                    only when named in --models
A stage whose outputs already exist is skipped (so an interrupted run continues), unless --force;
so is a whole model whose dev and test predictions exist (predictions carried to a fresh machine
are enough). A step interrupted and continued by a later call is timed over both calls.
--time_budget MINUTES: the whole run ends within MINUTES: each training step gets a share of the
time left (pretraining 8 parts, finetuning 1), after a reserve for the evaluations still to come,
as run.py's --time_budget (the epochs that fit on this machine, the schedule compressed to them).
The report (report.md, report.json, loss_curves.png in the output folder) has the dev accuracy of
each model, the wall time of each step, the device and the commit. It is written as each model
finishes, and when the run is stopped (Ctrl-C, SIGTERM): then it says it was cut, and gives what
finished and the seconds each step had so far.
"""
import argparse
import contextlib
import functools
import importlib
import io
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(REPO, 'src', 'run.py')
sys.path.insert(0, os.path.join(REPO, 'src'))
from engine.common import MAX_BUDGET_MINUTES, OneLineParser, UsageError, source_commit  # noqa: E402
from engine.machine.cpu_load import usable_cores  # noqa: E402
from engine.datafiles import resolve  # noqa: E402
from engine.command.paths import out_folder_problem  # noqa: E402
from engine.presets import BLOCK_SIZE, PRESETS, mix, model_values  # noqa: E402
from engine.command.inputs import evaluate_places  # noqa: E402

# name -> (variant, extra flags, pretrain?)
MODELS = {
    'vanilla-nopretrain': ('vanilla', [], False),
    'vanilla': ('vanilla', [], True),
    'synthesizer': ('synthesizer', [], True),
    'perceiver': ('perceiver', ['--bottleneck_dim', '64', '--pretrain_lr', '6e-4'], True),
    'rope': ('rope', [], True),
    'perceiver-starter': ('perceiver', ['--bottleneck_dim', '64', '--pretrain_lr', '6e-3'], True),
}
# The other reading of a value (READINGS) runs only when asked for, into files of its own name.
DEFAULT_MODELS = [name for name in MODELS if name != 'perceiver-starter']
FILE_STEM = {'perceiver-starter': 'perceiver-starter'}
# Where the handout's own materials give two values, the one a model's commands above take
# (the starters' facts, run.py): the report names it.
READINGS = {
    'perceiver': 'pretraining rate 6e-4, as the 2022-23 handout text types its command; the '
                 'starter\'s scripts/run_perceiver.sh (and run.py\'s default) types 6e-3',
    'perceiver-starter': 'pretraining rate 6e-3, as the perceiver starter\'s '
                         'scripts/run_perceiver.sh types it; the 2022-23 handout text types 6e-4',
}
REFERENCE = {  # public student submissions (dev) and the handout's minimums
    'london': ('5.0% (London baseline)', None),
    'vanilla-nopretrain': ('1.4%', 'well below 10%'),
    'vanilla': ('20.2%', '>= 10% dev'),
    'synthesizer': ('5.6%', '>= 5% test'),
    'perceiver': ('-', '>= 6% dev'),
    'perceiver-starter': ('-', '>= 6% dev'),
    'rope': ('30.2-40.4% (2024-25)', '>= 30% test'),
}


def files_of(name):
    variant, _, pretrained = MODELS[name]
    variant = FILE_STEM.get(name, variant)
    if not pretrained:
        return dict(params=f'{variant}.model.params', dev=f'{variant}.nopretrain.dev.predictions',
                    test=f'{variant}.nopretrain.test.predictions')
    return dict(pretrain=f'{variant}.pretrain.params', params=f'{variant}.finetune.params',
                dev=f'{variant}.pretrain.dev.predictions', test=f'{variant}.pretrain.test.predictions')


def commands(name):
    """[(step, argv)] for one model: the handout's commands."""
    variant, extra, pretrained = MODELS[name]
    f = files_of(name)
    tb = ['--tb_expt_name', name]
    steps = []
    if pretrained:
        steps.append(('pretrain', ['pretrain', variant, 'wiki.txt', *extra, *tb,
                                   '--writing_params_path', f['pretrain']]))
        steps.append(('finetune', ['finetune', variant, 'wiki.txt', *extra, *tb,
                                   '--reading_params_path', f['pretrain'],
                                   '--writing_params_path', f['params'],
                                   '--finetune_corpus_path', 'birth_places_train.tsv']))
    else:
        steps.append(('finetune', ['finetune', variant, 'wiki.txt', *extra, *tb,
                                   '--writing_params_path', f['params'],
                                   '--finetune_corpus_path', 'birth_places_train.tsv']))
    for split, tsv in (('dev', 'birth_dev.tsv'), ('test', 'birth_test_inputs.tsv')):
        steps.append((f'evaluate-{split}', ['evaluate', variant, 'wiki.txt', *extra, *tb,
                                            '--reading_params_path', f['params'],
                                            '--eval_corpus_path', tsv, '--outputs_path', f[split]]))
    return steps


# --time_budget: how the time left is shared among the training steps still to run, and what is
# kept back for each step that follows (evaluations; starting a process)
BUDGET_WEIGHTS = {'pretrain': 8, 'finetune': 1}
RESERVE_SECONDS = {'pretrain': 10, 'finetune': 10, 'evaluate-dev': 20, 'evaluate-test': 20}


def stage_budget(seconds_left, step, steps_after):
    """Minutes for training step `step` ('pretrain'/'finetune') when `seconds_left` remain and
    `steps_after` (names) follow it: its weight's share of the time left after their reserve."""
    reserve = sum(RESERVE_SECONDS[s] for s in steps_after)
    weights = [BUDGET_WEIGHTS[s] for s in [step, *steps_after] if s in BUDGET_WEIGHTS]
    return (seconds_left - reserve) * BUDGET_WEIGHTS[step] / sum(weights) / 60


def output_of(argv):
    for flag in ('--outputs_path', '--writing_params_path'):
        if flag in argv:
            return argv[argv.index(flag) + 1]


class Signals:
    """Ctrl-C and SIGTERM while steps run, handled in the main thread for every step at once: a
    step writes its checkpoint and ends (Ctrl-C reaches it from the terminal; a SIGTERM may be
    run_all's alone, `kill PID`, and is passed on to each live step, or to each step in a thread
    of this process through its team), then run_all stops."""

    def __init__(self, team=None):
        self.live, self.stopped, self.lock = set(), [], threading.Lock()
        self.team = team  # (--one_process: the steps running as this process's threads)

    def __enter__(self):
        self.previous = {s: signal.signal(s, self.stop) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for s, handler in self.previous.items():
            signal.signal(s, handler)

    def stop(self, signum, frame):
        self.stopped.append(signum)
        if self.team is not None:
            self.team.stop()
        if signum == signal.SIGTERM:
            with self.lock:
                for proc in self.live:
                    proc.send_signal(signum)


def run_step(argv, out, log, run_flags, signals, interrupted=lambda seconds: None, env=None,
             say=functools.partial(print, flush=True), team=None, name=None):
    """Run one run.py step in `out` (its environment `env`, else run_all's); returns (seconds,
    its stdout). With a `team` (--one_process) the step is a thread of this process instead,
    the member `name` of the team (in_this_process). Stopped by Ctrl-C or SIGTERM (the step
    writes its checkpoint: `signals`), it calls interrupted(seconds) and exits 130."""
    cmd = [sys.executable, RUN, *argv, *run_flags]
    say('+ python src/run.py ' + ' '.join(argv + run_flags))
    start = time.time()
    with open(log, 'a', encoding='utf-8') as f:
        if team is not None:
            returncode, stdout = in_this_process([*argv, *run_flags], f, team, name)
        else:
            with signals.lock:
                proc = subprocess.Popen(cmd, cwd=out, stdout=subprocess.PIPE, stderr=f, text=True,
                                        env=env)
                signals.live.add(proc)
            try:
                stdout, _ = proc.communicate()
            finally:
                with signals.lock:
                    signals.live.discard(proc)
            returncode = proc.returncode
    say(stdout.rstrip('\n'))
    if returncode == 130 or signals.stopped:
        interrupted(time.time() - start)
        print(f'interrupted: the same command continues (finished steps are skipped, this one '
              f'resumes from its checkpoint); see {log}', file=sys.stderr)
        raise SystemExit(130)
    if returncode != 0:
        raise SystemExit(f'error: step failed (exit {returncode}); see {log}')
    return time.time() - start, stdout


def in_this_process(argv, log_file, team, name):
    """(exit status, stdout) of run.py's main(argv) run in this thread as the member `name` of
    `team` (engine/training/turns.py): what it prints on stdout kept, on stderr into the log,
    as a process of its own would have them."""
    import run  # src/run.py, the handout's command (imported by one_process already)
    stdout = io.StringIO()
    with team.member(name, stdout=stdout, stderr=log_file) as member:
        try:
            run.main(argv, member=member)
            code = 0
        except SystemExit as e:  # run.py's own exit: a bad input, an interrupt (130)
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
        except Exception:  # a bug: its traceback in the log, as a process's would be
            traceback.print_exc()
            code = 1
    return code, stdout.getvalue()


def labelled(name, lock):
    """say() for a model run beside others: each line of the text prefixed by the model's name,
    the whole text written at once under `lock` (print writes a text and its newline apart, so two
    threads' lines could share one)."""
    def say(text):
        block = ''.join(f'[{name}] {line}\n' for line in text.split('\n'))
        with lock:
            sys.stdout.write(block)
            sys.stdout.flush()
    return say


BUDGET_LINES = re.compile(r'time budget [\d.]+ min(?: \([^)]*\))?: (\d+) epochs'  # the plan
                          r'|time budget: after epoch \d+ \([\d.]+ s per epoch\): (\d+) epochs'
                          r'|time budget: the first epoch took [\d.]+ s: (\d+) epochs'  # (before 2026-11-24)
                          r'|time budget: stopping after epoch (\d+)')


def epochs_trained(stdout):
    """The epochs a budgeted training step ran: the number run.py printed last (its plan, a
    plan made again after an epoch, or where it stopped); None without a time budget."""
    found = [next(g for g in m.groups() if g is not None) for m in BUDGET_LINES.finditer(stdout)]
    return int(found[-1]) if found else None


def dev_accuracy(out, name):
    """Recompute from the predictions file (also for skipped stages)."""
    path = os.path.join(out, files_of(name)['dev']) if name != 'london' else None
    dev = resolve('birth_dev.tsv', 'birth_dev.tsv')
    if name == 'london':
        with open(dev, encoding='utf-8') as f:
            preds = ['London'] * sum(1 for _ in f)
    elif os.path.exists(path):
        with open(path, encoding='utf-8') as f:
            preds = [line.rstrip('\n') for line in f]
    else:
        return None
    with open(dev, encoding='utf-8') as f:
        if sum(1 for _ in f) != len(preds):
            print(f'warning: {path} does not have one line per dev question; not scored')
            return None
    total, correct = evaluate_places(dev, preds)
    return dict(correct=correct, total=total, percent=round(correct / total * 100, 2))


def device_name(flags):
    import torch
    if '--device' in flags and flags[flags.index('--device') + 1] == 'cpu' or not torch.cuda.is_available():
        return f'CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores ' \
               f'({torch.backends.cpu.get_cpu_capability()}), torch {torch.__version__}'
    return f'GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}'


def read_losses(out):
    """{'<model>/<function>': [(step, loss)]} from the tensorboard logs under out/expt."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    curves = {}
    for function in ('pretrain', 'finetune'):
        root = os.path.join(out, 'expt', function)
        if not os.path.isdir(root):
            continue
        for run in sorted(os.listdir(root)):
            # <tb_expt_name>_<variant>_...: run_all names each run by its model; a run by hand
            # (main.sh's) is named 'run', and its variant names the model it trained
            name, variant = (run.split('_') + [''])[:2]
            name = name if name in MODELS or variant not in MODELS else variant
            points = []
            for event_file in sorted(os.listdir(os.path.join(root, run))):
                acc = EventAccumulator(os.path.join(root, run, event_file), size_guidance={'scalars': 0})
                acc.Reload()
                if 'train/loss' in acc.Tags()['scalars']:
                    points = [(e.step, e.value) for e in acc.Scalars('train/loss')]
            if points:
                curves[f'{name}/{function}'] = points
    return curves


def run_record(out, output):
    """The record run.py wrote beside `output` in `out` (a dict); None where there is none, or
    one not of its making (a folder's files are whoever's)."""
    try:
        with open(os.path.join(out, output + '.run.json'), encoding='utf-8') as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def steps_per_epoch(out, curves):
    """{'<model>/<stage>': steps per epoch} from the .run.json run.py wrote beside each params
    file (its steps over its epochs); stages without one are left out."""
    found = {}
    for key in curves:
        name, stage = key.split('/')
        params = files_of(name).get('pretrain' if stage == 'pretrain' else 'params') if name in MODELS else None
        record = run_record(out, params) if params else None
        try:
            found[key] = record['steps'] / record['epochs_trained']
        except (TypeError, ValueError, KeyError, ZeroDivisionError):
            continue
    return found


@functools.lru_cache(maxsize=None)
def wiki():
    """The pretraining corpus (its CharCorruptionDataset), read once for all the models of a
    report: its vocabulary, and how much of its examples can change the loss."""
    from engine.command import inputs
    import dataset
    return inputs.read_corpus(resolve('wiki.txt', 'wiki.txt'), dataset.CharCorruptionDataset)


@functools.lru_cache(maxsize=None)
def wiki_needed_lengths():
    """How many positions of each of 2,000 examples of wiki.txt's span corruption can change
    the loss (flops.needed_lengths): the pretraining's work per example, padding left out."""
    from engine.fast import flops
    return tuple(flops.needed_lengths(wiki()))


def pretraining_pace(out, name, device):
    """(tokens per second, model FLOP utilisation) of a model's pretraining from the record run.py
    wrote beside its params, over that command's wall time (and the utilisation over its
    training alone, where the record splits the command's time); None without one. Tokens count
    every position, as the handout's trainer does. The FLOPs (forward and backward, on the plain fp32
    model) are those of the positions that can change the loss, the least any path computes
    (flops.py): of wiki.txt's span corruption, or every position of a preset's mix."""
    if name not in MODELS or not MODELS[name][2]:
        return None
    record = run_record(out, files_of(name)['pretrain'])
    try:
        tokens, seconds, precision = record['tokens'], record['seconds'], record['precision']
        sizes = dict(model_values(record['preset']), n_layer=record['n_layer'])
        variant, bottleneck = record['variant'], record.get('bottleneck_dim')
    except (ValueError, KeyError, TypeError):  # no record, or one from before 'tokens'
        return None
    import model
    from engine.fast import flops
    config = model.config_for(variant, wiki().vocab_size, BLOCK_SIZE, bottleneck, **sizes,
                              fast_attention=False, fast_dropout=False)
    lengths = wiki_needed_lengths() if mix(record['preset']) is None else [BLOCK_SIZE - 1]
    work = tokens / (BLOCK_SIZE - 1) * flops.training_flops(model.GPT(config), lengths)
    peaks = flops.peaks_of(device)
    pace = dict(tokens_per_second=tokens / seconds, mfu=flops.mfu(work, seconds, precision, peaks))
    training = (record.get('phases') or {}).get('training')
    if isinstance(training, (int, float)) and training > 0:  # the steps and epochs' ends alone
        pace['training_mfu'] = flops.mfu(work, training, precision, peaks)
    return pace


def recorded_seconds(out, name):
    """A model's step times as run.py's records beside its outputs hold them (a folder that
    main.sh's commands filled, not this script: no timings.json), with the epochs trained where a
    time budget cut those asked for; {} without records."""
    seconds = {}
    for step, argv in commands(name) if name in MODELS else []:
        record = run_record(out, output_of(argv))
        try:
            seconds[step] = float(record['seconds'])
            if record.get('time_budget_minutes') is not None and \
                    record.get('epochs_trained') != record.get('epochs_asked'):
                seconds[f'{step} epochs'] = int(record['epochs_trained'])
        except (ValueError, KeyError, TypeError):
            continue  # (no record, or one not of run.py's making: nothing to say)
    return seconds


def report(out, timings, flags, preset, models=DEFAULT_MODELS, out_arg=None, time_budget=None,
           command=None, cut=False, echo=True):
    """report.md, report.json and loss_curves.png in `out`; `command`: what filled the folder
    (default: this script's command line); `cut`: the run was stopped before it finished (its
    wall time so far in timings); `echo`: print the report too."""
    rows = []
    device = device_name(flags)
    for name in ['london', *models]:
        acc = dev_accuracy(out, name)
        public, minimum = REFERENCE[name]
        rows.append(dict(model=name, dev=acc, seconds=timings.get(name) or recorded_seconds(out, name),
                         public=public, handout_minimum=minimum,
                         pretraining=pretraining_pace(out, name, device)))
    wall, side = timings.get('wall_seconds'), timings.get('side_by_side', 1)
    together = timings.get('one_process', False)  # (only ever with side > 1)
    calls = timings.get('calls', 1)
    info = dict(preset=preset, flags=flags, device=device, commit=source_commit(),
                wall_seconds=wall, calls=calls, side_by_side=side, one_process=together,
                seed=int(flags[flags.index('--seed') + 1]) if '--seed' in flags else 0,
                date=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()), models=rows,
                readings={name: READINGS[name] for name in models if name in READINGS},
                cut=cut)
    info['command'] = command or ' '.join(['python scripts/run_all.py', '--preset', preset]
                               + (['--models', *models] if list(models) != DEFAULT_MODELS else [])
                               + (['--out', out_arg] if out_arg else [])
                               + (['--time_budget', f'{time_budget:g}'] if time_budget else [])
                               + (['--side_by_side', str(side)] if side > 1 else [])
                               + (['--one_process'] if together else [])
                               + (['--', *flags] if flags else []))
    with open(os.path.join(out, 'report.json'), 'w', encoding='utf-8') as f:
        json.dump(info, f, indent=2)
    lines = [f'# Assignment results ({preset} preset)', '',
             f'- device: {info["device"]}', f'- commit: {info["commit"]}', f'- seed: {info["seed"]}',
             f'- date: {info["date"]}',
             f'- command: `{info["command"]}`']
    if cut:
        so_far = timings.get('wall_seconds so far')
        lines.append('- **cut**: the command was stopped (Ctrl-C or SIGTERM)'
                     + (f' after {so_far:.0f} s' if so_far is not None else '')
                     + ' before every model finished: the rows give what finished, and each '
                     'step\'s seconds so far (`so far`: stopped, continued by the same command)')
    if wall is not None:
        lines.append(f'- the command\'s wall time: {wall:.0f} s'
                     + (f' over {calls} calls (each interrupted one continued by the next)'
                        if calls > 1 else '') + ', '
                     + ('the models one after another' if side == 1 else
                        f'up to {side} models trained side by side (threads of one process '
                        'taking turns at each training step, on a GPU each on a stream of its '
                        'own)' if together else
                        f'up to {side} models trained side by side (processes sharing the '
                        'device and the cores)'))
    lines += ['',
             '| model | dev accuracy | public reference (dev) | handout asks | wall time per stage (s; epochs where a time budget chose them) | pretraining: tokens/s, model FLOP utilisation (the FLOPs of the positions that can change the loss, over the command\'s wall time; and over its training alone) |',
             '|---|---|---|---|---|---|']
    for r in rows:
        acc = '-' if r['dev'] is None else f"{r['dev']['percent']:.1f}% ({r['dev']['correct']:.0f}/{r['dev']['total']:.0f})"
        secs = ', '.join(f'{k} {v:.0f}' for k, v in r['seconds'].items()) or '-'
        pace = r['pretraining']
        if pace:
            pace = f"{pace['tokens_per_second']:,.0f}, {pace['mfu']}" + \
                (f"; training: {pace['training_mfu']}" if 'training_mfu' in pace else '')
        else:
            pace = '-'
        lines.append(f"| {r['model']} | {acc} | {r['public']} | {r['handout_minimum'] or '-'} | {secs} | {pace} |")
    if info['readings']:
        lines += [''] + [f'- {name}: {text}' for name, text in info['readings'].items()]
    curves = read_losses(out)
    if curves:
        try:
            import figures  # (matplotlib: only where there is something to draw)
        except ImportError as e:  # a borrowed GPU machine may hold torch and not matplotlib
            print(f'run_all: no loss-curve picture: {e} (pip install matplotlib)')
            curves = None
    if curves:
        scored = [f"{r['model']} {r['dev']['percent']:.1f}%" for r in rows[1:] if r['dev']]
        title = (f'Training loss ({preset} preset); dev accuracy: ' + ', '.join(scored or ['-'])
                 + f"; London baseline {rows[0]['dev']['percent']:.1f}%")
        figures.loss_curves(curves, steps_per_epoch(out, curves), title,
                            os.path.join(out, 'loss_curves.png'))
        lines += ['', '![training loss curves](loss_curves.png)']
    with open(os.path.join(out, 'report.md'), 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines) + '\n')
    if echo:
        print('\n'.join(lines))


def load_timings(path):
    """The step times of earlier calls ({} when none); a file cut short or not JSON is said in
    one line, and the times start afresh (they inform the report, they decide nothing)."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding='utf-8') as f:
            timings = json.load(f)
        if isinstance(timings, dict):
            return timings
        problem = 'not a JSON object'
    except (OSError, UnicodeDecodeError, ValueError) as e:
        problem = str(e).splitlines()[0] if str(e) else type(e).__name__
    print(f'warning: {path}: unreadable ({problem}); the step times start afresh', file=sys.stderr)
    return {}


def save_timings(path, timings):
    """timings.json, written whole or not at all (a kill mid-write leaves the previous one)."""
    tmp = path + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        json.dump(timings, f, indent=2)
    os.replace(tmp, path)


def threads_env(side):
    """The environment of each step when `side` models train at once: torch's threads a share
    of the cores (where OMP_NUM_THREADS does not already say), so that no model's steps wait on
    another's; None (run_all's own) for one model at a time."""
    if side == 1 or os.environ.get('OMP_NUM_THREADS'):
        return None
    return dict(os.environ, OMP_NUM_THREADS=str(max(1, usable_cores() // side)))


def one_process(flags, out):
    """--one_process: the team the steps join (engine/training/turns.py), on the device the
    flags choose; this process works in `out`, as each step's process would."""
    importlib.import_module('run')  # src/run.py, before any thread: its import seeds Python's random
    from engine.devices import pick_device
    from engine.training.turns import Team
    os.chdir(out)
    return Team(pick_device(flags[flags.index('--device') + 1] if '--device' in flags else 'auto'))


def printing(team):
    """What each step in a thread prints goes to its own sinks (turns.Printing); nothing to do
    for steps that are processes."""
    if team is None:
        return contextlib.nullcontext()
    from engine.training.turns import Printing
    return Printing.installed()


def missing_folders(path):
    """The folders os.makedirs(path) would make, deepest first."""
    missing = []
    while path and not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing


def main():
    ap = OneLineParser(prog='python scripts/run_all.py', description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--preset', default='handout', choices=sorted(PRESETS))
    ap.add_argument('--out', default=None, help='output folder (default runs/all-<preset>)')
    ap.add_argument('--models', nargs='+', choices=list(MODELS), default=DEFAULT_MODELS)
    ap.add_argument('--force', action='store_true', help='rerun stages whose outputs exist')
    ap.add_argument('--report-only', action='store_true')
    # main.sh's report of its own folder: the command the report names
    ap.add_argument('--command', default=None, help=argparse.SUPPRESS)
    ap.add_argument('--time_budget', type=float, default=None, metavar='MINUTES',
                    help='end the whole run within MINUTES (shared among the training steps)')
    ap.add_argument('--side_by_side', type=int, default=1, metavar='N',
                    help='train up to N models at once, processes sharing the device and the '
                         'cores (each its share of the threads); 1: one after another')
    ap.add_argument('--one_process', action='store_true',
                    help='with --side_by_side N: the N models as threads of this process, each '
                         'on a CUDA stream of its own, taking turns at each training step (the '
                         'same results as alone; processes take turns on a GPU, streams need not)')
    ap.add_argument('run_flags', nargs=argparse.REMAINDER,
                    help='after --: flags passed to every run.py call (e.g. -- --device cuda --compile)')
    args = ap.parse_args()
    if args.time_budget is not None and not 0 < args.time_budget <= MAX_BUDGET_MINUTES:
        ap.error(f'argument --time_budget: must be a positive number of minutes up to '
                 f'{MAX_BUDGET_MINUTES} (a week), not {args.time_budget:g}')
    if args.side_by_side < 1:
        ap.error(f'argument --side_by_side: must be 1 or more, not {args.side_by_side}')
    if args.one_process and args.side_by_side < 2:
        ap.error('argument --one_process: give it with --side_by_side N, N of 2 or more')
    flags = [f for f in args.run_flags if f != '--']
    if '--time_budget' in flags:
        ap.error('give the whole run\'s --time_budget before --, not to every run.py call')
    out = os.path.abspath(args.out or os.path.join(REPO, 'runs', f'all-{args.preset}'))
    problem = out_folder_problem(out)
    if problem is not None:
        ap.error(f'argument --out {out}: {problem}')
    made = missing_folders(out)
    os.makedirs(out, exist_ok=True)
    team = None  # --one_process: the steps' team, on the device the flags choose
    if args.one_process and not args.report_only:
        try:
            team = one_process(flags, out)
        except UsageError as e:  # (--device cuda without a GPU: once here, not at every step)
            for folder in made:  # a refused run leaves no folder of its own behind
                os.rmdir(folder)
            ap.error(f'argument --one_process: {e}')
    timing_file = os.path.join(out, 'timings.json')
    timings = load_timings(timing_file)
    log = os.path.join(out, 'run.log')
    run_flags = ['--preset', args.preset, *flags]

    if not args.report_only:
        start = deadline = time.time()
        if args.time_budget is not None:
            deadline += args.time_budget * 60
        # in the output folder: it writes london_baseline_accuracy.txt (the rope edition submits it)
        london = subprocess.run([sys.executable, os.path.join(REPO, 'src', 'london_baseline.py')],
                                cwd=out)
        if london.returncode != 0:  # it has said what is wrong (a missing data file) in one line
            raise SystemExit(london.returncode)
        timings['london'] = {'evaluate-dev': time.time() - start}
        save_timings(timing_file, timings)

        def predicted(name):  # both predictions files there: nothing of the model to run
            return not args.force and all(os.path.exists(os.path.join(out, files_of(name)[split]))
                                          for split in ('dev', 'test'))
        todo = {name: [step for step, argv in commands(name)
                       if args.force or not os.path.exists(os.path.join(out, output_of(argv)))]
                for name in args.models if not predicted(name)}
        order = [name for name in args.models if name in todo]
        lock = threading.Lock()  # timings and `todo`, shared by the models run side by side
        say_lock = threading.Lock()
        side = max(1, min(args.side_by_side, len(order)))
        team = team if side > 1 else None  # (one model left: its steps as processes)
        env = threads_env(side) if team is None else None

        def steps_after(name):
            """The steps still to run after this model's next one that its budget leaves time
            for: its own, and those of the models queued behind it (one after another: all the
            others; side by side: a share of them)."""
            queued = [s for other in order[order.index(name) + 1:] for s in todo[other]]
            return todo[name][1:] + queued[:len(queued) // side]

        def run_model(name):
            say = functools.partial(print, flush=True) if side == 1 else labelled(name, say_lock)
            for step, argv in commands(name):
                target = os.path.join(out, output_of(argv))
                if os.path.exists(target) and not args.force:
                    say(f'skip {name} {step}: {os.path.relpath(target)} exists')
                    continue
                if os.path.exists(target + '.ckpt'):  # interrupted mid-training: continue it
                    argv = argv + ['--resume']
                budget = []
                with lock:
                    if args.time_budget is not None and step in BUDGET_WEIGHTS:
                        minutes = stage_budget(deadline - time.time(), step, steps_after(name))
                        budget = ['--time_budget', f'{max(minutes, 0.001):.3f}',
                                  '--time_budget_share']
                    todo[name].pop(0)
                    mine = timings.setdefault(name, {})
                    # seconds a call that was interrupted spent on this step, continued here
                    before = mine.pop(f'{step} so far', 0) if '--resume' in argv else 0

                def interrupted(seconds):
                    with lock:
                        mine[f'{step} so far'] = before + seconds
                        save_timings(timing_file, timings)
                seconds, stdout = run_step(argv + budget, out, log, run_flags, signals,
                                           interrupted, env, say, team, name)
                with lock:
                    mine[step] = before + seconds
                    epochs = epochs_trained(stdout)
                    if epochs is not None:  # a time budget chose them: the report says how many
                        mine[f'{step} epochs'] = epochs
                    save_timings(timing_file, timings)
            with lock:  # what finished, reported as it finishes: a run cut later keeps it
                report(out, timings, flags, args.preset, args.models, args.out, args.time_budget,
                       args.command, echo=False)

        for name in args.models:
            if predicted(name):
                print(f'skip {name}: its dev and test predictions exist')
        # an interrupted call's wall time: this call continues that command, and its time counts
        earlier = {key: timings.pop(f'{key} so far', 0) for key in ('wall_seconds', 'calls')}
        try:
            with Signals(team) as signals, printing(team):
                if side == 1:
                    for name in order:
                        run_model(name)
                else:
                    # every model's steps one after another, up to `side` models at once; a step
                    # that fails or is stopped ends its model, the others finish theirs first
                    with ThreadPoolExecutor(max_workers=side) as pool:
                        futures = [pool.submit(run_model, name) for name in order]
                    failed = [f.exception() for f in futures if f.exception() is not None]
                    if failed:
                        raise failed[0]
        except SystemExit as e:
            if e.code == 130:  # stopped: the same command continues later
                timings['wall_seconds so far'] = earlier['wall_seconds'] + time.time() - start
                timings['calls so far'] = earlier['calls'] + 1
                save_timings(timing_file, timings)
                report(out, timings, flags, args.preset, args.models, args.out, args.time_budget,
                       args.command, cut=True, echo=False)
            raise
        timings['wall_seconds'] = earlier['wall_seconds'] + time.time() - start
        timings['calls'] = earlier['calls'] + 1
        timings['side_by_side'] = side
        timings['one_process'] = team is not None
        save_timings(timing_file, timings)
    report(out, timings, flags, args.preset, args.models, args.out, args.time_budget, args.command)


if __name__ == '__main__':
    main()
