"""Where main.sh's 20-minute runs would end under budget.py's rules: recorded epoch times replayed.

    python scripts/dev/replay_budget.py                  # results/cpu-20min/epoch_times.json
    python scripts/dev/replay_budget.py runs/main/vanilla.pretrain.params.run.json ...

Each record's seconds per pretraining epoch (a run.json's epoch_seconds, or the traces of
epoch_times.json) drive budget.TimeBudget on a stand-in clock, as they did in the run, at its
pace and a quarter and a half slower (a busier machine's), the first plan made from the first
epoch's pace at 0.8, 0.95 and 1.1 of it (a few timed steps are that far off). What follows the
pretraining is modelled from runs 23-25 of results/cpu-20min: the finetuning takes --finetune
epochs of the last pace (1.08-1.28 measured) and the evaluations, the report and the starts of
python --rest seconds (15-21). Prints each replay's pretraining and whole-run end, and how many
end outside [19, 20] minutes. The budget's arguments default to main.sh's.
"""
import contextlib
import io
import json
import os
import statistics
import sys
import types

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'src'))
from engine.machine import budget as rules  # noqa: E402
from engine.common import OneLineParser  # noqa: E402

STEPS, TOKENS = 62, 62 * 64 * 128  # cpu-20min's steps and tokens per pretraining epoch
ASKED = 650  # the handout's epochs, which the budget cuts
TRACES = os.path.join(REPO, 'results', 'cpu-20min', 'epoch_times.json')


def records(paths):
    """{name: seconds per epoch} from run.json files, or from epoch_times.json."""
    if not paths:
        with open(TRACES) as f:
            return {name: run['epoch_seconds'] for name, run in json.load(f)['runs'].items()}
    found = {}
    for path in paths:
        try:
            with open(path) as f:
                times = json.load(f).get('epoch_seconds')
        except (OSError, ValueError, AttributeError) as e:
            raise SystemExit(f'error: {path}: not a readable run.json ({e})')
        if not times:
            raise SystemExit(f'error: {path}: no epoch_seconds (a budgeted pretraining\'s '
                             'run.json has them)')
        found[path] = times
    return found


def replay(times, budget, after, first_plan, start=10.0):
    """Pretraining under `budget` seconds holding `after` epochs, its epochs taking `times` (in
    turn, again from the first when the run is longer): (seconds at its end, epochs trained).
    The first plan's epoch is times[0] * first_plan; measuring it takes `start` seconds."""
    now = [start]
    config = types.SimpleNamespace(time_budget=budget, budget_after=after)
    first = times[0] * first_plan
    fit = rules.epochs_that_fit(budget - start, first, rules.kept(config, first))
    epochs = min(max(fit, 1), ASKED)
    schedule = types.SimpleNamespace(max_epochs=ASKED, asked=(ASKED, ASKED * TOKENS), warmup_tokens=0,
                                     final_tokens=ASKED * TOKENS, relaid=None, decay_share=None)
    trainer = types.SimpleNamespace(
        config=config, schedule=schedule, steps_per_epoch=STEPS, device='cpu', rank=0, tokens=0,
        start_epoch=0,
        plan=types.SimpleNamespace(start=0.0, epochs=epochs, final_tokens=epochs * TOKENS),
        progress=types.SimpleNamespace(set_total=lambda steps: None, start_tokens=0))
    timer = rules.TimeBudget(clock=lambda: now[0])
    timer.on_train_start(trainer)
    epoch = 0
    with contextlib.redirect_stdout(io.StringIO()):  # (the re-plans' lines)
        while epoch < schedule.max_epochs:
            for it in range(STEPS):
                now[0] += times[epoch % len(times)] / STEPS
                timer.on_step_end(trainer, epoch, it)
            trainer.tokens += TOKENS
            stop = timer.on_epoch_end(trainer, epoch)
            epoch += 1
            if stop:
                break
    return now[0], epoch


def main():
    ap = OneLineParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('runs', nargs='*',
                    help='run.json files (default: results/cpu-20min/epoch_times.json)')
    ap.add_argument('--setup', type=float, default=70.0, help='seconds before pretraining starts')
    ap.add_argument('--rest', type=float, default=18.0, help="main.sh's seconds kept after the budget")
    ap.add_argument('--after', type=float, default=1.2, help="main.sh's --time_budget_after")
    ap.add_argument('--finetune', type=float, nargs=2, default=(1.08, 1.28), metavar=('LOW', 'HIGH'),
                    help='the finetuning, in epochs of the last pace')
    ap.add_argument('--post', type=float, nargs=2, default=(15.0, 21.0), metavar=('LOW', 'HIGH'),
                    help='seconds after the finetuning: evaluations, report, starts of python')
    args = ap.parse_args()
    budget = 1200 - args.setup - args.rest
    ends, outside, runs = [], 0, records(args.runs)
    print(f'pretraining budget {budget:.0f} s holding {args.after:g} epochs; whole run: setup '
          f'{args.setup:g} s + pretraining + finetuning + {args.post[0]:g}-{args.post[1]:g} s')
    for name, times in runs.items():
        for slower in (1.0, 1.25, 1.5):
            paced = [t * slower for t in times]
            for first_plan in (0.8, 0.95, 1.1):
                took, epochs = replay(paced, budget, args.after, first_plan)
                last = paced[(epochs - 1) % len(paced)]
                span = [args.setup + took + 2 + ft * last + post  # (+2: the params' save)
                        for ft, post in zip(args.finetune, args.post)]
                ends += span
                out = [e for e in span if not 1140 <= e <= 1200]
                outside += bool(out)
                print(f'{os.path.basename(name)} x{slower:g}, first plan at {first_plan:g}: '
                      f'{epochs} epochs, pretraining ends at {took:.0f} s, the run at '
                      f'{span[0]:.0f}-{span[1]:.0f} s' + ('  <- outside [1140, 1200]' if out else ''))
    print(f'whole-run ends {min(ends):.0f}-{max(ends):.0f} s (median {statistics.median(ends):.0f}); '
          f'{outside} of {len(ends) // 2} replays outside [1140, 1200] s')


if __name__ == '__main__':
    main()
