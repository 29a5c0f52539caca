"""The step before row groups (f2f1953: the model's packed rows) and the step after (the
handout's forward once a group of rows), side by side in one process on the same batches.

    git worktree add /tmp/f2f1953 f2f1953 && cp -r data/* /tmp/f2f1953/data/
    python results/grouped-steps/side_by_side.py /tmp/f2f1953/src [--preset cpu-20min] [--steps 20]

It runs at f2f1953, whose GPT.forward still takes the packed path (loss_only=True); the grouped
step is loop.train_step's of the change that replaced it, written out here with the same
groups (batches.groups_for on a CPU: groups of at least 16 rows, at most 8; columns rounded up
to pad_multiple 8). fp32, the handout's optimizer; the first step of each path untimed.
"""
import argparse
import os
import random
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument('src')
ap.add_argument('--preset', choices=('handout', 'cpu-20min'), default='handout')
ap.add_argument('--steps', type=int, default=4)
ap.add_argument('--variant', default='vanilla')
args = ap.parse_args()
sys.path.insert(0, args.src)
import torch  # noqa: E402
import dataset  # noqa: E402
import model  # noqa: E402
from engine import presets  # noqa: E402
from engine.training import optim  # noqa: E402
from engine.fast.batches import collate, trim_padding  # noqa: E402
from engine.fast.fastpath import kept_lengths  # noqa: E402

data_dir = os.path.join(os.path.dirname(args.src), 'data')
wiki = dataset.CharCorruptionDataset(open(os.path.join(data_dir, 'wiki.txt'), encoding='utf-8').read(),
                                     presets.BLOCK_SIZE)
data, rows, sizes = wiki, 128, {}
if args.preset == 'cpu-20min':
    from engine.command import cpu_recipe, inputs
    questions = inputs.read_finetune(os.path.join(data_dir, 'birth_places_train.tsv'), wiki,
                                     dataset.NameDataset)
    mix = presets.mix('cpu-20min')
    data = cpu_recipe.BornViewMix(wiki, questions, mix['question_share'], mix['lead'])
    rows, sizes = 64, dict(n_embd=128, embd_pdrop=0.0, resid_pdrop=0.0, attn_pdrop=0.0)
random.seed(0)
batches = [collate(data, range(i * rows, (i + 1) * rows)) for i in range(args.steps + 1)]


def build(fast):
    torch.manual_seed(0)
    conf = model.config_for(args.variant, wiki.vocab_size, presets.BLOCK_SIZE, 32,
                            **{**presets.MODEL, **sizes}, fast_attention=fast, skip_padding=fast,
                            fast_dropout=fast)
    return model.GPT(conf)


def plain(m, x, y):
    _, loss = m(x, y)
    loss.backward()
    return loss


def packed(m, x, y):
    x, y = trim_padding(x, y, 8)
    _, loss = m(x, y, loss_only=True, packed=None)
    loss.backward()
    return loss


def grouped(m, x, y):
    x, y = trim_padding(x, y, 8)
    groups = max(1, min(8, len(x) // 16))
    lengths = kept_lengths(y)
    order = lengths.argsort(descending=True, stable=True)
    total, targets = 0.0, (y != 0).sum()
    for part in order.chunk(groups):
        columns = min(x.size(1), -(-int(lengths[part].max()) // 8) * 8)
        xg, yg = x[part, :columns].contiguous(), y[part, :columns].contiguous()
        _, loss = m(xg, yg)
        loss = loss * ((yg != 0).sum() / targets)
        loss.backward()
        total = total + loss.detach()
    return total


def seconds_a_step(step, fast):
    m = build(fast).train()
    opt = torch.optim.AdamW(optim.optimizer_groups(m, 0.1), lr=6e-4, betas=(0.9, 0.95))
    times = []
    for i, (x, y) in enumerate(batches):
        start = time.perf_counter()
        m.zero_grad(set_to_none=True)
        loss = step(m, x, y)
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        float(loss.detach())
        if i:
            times.append(time.perf_counter() - start)
    return sum(times) / len(times)


t = {name: seconds_a_step(step, name != 'plain')
     for name, step in (('plain', plain), ('packed (f2f1953)', packed), ('grouped', grouped))}
print(f'{args.preset} {args.variant}, {rows} rows, {args.steps} steps, torch '
      f'{torch.__version__}, {torch.get_num_threads()} threads')
for name, s in t.items():
    print(f'{name}: {s * 1000:.0f} ms a step, {t["plain"] / s:.2f}x plain')
print(f'grouped / packed steps a second: {t["packed (f2f1953)"] / t["grouped"]:.2f}')
