"""The tiny corpus, people and flags the command-line reliability tests share
(test_bad_input.py, test_resume.py): a ~30-line corpus, batch 8, fp32 on the CPU."""
import os

import torch

import model
from conftest import PEOPLE

FAST = ['--batch_size', '8', '--precision', 'fp32', '--device', 'cpu']
ENV = dict(os.environ, PYTHONIOENCODING='utf-8', PYTHONUNBUFFERED='1')
ENV.pop('WORLD_SIZE', None)

PEOPLE = PEOPLE[:31]
CORPUS = '\n'.join([f'{n}. {n} was born in {p} .' for n, p in PEOPLE]
                   + ['Where was he born? Nobody knows, said the writer.']) + '\n'
DOCUMENTS = 33  # the lines of CORPUS and the empty one after its last newline: batches 4*8 + 1
VOCAB = len(set(CORPUS)) + 2
TRAIN, DEV = PEOPLE[:16], PEOPLE[16:24]
OLD_PARAMS = b'old params: must survive every failed run\n'
OLD_PREDICTIONS = b'old predictions: must survive every failed run\n'


def tsv(rows, end='\n'):
    return ''.join(f'Where was {n} born?\t{p}{end}' for n, p in rows)


assert len(CORPUS.split('\n')) == DOCUMENTS


def tiny_gpt(**extra):
    torch.manual_seed(0)
    return model.GPT(model.GPTConfig(VOCAB, 128, n_layer=4, n_head=8, n_embd=256, **extra))
