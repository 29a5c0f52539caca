"""The engine's tests (src/engine/): the name-question dataset several of them train on."""
import pytest

import dataset
from support import PEOPLE

BLOCK = 128


@pytest.fixture
def name_data():
    """A NameDataset of 20 made-up people born in five places, its corpus the questions' text."""
    tsv = ''.join(f'Where was {name} born?\t{PEOPLE[i % 5][1]}\n'
                  for i, (name, _) in enumerate(PEOPLE[:20]))
    corpus = tsv.replace('\t', ' ')
    return dataset.NameDataset(dataset.CharCorruptionDataset(corpus, BLOCK), tsv)
