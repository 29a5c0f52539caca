"""Make an edition's student starter from this project's handout files.

    python scripts/grading/starter.py --edition 2024-25 --out DIR [--solved]

The handout files (src/attention.py, dataset.py, london_baseline.py, model.py, run.py,
trainer.py, utils.py) are the solved starter of every edition at once, with this project's
engine on marked lines. A starter is read out of them by their markers (comments at the end of a
line, or a comment line of their own):

  # [engine]            the statement (and its block) is the engine's: in no starter. On an `if`,
                        its `elif`/`else` clauses go with it unless one is marked `# [starter]`,
                        whose body then stays, in the if's place.
  # [wrapper]           a compound statement's header is the engine's, its body the starter's:
                        the header goes, the body stays, dedented (an if-chain's other clauses go).
  # [2024-25]           the statement is in these editions' starters only (several may be named:
  # [2021-22 2022-23]   `# [2021-22 2022-23]`); `# [wrapper 2024-25]`: a wrapper in those, gone
                        elsewhere. In the project every such line runs (an edition's
                        alternatives sit in `if` clauses marked as wrappers of their editions).
  #[2024-25] CODE       a comment line holding an edition's own line: CODE, in that edition only;
                        where CODE is a header and the next line a header marked [engine] or for
                        editions, CODE replaces that header (its body stays) in its editions;
                        several such lines in a row: each in its own editions.
  # [2024-25] text      a comment line of those editions' starters only (`# text` there); after
                        code, the line is those editions' and keeps `# text` there.
  # [2021-22 empty]     `solved` or `empty` beside the editions (or alone): in the solved or the
  #[2021-22 empty] CODE emptied starter only (a line of the empty starter a student's part
                        replaces; in the project every such line runs, as all others do).
  ### YOUR CODE HERE ###
  ...                   a block the student fills: emptied to `pass` (kept with --solved).
  ### END YOUR CODE ###

The 2021-22 and 2022-23 starters name the model's module `model`, the 2024-25 one `models`:
run.py is written with `models` and the others get `model`. Every file written is checked to
compile, and none imports the engine.
"""
import ast
import collections
import hashlib
import io
import os
import re
import sys
import tokenize

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SRC = os.path.join(REPO, 'src')

EDITIONS = ('2021-22', '2022-23', '2024-25')
HANDOUT_FILES = ('attention.py', 'dataset.py', 'london_baseline.py', 'model.py', 'run.py',
                 'trainer.py', 'utils.py')
BEGIN = re.compile(r'^\s*###\s*YOUR CODE HERE')
END = re.compile(r'^\s*###\s*END YOUR CODE')
HINT = re.compile(r'^\s*###\s*Hint')
MARK = re.compile(r'#\s*\[([^\]]*)\]')
ALTERNATIVE = re.compile(r'^(\s*)#\[([0-9a-z -]+)\] (.*)$')
ENGINE_MODULES = re.compile(r'^\s*(from engine\b|import engine\b)', re.M)


class StarterError(Exception):
    """A handout file whose markers cannot be read: what and where."""


def model_file(edition):
    """The name of the model's file in an edition's starter."""
    return 'models.py' if edition == '2024-25' else 'model.py'


# ---- reading the markers -----------------------------------------------------------------------

class Line:
    """A logical line of source: its physical lines, indentation, marker and whether it opens a
    block (a compound statement's header)."""

    def __init__(self, rows, text, indent, marker, header, comment_only):
        self.rows, self.text, self.indent = rows, text, indent
        self.marker, self.header, self.comment_only = marker, header, comment_only

    @property
    def keyword(self):
        word = self.text.lstrip().split(None, 1)[0].rstrip(':') if self.text.strip() else ''
        return word


def logical_lines(source):
    """The source as Line objects, comment lines and blank lines each a Line of their own."""
    physical = source.split('\n')
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    lines, start, marker, last_op, code_rows = [], None, None, None, set()
    for tok in tokens:
        if tok.type in (tokenize.ENCODING, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        if tok.type == tokenize.NL and start is None:
            continue
        if tok.type == tokenize.COMMENT and start is None:
            continue
        if start is None:
            start, marker, last_op = tok.start[0], None, None
        if tok.type == tokenize.COMMENT:
            found = MARK.match(tok.string)
            if found and marker is None:
                marker = found.group(1).strip()
            continue
        if tok.type == tokenize.NEWLINE:
            rows = list(range(start, tok.end[0] + 1))
            code_rows.update(rows)
            text = '\n'.join(physical[r - 1] for r in rows)
            indent = len(physical[start - 1]) - len(physical[start - 1].lstrip())
            lines.append(Line(rows, text, indent, marker, last_op == ':', False))
            start = None
            continue
        if tok.type != tokenize.NL:
            last_op = tok.string if tok.type == tokenize.OP else None
    # comment-only and blank lines, in their places
    for r, text in enumerate(physical, 1):
        if r in code_rows:
            continue
        stripped = text.strip()
        found = MARK.match(stripped) if stripped.startswith('#') else None
        lines.append(Line([r], text, len(text) - len(text.lstrip()),
                          found.group(1).strip() if found and found.start() == 0 else None,
                          False, True))
    lines.sort(key=lambda line: line.rows[0])
    return lines


def parse_marker(marker):
    """(kind, editions) of a marker's text: kind 'engine', 'wrapper', 'starter', 'editions' or
    None (no marker, or a comment in brackets that is none of these)."""
    if marker is None:
        return None, None
    words = marker.split()
    if words == ['engine']:
        return 'engine', None
    if words == ['starter']:
        return 'starter', None
    if words and words[0] == 'wrapper':
        editions = tuple(words[1:]) or EDITIONS
        if not set(editions) <= set(EDITIONS):
            raise StarterError(f'unknown edition in marker [{marker}]')
        return 'wrapper', editions
    if words and all(w in EDITIONS or w in STATES for w in words):
        return 'editions', tuple(words)
    return None, None


# A starter is emptied (its students' blocks `pass`) or solved: a line marked `solved` is in the
# solved one only (and runs in the project), one marked `empty` in the emptied one only.
STATES = ('solved', 'empty')


class Target(collections.namedtuple('Target', 'edition solved')):
    """The starter being read out: its edition, and whether its students' blocks are kept."""

    def wants(self, words):
        """Whether a marker's words (editions, and `solved` or `empty`) take in this starter."""
        editions = [w for w in words if w in EDITIONS] or EDITIONS
        states = [w for w in words if w in STATES]
        return self.edition in editions and (not states or STATES[not self.solved] in states)


def block_end(lines, i):
    """The index after the block that line i opens: the lines after it indented deeper (blank
    lines inside it included; those after its last line belong to what follows)."""
    indent, end, j = lines[i].indent, i + 1, i + 1
    while j < len(lines):
        if lines[j].text.strip():
            if lines[j].indent <= indent:
                break
            end = j + 1
        j += 1
    return end


def dedent(lines, amount):
    """The lines shifted `amount` columns to the left."""
    out = []
    for line in lines:
        rows = [r[amount:] if r[:amount].strip() == '' else r.lstrip() for r in line.text.split('\n')]
        out.append(Line(line.rows, '\n'.join(rows), max(0, line.indent - amount), line.marker,
                        line.header, line.comment_only))
    return out


CLAUSES = {'if': ('elif', 'else'), 'try': ('except', 'else', 'finally'), 'for': ('else',),
           'while': ('else',)}


def transform(lines, target):
    """The lines of the `target` starter (markers read; students' blocks as they are)."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        kind, editions = parse_marker(line.marker)
        if line.comment_only:
            alt = ALTERNATIVE.match(line.text)
            heads = alternative_headers(lines, i)
            if heads:  # editions' headers in place of the marked one: the body stays
                header = lines[i + len(heads)]
                end = block_end(lines, i + len(heads))
                mine = [h for h in heads if target.wants(h.group(2).split())]
                if mine:
                    out.append(Line(line.rows, mine[0].group(1) + mine[0].group(3), line.indent,
                                    None, True, False))
                    out += transform(lines[i + len(heads) + 1:end], target)
                # (the engine's header goes with its body; an edition's is read as marked)
                i = end if mine or parse_marker(header.marker)[0] == 'engine' else \
                    i + len(heads)
                continue
            if alt:
                if target.wants(alt.group(2).split()):
                    out.append(Line(line.rows, alt.group(1) + alt.group(3), line.indent, None,
                                    False, False))
            elif kind == 'editions':  # a comment of those editions' only
                if target.wants(editions):
                    out.append(Line(line.rows, MARK.sub('#', line.text, count=1).rstrip(),
                                    line.indent, None, False, True))
            elif kind != 'engine':
                out.append(line)
            i += 1
            continue
        if not line.header:
            if kind in ('wrapper', 'starter'):
                raise StarterError(f'line {line.rows[0]}: [{line.marker}] marks a line that '
                                   'opens no block')
            if not (kind == 'engine' or (kind == 'editions' and not target.wants(editions))):
                out.append(line)
            i += 1
            continue
        clauses, j = [], i  # the compound statement's clauses: (start, end) each
        follow = CLAUSES.get(line.keyword, ())
        while True:
            end = block_end(lines, j)
            clauses.append((j, end))
            if end < len(lines) and lines[end].indent == line.indent and \
                    not lines[end].comment_only and lines[end].keyword in follow:
                j = end
                continue
            break
        out += chain(lines, clauses, target)
        i = clauses[-1][1]
    return out


def alternative_headers(lines, i):
    """The alternative lines from i on (matches of ALTERNATIVE) that are headers in place of the
    header after them, one marked [engine] or for editions; [] where lines[i] opens no such run."""
    heads, j = [], i
    while j < len(lines) and lines[j].comment_only:
        alt = ALTERNATIVE.match(lines[j].text)
        if alt is None or not alt.group(3).rstrip().endswith(':'):
            return []
        heads.append(alt)
        j += 1
    if heads and j < len(lines) and lines[j].header and \
            parse_marker(lines[j].marker)[0] in ('engine', 'editions'):
        return heads
    return []


def unwrapped(lines, start, end, target):
    """A clause's body in its header's place: dedented, read for the edition."""
    body = lines[start + 1:end]
    return transform(dedent(body, body_indent(body) - lines[start].indent), target)


def chain(lines, clauses, target):
    """A compound statement's clauses (if/elif/else, try/except/else/finally, def, with, ...)
    as `edition`'s starter has them."""
    out, emitted, engine_if = [], False, False
    first = lines[clauses[0][0]].keyword
    for n, (start, end) in enumerate(clauses):
        head = lines[start]
        kind, editions = parse_marker(head.marker)
        mine = editions is None or target.wants(editions)
        if kind == 'engine' or (kind in ('editions', 'wrapper') and not mine):
            engine_if = engine_if or (n == 0 and kind == 'engine')
            continue
        if kind in ('wrapper', 'starter'):
            if emitted and first == 'if':
                raise StarterError(f'line {head.rows[0]}: a clause unwrapped after an if that '
                                   'stays')
            out += unwrapped(lines, start, end, target)
            if first in ('if', 'try') or n == 0:
                break  # the other clauses were its alternatives (or its handlers)
            continue
        if engine_if or (n > 0 and not emitted and first == 'try'):
            continue  # the clause of an engine's if (unless marked [starter]), of a try gone
        text = head.text
        if not emitted and head.keyword == 'elif':
            text = text.replace('elif', 'if', 1)
        elif not emitted and n > 0 and head.keyword == 'else':
            out += unwrapped(lines, start, end, target)
            break
        out.append(Line(head.rows, text, head.indent, None, True, False))
        out += transform(lines[start + 1:end], target)
        emitted = True
    return out


def body_indent(body):
    for line in body:
        if line.text.strip() and not line.comment_only:
            return line.indent
    return 0


def strip_markers(text):
    """The markers' comments (and linters' `# noqa` notes) taken off the code they end."""
    rows = text.split('\n')
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError) as e:
        raise StarterError(f'cannot be read after its markers were applied ({e})')
    for tok in reversed(tokens):
        if tok.type != tokenize.COMMENT:
            continue
        if not (MARK.match(tok.string) or tok.string.lstrip('# ').startswith('noqa')):
            continue
        row, col = tok.start
        line = rows[row - 1]
        if line[:col].strip():  # a comment after code: cut off, but an edition's own words
            found = MARK.match(tok.string)
            words = tok.string[found.end():].strip() if found else ''
            kept = words and not words.startswith('noqa') and \
                parse_marker(found.group(1))[0] == 'editions'
            rows[row - 1] = line[:col].rstrip() + (f'  # {words}' if kept else '')
    return '\n'.join(rows)


def empty_blocks(text):
    """Each student block emptied to `pass` at its indentation, its hints (`### Hint` lines) kept
    above it."""
    out, inside = [], False
    for row in text.split('\n'):
        if BEGIN.match(row):
            out.append(row)
            inside, indent = True, row[:len(row) - len(row.lstrip())]
            continue
        if END.match(row) and inside:
            out.append(indent + 'pass')
            inside = False
        if not inside or HINT.match(row):
            out.append(row)
    return '\n'.join(out)


def tidy(text):
    """Blank lines left by what was taken out: at most one in a row, two before a top-level
    definition; one newline at the end."""
    text = re.sub(r'\n(\s*\n)+', '\n\n', text)
    text = re.sub(r'\n\n(?=(def |class |@|if __name__))', '\n\n\n', text)
    return text.strip('\n') + '\n'


def starter_source(source, edition, solved=False, name='?'):
    """A handout file's source as `edition`'s starter has it."""
    try:
        lines = logical_lines(source)
    except (tokenize.TokenError, IndentationError, SyntaxError) as e:
        raise StarterError(f'{name}: cannot be read ({e})')
    try:
        text = '\n'.join(line.text for line in transform(lines, Target(edition, solved)))
    except StarterError as e:
        raise StarterError(f'{name} {e}')
    text = strip_markers(text)
    if not solved:
        text = empty_blocks(text)
    if name == 'run.py' and edition != '2024-25':  # the module, not the word in comments
        text = '\n'.join(row if row.lstrip().startswith('#') else
                         re.sub(r'\bmodels(?=\.)|(?<=^import )models$', 'model', row)
                         for row in text.split('\n'))
    return tidy(text)


# ---- the statements of a starter ---------------------------------------------------------------

def outside_blocks(text):
    """The source with every student block's lines replaced by one `pass`."""
    out, inside = [], False
    for line in text.split('\n'):
        if BEGIN.match(line):
            inside = True
            out.append(line[:len(line) - len(line.lstrip())] + 'pass')
            continue
        if END.match(line):
            inside = False
            continue
        if not inside:
            out.append(line)
    return '\n'.join(out)


def _header(node):
    """A compound statement's own line, normalised (its body left out)."""
    fields = {f: getattr(node, f) for f in node._fields}
    fields['body'] = [ast.Pass()]
    for f in ('orelse', 'handlers'):
        if f in fields:
            fields[f] = []
    if 'finalbody' in fields:
        fields['finalbody'] = [ast.Pass()] if isinstance(node, ast.Try) else []
    if 'decorator_list' in fields:
        fields['decorator_list'] = []
    copy = ast.copy_location(type(node)(**fields), node)
    return ast.unparse(copy).split('\n')[0]


def statements(text):
    """The code statements of a Python source outside its student blocks, each as ast.unparse
    writes it (docstrings, comments and line breaks aside; a compound statement by its header,
    a bare `pass` not counted), as a multiset."""
    found = []

    def visit(body):
        for node in body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                continue  # a docstring, or a string standing as a comment
            if isinstance(node, ast.Pass):
                continue
            simple = not any(hasattr(node, f) for f in ('body', 'orelse', 'handlers'))
            found.append(ast.unparse(node) if simple else _header(node))
            for f in ('body', 'orelse', 'finalbody'):
                visit(getattr(node, f, []) or [])
            for handler in getattr(node, 'handlers', []) or []:
                found.append(ast.unparse(ast.ExceptHandler(handler.type, handler.name,
                                                           [ast.Pass()])).split('\n')[0])
                visit(handler.body)
    visit(ast.parse(outside_blocks(text)).body)
    return collections.Counter(found)


def digests(text):
    """statements(text) as {sha256 of the statement (16 hex digits): count}: what a test keeps
    of a public starter, whose code is not this project's to copy."""
    return {digest(s): n for s, n in statements(text).items()}


def digest(statement):
    """One statement's digest, as digests keeps it."""
    return hashlib.sha256(statement.encode('utf-8')).hexdigest()[:16]


def held(reference, ours):
    """(how many of `reference`'s statements {digest: count} `ours` holds, how many it has)."""
    have = collections.Counter(digests(ours))
    return sum(min(n, have.get(d, 0)) for d, n in reference.items()), sum(reference.values())


# ---- writing a starter --------------------------------------------------------------------------

def handout_sources(src=SRC):
    out = {}
    for name in HANDOUT_FILES:
        with open(os.path.join(src, name), encoding='utf-8') as f:
            out[name] = f.read()
    return out


def unmarked(src=SRC):
    """The handout files that still import the engine outside marked lines: no starter can be
    read out of them yet."""
    return [name for name, source in handout_sources(src).items()
            if ENGINE_MODULES.search(starter_source(source, '2024-25', True, name))]


def starter_files(edition, solved=False, src=SRC):
    """{path in the starter: text} of `edition`'s starter (its src/ files; scripts: see
    extra_files)."""
    waiting = unmarked(src)
    if waiting:
        raise StarterError(f'{", ".join("src/" + n for n in waiting)} not marked for the starter '
                           'yet (they import the engine outside [engine] lines): no starter can '
                           'be read out of them')
    files = {}
    for name, source in handout_sources(src).items():
        text = starter_source(source, edition, solved, name)
        target = model_file(edition) if name == 'model.py' else name
        files[f'src/{target}'] = text
    files.update(extra_files(edition))
    for path, text in files.items():
        if path.endswith('.py'):
            try:
                compile(text, path, 'exec')
            except SyntaxError as e:
                raise StarterError(f'{path} of the {edition} starter does not compile: {e}')
            if ENGINE_MODULES.search(text):
                raise StarterError(f'{path} of the {edition} starter imports the engine')
    return files


sys.path.insert(0, HERE)
import submission  # noqa: E402  (the handouts' file lists)

HANDOUT_OF = {'2021-22': 'synthesizer', '2022-23': 'perceiver', '2024-25': 'rope'}


def extra_files(edition):
    """The starter's scripts: collect_submission.sh (the handout's zip of its files) and, from
    2022-23 on, scripts/run_*.sh with the handout's commands."""
    handout = HANDOUT_OF[edition]
    members = ['src/'] + (submission.ZIPPED_DATA if submission.ZIPS_DATA[handout] else []) \
        + submission.required_files(handout)
    zipname = submission.ZIP_NAME[handout]
    files = {'collect_submission.sh': f'rm -f {zipname}\nrm -rf src/__pycache__\n'
                                      f'zip -r {zipname} {" ".join(members)}\n'}
    if edition == '2021-22':
        return files
    for variant in ('vanilla', handout):
        extra = ' \\\n        --bottleneck_dim 64' if variant == 'perceiver' else ''
        files[f'scripts/run_{variant}.sh'] = commands(variant, 'pretrain', extra)
    files['scripts/run_vanilla_no_pretraining.sh'] = commands('vanilla', 'nopretrain', '')
    return files


def commands(variant, kind, extra):
    """The handout's commands for a model, as a shell script."""
    run = f'python src/run.py {{}} {variant} wiki.txt{extra}'
    if kind == 'nopretrain':
        params, steps = f'{variant}.model.params', [
            ('# Train on the names dataset', 'finetune',
             f'--writing_params_path {variant}.model.params \\\n        '
             '--finetune_corpus_path birth_places_train.tsv')]
    else:
        params, steps = f'{variant}.finetune.params', [
            ('# Pretrain the model', 'pretrain',
             ('--pretrain_lr 6e-3 ' if variant == 'perceiver' else '')  # (its starter's script)
             + f'--writing_params_path {variant}.pretrain.params'),
            ('# Finetune the model', 'finetune',
             f'--reading_params_path {variant}.pretrain.params \\\n        '
             f'--writing_params_path {variant}.finetune.params \\\n        '
             '--finetune_corpus_path birth_places_train.tsv')]
    for split, tsv in (('dev', 'birth_dev.tsv'), ('test', 'birth_test_inputs.tsv')):
        steps.append((f'# Evaluate on the {split} set; write to disk', 'evaluate',
                      f'--reading_params_path {params} \\\n        --eval_corpus_path {tsv} '
                      f'\\\n        --outputs_path {variant}.{kind}.{split}.predictions'))
    return '#!/bin/bash\n' + ''.join(f'\n{comment}\n{run.format(function)} \\\n        {flags}\n'
                                     for comment, function, flags in steps)


def write(files, out):
    """The files under `out` (made where missing; an existing file there, or an `out` that is
    no folder, is an error before anything is written; a folder that cannot be written, one line)."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise StarterError(f'--out {out}: a file, not a folder (name a new folder)')
    for path in files:
        if os.path.exists(os.path.join(out, path)):
            raise StarterError(f'--out {out}: {path} is there already (a fresh folder, please)')
    for path, text in files.items():
        target = os.path.join(out, path)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, 'w', encoding='utf-8') as f:
                f.write(text)
            if path.endswith('.sh'):
                os.chmod(target, 0o755)
        except OSError as e:
            raise StarterError(f'--out {out}: cannot write {path} ({e.strerror or e})')


def main(argv=None):
    sys.path.insert(0, SRC)
    from engine.common import OneLineParser
    ap = OneLineParser(prog='python scripts/grading/starter.py',
                       description='Write an edition\'s student starter from the handout files.')
    ap.add_argument('--edition', required=True, choices=EDITIONS,
                    help='2021-22 (synthesizer), 2022-23 (perceiver) or 2024-25 (rope)')
    ap.add_argument('--out', required=True, help='the folder to write it in')
    ap.add_argument('--solved', action='store_true',
                    help='keep the solutions in the students\' blocks')
    args = ap.parse_args(argv)
    try:
        files = starter_files(args.edition, args.solved)
        write(files, args.out)
    except StarterError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)
    print(f'the {args.edition} starter{" (solved)" if args.solved else ""}: {len(files)} files '
          f'in {args.out}')


if __name__ == '__main__':
    main()
