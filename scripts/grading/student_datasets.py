"""Students' src/dataset.py, written the way public solutions write it, with the choices the
handouts leave open as parameters: how the truncation and the masked length are drawn, whether a
third ⁇ follows the masked content (the starter's examples), and whether x and y are block_size
or block_size - 1 long. NameDataset is the handout's, which students do not change.

    python scripts/grading/student_datasets.py [--draws N] [--seed S]

prints, for each masked length of PASSING and FAILING, the grader's verdict, mean gap and
interval (the table in results/grading.md). The grader's tests (test_grade_readings.py,
test_grade.py) build their students' datasets from here.
"""
import argparse
import importlib.util
import os
import sys
import tempfile

TEMPLATE = '''import random

import torch
from torch.utils.data import Dataset
{imports}
MASK_CHAR = u"\\u2047"
PAD_CHAR = u"\\u25A1"


class NameDataset(Dataset):
    def __init__(self, pretraining_dataset, data):
        self.MASK_CHAR = MASK_CHAR
        self.PAD_CHAR = PAD_CHAR
        self.itos = pretraining_dataset.itos
        self.stoi = pretraining_dataset.stoi
        self.block_size = pretraining_dataset.block_size
        self.data = list(data.encode('utf-8').decode('ascii', errors='ignore').split('\\n'))

    def __len__(self):
        return len(self.data) - 1

    def __getitem__(self, idx):
        inp, oup = self.data[idx].split('\\t')
        x = inp + self.MASK_CHAR + oup + self.MASK_CHAR
        x = x + self.PAD_CHAR * (self.block_size - len(x))
        y = self.PAD_CHAR * (len(inp) - 1) + x[len(inp):]
        x = x[:-1]
        x = torch.tensor([self.stoi[c] for c in x], dtype=torch.long)
        y = torch.tensor([self.stoi[c] for c in y], dtype=torch.long)
        return x, y


class CharCorruptionDataset(Dataset):
    def __init__(self, data, block_size):
        self.MASK_CHAR = MASK_CHAR
        self.PAD_CHAR = PAD_CHAR
        chars = list(sorted(list(set(data))))
        chars.insert(0, self.MASK_CHAR)
        chars.insert(0, self.PAD_CHAR)
        self.stoi = {{ch: i for i, ch in enumerate(chars)}}
        self.itos = {{i: ch for i, ch in enumerate(chars)}}
        self.block_size = block_size
        self.vocab_size = len(chars)
        self.data = data.split('\\n')

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        doc = self.data[idx]
        doc = doc[:{truncate}]
        t = len(doc)
        m = {masked}
        start = {start}
        content = doc[start:start + m]
        s = doc[:start] + self.MASK_CHAR + doc[start + len(content):] + self.MASK_CHAR + content{tail}
        s = s + self.PAD_CHAR * (self.block_size + {extra} - len(s))
        x = torch.tensor([self.stoi[c] for c in s[:-1]], dtype=torch.long)
        y = torch.tensor([self.stoi[c] for c in s[1:]], dtype=torch.long)
        return x, y
'''

HANDOUT_TRUNCATE = 'random.randint(4, int(self.block_size * 7 / 8))'


# masked lengths of public solutions (t: the truncated length), their mean within the band:
# these pass, every run, at every --draws the grader accepts
PASSING = {
    'randint(1, 2*(t//4)-1)': dict(masked='random.randint(1, 2 * (t // 4) - 1)'),
    'int(gauss(t//4, t//8)) clipped to [1, t-2]':
        dict(masked='min(max(int(random.gauss(t // 4, t // 8)), 1), t - 2)'),
    'randrange(int(t/8), int(3*t/8))': dict(masked='random.randrange(int(t / 8), int(3 * t / 8))'),
    'randint(1, t//2)': dict(masked='random.randint(1, t // 2)'),
    'uniform on [0, t/2]': dict(masked='round(random.uniform(0, t / 2))'),
    "numpy's generator": dict(masked='int(np.random.randint(1, max(2, t // 2)))',
                              imports='import numpy as np\n'),
}
# and these fail at the default draws: a mean of 0.21 t or 0.29 t, a span clipped at the end of
# the document (its start drawn anywhere), a length fixed by the truncated length
FAILING = {
    '0.21 t': dict(masked='round(random.uniform(0, 0.42 * t))'),
    '0.29 t': dict(masked='round(random.uniform(0, 0.58 * t))'),
    'clipped at the end': dict(masked='random.randint(1, max(1, t // 2))',
                               start='random.randint(0, max(0, t - 1))'),
    't // 4': dict(masked='t // 4'),
}


def source(masked='random.randint(1, max(1, t // 2)) if t else 0', truncate=HANDOUT_TRUNCATE,
           start='random.randint(0, t - m)', third_mask=False, length=127, imports=''):
    """The text of a dataset.py: `masked` and `start` are expressions in t (the truncated
    length; start may use m), `length` x's and y's length (127 or 128)."""
    return TEMPLATE.format(imports=imports, truncate=truncate, masked=masked, start=start,
                           tail=' + self.MASK_CHAR' if third_mask else '',
                           extra=length - 127)


def load(text, folder, name):
    """The module a dataset.py of this text is, written into `folder` as NAME.py and imported."""
    path = os.path.join(folder, name + '.py')
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def judge(text, folder, name, handout='synthesizer', draws=None, seed=0, also=()):
    """spec_check.check's ({property: (passed, detail)}, warnings) for a dataset.py's text, drawn
    in this process by the probe's own code (dataset_probe.draw); with `also`, a list of those
    for the first n draws of the same report, for each n in it (what --draws n gives: the same
    indices and seeds), after the whole report's."""
    import dataset_probe
    import spec_check
    request, docs, pairs = spec_check.request_for(
        seed=seed, draws=draws or spec_check.DEFAULTS['draws'])
    report = dataset_probe.draw(request, load(text, folder, name))
    verdicts = [spec_check.check(report, handout, docs, pairs)]
    for n in also:
        verdicts.append(spec_check.check({**report, 'draws': report['draws'][:n]}, handout, docs,
                                         pairs))
    return verdicts[0] if not also else verdicts


def main(argv=None):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import spec_check
    ap = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--draws', type=int, default=spec_check.DEFAULTS['draws'])
    ap.add_argument('--seed', type=int, default=spec_check.DEFAULTS['seed'])
    args = ap.parse_args(argv)
    print('| masked length (t: truncated length) | expected | verdict | mean gap | interval |')
    print('|---|---|---|---|---|')
    with tempfile.TemporaryDirectory() as folder:
        for expected, cases in (('pass', PASSING), ('fail', FAILING)):
            for i, (case, kw) in enumerate(cases.items()):
                results, _ = judge(source(**kw), folder, f'case_{expected}_{i}', draws=args.draws,
                                   seed=args.seed)
                ok, detail = results['masked_length_mean']
                gap = detail.split('truncated/4 ')[1].split(' ')[0]
                interval = '[' + detail.split('interval [')[1].split(']')[0] + ']'
                why = ' (fixed from t = 16 on)' if 'fixed at every' in detail else ''
                others = [p for p, (o, _) in results.items()
                          if p != 'masked_length_mean' and o is not True]
                print(f'| `{case}` | {expected} | {"pass" if ok else "FAIL"}{why}'
                      f'{" (also: " + ", ".join(others) + ")" if others else ""} | {gap} | '
                      f'{interval} |', flush=True)


if __name__ == '__main__':
    main()
