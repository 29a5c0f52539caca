"""What building a batch costs against the step that trains on it: the handout's pretraining
data (CharCorruptionDataset) and the cpu-20min preset's (cpu_recipe.BornViewMix), side by side in
one run, with that preset's model and batch size.

    python scripts/dev/benchmark_data.py [--batches 50] [--rounds 3]

Prints, for each dataset, the median milliseconds to build one batch (batches.collate, seeded as
the trainer seeds it), to train one step on such batches (trainer.Trainer as run.py configures
it, its own batch building left out), and the first as a share of the second.
"""
import argparse
import os
import random
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'src'))
import torch  # noqa: E402

from engine.fast import batches  # noqa: E402
from engine.command import cpu_recipe  # noqa: E402
from engine.command import inputs  # noqa: E402
import dataset  # noqa: E402
import model  # noqa: E402
from engine import presets  # noqa: E402
import trainer  # noqa: E402
from engine.datafiles import resolve  # noqa: E402

PRESET = 'cpu-20min'


def build_times(data, batch, n):
    """Milliseconds to build each of n batches, and the batches."""
    times, built = [], []
    for i in range(n):
        indices = random.Random(i).sample(range(len(data)), batch)
        start = time.perf_counter()
        built.append(batches.collate(data, indices, seed=i))
        times.append((time.perf_counter() - start) * 1e3)
    return times, built


class Fixed(torch.utils.data.Dataset):
    """Prebuilt batches served row by row, so the step's time leaves out building them."""
    def __init__(self, built):
        self.rows = [(x[i], y[i]) for x, y in built for i in range(len(x))]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, idx):
        return self.rows[idx]


class StepClock:
    def __init__(self):
        self.times, self.last = [], None

    def on_step_end(self, run, epoch, it):
        now = time.perf_counter()
        if self.last is not None:
            self.times.append((now - self.last) * 1e3)
        self.last = now


def step_times(vocab, built, batch):
    gpt = model.GPT(model.config_for('vanilla', vocab.vocab_size, presets.BLOCK_SIZE,
                                     **presets.model_values(PRESET)))
    clock = StepClock()
    tconf = trainer.TrainerConfig(max_epochs=1, batch_size=batch, learning_rate=3e-3,
                                  lr_decay=False, precision='fp32', log_every=10 ** 9)
    t = trainer.Trainer(gpt, Fixed(built), None, tconf)
    t.run.callbacks.append(clock)  # the run's named point after each step
    t.train()
    return clock.times[2:]  # the first steps warm up


def main():
    ap = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--batches', type=int, default=50)
    ap.add_argument('--rounds', type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    vocab = inputs.read_corpus(resolve('wiki.txt', 'wiki.txt'), dataset.CharCorruptionDataset)
    questions = inputs.read_finetune(resolve('birth_places_train.tsv', 'questions'), vocab,
                                     dataset.NameDataset)
    mix = presets.mix(PRESET)
    datasets = {'CharCorruptionDataset (the handout\'s)': vocab,
                'BornViewMix (cpu-20min)': cpu_recipe.BornViewMix(vocab, questions,
                                                              mix['question_share'], mix['lead'])}
    batch = presets.stage_values(PRESET, 'pretrain')['batch_size']
    results = {name: ([], []) for name in datasets}
    for _ in range(args.rounds):  # the datasets take turns
        for name, data in datasets.items():
            build, built = build_times(data, batch, args.batches)
            results[name][0].extend(build)
            results[name][1].extend(step_times(vocab, built, batch))
    print(f'{torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads, '
          f'batch {batch}, {PRESET} model, medians of {args.rounds} x {args.batches} batches')
    for name, (build, steps) in results.items():
        b, s = statistics.median(build), statistics.median(steps)
        print(f'{name}: build {b:.1f} ms, step {s:.0f} ms, build / step {b / s:.1%}')


if __name__ == '__main__':
    main()
