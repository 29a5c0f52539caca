"""Engine (free to change): the files a command reads, checked before any work.

The pretraining corpus, the finetuning questions, the evaluation questions, and the folders the
outputs go to (a params file: params.py). Each problem is a UsageError naming the file or flag and what is
wrong (run.py prints it as one `error:` line and exits 2), raised before anything is trained or
written."""
import os
import shutil
import sys
import tempfile

from engine import datafiles, presets
from engine.datafiles import Reserved, question_lines, refuse_reserved
from engine.command import paths
from engine.common import UsageError
from engine.fast.decode import mask_of


def check_outputs(writes, reads, kinds={}):
    """A UsageError for the first output that cannot be written (paths.output_problem): writes
    and reads are (flag, path) of what the command writes and reads (None: not given); kinds:
    flag -> what that output is ('params', 'predictions': it replaces no file of another kind)."""
    for i, (flag, path) in enumerate(writes):
        if path is None:
            continue
        others = reads + [w for j, w in enumerate(writes) if j != i]
        problem = paths.output_problem(path, others, kinds.get(flag))
        if problem is not None:
            raise UsageError(f'{flag} {path or repr(path)}: {problem}')


def check_log_folder(folder):
    """The tensorboard folder (made at the first step): the first part of it that exists must be
    a folder that can be written, or the run would fail after its first step."""
    problem = paths.out_folder_problem(folder)
    if problem is not None:
        raise UsageError(f'the tensorboard log folder {folder}: {problem} ' + (
            '(a shorter --tb_expt_name?)' if 'bytes long' in problem else
            '(run from a folder you can write to)'))


_SHOWN = {}  # a copy read_once made -> the path the command was given (for messages)


def shown(path):
    """The path to name in a message: the one given, where `path` is read_once's copy of it."""
    return _SHOWN.get(path, path)


def read_once(path, held):
    """A path the command can read as often as its lines do: `path` where it is a regular file;
    else (a pipe such as `<(cat wiki.txt)`, a device) a file of the command's own holding its
    bytes, read now, once. `held` collects the folders made, for the command's end to remove."""
    if path is None or os.path.isfile(path):
        return path
    folder = None
    try:
        folder = tempfile.mkdtemp(prefix='cs224n-input-')
        held.append(folder)
        copy = os.path.join(folder, 'input')
        with open(path, 'rb') as src, open(copy, 'wb') as dest:
            shutil.copyfileobj(src, dest)
    except OSError as e:
        if getattr(e, 'filename', None) == path:  # (the input itself cannot be read)
            raise
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        raise UsageError(f'{path}: cannot hold what it gives in the temporary folder '
                         f'{tempfile.gettempdir()} ({e.strerror or e}): free space there, or '
                         'set TMPDIR to a folder you can write to, with room')
    _SHOWN[copy] = path
    return copy


def read_text(path, flag, lines=False):
    """The text of the file given by `flag` (lines=True: its lines, line ends kept as they are);
    a file that is not UTF-8 is an error naming it."""
    try:
        with open(path, encoding='utf-8', newline='' if lines else None) as f:
            return list(f) if lines else f.read()
    except UnicodeDecodeError as e:
        raise UsageError(f'{flag} {shown(path)}: not UTF-8 text ({e.reason} at byte {e.start})')


def read_corpus(corpus_path, make, edition=None, text=None):
    """The pretraining corpus's dataset, make(text, block size) (the handout's
    CharCorruptionDataset, which also gives every stage its vocabulary; wiki.txt as `edition`
    ships it, datafiles.as_edition); a file that is not UTF-8, is empty or holds a reserved
    character is an error naming it. `text`: the file's, already read."""
    edition = presets.edition(edition)
    if text is None:
        text = read_text(corpus_path, 'pretrain_corpus_path')
    text = datafiles.as_edition(text, edition)
    check_corpus(corpus_path, text)
    return make(text, presets.BLOCK_SIZE, edition)


def check_corpus(corpus_path, text):
    """The pretraining corpus checked before any work (its dataset is built later, by run.py's
    own line): not empty, no reserved character (MASK_CHAR, PAD_CHAR: an error naming its
    line). Returns its characters (the vocabulary without the two)."""
    if not text.strip():
        raise UsageError(f'pretrain_corpus_path {shown(corpus_path)} is empty')
    chars = set(text)
    try:
        refuse_reserved(chars, RESERVED)
    except Reserved as e:
        line = next((f' line {i}' for i, s in enumerate(text.split('\n'), 1) if e.char in s), '')
        raise UsageError(f'pretrain_corpus_path {shown(corpus_path)}{line}: {e}')
    return chars


RESERVED = ('\u2047', '\u25a1')  # MASK_CHAR and PAD_CHAR (the vocabulary's ids 1 and 0)


def check_plain_questions(path, chars):
    """What the handout's one-question loop (run.py --plain) cannot answer, refused before any
    work: a blank line, a character outside the corpus's `chars` (it would stop with a
    KeyError), a file that is not "question<TAB>place" or bare questions throughout."""
    for lineno, row in enumerate(read_gold_lines(path, '--eval_corpus_path'), 1):
        if row is None:
            raise UsageError(f'--eval_corpus_path {shown(path)} line {lineno}: blank (the handout\'s '
                             'evaluation, --plain, takes none; without --plain it is answered '
                             'blank)')
        unknown = sorted(set(row[0]) - set(chars))
        if unknown:
            raise UsageError(f'--eval_corpus_path {shown(path)} line {lineno}: character '
                             f'{unknown[0]!r} is not in the pretraining vocabulary')


def check_finetune(path, chars):
    """The finetuning questions checked before any work (run.py's own line builds their dataset
    later): UTF-8, every line "question<TAB>place" in the corpus's characters `chars`, at least
    one; an error naming the file and the line."""
    text = read_text(path, '--finetune_corpus_path')
    try:
        lines = question_lines(text.encode('utf-8').decode('ascii', errors='ignore').split('\n'),
                               set(chars) | set(RESERVED))
    except UsageError as e:
        raise UsageError(f'--finetune_corpus_path {shown(path)}: {e}')
    if len(lines) <= 1:
        raise UsageError(f'--finetune_corpus_path {shown(path)} has no examples')


def read_finetune(path, pretrain_dataset, make):
    """The finetuning questions' dataset, make(pretrain_dataset, text) (the handout's
    NameDataset); a malformed or empty file is an error naming it."""
    text = read_text(path, '--finetune_corpus_path')
    try:
        names = make(pretrain_dataset, text)
    except UsageError as e:  # which line: say which file too
        raise UsageError(f'--finetune_corpus_path {shown(path)}: {e}')
    if len(names) == 0:
        raise UsageError(f'--finetune_corpus_path {shown(path)} has no examples')
    return names


def read_gold_lines(path, flag):
    """The lines of a questions file, checked line by line before any time is spent on them:
    (question, place) for `question<TAB>place`, (question, None) for a bare question (the text
    before the tab, as the handout takes it: a bare question keeps its '\n'), None for a blank
    line. CRLF line ends read as LF. Every non-blank line is `question<TAB>place`, neither part
    empty, or (a file without gold places) every one is a bare question; an empty or non-UTF-8
    file, and a line that breaks this, is an error naming the file and the line."""
    lines = read_text(path, flag, lines=True)
    if not any(line.strip() for line in lines):
        raise UsageError(f'{flag} {shown(path)} has no questions (the file is empty)')
    rows = []
    gold = None  # whether the file's lines have a place column: the first non-blank line says
    for lineno, line in enumerate(lines, 1):
        line = line.replace('\r\n', '\n')
        if not line.strip():
            rows.append(None)
            continue
        tabs = line.count('\t')
        if tabs > 1:
            raise UsageError(f'{flag} {shown(path)} line {lineno}: expected '
                             f'"question<TAB>place" or a bare question, found {tabs} tabs')
        if gold is None:
            gold, first = tabs == 1, lineno
        elif gold != (tabs == 1):
            raise UsageError(f'{flag} {shown(path)} line {lineno}: '
                             + ('no tab, but line {} has "question<TAB>place"' if gold else
                                'has a tab, but line {} is a bare question').format(first))
        question, _, place = line.partition('\t')
        if gold and not question.strip():
            raise UsageError(f'{flag} {shown(path)} line {lineno}: empty question before the tab')
        if gold and not place.strip():
            raise UsageError(f'{flag} {shown(path)} line {lineno}: empty place after the tab '
                             '(a line is "question<TAB>place")')
        rows.append((question, place.strip() if gold else None))
    return rows


def read_questions(path, stoi, strict):
    """The handout's prompts, one per line of the file (read_gold_lines): the question + ⁇, or
    None for a blank line (it gets an empty prediction, so the predictions file still has one
    line per input line). Characters outside the pretraining vocabulary are dropped with a
    warning naming the line (the handout would stop with a KeyError), or are an error with
    `strict`. A question holding ⁇ itself is an error naming the line: the answer is read after
    the first ⁇, so it would be read from inside the question."""
    return read_evaluation(path, stoi, strict)[0]


def read_evaluation(path, stoi, strict):
    """(read_questions' prompts, the file's lines as score_places takes them): the file is
    read once, so a pipe (`<(cat dev.tsv)`) gives its accuracy too."""
    prompts, lines, mask = [], [], mask_of(stoi)
    for lineno, row in enumerate(read_gold_lines(path, '--eval_corpus_path'), 1):
        if row is None:
            prompts.append(None)
            lines.append([''])
            continue
        lines.append([row[0]] if row[1] is None else [row[0].strip(), row[1]])
        if mask in row[0]:
            raise UsageError(f'--eval_corpus_path {shown(path)} line {lineno}: the question holds '
                             f'{mask} (the mask character), after which the answer is read')
        question = row[0] + mask
        unknown = sorted(set(question) - set(stoi))
        if unknown:
            if strict:
                raise UsageError(f'--eval_corpus_path {shown(path)} line {lineno}: character '
                                 f'{unknown[0]!r} is not in the pretraining vocabulary')
            print(f'warning: {shown(path)} line {lineno}: dropped characters outside the '
                  f'vocabulary: {"".join(unknown)!r}', file=sys.stderr)
        prompts.append([stoi[c] for c in question if c in stoi])
    return prompts, lines


def evaluate_places(filepath, predicted_places):
    """utils.evaluate_places (the handout's signature and result: (total, correct), floats),
    on any questions file the commands take: its blank lines are not counted (the handout's
    fails on them), CRLF ends read as LF, and each line has a gold place or not by itself."""
    with open(filepath, encoding='utf-8') as fin:
        lines = [[field.strip() for field in x.rstrip('\r\n').split('\t')] for x in fin]
    return score_places(lines, predicted_places)


def score_places(lines, predicted_places):
    """evaluate_places on a file's lines already read and split at the tab (stripped fields;
    [''] for a blank line): one prediction per line; (0, 0) where no line has a gold place."""
    asked = [x for x in lines if x != ['']]
    if not any(len(x) > 1 for x in asked):
        print('No gold birth places provided; returning (0,0)')
        return (0, 0)
    assert len(lines) == len(predicted_places), (len(lines), len(predicted_places))
    rows = [(x, pred) for x, pred in zip(lines, predicted_places) if x != ['']]
    true_places = [x[1] if len(x) > 1 else None for x, _ in rows]
    correct = sum(1 for gold, (_, pred) in zip(true_places, rows) if gold == pred)
    return (float(len(true_places)), float(correct))
