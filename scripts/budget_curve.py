"""Dev accuracy against time budget: the whole pipeline (run_all.py) under several budgets.

    python scripts/budget_curve.py --budgets 10 20 45            # the cpu-rehearsal recipe, vanilla
    python scripts/budget_curve.py --budgets 10 20 45 --report-only --out runs/budget

Each budget M is `python scripts/run_all.py --preset P --models MODEL --time_budget M --out
RUNS/MODEL-M` (skipped where its report exists: an interrupted sweep continues), one at a time:
two runs side by side on a small machine would each get half of it. Then a table and a figure of
dev accuracy against the minutes the run took, beside the London baseline, with each run's
pretraining epochs and final loss, go to OUT (report.md, budget_curve.png, budget_curve.json,
and each run's dev and test predictions).
"""
import json
import math
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, 'scripts'))
sys.path.insert(0, os.path.join(REPO, 'src'))
import run_all  # noqa: E402
from engine.common import MAX_BUDGET_MINUTES, OneLineParser  # noqa: E402
from engine.datafiles import resolve  # noqa: E402
from engine.command.paths import out_folder_problem  # noqa: E402
from engine.presets import PRESETS, stage_values  # noqa: E402

LONDON = 5.0  # the London baseline's dev accuracy (london_baseline.py)


def run_budget(minutes, preset, model, folder):
    cmd = [sys.executable, os.path.join(REPO, 'scripts', 'run_all.py'), '--preset', preset,
           '--models', model, '--time_budget', f'{minutes:g}', '--out', folder]
    print('+ ' + ' '.join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)


def last_epoch_loss(folder, model, preset):
    """Mean training loss over the last pretraining epoch (tensorboard log), or None."""
    points = run_all.read_losses(folder).get(f'{model}/pretrain')
    if not points:
        return None
    with open(resolve('wiki.txt', 'wiki.txt'), encoding='utf-8') as f:
        lines = sum(1 for _ in f)
    steps = math.ceil(lines / stage_values(preset, 'pretrain')['batch_size'])
    last = [v for _, v in points[-steps:]]
    return sum(last) / len(last)


def measure(minutes, preset, model, folder):
    with open(os.path.join(folder, 'report.json'), encoding='utf-8') as f:
        report = json.load(f)
    entry, london = (next(m for m in report['models'] if m['model'] == name)
                     for name in (model, 'london'))
    seconds = entry['seconds']
    return dict(budget=minutes, dev=entry['dev'], device=report['device'], commit=report['commit'],
                date=report['date'],
                minutes=sum(v for k, v in seconds.items() if not k.endswith('epochs')) / 60
                + london['seconds'].get('evaluate-dev', 0) / 60,  # run_all's London baseline first
                pretrain_epochs=seconds.get('pretrain epochs'), finetune_epochs=seconds.get('finetune epochs'),
                pretrain_minutes=seconds.get('pretrain', 0) / 60,
                finetune_minutes=seconds.get('finetune', 0) / 60,
                last_epoch_loss=last_epoch_loss(folder, model, preset))


def write(points, out, preset, model, command):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, 'budget_curve.json'), 'w', encoding='utf-8') as f:
        json.dump(dict(preset=preset, model=model, command=command, runs=points), f, indent=2)
    import figures  # (matplotlib: only where there is something to draw)
    figures.budget_curve(points, LONDON, f'{model}, preset {preset}: dev accuracy against time budget',
                         os.path.join(out, 'budget_curve.png'))
    devices = sorted({p['device'] for p in points})
    lines = [f'# Dev accuracy against time budget ({model}, preset {preset})', '',
             f'- device: {"; ".join(devices)}',
             f'- commits: {", ".join(sorted({p["commit"] for p in points}))}',
             f'- command: `{command}` (each budget: `python scripts/run_all.py --preset {preset} '
             f'--models {model} --time_budget M`)', '',
             '| budget (min) | took (min) | pretraining epochs | pretraining (min) | mean loss of '
             'the last pretraining epoch | finetuning epochs | finetuning (min) | dev accuracy |',
             '|---|---|---|---|---|---|---|---|']
    for p in points:
        dev = '-' if not p['dev'] else f"{p['dev']['percent']:.1f}% ({p['dev']['correct']:.0f}/{p['dev']['total']:.0f})"
        loss = '-' if p['last_epoch_loss'] is None else f"{p['last_epoch_loss']:.3f}"
        lines.append(f"| {p['budget']:g} | {p['minutes']:.1f} | {p['pretrain_epochs'] or '-'} | "
                     f"{p['pretrain_minutes']:.1f} | {loss} | {p['finetune_epochs'] or '-'} | "
                     f"{p['finetune_minutes']:.1f} | {dev} |")
    lines += ['', f'London baseline: {LONDON:.1f}% dev.', '', '![dev accuracy against budget](budget_curve.png)']
    with open(os.path.join(out, 'report.md'), 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines) + '\n')
    print('\n'.join(lines))


def main():
    ap = OneLineParser(prog='python scripts/budget_curve.py', description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--budgets', type=float, nargs='+', required=True, metavar='MINUTES')
    ap.add_argument('--preset', default='cpu-rehearsal', choices=sorted(PRESETS))
    ap.add_argument('--model', default='vanilla', choices=[m for m, v in run_all.MODELS.items() if v[2]])
    ap.add_argument('--runs', default=os.path.join(REPO, 'runs', 'budget'),
                    help='where the runs go (default runs/budget)')
    ap.add_argument('--out', default=os.path.join(REPO, 'runs', 'budget', 'curve'),
                    help='where the table and figure go')
    ap.add_argument('--report-only', action='store_true', help='no new runs: the report of those made')
    args = ap.parse_args()
    bad = [m for m in args.budgets if not 0 < m <= MAX_BUDGET_MINUTES]
    if bad:
        ap.error(f'argument --budgets: minutes must be positive, up to {MAX_BUDGET_MINUTES} '
                 f'(a week), not {bad[0]:g}')
    for flag, folder in (('--runs', args.runs), ('--out', args.out)):
        problem = out_folder_problem(folder)
        if problem is not None:
            ap.error(f'argument {flag} {folder}: {problem}')
    points = []
    for minutes in sorted(args.budgets):
        folder = os.path.join(args.runs, f'{args.model}-{minutes:g}')
        if not os.path.exists(os.path.join(folder, 'report.json')):
            if args.report_only:
                print(f'no run for {minutes:g} min in {folder}: left out', flush=True)
                continue
            start = time.time()
            run_budget(minutes, args.preset, args.model, folder)
            print(f'{minutes:g} min budget: took {(time.time() - start) / 60:.1f} min', flush=True)
        points.append(measure(minutes, args.preset, args.model, folder))
        for split in ('dev', 'test'):
            name = run_all.files_of(args.model)[split]
            target = os.path.join(args.out, f'{minutes:g}min', name)
            if os.path.exists(os.path.join(folder, name)):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(os.path.join(folder, name), target)
    if not points:
        raise SystemExit(f'error: no finished run under {args.runs} for budgets '
                         f'{", ".join(f"{m:g}" for m in args.budgets)}')
    write(points, args.out, args.preset, args.model, 'python scripts/budget_curve.py ' + ' '.join(sys.argv[1:]))


if __name__ == '__main__':
    main()
