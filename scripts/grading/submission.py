"""What a submission of each handout holds, and the zip that collect_submission.sh builds.

    bash collect_submission.sh [--handout synthesizer|perceiver|rope] [--dir DIR] [--output ZIP]

Handouts (what the handouts' "Submission Instructions" and scripts list), named by their variant:
  synthesizer (2021-22), perceiver (2022-23): assignment5_submission.zip with src/, birth_dev.tsv,
      birth_places_train.tsv, wiki.txt (not birth_test_inputs.tsv), the vanilla files (COMMON)
      and the variant's finetuned params and dev/test predictions;
  rope (2024-25): assignment4_submission.zip with src/, the same params and predictions and
      london_baseline_accuracy.txt (written by python src/london_baseline.py), no data.
Without --handout the handout is the one whose files are in the folder; when several or none are
there it says so and stops. A grader without the variant's files reads the handout from src/
(handout_from_src).

Checks before zipping: every params and predictions file exists and is not empty; each
*.dev.predictions has one line per line of birth_dev.tsv (500) and each *.test.predictions one per
line of birth_test_inputs.tsv (437); the data files are found in --dir, the current folder or the
repository's data/. Everything wrong is listed, and nothing is written. The zip is written to a
temporary file and renamed into place, so it is never left half-written. Standard library only.
Exit status: 0 zip written, 1 submission incomplete, 2 bad usage / handout unclear.
"""
import argparse
import json
import os
import sys
import tempfile
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'src'))
from engine.common import OneLineParser  # noqa: E402 (standard library only, as this module)
from engine.command.paths import output_problem  # noqa: E402
DATA_FILES = ['wiki.txt', 'birth_places_train.tsv', 'birth_dev.tsv', 'birth_test_inputs.tsv']
# what the 2021-23 handouts' collect_submission.sh zips of the data, in its order; birth_test_inputs.tsv
# is read here only to count the test predictions' lines
ZIPPED_DATA = ['birth_dev.tsv', 'birth_places_train.tsv', 'wiki.txt']
SPLIT_TSV = {'dev': 'birth_dev.tsv', 'test': 'birth_test_inputs.tsv'}
COMMON = ['vanilla.model.params', 'vanilla.nopretrain.dev.predictions',
          'vanilla.nopretrain.test.predictions', 'vanilla.finetune.params',
          'vanilla.pretrain.dev.predictions', 'vanilla.pretrain.test.predictions']
# the variant's own files, beyond COMMON: how a handout is recognised
HANDOUTS = {v: [f'{v}.finetune.params', f'{v}.pretrain.dev.predictions',
                f'{v}.pretrain.test.predictions'] for v in ('synthesizer', 'perceiver', 'rope')}
HANDOUT_YEAR = {'synthesizer': '2021-22', 'perceiver': '2022-23', 'rope': '2024-25'}
ZIP_NAME = {'synthesizer': 'assignment5_submission.zip', 'perceiver': 'assignment5_submission.zip',
            'rope': 'assignment4_submission.zip'}
EXTRA = {'rope': ['london_baseline_accuracy.txt']}  # zipped too, beyond the variant's files
ZIPS_DATA = {'synthesizer': True, 'perceiver': True, 'rope': False}
# The zipped src/edition.txt names the zip's starter-code edition (presets.EDITIONS), whatever the
# checkout's says: the autograder's bare CharCorruptionDataset(data, block_size) then gives that
# edition's lengths (2024-25: x and y block_size long; 2021-23: block_size - 1).
EDITION_FILE = 'src/edition.txt'
EDITION_OF = {'synthesizer': '2021-23', 'perceiver': '2021-23', 'rope': '2024-25'}


# (threshold name, predictions file, percent) per handout: the handouts' grading lines (grade.py
# judges them)
THRESHOLDS = {
    'synthesizer': [('vanilla.pretrain.dev >= 10%', 'vanilla.pretrain.dev.predictions', 10),
                    ('synthesizer.pretrain.test >= 5%', 'synthesizer.pretrain.test.predictions', 5)],
    'perceiver': [('vanilla.pretrain.dev >= 10%', 'vanilla.pretrain.dev.predictions', 10),
                  ('perceiver.pretrain.dev >= 6%', 'perceiver.pretrain.dev.predictions', 6),
                  ('perceiver.pretrain.test >= 5%', 'perceiver.pretrain.test.predictions', 5)],
    'rope': [('vanilla.pretrain.dev >= 15%', 'vanilla.pretrain.dev.predictions', 15),
             ('rope.pretrain.test >= 30%', 'rope.pretrain.test.predictions', 30)],
}
THRESHOLD_FILES = {label: name for rows in THRESHOLDS.values() for label, name, _ in rows}


class SubmissionError(Exception):
    """Bad usage or an unclear handout: one `error:` line, exit status 2."""


def add_handout_flag(ap, help, **kwargs):
    """--handout NAME, and --edition (hidden) so that refuse_edition_flag can say which word
    means what: a handout is named by its variant, an edition is the starter code run.py follows."""
    ap.add_argument('--handout', choices=sorted(HANDOUTS), help=help, **kwargs)
    ap.add_argument('--edition', default=None, help=argparse.SUPPRESS)


def refuse_edition_flag(args):
    if args.edition is not None:
        hint = f' (--handout {args.edition})' if args.edition in HANDOUTS else ''
        raise SubmissionError(
            f'--edition {args.edition}: the handout is named by --handout synthesizer, perceiver or '
            f'rope{hint}; an edition (2021-23, 2024-25) is the starter code run.py follows')


def starter_src(handout):
    """The starter code's files, which a submission's src/ holds: the rope handout renamed
    model.py to models.py."""
    model = 'models' if handout == 'rope' else 'model'
    return [f'src/{name}.py' for name in
            ('attention', 'dataset', 'london_baseline', model, 'run', 'trainer', 'utils')]


def zipped_data(handout):
    """The data files the handout zips (none for rope)."""
    return ZIPPED_DATA if ZIPS_DATA[handout] else []


def _read_text(path, cap=1 << 20):
    """The first `cap` bytes of a file as text ('' when missing or unreadable)."""
    try:
        with open(path, 'rb') as f:
            return f.read(cap).decode('utf-8', errors='replace')
    except OSError:
        return ''


# What a student's src/ shows of its handout when no variant file does, first match wins: only the
# RoPE starter renamed model.py to models.py and has precompute_rotary_emb; only the 2022-23
# starter's model.py has the perceiver's blocks (its attention.py may keep the synthesizer's class);
# only the 2021-22 starter has SynthesizerAttention besides.
SRC_SIGNS = [
    ('rope', 'src/models.py without src/model.py',
     lambda src: os.path.isfile(os.path.join(src, 'models.py'))
     and not os.path.exists(os.path.join(src, 'model.py'))),
    ('perceiver', 'DownProjectBlock in src/model.py',
     lambda src: 'DownProjectBlock' in _read_text(os.path.join(src, 'model.py'))),
    ('synthesizer', 'SynthesizerAttention in src/attention.py',
     lambda src: 'SynthesizerAttention' in _read_text(os.path.join(src, 'attention.py'))),
    ('rope', 'precompute_rotary_emb in src/attention.py',
     lambda src: 'precompute_rotary_emb' in _read_text(os.path.join(src, 'attention.py'))),
]


def handout_from_src(folder):
    """(handout, the sign read) from the submission's src/ (its src/edition.txt first, then the
    starter's code: SRC_SIGNS), or (None, None)."""
    src = os.path.join(folder, 'src')
    stamp = checkout_setting(folder)
    candidates = [e for e, setting in EDITION_OF.items() if setting == stamp] or list(HANDOUTS)
    for handout, sign, holds in SRC_SIGNS:
        if handout in candidates and holds(src):
            return handout, sign
    if len(candidates) == 1:
        return candidates[0], f'{EDITION_FILE} says {stamp}'
    return None, None


def required_files(handout):
    """The params, predictions and other files a submission of `handout` holds (no src/, no data)."""
    return COMMON + HANDOUTS[handout] + EXTRA.get(handout, [])


def count_lines(path):
    """Lines as run.py reads them: \\n, \\r\\n or \\r ends a line; a last line without one counts."""
    with open(path, 'rb') as f:
        return len(f.read().splitlines())


def find(name, folders):
    for folder in folders:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    return None


def present_handouts(folder):
    """{handout: its own files that are in `folder`} for every handout with any there."""
    present = {e: [f for f in files if os.path.exists(os.path.join(folder, f))]
               for e, files in HANDOUTS.items()}
    return {e: files for e, files in present.items() if files}


def detect_handout(folder):
    """The handout whose own files are in `folder`; SubmissionError when none or several are."""
    where = os.path.abspath(folder)
    present = {e: [f for f in files if os.path.exists(os.path.join(folder, f))]
               for e, files in HANDOUTS.items()}
    found = [e for e, files in present.items() if files]
    if len(found) == 1:
        return found[0]
    if not found:
        raise SubmissionError(
            f'cannot tell the handout: none of the synthesizer.*, perceiver.* or rope.* submission '
            f'files is in {where}; pass --handout synthesizer (2021-22), --handout perceiver '
            f'(2022-23) or --handout rope (2024-25)')
    listing = '; '.join(f'{e}: {", ".join(files)}' for e, files in present.items() if files)
    raise SubmissionError(f'ambiguous handout: {where} has files of several handouts ({listing}); '
                          f'pass --handout {" or --handout ".join(found)}')


def preset_outputs(folder, handout):
    """(preset, [files]) of the submission's params and predictions whose run records
    (NAME.run.json, written beside each by run.py) name a preset other than the handout's, or
    None: a CPU preset trains another model on other data, which no autograder takes."""
    found = {}
    for name in required_files(handout):
        record = os.path.join(folder, name + '.run.json')
        try:
            with open(record, encoding='utf-8') as f:
                preset = json.load(f).get('preset')
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(preset, str) and preset != 'handout':
            found.setdefault(preset, []).append(name)
    if not found:
        return None
    preset = sorted(found)[0]
    return preset, found[preset]


def check(folder, handout, repo=REPO):
    """(problems, data): what is wrong with the submission in `folder` (a list of lines, empty
    when it is complete) and the data files found ({name: path})."""
    problems = []
    data_dirs = [folder, '.', os.path.join(repo, 'data')]
    data = {}
    for name in DATA_FILES:
        path = find(name, data_dirs)
        if path is None:
            problems.append(f'{name}: data file not found in {", ".join(dict.fromkeys(data_dirs))} '
                            f'(run `python src/engine/datafiles.py`)')
        elif os.path.getsize(path) == 0:
            problems.append(f'{path}: data file is empty')
        else:
            data[name] = path

    for name in required_files(handout):
        path = os.path.normpath(os.path.join(folder, name))
        if not os.path.exists(path):
            problems.append(f'{path}: missing')
            continue
        if not os.path.isfile(path):
            problems.append(f'{path}: not a regular file')
            continue
        if os.path.getsize(path) == 0:
            problems.append(f'{path}: empty')
            continue
        if name.endswith('.predictions'):
            tsv = SPLIT_TSV[name.split('.')[-2]]
            if tsv not in data:
                problems.append(f'{path}: cannot check its line count without {tsv}')
                continue
            want, got = count_lines(data[tsv]), count_lines(path)
            if got != want:
                problems.append(f'{path}: {got} lines, expected {want} (one per line of {tsv})')
    return problems, data


def src_members(src):
    """(path on disk, name in the zip) for the files of src/, without caches and hidden files."""
    members = []
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d != '__pycache__' and not d.startswith('.'))
        for f in sorted(files):
            if f.endswith('.pyc') or f.startswith('.'):
                continue
            path = os.path.join(root, f)
            members.append((path, os.path.join('src', os.path.relpath(path, src)).replace(os.sep, '/')))
    return members


def write_zip(out, members, texts=()):
    """Zip members [(path, name)] and texts [(name, text)] into `out` through a temporary file
    renamed into place."""
    out_dir = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(prefix='.' + os.path.basename(out) + '.', suffix='.tmp', dir=out_dir)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, 'w', compression=zipfile.ZIP_DEFLATED) as z:
            for path, arcname in members:
                z.write(path, arcname)
            for arcname, text in texts:
                z.writestr(arcname, text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def collect(args, repo=REPO):
    folder = args.dir
    if not os.path.isdir(folder):
        raise SubmissionError(f'--dir {folder}: no such folder')
    src = os.path.join(repo, 'src')
    if not os.path.isdir(src):
        raise SubmissionError(f'{src}: no src/ folder next to collect_submission.sh')
    handout = args.handout or detect_handout(folder)
    required = required_files(handout)
    print(f'handout: {handout} ({HANDOUT_YEAR[handout]}); files from {os.path.abspath(folder)}')

    trained = preset_outputs(folder, handout)
    if trained is not None:
        preset, names = trained
        raise SubmissionError(
            f'{names[0]}{f" and {len(names) - 1} more" if len(names) > 1 else ""} came from the '
            f'{preset} preset (its .run.json says so), not the handout\'s model and data: train '
            'them with the handout\'s commands (src/run.py without --preset, or `bash '
            'scripts/main.sh --full`)')
    problems, data = check(folder, handout, repo)
    out = args.output or ZIP_NAME[handout]
    members = [m for m in src_members(src) if m[1] != EDITION_FILE]
    members += [(data[name], name) for name in zipped_data(handout) if name in data]
    members += [(os.path.join(folder, name), name) for name in required]
    problem = output_problem(out, [(name, path) for path, name in members], kind='zip')
    if problem is not None:
        raise SubmissionError(f'--output {out}: {problem}')
    if problems:
        print(f'error: the submission is incomplete; {out} was not written:', file=sys.stderr)
        for p in problems:
            print(f'  - {p}', file=sys.stderr)
        if os.path.exists(out):
            print(f'note: the existing {out} (from an earlier run) was left as it was',
                  file=sys.stderr)
        return 1

    data_members = zipped_data(handout)
    stamp = EDITION_OF[handout]
    write_zip(out, members, [(EDITION_FILE, stamp + '\n')])
    print(f'wrote {out}: {len(members) + 1} files (src/ + {len(data_members)} data files + '
          f'{len(required)} params/predictions files); its {EDITION_FILE} says {stamp}')
    checkout = checkout_setting(repo)
    if checkout not in (None, stamp):
        print(f'note: this checkout\'s {EDITION_FILE} says {checkout}; the zip follows the '
              f'{handout} handout (edition {stamp})')
    return 0


def checkout_setting(repo=REPO):
    """The edition the checkout's src/edition.txt names (as presets.checkout_edition reads it),
    or None."""
    try:
        with open(os.path.join(repo, EDITION_FILE), encoding='utf-8') as f:
            return f.read().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def main(argv=None):
    ap = OneLineParser(
        prog='collect_submission.sh',
        description='Check the submission files and zip them with src/ (and, before 2024, the '
                    'data) into the handout\'s zip.')
    add_handout_flag(ap, 'synthesizer (2021-22 handout), perceiver (2022-23) or rope (2024-25); '
                         'default: detected from the files present')
    ap.add_argument('--dir', default='.',
                    help='folder with the params and predictions files (default: the current folder)')
    ap.add_argument('--output', default=None,
                    help='zip to write (default: ./assignment5_submission.zip; rope: '
                         './assignment4_submission.zip)')
    args = ap.parse_args(argv)
    try:
        refuse_edition_flag(args)
        sys.exit(collect(args))
    except SubmissionError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)


if __name__ == '__main__':
    main()
