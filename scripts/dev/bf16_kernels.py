"""Which attention kernel makes bf16 pretraining climb on a GPU.

On an H100 the handout's vanilla pretraining under bf16 autocast with scaled_dot_product_attention
rose from epoch 20 while fp32 and the written-out attention in bf16 did not
(docs/gpu.md). This runs the handout's pretraining for --epochs under each
SDPA backend (flash, memory-efficient, math) in bf16, with the handout's attention dropout (0.1)
and without it, plus fp32 for reference, and writes the last batch's loss at a few epochs:

    python scripts/dev/bf16_kernels.py --device cuda --epochs 40 --out bf16_kernels.md

Each configuration is its own process (the backend choice is global state); the table is rewritten
after every row, so a run stopped by a time limit keeps the rows it finished.
"""
import argparse
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (name, precision, SDPA backend or None for the default choice, attention dropout)
CONFIGS = [
    ('bf16-flash', 'bf16', 'FLASH_ATTENTION', 0.1),
    ('bf16-efficient', 'bf16', 'EFFICIENT_ATTENTION', 0.1),
    ('bf16-math', 'bf16', 'MATH', 0.1),
    ('bf16-flash-nodrop', 'bf16', 'FLASH_ATTENTION', 0.0),
    ('bf16-efficient-nodrop', 'bf16', 'EFFICIENT_ATTENTION', 0.0),
    ('bf16-math-nodrop', 'bf16', 'MATH', 0.0),
    ('fp32-default', 'fp32', None, 0.1),
    ('bf16-cudnn', 'bf16', 'CUDNN_ATTENTION', 0.1),
    ('bf16-default', 'bf16', None, 0.1),
]
EPOCH_LINE = re.compile(r'epoch (\d+) iter \d+: train loss (\d+\.\d+)')


def one(args):
    """In this process: pretrain under one backend and attention dropout (run.py's own code)."""
    sys.path.insert(0, os.path.join(REPO, 'src'))
    import model
    import run
    from torch.nn.attention import SDPBackend, sdpa_kernel

    config_for = model.config_for

    def with_attention_dropout(*a, **k):  # only attention's dropout: embd/resid keep the handout's
        config = config_for(*a, **k)
        config.attn_pdrop = args.attn_pdrop
        return config

    model.config_for = with_attention_dropout
    argv = ['pretrain', 'vanilla', 'wiki.txt', '--writing_params_path', args.params,
            '--max_epochs', str(args.epochs), '--precision', args.precision, '--device', args.device]
    if args.backend:
        with sdpa_kernel(getattr(SDPBackend, args.backend)):
            run.main(argv)
    else:
        run.main(argv)


def losses(text):
    found = {}
    for m in EPOCH_LINE.finditer(text.replace('\r', '\n')):
        found[int(m.group(1))] = float(m.group(2))
    return found


def write(path, rows, marks, header):
    lines = header + ['', '| run | precision | SDPA backend | attention dropout | '
                      + ' | '.join(f'epoch {e}' for e in marks) + ' | seconds | note |',
                      '|---|---|---|---|' + '---|' * len(marks) + '---|---|']
    for name, precision, backend, drop, found, seconds, note in rows:
        cells = ' | '.join(f'{found[e]:.2f}' if e in found else '-' for e in marks)
        lines.append(f'| {name} | {precision} | {backend or "default"} | {drop} | {cells} | '
                     f'{seconds:.0f} | {note} |')
    tmp = path + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines) + '\n')
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--device', default='cuda')
    ap.add_argument('--epochs', type=int, default=40)
    ap.add_argument('--marks', default='1,10,20,30,40', help='epochs whose loss the table shows')
    ap.add_argument('--only', default='', help='comma-separated run names (default: all)')
    ap.add_argument('--out', default='bf16_kernels.md')
    ap.add_argument('--one', action='store_true', help=argparse.SUPPRESS)
    ap.add_argument('--precision', help=argparse.SUPPRESS)
    ap.add_argument('--backend', help=argparse.SUPPRESS)
    ap.add_argument('--attn_pdrop', type=float, help=argparse.SUPPRESS)
    ap.add_argument('--params', help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        return one(args)
    import torch
    marks = [int(e) for e in args.marks.split(',')]
    names = [n for n in args.only.split(',') if n]
    header = [f'# bf16 × attention kernel, {args.epochs} epochs of the handout\'s vanilla pretraining',
              '', f'- device: {torch.cuda.get_device_name() if args.device == "cuda" else args.device}, '
              f'torch {torch.__version__}',
              f'- command: `python scripts/dev/{os.path.basename(__file__)} --device {args.device} '
              f'--epochs {args.epochs}`', '- loss: the last batch of each epoch, seed 0']
    rows = []
    for name, precision, backend, drop in CONFIGS:
        if names and name not in names:
            continue
        params = os.path.join(os.environ.get('TMPDIR', '/tmp'), f'bf16_kernels.{name}.params')
        cmd = [sys.executable, os.path.abspath(__file__), '--one', '--device', args.device,
               '--epochs', str(args.epochs), '--precision', precision, '--attn_pdrop', str(drop),
               '--params', params] + (['--backend', backend] if backend else [])
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        seconds = time.monotonic() - start
        found = losses(proc.stdout + proc.stderr)
        note = '' if proc.returncode == 0 else (
            f'exit {proc.returncode}: ' + ((proc.stderr.strip().splitlines() or [''])[-1])[:120])
        rows.append((name, precision, backend, drop, found, seconds, note.replace('|', '/')))
        print(f'{name}: ' + ', '.join(f'{e}: {found[e]:.2f}' for e in marks if e in found)
              + f' ({seconds:.0f} s){" " + note if note else ""}', flush=True)
        write(args.out, rows, marks, header)
        for leftover in (params, params + '.run.json', params + '.ckpt'):
            if os.path.exists(leftover):
                os.remove(leftover)


if __name__ == '__main__':
    main()
