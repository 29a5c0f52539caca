import argparse
import random
import re

import torch
from torch.utils.data import Dataset

import presets
from utils import UsageError

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


class LeadInDataset(Dataset):
    """The examples of the pretraining dataset with `lead` written before each: the lead's
    characters as inputs, PAD as their targets (the loss ignores them), the example cut back to
    its length.
    Not the handout's: the CPU recipe (presets.py) finetunes on the pretraining corpus led by the
    question's opening "Where was " beside the questions. Its pretraining puts every name at
    position 0, where its facts are stored; this shows the model the same lines with the name
    where the question puts it."""
    def __init__(self, pretraining_dataset, lead):
        self.examples = pretraining_dataset
        # the NameDataset's length (block_size - 1), in every edition: batches mix the two
        self.length = pretraining_dataset.block_size - 1
        self.lead = torch.tensor([pretraining_dataset.stoi[c] for c in lead], dtype=torch.long)
        self.lead_targets = torch.full_like(self.lead, pretraining_dataset.stoi[PAD_CHAR])

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, idx):
        x, y = self.examples[idx]
        x = torch.cat([self.lead, x])[:self.length]
        y = torch.cat([self.lead_targets, y])[:self.length]
        return x, y


MONTHS = frozenset('january february march april may june july august september october '
                   'november december'.split())
BORN = re.compile(r'\bborn\b', re.IGNORECASE)  # the word, not the end of "Osborn"
VIEW_CHARS = 40


def born_cut(sentence):
    """`sentence` from its first word "born" on (all of it where there is none)."""
    match = BORN.search(sentence)
    return sentence[match.start():] if match else sentence


def undated(text):
    """`text` without the words that hold a digit or name a month."""
    return ' '.join(w for w in text.split(' ') if not any(c.isdigit() for c in w)
                    and w.strip('.,;:()').lower() not in MONTHS)


def born_view(document, chars=VIEW_CHARS):
    """A short view of one corpus line `NAME. sentence`: the name, then the sentence from its
    first word "born" on (all of it where there is none), without the words that hold a digit or
    name a month, cut to its words within `chars` characters (None: not cut).
    Why (docs/cpu-recipe.md): a place that follows a date is learnt under the date, which no
    question holds; without the dates it follows the name, as in a question. Most places end
    within 40 characters of "born", and a batch costs its longest row. Only the line's words,
    "born" and the dates are looked at: never a place."""
    name, _, sentence = document.partition('. ')
    text = undated(born_cut(sentence))
    if chars is not None and len(text) > chars:
        text = text[:chars + 1].rsplit(' ', 1)[0]
    return f'{name} {text}'


class BornViewMix(Dataset):
    """Mixed training (Allen-Zhu and Li, Physics of Language Models 3.1): each example is, with
    probability `question_share`, a training question as the NameDataset gives it (loss on the
    answer only), else `lead` + the born_view of a random line of the pretraining corpus (the
    lead's targets PAD). The questions teach how a question reads a person's stored facts; the
    views store every person's, under the name where a question puts it.
    Not the handout's: the CPU presets' pretraining (presets.py). Examples are drawn with
    `random`, which the trainer seeds for every batch; an epoch is as many examples as give
    each line one view on average."""
    def __init__(self, pretraining_dataset, questions, question_share, lead):
        self.lines = [line for line in pretraining_dataset.data if line.strip()]
        self.questions, self.share = questions, question_share
        self.stoi = pretraining_dataset.stoi
        self.length = pretraining_dataset.block_size - 1  # the NameDataset's, in every edition
        self.lead = lead
        self.size = round(len(self.lines) / (1 - question_share))

    def __len__(self):
        return self.size

    def __getitem__(self, idx):
        if random.random() < self.share:
            return self.questions[random.randrange(len(self.questions))]
        text = self.lead + born_view(random.choice(self.lines)) + PAD_CHAR * self.length
        ids = torch.tensor([self.stoi[c] for c in text[:self.length + 1]], dtype=torch.long)
        x, y = ids[:-1], ids[1:].clone()
        y[:max(0, len(self.lead) - 1)] = self.stoi[PAD_CHAR]
        return x, y


"""
Code under here is strictly for your debugging purposes; feel free to modify as desired.
"""
if __name__ == '__main__':
    from datafiles import as_edition, resolve

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
