"""Plain (handout-equivalent) path vs this code's fast path, measured side by side in one run.

    python scripts/benchmark.py                      # CPU, writes results/benchmarks.md
    python scripts/benchmark.py --device cuda --out results/benchmarks-h100.md

Training: tokens/s as the handout counts them (batch x 127 per step, padding included).
  plain: fp32, the written-out attention math, full 127-column batches, a DataLoader with 4
         workers created every epoch (its start-up is measured and spread over one epoch's steps),
         a loss .item() every step;
  fast:  trainer.Trainer as run.py configures it (in-process batches, trailing padding dropped,
         scaled_dot_product_attention, bf16 autocast where the hardware has bf16, fused AdamW on
         CUDA).
Evaluation: the 500 dev questions, the handout's one-question `utils.sample` loop vs
decode.greedy_complete, with a check that the predictions are identical.
"""
import argparse
import math
import os
import platform
import sys
import time

import torch
from torch.utils.data import DataLoader, Subset

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, 'src'))
import dataset  # noqa: E402
from attention import kept_lengths  # noqa: E402
import model  # noqa: E402
import presets  # noqa: E402
import trainer  # noqa: E402
import utils  # noqa: E402
from datafiles import resolve  # noqa: E402
from decode import greedy_complete  # noqa: E402
from run import bf16_supported  # noqa: E402


def build(variant, vocab, fast):
    conf = model.GPTConfig(vocab, presets.BLOCK_SIZE, **presets.MODEL, fast_attention=fast,
                           skip_padding=fast)
    conf.synthesizer = variant == 'synthesizer'
    conf.perceiver = variant == 'perceiver'
    conf.bottleneck_dim = 64 if variant == 'perceiver' else None
    return model.GPT(conf)


def sync(device):
    if device == 'cuda':
        torch.cuda.synchronize()


def plain_steps(gpt, data, batch, steps, device):
    """The handout's Trainer loop body, fp32, for `steps` steps; returns seconds per step."""
    gpt.to(device).train()
    opt = torch.optim.AdamW(trainer.optimizer_groups(gpt, 0.1), lr=6e-4, betas=(0.9, 0.95))
    loader = DataLoader(data, batch_size=batch, shuffle=True, num_workers=0)
    it = iter(loader)
    times = []
    for i in range(steps + 1):  # the first step warms up
        x, y = next(it)
        start = time.perf_counter()
        _, loss = gpt(x.to(device), y.to(device))
        gpt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(gpt.parameters(), 1.0)
        opt.step()
        loss.item()
        sync(device)
        if i:
            times.append(time.perf_counter() - start)
    return sum(times) / len(times)


def worker_startup(data, batch):
    """Seconds until the first batch of a new DataLoader with the handout's 4 workers."""
    start = time.perf_counter()
    next(iter(DataLoader(data, batch_size=batch, shuffle=True, num_workers=4)))
    return time.perf_counter() - start


def fast_steps(gpt, data, batch, steps, device, variant):
    """trainer.Trainer on `steps` batches (after a warm-up run); returns seconds per step."""
    precision = 'bf16' if bf16_supported(device) else 'fp32'
    conf = dict(max_epochs=1, batch_size=batch, learning_rate=6e-4, lr_decay=True,
                warmup_tokens=10240, final_tokens=1e9, device=device, precision=precision,
                log_every=1 if device == 'cpu' else 25)
    trainer.Trainer(gpt, Subset(data, range(batch)), None, trainer.TrainerConfig(**conf)).train()
    sync(device)
    start = time.perf_counter()
    trainer.Trainer(gpt, Subset(data, range(batch * steps)), None,
                    trainer.TrainerConfig(**conf)).train()
    sync(device)
    return (time.perf_counter() - start) / steps, precision


def computed_share(data, rows=2000):
    """The share of a padded row's 127 positions that the fast CPU path computes (the positions
    up to its last non-PAD target, see model.GPT.packed_loss), over `rows` examples."""
    targets = torch.stack([data[i % len(data)][1] for i in range(rows)])
    return int(kept_lengths(targets).sum()) / targets.numel()


def evaluation(gpt, vocab, device, limit):
    path = resolve('birth_dev.tsv', 'birth_dev.tsv')
    questions = [line.split('\t')[0] + dataset.MASK_CHAR
                 for line in open(path, encoding='utf-8')][:limit]
    prompts = [[vocab.stoi[c] for c in q] for q in questions]
    gpt.to(device).eval()

    def answer(ids):
        return ''.join(vocab.itos[int(i)] for i in ids).split(dataset.MASK_CHAR)[1]

    start = time.perf_counter()
    plain = [answer(utils.sample(gpt, torch.tensor([p], device=device), 32, sample=False)[0])
             for p in prompts]
    sync(device)
    t_plain = time.perf_counter() - start
    start = time.perf_counter()
    fast = [answer(ids) for ids in greedy_complete(gpt, prompts, 32, stop_id=vocab.stoi[dataset.MASK_CHAR],
                                                   device=device)]
    sync(device)
    t_fast = time.perf_counter() - start
    return t_plain, t_fast, plain == fast, len(prompts)


def machine(device):
    if device == 'cuda':
        return f'{torch.cuda.get_device_name()}, torch {torch.__version__}'
    model_name = platform.processor()
    try:
        with open('/proc/cpuinfo') as f:
            model_name = next(line.split(':', 1)[1].strip() for line in f if line.startswith('model name'))
    except (OSError, StopIteration):
        pass
    return (f'{model_name}, {os.cpu_count()} cores, torch {torch.__version__}, CPU capability '
            f'{torch.backends.cpu.get_cpu_capability()}, bf16 arithmetic: {bf16_supported("cpu")}')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--device', default='cpu', choices=('cpu', 'cuda'))
    ap.add_argument('--steps', type=int, default=3, help='timed steps per training measurement')
    ap.add_argument('--variants', nargs='+', default=['vanilla', 'synthesizer', 'perceiver'])
    ap.add_argument('--eval_questions', type=int, default=500)
    ap.add_argument('--out', default=os.path.join(REPO, 'results', 'benchmarks.md'))
    args = ap.parse_args()
    utils.set_seed(0)

    wiki = dataset.CharCorruptionDataset(open(resolve('wiki.txt', 'wiki.txt'), encoding='utf-8').read(),
                                         presets.BLOCK_SIZE)
    names = dataset.NameDataset(wiki, open(resolve('birth_places_train.tsv', 'tsv'), encoding='utf-8').read())
    rows = []
    shares = {stage: computed_share(data) for stage, data in (('pretrain', wiki), ('finetune', names))}
    for stage, data, batch, variants in (('pretrain', wiki, 128, args.variants),
                                         ('finetune', names, 256, ['vanilla'])):
        startup = worker_startup(data, batch)
        per_epoch = math.ceil(len(data) / batch)
        for variant in variants:
            utils.set_seed(0)
            t_plain = plain_steps(build(variant, wiki.vocab_size, False), data, batch, args.steps,
                                  args.device) + startup / per_epoch
            utils.set_seed(0)
            t_fast, precision = fast_steps(build(variant, wiki.vocab_size, True), data, batch,
                                           args.steps, args.device, variant)
            tokens = batch * (presets.BLOCK_SIZE - 1)
            rows.append((f'{stage} {variant}', f'{tokens / t_plain:,.0f} tok/s',
                         f'{tokens / t_fast:,.0f} tok/s ({precision})', f'{t_plain / t_fast:.2f}x'))
            print(rows[-1], flush=True)
    utils.set_seed(0)
    gpt = build('vanilla', wiki.vocab_size, True)
    t_plain, t_fast, same, n = evaluation(gpt, wiki, args.device, args.eval_questions)
    rows.append((f'evaluate vanilla, {n} dev questions', f'{t_plain:.1f} s', f'{t_fast:.2f} s',
                 f'{t_plain / t_fast:.1f}x (predictions identical: {same})'))
    print(rows[-1], flush=True)

    cmd = 'python scripts/benchmark.py ' + ' '.join(sys.argv[1:])
    lines = ['# Benchmark: handout-equivalent path vs fast path', '',
             f'- machine: {machine(args.device)}', f'- command: `{cmd.strip()}`',
             f'- date: {time.strftime("%Y-%m-%d", time.gmtime())}',
             f'- training: {args.steps} timed steps per row after a warm-up; plain includes the '
             'per-epoch start-up of 4 DataLoader workers, spread over one epoch\'s steps',
             '- positions computed by the fast path on a CPU (up to the last non-PAD target of each '
             'row), as a share of the padded rows the plain path computes: '
             + ', '.join(f'{k} {v:.0%}' for k, v in shares.items()),
             '- evaluation: randomly initialised model (no early stopping helps: every question runs '
             'all 32 steps unless it emits two ⁇)', '',
             '| measurement | plain (handout) | fast (this code) | ratio |', '|---|---|---|---|']
    lines += [f'| {a} | {b} | {c} | {d} |' for a, b, c, d in rows]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines) + '\n')
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
