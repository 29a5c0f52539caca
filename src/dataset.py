# [engine] Handout file: the starter's dataset.py (its examples and lengths: tests/handout/test_dataset.py).
import argparse
import random

import torch
from torch.utils.data import Dataset

from engine import datafiles, presets  # [engine]

MASK_CHAR = u"\u2047"  # [engine] the two reserved characters, for the code that imports them
PAD_CHAR = u"\u25A1"  # [engine]

"""
The input-output pairs (x, y) of the NameDataset are of the following form:

  x: Where was Khatchig Mouradian born?⁇Lebanon⁇□□□□
  y: □□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□⁇Lebanon⁇□□□□□
  x: Where was Jacob Henry Studer born?⁇Columbus⁇□□□□
  y: □□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□□⁇Columbus⁇□□□□□

The PAD_CHAR characters in y up to the ⁇ of the answer keep the trainer from teaching the model to
predict the question ("Where was ...") itself: only ⁇place⁇ is learned.

The NameDataset takes the pretraining dataset of run.py, so that both share one vocabulary.
"""


class NameDataset(Dataset):
    def __init__(self, pretraining_dataset, data):
        self.MASK_CHAR = "\u2047"  # [2024-25] the doublequestionmark character, for mask
        #[2021-22 2022-23] self.MASK_CHAR = u"\u2047" # the doublequestionmark character, for mask
        self.PAD_CHAR = "\u25A1"  # [2024-25] the empty square character, for pad
        #[2021-22 2022-23] self.PAD_CHAR = u"\u25A1" # the empty square character, for pad
        self.itos = pretraining_dataset.itos
        self.stoi = pretraining_dataset.stoi
        self.block_size = pretraining_dataset.block_size
        self.data = list(data.encode('utf-8').decode('ascii', errors='ignore').split('\n'))
        # [engine] each line checked (one error line naming it), blank ones and CRLF's '\r' dropped,
        self.data = datafiles.question_lines(self.data, self.stoi)  # [engine] and one '' last, as here

    def __len__(self):
        # returns the length of the dataset (the '\n'-split's last piece is the empty string)
        return len(self.data) - 1

    def __getitem__(self, idx):
        inp, oup = self.data[idx].split('\t')
        x = inp + self.MASK_CHAR + oup + self.MASK_CHAR
        x = x + self.PAD_CHAR*(self.block_size - len(x))
        x = x[:self.block_size]  # [engine] a line longer than a block is cut (it would not batch)
        y = self.PAD_CHAR*(len(inp)-1) + x[len(inp):]
        y = y[:self.block_size - 1]  # [engine]

        x = x[:-1]
        x = torch.tensor([self.stoi[c] for c in x], dtype=torch.long)
        y = torch.tensor([self.stoi[c] for c in y], dtype=torch.long)
        return x, y


# [part e]
#
# CharCorruptionDataset turns each document (one line of the pretraining corpus) into an example
# of a simplified span corruption objective. Write its __getitem__; keep the signatures of
# __init__ and __getitem__ as they are (an autograder builds the dataset with its own data).
# Every point below is graded.
#
# Vocabulary: id 0 is PAD_CHAR, id 1 is MASK_CHAR, ids 2, 3, ... are the sorted characters of
# the data (given: __init__ builds it).
#
# __getitem__(idx) returns (x, y), LongTensors of the same length:
#
# 0. The document is self.data[idx].
# 1. Truncate it at a random length from 4 to int(self.block_size*7/8) characters: every length
#    in that range must be possible.
# 2. Split the truncated document into [prefix] [masked_content] [suffix] (joined again, they
#    are the truncated document). The length of masked_content is random and 1/4 of the
#    truncated length on average: sometimes more, sometimes less.
# 3. Rearrange into
#
#        [prefix] MASK_CHAR [suffix] MASK_CHAR [masked_content] [pads]
#
#    where [pads] repeats PAD_CHAR up to the masked string's length:
# [2021-22 2022-23]    self.block_size characters (x and y are then block_size - 1 long).
# [2024-25]    self.block_size + 1 characters (x and y are then block_size long).
# 4. x is masked_string[:-1] and y is masked_string[1:]: each position predicts the character
#    after it.
# 5. Encode x and y with the vocabulary as LongTensors.
#
# Examples (block_size 128):
#
#   x: Khatchig Mouradian. Khatchig Mouradian is a jour⁇and tran⁇nalist, writer □□□
#   y: hatchig Mouradian. Khatchig Mouradian is a jour⁇and tran⁇nalist, writer □□□□


class CharCorruptionDataset(Dataset):
    #[2021-22 2022-23 2024-25] def __init__(self, data, block_size):
    def __init__(self, data, block_size, edition=None):  # [engine] edition: presets.edition's
        self.MASK_CHAR = "\u2047"  # [2024-25] the doublequestionmark character, for mask
        #[2021-22 2022-23] self.MASK_CHAR = u"\u2047" # the doublequestionmark character, for mask
        self.PAD_CHAR = "\u25A1"  # [2024-25] the empty square character, for pad
        #[2021-22 2022-23] self.PAD_CHAR = u"\u25A1" # the empty square character, for pad

        chars = list(sorted(list(set(data))))
        datafiles.refuse_reserved(chars, (self.MASK_CHAR, self.PAD_CHAR))  # [engine] one error line
        assert self.MASK_CHAR not in chars
        assert self.PAD_CHAR not in chars
        chars.insert(0, self.MASK_CHAR)
        chars.insert(0, self.PAD_CHAR)

        self.stoi = {ch: i for i, ch in enumerate(chars)}
        self.itos = {i: ch for i, ch in enumerate(chars)}

        data_size, vocab_size = len(data), len(chars)
        print(f'data has {data_size} characters, {vocab_size} unique.')  # [2024-25]
        #[2021-22 2022-23] print('data has %d characters, %d unique.' % (data_size, vocab_size))

        self.block_size = block_size
        self.vocab_size = vocab_size
        self.data = data.split('\n')
        # [engine] which edition's lengths (2024-25: x and y block_size long; else block_size - 1):
        self.edition = presets.edition(edition)  # [engine] the argument, $CS224N_EDITION, src/edition.txt

    def __len__(self):
        # returns the length of the dataset
        return len(self.data)

    def __getitem__(self, idx):
        # TODO [part e]: see the spec above
        ### YOUR CODE HERE ###
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
        length = self.block_size  # [2021-22 2022-23]
        length = self.block_size + 1  # [2024-25]
        length = self.block_size + presets.EDITIONS[self.edition]['extra_pad']  # [engine]
        masked_string = prefix + self.MASK_CHAR + suffix + self.MASK_CHAR + masked_content
        masked_string = (masked_string + self.PAD_CHAR * length)[:length]

        # 4., 5.
        x = torch.tensor([self.stoi[c] for c in masked_string[:-1]], dtype=torch.long)
        y = torch.tensor([self.stoi[c] for c in masked_string[1:]], dtype=torch.long)
        return x, y
        ### END YOUR CODE ###


"""
Code under here is strictly for your debugging purposes; feel free to modify
as desired.
"""
if __name__ == '__main__':
    argp = argparse.ArgumentParser()
    argp.add_argument('dataset_type', help="Type of dataset to sample from."
                      "Options: namedata, charcorruption.",
                      choices=["namedata", "charcorruption"])
    args = argp.parse_args()
    datafiles.enter_data_folder('wiki.txt')  # [engine] here, else in data/: the files' folder

    if args.dataset_type == 'namedata':
        # Even if it hasn't been implemented, we use it to define the vocab
        corruption_dataset = CharCorruptionDataset(datafiles.edition_wiki(), 128)  # [engine]
        #[2022-23 2024-25] corruption_dataset = CharCorruptionDataset(open('wiki.txt', encoding='utf-8').read(), 128)
        #[2021-22] corruption_dataset = CharCorruptionDataset(open('wiki.txt').read(), 128)
        # Make the name dataset
        name_dataset = NameDataset(corruption_dataset,  # [2022-23 2024-25]
                                   open('birth_places_train.tsv', encoding='utf-8').read())
        #[2021-22] name_dataset = NameDataset(corruption_dataset, open('birth_places_train.tsv').read())
        for _, example in zip(range(4), name_dataset):
            x, y = example
            print('x:', ''.join([name_dataset.itos[int(c)] for c in x]))
            print('y:', ''.join([name_dataset.itos[int(c)] for c in y]))
    elif args.dataset_type == 'charcorruption':
        corruption_dataset = CharCorruptionDataset(datafiles.edition_wiki(), 128)  # [engine]
        #[2022-23 2024-25] corruption_dataset = CharCorruptionDataset(open('wiki.txt', encoding='utf-8').read(), 128)
        #[2021-22] corruption_dataset = CharCorruptionDataset(open('wiki.txt').read(), 128)
        for _, example in zip(range(4), corruption_dataset):
            x, y = example
            print('x:', ''.join([corruption_dataset.itos[int(c)] for c in x]))
            print('y:', ''.join([corruption_dataset.itos[int(c)] for c in y]))
    else:
        raise ValueError(f"Unknown dataset type in command line args: {args.dataset_type}")  # [2024-25]
        #[2021-22 2022-23] raise ValueError("Unknown dataset type in command line args: {}".format(args.dataset_type))
