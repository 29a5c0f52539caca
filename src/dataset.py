"""Handout file: the starter's dataset.py (names and examples fixed: tests/test_dataset.py)."""
import argparse
import random

import torch
from torch.utils.data import Dataset

from engine import presets
from engine.common import UsageError

"""
The input-output pairs (x, y) of the NameDataset are of the following form:

  x: Where was Khatchig Mouradian born?⁇Lebanon⁇□□□□
  y: □□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□⁇Lebanon⁇□□□□□
  x: Where was Jacob Henry Studer born?⁇Columbus⁇□□□□
  y: □□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□⁇Columbus⁇□□□□□

Using the PAD_CHAR characters in y before the ⁇[place] keeps the trainer from optimizing the model
to predict the question, "Where was...".

Note that the NameDataset should take the pretraining_dataset defined in run.py as an input. This
is to allow the vocab specification of the NameDataset to be the same as that of the pretraining
dataset.
"""

MASK_CHAR = u"\u2047"  # the doublequestionmark character, for mask
PAD_CHAR = u"\u25A1"  # the empty square character, for pad


class NameDataset(Dataset):
    def __init__(self, pretraining_dataset, data):
        self.MASK_CHAR = MASK_CHAR
        self.PAD_CHAR = PAD_CHAR
        self.itos = pretraining_dataset.itos
        self.stoi = pretraining_dataset.stoi
        self.block_size = pretraining_dataset.block_size
        # The handout keeps every '\n'-separated piece and drops the last one (`len - 1`), which is
        # the empty string after the final newline. Dropping blank lines (and CRLF's '\r') gives the
        # same examples for a well-formed file and keeps the last line of a file without a
        # trailing newline.
        # Errors name the line of the file (blank lines counted).
        lines = data.encode('utf-8').decode('ascii', errors='ignore').split('\n')
        self.data = []
        for lineno, line in enumerate(lines, 1):
            line = line.rstrip('\r')
            if not line.strip():
                continue
            if line.count('\t') != 1:
                raise UsageError(f'finetune corpus line {lineno}: expected "question<TAB>place", '
                                 f'found {line.count(chr(9))} tabs: {line[:60]!r}')
            unknown = sorted(set(line.replace('\t', '')) - set(self.stoi))
            if unknown:
                raise UsageError(f'finetune corpus line {lineno}: character {unknown[0]!r} is not '
                                 f'in the pretraining vocabulary')
            self.data.append(line)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        inp, oup = self.data[idx].split('\t')
        x = inp + self.MASK_CHAR + oup + self.MASK_CHAR
        # Lines longer than a block are cut (the handout would return a longer tensor and fail
        # when batching); the usual question-and-place lines are far shorter.
        x = (x + self.PAD_CHAR * (self.block_size - len(x)))[:self.block_size]
        y = (self.PAD_CHAR * (len(inp) - 1) + x[len(inp):])[:self.block_size - 1]

        x = x[:-1]
        x = torch.tensor([self.stoi[c] for c in x], dtype=torch.long)
        y = torch.tensor([self.stoi[c] for c in y], dtype=torch.long)
        return x, y


"""
[part e]

CharCorruptionDataset turns each document (one line of the pretraining corpus) into a span
corruption example:

1. Truncate the document at a random length from 4 to int(block_size*7/8) characters, every
   length in that range possible (a shorter document stays whole).
2. Split the truncated document into [prefix] [masked_content] [suffix], the length of
   masked_content random and 1/4 of the truncated length on average.
3. Rearrange into  [prefix] MASK_CHAR [suffix] MASK_CHAR [masked_content] [pad]  padded with
   PAD_CHAR to exactly block_size characters (the 2024-25 edition: block_size + 1).
4. x = masked_string[:-1], y = masked_string[1:]: predict the next character everywhere.
5. Encode both with the vocabulary as LongTensors (of length block_size - 1; 2024-25: block_size).

The edition (presets.EDITIONS) is the `edition` argument, else $CS224N_EDITION, else this
checkout's (src/edition.txt, which collect_submission.sh stamps in the zip with the zip's edition),
else 2021-23: an autograder's bare CharCorruptionDataset(data, block_size) in an unzipped
submission gives that edition's lengths.

Vocabulary: id 0 is PAD_CHAR, id 1 is MASK_CHAR, ids 2.. are the sorted characters of the corpus.
Example (block_size 128 in run.py):

x: Khatchig Mouradian. Khatchig Mouradian is a jour⁇and tran⁇nalist, writer □□□
y: hatchig Mouradian. Khatchig Mouradian is a jour⁇and tran⁇nalist, writer □□□□
"""


class CharCorruptionDataset(Dataset):
    def __init__(self, data, block_size, edition=None):
        self.MASK_CHAR = MASK_CHAR
        self.PAD_CHAR = PAD_CHAR

        chars = list(sorted(list(set(data))))
        for special, name in ((self.MASK_CHAR, 'MASK_CHAR ⁇'), (self.PAD_CHAR, 'PAD_CHAR □')):
            if special in chars:
                raise UsageError(f'the pretraining corpus contains {name} (U+{ord(special):04X}), '
                                 'which is reserved for masking/padding')
        chars.insert(0, self.MASK_CHAR)
        chars.insert(0, self.PAD_CHAR)

        self.stoi = {ch: i for i, ch in enumerate(chars)}
        self.itos = {i: ch for i, ch in enumerate(chars)}

        data_size, vocab_size = len(data), len(chars)
        print('data has %d characters, %d unique.' % (data_size, vocab_size))

        self.block_size = block_size
        self.vocab_size = vocab_size
        self.data = data.split('\n')
        self.edition = presets.edition(edition)
        # the masked string's length: x and y are one shorter
        self.padded_length = block_size + presets.EDITIONS[self.edition]['extra_pad']

    def __len__(self):
        # returns the length of the dataset
        return len(self.data)

    def __getitem__(self, idx):
        document = self.data[idx]
        # 1. every truncation length from 4 to int(block_size*7/8) can be drawn
        document = document[:random.randint(4, int(self.block_size * 7 / 8))]
        n = len(document)

        # 2. masked length uniform on 1..hi with hi = n/2 - 1, so its mean is exactly n/4; where
        #    n/2 - 1 is fractional, hi is rounded down or up at random in the right proportion.
        #    Documents shorter than 4 characters mask a single character (none if empty).
        hi = n / 2 - 1
        if hi >= 1:
            top = int(hi) + (random.random() < hi - int(hi))
            masked_len = random.randint(1, top)
        else:
            masked_len = min(n, 1)
        start = random.randint(0, n - masked_len)
        prefix = document[:start]
        masked_content = document[start:start + masked_len]
        suffix = document[start + masked_len:]

        # 3. the cut only matters for block sizes under 10, where int(block_size*7/8) + 2
        #    characters would not fit
        masked_string = prefix + self.MASK_CHAR + suffix + self.MASK_CHAR + masked_content
        masked_string = (masked_string + self.PAD_CHAR * self.padded_length)[:self.padded_length]

        # 4., 5.
        x = torch.tensor([self.stoi[c] for c in masked_string[:-1]], dtype=torch.long)
        y = torch.tensor([self.stoi[c] for c in masked_string[1:]], dtype=torch.long)
        return x, y


"""
Code under here is strictly for your debugging purposes; feel free to modify as desired.
"""
if __name__ == '__main__':
    from engine.datafiles import as_edition, resolve

    argp = argparse.ArgumentParser()
    argp.add_argument('dataset_type', help="Type of dataset to sample from."
                      "Options: namedata, charcorruption.",
                      choices=["namedata", "charcorruption"])
    args = argp.parse_args()

    try:
        wiki = as_edition(open(resolve('wiki.txt', 'wiki.txt'), encoding='utf-8').read(),
                          presets.edition())
        # Even for namedata, the pretraining dataset defines the vocab
        corruption_dataset = CharCorruptionDataset(wiki, 128)
        if args.dataset_type == 'namedata':
            dataset = NameDataset(corruption_dataset, open(
                resolve('birth_places_train.tsv', 'birth_places_train.tsv'), encoding='utf-8').read())
        else:
            dataset = corruption_dataset
    except UsageError as e:
        raise SystemExit(f'error: {e}')
    for _, example in zip(range(4), dataset):
        x, y = example
        print('x:', ''.join([dataset.itos[int(c)] for c in x]))
        print('y:', ''.join([dataset.itos[int(c)] for c in y]))
