"""Grade submissions of the assignment, as course staff would (or a student before uploading).

    python scripts/grading/grade.py SUBMISSION [SUBMISSION ...] [--handout synthesizer|perceiver|rope]
        [--test_answers FILE] [--json FILE] [--out DIR] [--data_dir DIR] [--jobs N]
        [--gradescope results.json [--rubric FILE]]

A SUBMISSION is a zip (collect_submission.sh's), an unzipped folder, or a folder of zips. Per
submission:
  layout        the files its handout lists (scripts/grading/submission.py), none missing or
                empty; extra files named;
  predictions   one line per question; dev accuracy against birth_dev.tsv, test accuracy with
                --test_answers; the handout's thresholds, pass or fail;
  params        each params file loads strictly (weights_only) into the reference model of its
                variant, or one reason;
  reproduction  the predictions regenerated from the submitted params by run.py's evaluation,
                compared line by line with the submitted file;
  dataset       the submission's CharCorruptionDataset and NameDataset checked against the spec
                in a sandboxed child process (spec_check.py), on a corpus made up for the purpose.
A submission is a stranger's file: one that cannot be opened safely (unpack.py) is a row with its
reason, and grading goes on. Nothing is written outside the grader's temporary folder, --json and
--out. Exit status: 0 every submission graded (whatever its grades), 1 the grader failed on
one, 2 bad usage.
"""
import concurrent.futures
import contextlib
import csv
import ctypes
import gc
import io
import json
import math
import multiprocessing
import os
import random
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, 'src'))

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

from engine.command import grader_api as engine  # noqa: E402 (the engine's one entry point here)
import dataset  # noqa: E402
import gradescope  # noqa: E402
import model  # noqa: E402
import run  # noqa: E402
import spec_check  # noqa: E402
import submission  # noqa: E402
import unpack  # noqa: E402
import user_sandbox  # noqa: E402
from engine.command.grader_api import UsageError  # noqa: E402

LONDON = 'london_baseline_accuracy.txt'
HANDOUT_BOTTLENECK = 64  # the perceiver handout's commands pass --bottleneck_dim 64
PREDICTIONS_CAP = 1 << 20  # bytes; 500 predictions take a few kB
SHOWN_DIFFERENCES = 3
DECODE_BATCH = 64  # questions decoded together: 256 held ~200 MB more at once (Gradescope: 768 MB)


def params_cap(gpt):
    """The most a params file's records may unpack to: the model's own fp32 tensors, twice over
    (fp64 params, torch.save's per-record alignment), plus a MiB for the pickle."""
    return 2 * sum(t.numel() * 4 for t in gpt.state_dict().values()) + (1 << 20)


def predictions_params(predictions_name):
    """The params file that produced a predictions file (the inverse of predictions_of)."""
    variant, kind = predictions_name.split('.')[:2]
    return f'{variant}.model.params' if kind == 'nopretrain' else f'{variant}.finetune.params'


def predictions_of(params_name):
    """The predictions files a params file produced: vanilla.model.params -> the
    vanilla.nopretrain ones, X.finetune.params -> the X.pretrain ones."""
    variant, kind, _ = params_name.split('.')
    stem = f'{variant}.nopretrain' if kind == 'model' else f'{variant}.pretrain'
    return [f'{stem}.{split}.predictions' for split in ('dev', 'test')]


class Grader:
    """What every submission is graded against: the data, the questions, the reference models."""

    def __init__(self, args):
        self.args = args
        self.data = {name: _data_file(args.data_dir, name)
                     for name in ('wiki.txt', 'birth_dev.tsv', 'birth_test_inputs.tsv')}
        with contextlib.redirect_stdout(io.StringIO()):  # its "data has ..." line
            self.vocab = engine.read_corpus(self.data['wiki.txt'], dataset.CharCorruptionDataset)
        self.questions = {'dev': self.data['birth_dev.tsv'], 'test': self.data['birth_test_inputs.tsv']}
        self.gold = {'dev': self.data['birth_dev.tsv'], 'test': args.test_answers}
        self.prompts = {split: engine.read_questions(path, self.vocab.stoi, strict=False)
                        for split, path in self.questions.items()}
        if args.test_answers is not None:
            answers = engine.read_gold_lines(args.test_answers, '--test_answers')
            if len(answers) != len(self.prompts['test']) or any(a is not None and a[1] is None
                                                               for a in answers):
                raise UsageError(f'--test_answers {args.test_answers}: expected '
                                 f'{len(self.prompts["test"])} lines "question<TAB>place", one per '
                                 f'line of {self.questions["test"]}; found {len(answers)}')
        with contextlib.redirect_stdout(io.StringIO()):
            total, correct = engine.evaluate_places(self.gold['dev'],
                                                   ['London'] * len(self.prompts['dev']))
        self.london = 100 * correct / total if total else None
        self.device = engine.pick_device(args.device)
        # the files a folder submission must not reach by a hard link (the held-out answers)
        self.protected = unpack.identities([args.test_answers, *self.data.values()])
        self.probe_request = None
        self.progress = None  # progress(row so far, the groups of checks still to run)

    def model(self, variant, bottleneck_dim=HANDOUT_BOTTLENECK):
        """The model `python src/run.py evaluate VARIANT wiki.txt --bottleneck_dim 64` builds."""
        cmd = run.parse_args(['evaluate', variant, self.data['wiki.txt'],
                              '--bottleneck_dim', str(bottleneck_dim)])
        mconf = model.config_for(variant, self.vocab.vocab_size, self.vocab.block_size,
                                 bottleneck_dim)
        with contextlib.redirect_stdout(io.StringIO()):  # its "number of parameters" line
            gpt = model.GPT(engine.model_config(cmd, mconf)).to(self.device)
        return gpt, engine.describe_model(cmd)

    def request(self):
        """What the dataset check asks of every submission (made once per run, from --seed)."""
        if self.probe_request is None:
            a = self.args
            self.probe_request = spec_check.request_for(
                seed=a.seed, draws=a.draws, cpu_seconds=a.dataset_cpu_seconds,
                memory_mb=a.dataset_memory_mb)
        return self.probe_request

    def grade(self, path, work):
        """The result of one submission (see README: its keys are --json's)."""
        r = empty_result(path)
        try:
            folder = unpack.unpack(path, os.path.join(work, 'files'), r['warnings'],
                                   self.protected)
        except unpack.Refused as e:
            r['errors'].append(f'refused: {e}')
            return r
        handout = self.handout_of(folder, r)
        dataset = 'dataset' not in self.args.skip
        if handout is not None:
            r['handout'], r['year'] = handout, submission.HANDOUT_YEAR[handout]
            self.check_layout(folder, handout, r)
            if 'london_baseline_accuracy.txt' in submission.required_files(handout):
                self.check_london(folder, r)
            self.said(r, ['threshold', 'params'] + ['reproduction'] * ('reproduction' not in
                                                                       self.args.skip)
                      + ['dataset'] * dataset)
            valid, missing = self.check_predictions(folder, handout, r)
            reproducing = 'reproduction' not in self.args.skip
            self.check_params(folder, handout, valid if reproducing else {}, r)
            if reproducing:  # a file whose params did not load cannot be regenerated
                for name in valid:
                    r['reproduced'].setdefault(name, None)
            self.judge_thresholds(handout, missing, reproducing, r)
        if dataset:  # judged whatever else is missing
            self.said(r, ['dataset'])
            release_memory()  # (the probe's process comes on top of this one)
            self.check_dataset(folder, handout, work, r)
        return r

    def said(self, r, still):
        """The row so far to whoever follows the grading (--gradescope: results.json rewritten)."""
        if self.progress is not None:
            self.progress(r, still)

    def handout_of(self, folder, r):
        """The handout to grade by: --handout, else the one whose variant files are there, else
        the one src/ shows (submission.handout_from_src); None when none can be told (the
        error says why)."""
        try:
            found = submission.detect_handout(folder)
        except submission.SubmissionError as e:
            present = submission.present_handouts(folder)
            if len(present) > 1 and self.args.handout is None:
                # files of several handouts: the one with the most of its own (all, where a
                # stray file of another is there), never src/'s guess; a tie is the error's
                counts = sorted((len(files), h) for h, files in present.items())
                if counts[-1][0] == counts[-2][0]:
                    r['errors'].append(str(e).replace(folder, 'the submission'))
                    return None
                found = counts[-1][1]
                stray = [f for h, files in present.items() if h != found for f in files]
                r['warnings'].append(f'graded as the {found} handout, which {counts[-1][0]} of '
                                     f'its files show; also there: {", ".join(stray)}')
            else:
                found, sign = submission.handout_from_src(folder)
            if found is not None and len(present) <= 1:
                r['notes'].append(f'handout {found} ({submission.HANDOUT_YEAR[found]}) read from src/: '
                                  f'{sign}')
            elif found is None and self.args.handout is None:
                r['errors'].append(str(e).replace(folder, 'the submission')
                                   + '; nor does src/ show it')
                return None
        handout = self.args.handout or found
        if found is not None and found != handout:
            r['errors'].append(f'its files are those of the {found} handout '
                               f'({submission.HANDOUT_YEAR[found]}), graded as {handout} '
                               f'({submission.HANDOUT_YEAR[handout]})')
        stamp = submission.checkout_setting(folder)
        if stamp is not None and stamp != submission.EDITION_OF[handout]:
            r['errors'].append(f'its {submission.EDITION_FILE} says {stamp[:20]!r}; the '
                               f'{handout} handout follows {submission.EDITION_OF[handout]}')
        return handout

    def check_layout(self, folder, handout, r):
        wanted = (submission.required_files(handout) + submission.starter_src(handout)
                  + submission.zipped_data(handout))
        problems = []
        for name in wanted:
            path = os.path.join(folder, name)
            if name == LONDON and not os.path.isfile(path) and self.london_file(folder):
                continue  # misplaced in src/: check_london says so and reads it
            if not os.path.isfile(path):
                problems.append(f'{name}: missing')
            elif os.path.getsize(path) == 0:
                problems.append(f'{name}: empty')
        present = sorted(os.path.relpath(os.path.join(root, f), folder).replace(os.sep, '/')
                         for root, _, files in os.walk(folder) for f in files)
        r['extra_files'] = [f for f in present if f not in wanted and not f.startswith('src/')]
        r['errors'] += problems
        r['layout_ok'] = not problems

    @staticmethod
    def london_file(folder):
        """Where the submission's london_baseline_accuracy.txt is: at the top (the handout's
        place), else in src/ (where running src/london_baseline.py from src/ leaves it), else None."""
        for name in (LONDON, 'src/' + LONDON):
            if os.path.isfile(os.path.join(folder, name)):
                return name
        return None

    def check_london(self, folder, r):
        """The rope handout's london_baseline_accuracy.txt: the London baseline's dev accuracy,
        in percent (the handout's london_baseline.py writes 5.0)."""
        name = self.london_file(folder)
        if name is None or os.path.getsize(os.path.join(folder, name)) == 0:
            return  # named by the layout
        path = os.path.join(folder, name)
        if name != LONDON:
            r['warnings'].append(f'{LONDON} is misplaced: found in src/, the handout\'s '
                                 'collect_submission.sh zips it from the top folder; read from there')
        try:
            if os.path.getsize(path) > 100:
                raise ValueError
            with open(path, 'rb') as f:
                value = float(f.read().decode('utf-8').strip())
            if not math.isfinite(value):  # float() reads 'nan' and 'inf' too
                raise ValueError
        except (ValueError, UnicodeDecodeError):
            r['errors'].append(f'{name}: not one number')
            return
        if self.london is not None and abs(value - self.london) > 1e-6:
            fraction = abs(100 * value - self.london) <= 1e-6
            r['errors'].append(f'{name} says {value:g}; predicting London for every question of '
                               f'{os.path.basename(self.gold["dev"])} gives {self.london:g}'
                               + (' (percent): it holds a fraction where the handout writes a '
                                  'percentage' if fraction else ''))

    def check_predictions(self, folder, handout, r):
        """Accuracy; returns ({file name: its lines} of the files with one line per question,
        the names of those missing or empty)."""
        valid, missing = {}, set()
        for name in submission.required_files(handout):
            if not name.endswith('.predictions'):
                continue
            split = name.split('.')[-2]
            path = os.path.join(folder, name)
            if not os.path.isfile(path) or os.path.getsize(path) == 0:
                missing.add(name)
                continue  # named by the layout
            want = len(self.prompts[split])
            size = os.path.getsize(path)
            if size > PREDICTIONS_CAP:
                r['errors'].append(f'{name}: {size:,} bytes, far more than {want} predictions '
                                   'take; not read')
                continue
            with open(path, 'rb') as f:
                raw = f.read().splitlines()
            try:
                lines = [line.decode('utf-8') for line in raw]
            except UnicodeDecodeError:
                r['errors'].append(f'{name}: not UTF-8 text')
                continue
            if len(lines) != want:
                r['errors'].append(f'{name}: {len(lines):,} lines, expected {want} (one per line '
                                   f'of {os.path.basename(self.questions[split])})')
                continue
            valid[name] = lines
            gold = self.gold[split]
            if gold is not None:
                with contextlib.redirect_stdout(io.StringIO()):
                    total, correct = engine.evaluate_places(gold, lines)
                if total:
                    r['accuracy'][name] = round(100 * correct / total, 2)
        return valid, missing

    def judge_thresholds(self, handout, missing, reproducing, r):
        """The handout's grading lines. A prediction counts only where the submission's params
        regenerate it (r['verified']), so predictions copied from elsewhere pass nothing."""
        for label, name, percent in submission.THRESHOLDS[handout]:
            split = name.split('.')[-2]
            if name in missing:
                verdict = 'missing'  # named by the layout
            elif self.gold[split] is None:
                verdict = None  # no answers to judge by
            elif name not in r['accuracy']:
                verdict = 'unreadable'  # its error says why
            elif not reproducing:
                verdict = r['accuracy'][name] >= percent
            elif r['reproduced'].get(name) is None:
                verdict = 'not reproduced'
                r['errors'].append(f'{label}: fails, {predictions_params(name)} cannot '
                                   'regenerate its predictions (see its params line)')
            else:
                verdict = r['verified'][name] >= percent
                if verdict != (r['accuracy'][name] >= percent):
                    r['errors'].append(
                        f'{label}: {r["accuracy"][name]:g}% submitted, {r["verified"][name]:g}% '
                        f'from the predictions its params regenerate')
            r['thresholds'][label] = verdict

    def check_params(self, folder, handout, valid, r):
        for name in submission.required_files(handout):
            if not name.endswith('.params'):
                continue
            path = os.path.join(folder, name)
            if not os.path.isfile(path) or os.path.getsize(path) == 0:
                continue  # named by the layout
            variant = name.split('.')[0]
            gpt, wanted = self.model(variant)
            try:
                state = engine.read_state(path, 'cpu', max_bytes=params_cap(gpt))
                problem = engine.params_mismatch(gpt, state, wanted)
            except engine.ParamsProblem as e:
                r['params'][name] = str(e)
                r['errors'].append(f'{name}: {e}')
                continue
            r['params'][name] = 'ok' if problem is None else problem
            if problem is not None:
                r['errors'].append(f'{name}: {problem}')
                gpt = self.other_bottleneck(variant, state)
                if gpt is None:
                    continue
            gpt.load_state_dict(state)
            for pred in predictions_of(name):
                if pred in valid:
                    self.reproduce(gpt, pred, valid[pred], r)

    def other_bottleneck(self, variant, state):
        """A perceiver model of the bottleneck the params were trained with, when they are a
        perceiver's of another bottleneck than the handout's (still reproducible); else None."""
        c = state.get('down_block.C')
        if variant != 'perceiver' or c is None or c.dim() != 3 or not 0 < c.shape[1] <= 128:
            return None
        gpt, wanted = self.model(variant, int(c.shape[1]))
        return gpt if engine.params_mismatch(gpt, state, wanted) is None else None

    def reproduce(self, gpt, name, submitted, r):
        split = name.split('.')[-2]
        ours = engine.predict(gpt, self.prompts[split], self.vocab, self.device, 'fp32',
                               DECODE_BATCH)
        differ = [i for i, (a, b) in enumerate(zip(submitted, ours)) if a != b]
        r['reproduced'][name] = round(1 - len(differ) / len(ours), 4)
        gold = self.gold[split]
        if gold is not None:  # accuracy with every line it did not regenerate counted wrong
            unmatched = object()  # equal to no place
            kept = list(submitted)
            for i in differ:
                kept[i] = unmatched
            with contextlib.redirect_stdout(io.StringIO()):
                total, correct = engine.evaluate_places(gold, kept)
            if total:
                r['verified'][name] = round(100 * correct / total, 2)
        if differ:
            r['differences'][name] = [
                f'line {i + 1}: submitted {submitted[i][:40]!r}, regenerated {ours[i][:40]!r}'
                for i in differ[:SHOWN_DIFFERENCES]]

    def check_dataset(self, folder, handout, work, r):
        """The spec's properties of src/dataset.py, judged by `handout` (None: the lengths of
        any edition pass)."""
        src = os.path.join(folder, 'src')
        warnings = []
        if not os.path.isfile(os.path.join(src, 'dataset.py')):
            results = {p: (False, 'no src/dataset.py') for p in spec_check.PROPERTIES}
        else:
            request, docs, pairs = self.request()
            report, why = spec_check.run_probe(src, os.path.join(work, 'sandbox'), request,
                                               self.args.dataset_wall_seconds,
                                               isolate=self.args.sandbox_kind,
                                               hidden=self.hidden())
            if report is None:
                results = {p: (False, why) for p in spec_check.PROPERTIES}
            else:
                results, warnings = spec_check.check(report, handout, docs, pairs,
                                                     self.args.masked_band)
        if os.path.isdir(os.path.join(src, 'dataset')):
            warnings.append('src/dataset/ (a package) is beside src/dataset.py: dataset.py was '
                            'judged, but a bare `import dataset` gets the package')
        r['warnings'] += warnings
        r['dataset'] = {p: ok for p, (ok, _) in results.items()}
        r['dataset_seed'] = self.args.seed
        r['sandbox'] = spec_check.sandbox_name(self.args.sandbox_kind)
        r['dataset_details'] = {p: detail for p, (_, detail) in results.items()}

    def hidden(self):
        """What a probe run as another user must not reach: the grader's files, the data (the
        held-out answers), the results files (--json, --gradescope, --out's reports: the files
        alone, since their folder may hold the Python the probe runs on) and the submissions
        (the other students'; the grader's command line names them)."""
        a = self.args
        return [os.path.join(REPO, 'src'), os.path.join(REPO, 'scripts'),
                os.path.join(REPO, 'data'), a.data_dir, a.test_answers,
                *(os.path.abspath(p) for p in results_files(a)),
                *(os.path.abspath(p) for p in a.submissions)]


def release_memory():
    """Give the heap this process freed back to the system (glibc keeps it otherwise): under
    Gradescope's 768 MB the probe's memory adds to the grader's."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def empty_result(path):
    """A submission's result before any check (the keys of --json, README)."""
    return dict(submission=path, handout=None, year=None, layout_ok=False, errors=[],
                warnings=[], notes=[], extra_files=[], accuracy={}, thresholds={}, params={},
                reproduced={}, verified={}, differences={}, dataset={}, dataset_details={}, dataset_seed=None,
                sandbox=None)


def _data_file(folder, name):
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        raise UsageError(f'--data_dir {folder}: no {name} (`python src/engine/datafiles.py` copies the '
                         'data into data/)')
    return path


def grade_one(grader, path, work):
    """(row, whether the grader failed): its own fault is a row too, and the run goes on."""
    try:
        outcome = grader.grade(path, work), False
    except Exception as e:
        outcome = grader_error(path, e), True
    # rm -rf, not shutil.rmtree: a submission's tree too deep for Python's recursion (its probe
    # may build one) raised RecursionError here, and the whole run ended ungraded
    user_sandbox.remove(work)
    if os.path.lexists(work):
        outcome[0]['warnings'].append(f'its working files could not all be removed ({work})')
    return outcome


def grader_error(path, e):
    r = empty_result(path)
    r['errors'].append(f'grader error: {type(e).__name__}: {e}')
    return r


_WORKER = None  # a --jobs process's own Grader


def _start_worker(args, threads):
    global _WORKER
    torch.set_grad_enabled(False)
    torch.set_num_threads(threads)  # the jobs share the cores, not each take them all
    _WORKER = Grader(args)


def _grade_in_worker(path, work):
    return grade_one(_WORKER, path, work)


def grade_all(grader, args, found, tmp):
    """(rows of `found` in its order, how many the grader failed on): one at a time, or --jobs
    processes at once (each with its own Grader from the same args and seed: the same rows)."""
    works = [os.path.join(tmp, str(i)) for i in range(len(found))]
    results, failed = [None] * len(found), 0
    with tqdm(total=len(found), desc='grading', unit='submission', file=sys.stderr) as bar:
        for i, (row, bad) in graded(grader, args, found, works):
            results[i], failed = row, failed + bad
            tqdm.write(summary(row, args.skip))
            bar.update()
    return results, failed


def graded(grader, args, found, works):
    """(index, (row, whether the grader failed)) for each submission, as each is done."""
    if args.jobs == 1 or len(found) == 1:
        for i, path in enumerate(found):
            yield i, grade_one(grader, path, works[i])
        return
    # spawn, not fork: a forked child inherits torch's thread pools mid-state
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    with concurrent.futures.ProcessPoolExecutor(
            args.jobs, mp_context=multiprocessing.get_context('spawn'),
            initializer=_start_worker, initargs=(args, threads)) as pool:
        futures = {pool.submit(_grade_in_worker, path, works[i]): i for i, path in enumerate(found)}
        for future in concurrent.futures.as_completed(futures):
            i = futures[future]
            try:
                outcome = future.result()
            except Exception as e:  # the worker process itself died
                outcome = grader_error(found[i], e), True
            yield i, outcome


def find_submissions(paths_given):
    """The submissions named on the command line: a folder holding zips and no submission files
    stands for its zips."""
    found = []
    for path in paths_given:
        if not os.path.lexists(path):
            raise UsageError(f'{path}: no such file or folder')
        if os.path.isdir(path) and not os.path.islink(path):
            entries = os.listdir(path)
            zips = sorted(e for e in entries if e.lower().endswith('.zip'))
            own = set(entries) & {f.split('/')[0] for e in submission.HANDOUTS.values() for f in e}
            if zips and 'src' not in entries and not own:
                found += [os.path.join(path, z) for z in zips]
                continue
        found.append(path)
    return found


def summary(r, skipped=()):
    """One line per submission for the terminal; `skipped`: the checks --skip left out."""
    dataset = ('dataset skipped' if 'dataset' in skipped else
               f'dataset {sum(ok is True for ok in r["dataset"].values())}/{len(r["dataset"])}')
    if r['handout'] is None:
        return (f'{r["submission"]}: {r["errors"][0] if r["errors"] else "not graded"}'
                + (f'; {dataset}' if r['dataset'] else ''))
    acc = ', '.join(f'{k.replace(".predictions", "")} {v:g}%' for k, v in r['accuracy'].items())
    fractions = [v for v in r['reproduced'].values() if v is not None]
    lost = len(r['reproduced']) - len(fractions)
    if 'reproduction' in skipped:
        reproduced = 'reproduction skipped'
    elif not r['reproduced']:
        reproduced = 'no predictions to reproduce'
    else:
        reproduced = (f'reproduced {min(fractions):.0%} (lowest)' if fractions else 'reproduced none') \
            + (f', {lost} file(s) not regenerable' if lost else '')
    return (f'{r["submission"]}: {r["handout"]} ({r["year"]}), layout '
            f'{"ok" if r["layout_ok"] else "INCOMPLETE"}; {acc or "no accuracy"}; {reproduced}; '
            f'{dataset}; {len(r["errors"])} error(s)')


CONTROL = re.compile('[\x00-\x1f\x7f\u2028\u2029]')


def md(value):
    """A value for one line of report.md: control characters (a newline in a crafted file name
    or exception) escaped, so that no value can start a line of its own."""
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], str(value))


def report_md(results):
    out = ['# Grading report', '']
    for r in results:
        out += [f'## {md(r["submission"])}', '']
        if r['handout'] is not None:
            out.append(f'- handout: {r["handout"]} ({r["year"]})')
        out.append(f'- layout: {"ok" if r["layout_ok"] else "incomplete"}')
        if r['extra_files']:
            out.append(f'- extra files: {md(", ".join(r["extra_files"][:20]))}')
        for name, value in r['accuracy'].items():
            out.append(f'- {name}: {value:g}%')
        for name, ok in r['thresholds'].items():
            figure = r['accuracy'].get(submission.THRESHOLD_FILES[name])
            verdict = ('not judged (no --test_answers)' if ok is None else ok if isinstance(ok, str)
                       else 'pass' if ok else 'FAIL')
            out.append(f'- threshold {name}: {verdict}'
                       + ('' if figure is None else f' ({figure:g}%)'))
        for name, status in r['params'].items():
            out.append(f'- {name}: {"loads" if status == "ok" else status}')
        for name, frac in r['reproduced'].items():
            out.append(f'- {name} reproduced: '
                       + ('no (its params do not load)' if frac is None else f'{frac:.2%}')
                       + ''.join(f'\n  - {md(d)}' for d in r['differences'].get(name, [])))
        if r['dataset_seed'] is not None:
            out.append(f'- dataset check seed: {r["dataset_seed"]}, sandbox: {r["sandbox"]}')
        for name, ok in r['dataset'].items():
            out.append(f'- dataset {name}: {"not judged" if ok is None else "pass" if ok else "FAIL"} '
                       f'({md(r["dataset_details"][name])})')
        for e in r['errors']:
            out.append(f'- error: {md(e)}')
        for w in r['warnings']:
            out.append(f'- warning: {md(w)}')
        for n in r['notes']:
            out.append(f'- note: {md(n)}')
        out.append('')
    return '\n'.join(out)


CSV_FIELDS = ['submission', 'handout', 'layout_ok', 'errors', 'warnings']


def report_csv(results):
    cols = {}
    for r in results:
        for key in ('accuracy', 'thresholds', 'reproduced', 'dataset'):
            for name in r[key]:
                cols.setdefault(f'{key}:{name}', (key, name))
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_FIELDS + list(cols))
    for r in results:
        w.writerow([r['submission'], r['handout'] or '', r['layout_ok'], '; '.join(r['errors']),
                    '; '.join(r['warnings'])]
                   + ['' if r[key].get(name) is None else r[key][name]
                      for key, name in cols.values()])
    return buf.getvalue()


REPORTS = ('report.md', 'report.csv')  # what --out holds


def results_files(args):
    """The files the grader writes its results in."""
    reports = [os.path.join(args.out, name) for name in REPORTS] if args.out is not None else []
    return [p for p in (args.json, args.gradescope) if p is not None] + reports


def write_text(path, text):
    # a file name that is not UTF-8 (a lone surrogate in Python) is written as its escape (in
    # JSON, a valid \udcXX), not lost with the whole file
    def write(tmp):
        with open(tmp, 'w', encoding='utf-8', errors='backslashreplace', newline='') as f:
            f.write(text)
    engine.atomic_write(path, write)


def parse_args(argv=None):
    ap = engine.OneLineParser(prog='python scripts/grading/grade.py', description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('submissions', nargs='+', metavar='SUBMISSION',
                    help='a submission zip, an unzipped submission folder, or a folder of zips')
    submission.add_handout_flag(ap, 'grade as synthesizer (2021-22), perceiver (2022-23) or rope '
                                    '(2024-25); default: each submission\'s, detected from its files')
    ap.add_argument('--test_answers', help='the held-out test answers (birth_dev.tsv\'s format, '
                                           'one line per line of birth_test_inputs.tsv)')
    ap.add_argument('--json', help='write the results here: a JSON list, one object per submission')
    ap.add_argument('--out', help='folder for report.md and report.csv')
    ap.add_argument('--gradescope', metavar='FILE',
                    help='write Gradescope\'s results.json for the one SUBMISSION (gradescope.py '
                         'builds the autograder that passes it)')
    ap.add_argument('--rubric', default=gradescope.RUBRIC,
                    help='points per check for --gradescope (default %(default)s)')
    ap.add_argument('--data_dir', default=engine.DATA,
                    help='folder with wiki.txt, birth_dev.tsv and birth_test_inputs.tsv '
                         '(default: the repository\'s data/)')
    ap.add_argument('--device', choices=('auto', 'cpu', 'cuda'), default='auto',
                    help='where the predictions are regenerated')
    ap.add_argument('--jobs', type=int, default=1,
                    help='submissions graded at once, each in its own process (default 1; the '
                         'results are those of one at a time)')
    ap.add_argument('--skip', action='append', choices=('reproduction', 'dataset'), default=[],
                    help='leave out a check (repeatable): its key in --json stays empty')
    ap.add_argument('--sandbox', choices=('auto', 'bubblewrap', 'user', 'none'), default='auto',
                    help='where submissions\' dataset.py runs: bubblewrap\'s namespaces; an '
                         'unprivileged user (the grader running as root, where namespaces are '
                         'refused, as in Gradescope\'s Docker container); none (your user). '
                         'auto (default): bubblewrap where it runs, else the user')
    ap.add_argument('--no_sandbox', '--no-sandbox', action='store_true',
                    help='--sandbox none (only where neither sandbox can run): their code then '
                         'runs as your user, can read what you can, reach the network and start '
                         'processes that outlive the grader')
    checks = ap.add_argument_group('the dataset check')
    checks.add_argument('--draws', type=int, default=spec_check.DEFAULTS['draws'],
                        help='examples drawn from the CharCorruptionDataset (default %(default)s)')
    checks.add_argument('--seed', type=int, default=None,
                        help='seed of the made-up corpus and of the draws (default: a fresh one '
                             'each run, printed and recorded in every row; give it to repeat a run)')
    checks.add_argument('--masked_band', type=float, default=spec_check.DEFAULTS['masked_band'],
                        help='characters the mean masked length may stray from a quarter of the '
                             'truncated length (default %(default)s)')
    checks.add_argument('--dataset_cpu_seconds', type=int,
                        default=spec_check.DEFAULTS['cpu_seconds'],
                        help='CPU seconds the submission\'s dataset code may use (default %(default)s)')
    checks.add_argument('--dataset_memory_mb', type=int, default=spec_check.DEFAULTS['memory_mb'],
                        help='memory it may allocate (default %(default)s)')
    checks.add_argument('--dataset_wall_seconds', type=int,
                        default=spec_check.DEFAULTS['wall_seconds'],
                        help='wall-clock seconds before its processes are killed (default %(default)s)')
    return ap.parse_args(argv)


def check_args(args):
    if args.jobs < 1:
        raise UsageError(f'--jobs must be at least 1, not {args.jobs}')
    try:
        submission.refuse_edition_flag(args)
    except submission.SubmissionError as e:
        raise UsageError(str(e))
    for flag in ('dataset_cpu_seconds', 'dataset_memory_mb', 'dataset_wall_seconds'):
        if getattr(args, flag) <= 0:
            raise UsageError(f'--{flag} must be positive, not {getattr(args, flag)}')
    if args.draws < spec_check.MIN_DRAWS:
        raise UsageError(f'--draws must be at least {spec_check.MIN_DRAWS:,} (fewer cannot tell '
                         f'a correct dataset\'s truncation range), not {args.draws}')
    if not 0 <= args.masked_band < 100:  # also refuses nan
        raise UsageError(f'--masked_band must be a number of characters in [0, 100), not '
                         f'{args.masked_band}')
    if not os.path.isdir(args.data_dir):
        raise UsageError(f'--data_dir {args.data_dir}: no such folder')
    if args.test_answers is not None and not os.path.isfile(args.test_answers):
        raise UsageError(f'--test_answers {args.test_answers}: file not found')
    reads = [('SUBMISSION', p) for p in args.submissions]
    if args.test_answers is not None:
        reads.append(('--test_answers', args.test_answers))
    for flag in ('json', 'gradescope'):
        path = getattr(args, flag)
        problem = None if path is None else engine.output_problem(path, reads)
        if problem is not None:
            raise UsageError(f'--{flag} {path}: {problem}')
    if args.gradescope is not None:
        if len(args.submissions) != 1:
            raise UsageError(f'--gradescope grades one SUBMISSION, not {len(args.submissions)}')
        try:
            args.rubric_points = gradescope.load_rubric(args.rubric)
        except gradescope.RubricError as e:
            raise UsageError(str(e))
    if args.out is not None:
        problem = engine.out_folder_problem(args.out)
        if problem is None and os.path.isdir(args.out):
            for name in REPORTS:
                problem = engine.output_problem(os.path.join(args.out, name), reads)
                if problem is not None:
                    break
        if problem is not None:
            raise UsageError(f'--out {args.out}: {problem}')
    if args.no_sandbox:
        args.sandbox = 'none'
    args.sandbox_kind = None
    if args.sandbox != 'none' and 'dataset' not in args.skip:
        args.sandbox_kind, problem = spec_check.sandbox_kind(args.sandbox)
        if problem is not None:
            raise UsageError(f'{problem}: submissions\' dataset.py would run as your user, with '
                             'your files and network; install bubblewrap, run the grader as root '
                             '(--sandbox user), or pass --no-sandbox to accept that risk')
        if args.sandbox_kind == 'user' and args.jobs > 1:  # (one user: its probes would meet)
            raise UsageError('--jobs must be 1 where the dataset check runs as another user '
                             '(bubblewrap cannot run here)')
        if args.sandbox_kind == 'user':  # (the probe's user could read the paths it names)
            user_sandbox.hide_command_line()
            try:  # the lock's folder and a killed grader's journal: the grader's own, or refused
                user_sandbox.read_own(user_sandbox.journal_path())
            except user_sandbox.Unsafe as e:
                raise UsageError(str(e))
            # a folder hidden from the probe must not hold what it runs on
            for flag, folder in [('--data_dir', args.data_dir)] + \
                    [('SUBMISSION', p) for p in args.submissions]:
                needed = user_sandbox.needed_inside(folder)
                if needed is not None:
                    raise UsageError(f'{flag} {folder}: holds {needed}, which the dataset check\'s '
                                     'user runs on and so cannot be hidden from it: name a folder '
                                     'that holds the data or submissions alone')


def main(argv=None):
    args = parse_args(argv)
    fresh = args.seed is None
    if fresh:  # a fresh corpus each run: nothing can be keyed on a known one
        args.seed = random.SystemRandom().randrange(2 ** 31)
    try:
        check_args(args)
        found = find_submissions(args.submissions)
        grader = Grader(args)
    except UsageError as e:
        print(f'error: {e}', file=sys.stderr)
        if args.gradescope is not None and not str(e).startswith('--gradescope'):
            gradescope.write_results(args.gradescope, gradescope.failure_results(str(e)))
        return 2
    if fresh and 'dataset' not in args.skip:
        print(f'dataset check: corpus and draws from seed {args.seed} (--seed {args.seed} '
              'repeats them)', file=sys.stderr)
    if args.gradescope is not None and len(found) == 1:  # a timeout leaves what was judged
        grader.progress = lambda r, still: gradescope.write_results(
            args.gradescope, gradescope.results_json(r, args.rubric_points, still))
    with tempfile.TemporaryDirectory(prefix='grade-') as tmp:
        results, failed = grade_all(grader, args, found, tmp)
    try:  # (a disk that fills now: one line; each file is written whole or not at all)
        if args.json is not None:
            write_text(args.json, json.dumps(results, indent=1, ensure_ascii=False) + '\n')
        if args.gradescope is not None:
            if len(results) == 1:
                graded = gradescope.results_json(results[0], args.rubric_points)
            else:
                graded = gradescope.failure_results(f'{len(results)} submissions found in one upload')
            gradescope.write_results(args.gradescope, graded)
        if args.out is not None:
            os.makedirs(args.out, exist_ok=True)
            write_text(os.path.join(args.out, 'report.md'), report_md(results))
            write_text(os.path.join(args.out, 'report.csv'), report_csv(results))
    except (UsageError, OSError) as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == '__main__':
    torch.set_grad_enabled(False)
    sys.exit(main())
