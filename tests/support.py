"""What the tests share, written once: the repository's paths, made-up people for tiny corpora
and TSVs, a tensorboard writer and a clock for tests to drive, and the folders a job's tests
import from (each folder's conftest.py puts its own on the path)."""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(REPO, 'src')
RUN = os.path.join(REPO, 'src', 'run.py')


def on_path(*folders):
    """Each folder of the repository (a path relative to it) first on sys.path, once."""
    for folder in reversed(folders):
        path = os.path.join(REPO, folder)
        if path not in sys.path:
            sys.path.insert(0, path)


# Made-up people and places for tiny corpora and TSVs (the CLI tests train on these)
PEOPLE = [('Ada Brook', 'London'), ('Ben Carter', 'Paris'), ('Cleo Dunn', 'Berlin'),
          ('Dan Evans', 'Rome'), ('Eve Fox', 'Madrid'), ('Finn Gray', 'Dublin'),
          ('Gus Hale', 'Vienna'), ('Hana Ito', 'Tokyo'), ('Ivan Jones', 'Moscow'),
          ('Jude Kim', 'Seoul'), ('Kai Lowe', 'Oslo'), ('Lena Marx', 'Prague'),
          ('Milo Nash', 'Lisbon'), ('Nora Owen', 'Athens'), ('Otto Pike', 'Zurich'),
          ('Pia Quinn', 'Quebec'), ('Rex Stone', 'Cairo'), ('Sara Tate', 'Lima'),
          ('Tom Ueda', 'Kyoto'), ('Uma Vale', 'Delhi'), ('Vera Wolf', 'Warsaw'),
          ('Walt Xu', 'Beijing'), ('Yuri Zane', 'Kiev'), ('Zoe Abel', 'Geneva'),
          ('Amy Bell', 'Boston'), ('Bob Cole', 'Chicago'), ('Cy Dow', 'Denver'),
          ('Di Ely', 'Exeter'), ('Ed Ford', 'Florence'), ('Flo Gibb', 'Glasgow'),
          ('Gil Hart', 'Havana'), ('Hal Irwin', 'Istanbul')]


def decode(dataset, t):
    """The characters of token ids `t` in a dataset's vocabulary."""
    return ''.join(dataset.itos[int(i)] for i in t)


class Clock:
    """A clock that moves only when a test moves it (now += ..., or sleep)."""

    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class Replays:
    """CUDA graphs' stand-in (engine/fast/graphs.py): a recording runs nothing; a replay runs the
    step recorded, writing its loss into the one tensor the recording handed out."""

    def __init__(self):
        self.log = []

    def eager(self, step):
        self.log.append('eager')
        return step()

    def record(self, step, optimizer):
        import torch
        self.log.append('record')
        loss = torch.zeros(())

        def replay():
            self.log.append('replay')
            loss.copy_(step())
        return replay, loss


class LossLog:
    """A tensorboard writer stand-in for trainer.TrainerConfig(writer=...): the losses logged."""

    def __init__(self):
        self.values = []

    def add_scalar(self, tag, value, step):
        if tag == 'train/loss':
            self.values.append(value)
