"""Engine (free to change): the data files, set up and found, and the checks the handout's
datasets (dataset.py) make of what they read.

    python src/engine/datafiles.py [FOLDER]   # data/ as it is where it holds every file; else
                                              # copied from FOLDER (your starter's) or $A5_DATA_DIR

The handout's commands name the files bare (`wiki.txt`, `birth_dev.tsv`) because its students
keep them in the working directory; `resolve` accepts that and falls back to data/.
"""
import hashlib
import os
import shutil
import sys

if __name__ == '__main__':  # python src/engine/datafiles.py: import engine from src/
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine import presets
from engine.common import UsageError, atomic_write

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, 'data')
DATA_DIR_ENV = 'A5_DATA_DIR'
# wiki.txt as each edition ships it (sha256 of its bytes): the RoPE edition's (2024-25) is the
# 2021-23 file without its final newline (419,252 bytes against 419,253; `data has 418351
# characters`). A data folder may hold either; a run reads the one of its edition (as_edition).
WIKI = {'2021-23': '823bb536fca77c8b5a15b34b0dead6355d0cf1f806e822464bca28806c2fd055',
        '2024-25': '17e381468abd91b60be8acaff006c66b77532b4ea4c0ce097b0a686d2e8e8219'}


def checksums():
    """{file name: sha256} from data/SHA256SUMS."""
    with open(os.path.join(DATA, 'SHA256SUMS'), encoding='utf-8') as f:
        return {name: digest for digest, name in (line.split() for line in f if line.strip())}


def sha256(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            h.update(chunk)
    return h.hexdigest()


def accepted(name, digest):
    """The checksums a data file may have: data/SHA256SUMS's, and for wiki.txt every edition's."""
    return set(WIKI.values()) if name == 'wiki.txt' else {digest}


def as_edition(text, edition):
    """The pretraining corpus `edition` reads: where `text` is either edition's wiki.txt, that
    edition's; any other text as it is."""
    ours = hashlib.sha256(text.encode('utf-8')).hexdigest()
    if edition in WIKI and ours in WIKI.values() and ours != WIKI[edition]:
        return text[:-1] if text.endswith('\n') else text + '\n'
    return text


# Where a folder may hold a data file beside its own name: the handout's starter keeps the demo's
# text under mingpt-demo/ (or ships none: only the demo notebook reads it)
ALSO_IN = {'input.txt': ('mingpt-demo', os.path.join('mingpt-demo', 'mingpt'))}
OPTIONAL = ('input.txt',)


def missing():
    """The data files data/ lacks (or holds with a checksum of no edition), input.txt aside."""
    return [name for name, digest in checksums().items() if name not in OPTIONAL
            and not (os.path.isfile(os.path.join(DATA, name))
                     and sha256(os.path.join(DATA, name)) in accepted(name, digest))]


def setup(source=None):
    """Make data/ hold every file named in data/SHA256SUMS, each verified (wiki.txt may be
    either edition's). Where it already does, nothing is read: a set-up run again needs no
    folder. Else the files are copied from `source`, else from $A5_DATA_DIR: a student's own
    starter folder (the handout's zip puts wiki.txt and the birth_*.tsv files at its top).
    Files already in data/ with an accepted checksum are left alone; input.txt (mingpt-demo's
    notebook) may be missing."""
    if source is None and not missing():
        return
    source = source or os.environ.get(DATA_DIR_ENV)
    if not source:
        raise UsageError(f'data/ lacks {", ".join(missing())} and no data folder was given: set '
                         f'{DATA_DIR_ENV} to your starter\'s folder (where the handout put wiki.txt '
                         'and the birth_*.tsv files), or name it: python src/engine/datafiles.py FOLDER')
    if not os.path.isdir(source):
        raise UsageError(f'data folder {source}: not found (set {DATA_DIR_ENV}, or name the '
                         'folder that holds wiki.txt and the birth_*.tsv files: your starter\'s)')
    for name, digest in checksums().items():
        dest = os.path.join(DATA, name)
        if os.path.isfile(dest) and sha256(dest) in accepted(name, digest):
            continue
        src = next((p for p in (os.path.join(source, where, name)
                                for where in ('',) + ALSO_IN.get(name, ()))
                    if os.path.isfile(p)), None)
        if src is None and name in OPTIONAL:
            print(f'note: {name} is not in {source}: only the mingpt-demo notebook needs it')
            continue
        if src is None:
            raise UsageError(f'data file {name} not found in {source} '
                             f'(set {DATA_DIR_ENV} to the folder that holds the assignment data)')
        if sha256(src) not in accepted(name, digest):
            raise UsageError(f'{src} does not match its checksum in data/SHA256SUMS'
                             + (' (nor the RoPE edition\'s wiki.txt)' if name == 'wiki.txt' else ''))
        atomic_write(dest, lambda tmp: shutil.copyfile(src, tmp))
        print(f'data/{name}: copied from {source}, checksum ok')


def resolve(path, flag):
    """The path to read for a data argument: as given if it exists, else data/<name>.
    `flag` names the argument in the error message."""
    if path is None:
        raise UsageError(f'{flag} is required')
    if os.path.exists(path):
        if os.path.isdir(path):
            raise UsageError(f'{flag} {path} is a directory, not a file')
        return path
    candidate = os.path.join(DATA, path)
    if os.path.dirname(path) == '' and os.path.isfile(candidate):
        return candidate
    where = path if os.path.dirname(path) else f'{path} and {os.path.relpath(candidate)}'
    raise UsageError(f'{flag}: file not found (looked in {where}; '
                     f'`python src/engine/datafiles.py` copies the data into data/)')


def enter_data_folder(name):
    """Work in the folder that holds the data file `name`: the current one where it is there,
    else data/ (dataset.py's examples, which open the files by their bare names)."""
    if not os.path.exists(name) and os.path.isfile(os.path.join(DATA, name)):
        os.chdir(DATA)


def edition_wiki(name='wiki.txt'):
    """The text of `name` (the pretraining corpus) as the checkout's edition ships it
    (as_edition): dataset.py's examples print that edition's count, saying so on stderr where
    the edition was nobody's choice."""
    try:  # (the examples' entry point: a bad edition or a missing file is one error line)
        edition, where = presets.edition_source()
        with open(name, encoding='utf-8') as f:
            text = f.read()
    except (UsageError, OSError, UnicodeDecodeError) as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)
    print(presets.edition_note(edition, where), file=sys.stderr)
    return as_edition(text, edition)


def main():
    try:
        setup(sys.argv[1] if len(sys.argv) > 1 else None)
    except UsageError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)
    ready = [n for n in sorted(checksums()) if os.path.isfile(os.path.join(DATA, n))]
    print(f'data/ ready: {", ".join(ready)}')


# ---- what the handout's datasets read, checked as they read it (dataset.py's marked lines) --

class Reserved(UsageError):
    """A corpus holds one of the vocabulary's reserved characters (`char`)."""

    def __init__(self, message, char):
        super().__init__(message)
        self.char = char


def refuse_reserved(chars, reserved):
    """CharCorruptionDataset's check of its corpus's characters `chars`: a Reserved error for the
    first of `reserved` (MASK_CHAR, PAD_CHAR) among them, naming it (the starter asserts)."""
    for special in reserved:
        if special in chars:
            name = {0x2047: 'MASK_CHAR', 0x25A1: 'PAD_CHAR'}.get(ord(special), 'a reserved character')
            raise Reserved(f'the pretraining corpus contains {name} {special} (U+{ord(special):04X}), '
                           'which is reserved for masking/padding', special)


def question_lines(lines, stoi):
    """NameDataset's lines (its text split at '\n', non-ASCII dropped) checked one by one: each
    non-blank one is "question<TAB>place" in the vocabulary `stoi` (else an error naming the
    line); blank lines and CRLF's '\r' dropped; one '' last, where the split of a file ending in
    a newline has it (the handout's dataset counts len - 1 examples): the last line of a file
    without a final newline is an example too."""
    kept = []
    for lineno, line in enumerate(lines, 1):
        line = line.rstrip('\r')
        if not line.strip():
            continue
        if line.count('\t') != 1:
            raise UsageError(f'finetune corpus line {lineno}: expected "question<TAB>place", '
                             f'found {line.count(chr(9))} tabs: {line[:60]!r}')
        unknown = sorted(set(line.replace('\t', '')) - set(stoi))
        if unknown:
            raise UsageError(f'finetune corpus line {lineno}: character {unknown[0]!r} is not '
                             f'in the pretraining vocabulary')
        kept.append(line)
    return kept + ['']


if __name__ == '__main__':
    main()
