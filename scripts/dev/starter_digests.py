"""The statement digests of a public starter, which tests/handout/test_starter.py holds each generated
starter against (tests/data/*_starter_statements.json): the public code is not ours to copy, so
only a hash of each statement is kept.

    python scripts/dev/starter_digests.py PUBLIC_SRC --source "owner/repo at COMMIT, folder" \
        [--student FILE:FIRST-LAST ...] > tests/data/w22_starter_statements.json

Left out, as the student's parts (counted under "left_out", so the tally shows them):
- what lies between `### YOUR CODE HERE` and `### END YOUR CODE` (starter.statements);
- each `raise NotImplementedError`: the stub a student replaces where a starter has no blocks
  (2021-22 and 2022-23 write their parts that way);
- the lines given with --student: a public copy that already holds a student's own lines (the
  2022-23 copy's first commit has its owner's first lines in run.py).
The model file is stored under the name the generated starter gives it (model_file).
"""
import argparse
import collections
import json
import os
import sys
import textwrap

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                'grading'))
import starter  # noqa: E402

STUB = 'raise NotImplementedError'


def student_lines(spec):
    """'run.py:68-69' as ('run.py', 68, 69)."""
    name, _, span = spec.partition(':')
    first, _, last = span.partition('-')
    return name, int(first), int(last or first)


def left_out(text, spans):
    """The statements of `text` that are the student's: its stubs and the line spans given."""
    found = collections.Counter({STUB: starter.statements(text)[STUB]})
    rows = text.split('\n')
    for first, last in spans:
        found += starter.statements(textwrap.dedent('\n'.join(rows[first - 1:last])))
    return found


def hashed(counter):
    return {starter.digest(s): n for s, n in counter.items() if n > 0}


def main(argv=None):
    parser = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    parser.add_argument('public_src', help='the public starter\'s src/ folder')
    parser.add_argument('--source', required=True, help='where it is from, for the record')
    parser.add_argument('--student', action='append', default=[], metavar='FILE:FIRST-LAST',
                        help='lines of FILE that a student wrote (repeatable)')
    args = parser.parse_args(argv)
    spans = collections.defaultdict(list)
    for spec in args.student:
        name, first, last = student_lines(spec)
        spans[name].append((first, last))
    files, out = {}, {}
    for name in sorted(os.listdir(args.public_src)):
        if not name.endswith('.py'):
            continue
        with open(os.path.join(args.public_src, name), encoding='utf-8') as f:
            text = f.read()
        everything = starter.statements(text)
        student = left_out(text, spans[name])
        files[name] = hashed(everything - student)
        out[name] = hashed(student)
    json.dump({'how': 'starter.digests: each code statement outside the student\'s parts (see '
                      'scripts/dev/starter_digests.py), as ast.unparse writes it, sha256 '
                      '(16 hex digits) -> count',
               'source': args.source, 'files': files, 'left_out': out},
              sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == '__main__':
    main()
