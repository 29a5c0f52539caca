"""The pictures the scripts draw, with matplotlib: the loss curves of a run (run_all.py, main.sh)
and dev accuracy against the time budget (budget_curve.py). Each function returns the Figure it
saved, so a test can read what it holds (axes, labels, lines)."""
import math

from matplotlib.figure import Figure  # no pyplot: no window, no global state, any backend
from matplotlib.ticker import FuncFormatter

STAGES = {'pretrain': 'pretraining', 'finetune': 'finetuning'}
LONDON_COLOUR = 'tab:red'


def moving_mean(values, k):
    """Each value replaced by the mean of it and the k - 1 before it (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - k] if i >= k else 0.0)
        out.append(total / min(i + 1, k))
    return out


def loss_curves(curves, steps_per_epoch, title, path):
    """Training loss against epochs, one panel per stage, one line per model, log-scale loss.

    curves: {'<model>/<stage>': [(step, loss)]}; steps_per_epoch: {'<model>/<stage>': steps}
    (a stage whose steps per epoch are not known is drawn against steps, and its axis says so)."""
    fig = Figure(figsize=(11, 4.4), layout='constrained')
    fig.suptitle(title)
    for ax, (stage, name) in zip(fig.subplots(1, 2), STAGES.items()):
        runs = sorted((key.split('/')[0], points) for key, points in curves.items()
                      if key.endswith('/' + stage))
        in_epochs = bool(runs) and all(steps_per_epoch.get(f'{m}/{stage}') for m, _ in runs)
        for model, points in runs:
            k = max(1, len(points) // 100)  # a mean over ~1% of the run: the batches' noise smoothed
            per = steps_per_epoch.get(f'{model}/{stage}') if in_epochs else 1
            ax.plot([(step + 1) / per for step, _ in points], moving_mean([v for _, v in points], k),
                    label=model if k == 1 else f'{model} (mean of {k} steps)')
        ax.set_title(name)
        ax.set_xlabel('epoch' if in_epochs else 'step')
        ax.set_ylabel('training loss (log scale)')
        ax.set_yscale('log')
        losses = [v for _, points in runs for _, v in points if v > 0]
        if losses:  # plain numbers (0.6, not 6x10^-1); between powers of ten as many as fit
            wide = math.log10(max(losses) / min(losses)) > 1.2
            ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f'{y:g}'))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: f'{y:g}' if not wide or round(
                y / 10 ** math.floor(math.log10(y))) in (2, 5) else ''))
        ax.grid(True, which='both', alpha=0.3)
        if runs:
            ax.legend()
        else:
            ax.text(0.5, 0.5, f'no {name} logged', ha='center', va='center', transform=ax.transAxes)
    fig.savefig(path, dpi=100)
    return fig


def budget_curve(points, london, title, path):
    """Dev accuracy (%) against the minutes each run took, and the London baseline.

    points: [{'minutes', 'dev': {'percent'} or None, 'pretrain_epochs'}]: runs without a dev
    accuracy are left out."""
    fig = Figure(figsize=(7.6, 4.4), layout='constrained')
    ax = fig.subplots()
    done = [p for p in points if p['dev']]
    ax.plot([p['minutes'] for p in done], [p['dev']['percent'] for p in done], 'o-', label='dev accuracy')
    for p in done:
        ax.annotate(f"{p['dev']['percent']:.1f}% ({p['pretrain_epochs'] or '-'} ep.)",
                    (p['minutes'], p['dev']['percent']), textcoords='offset points', xytext=(5, 6))
    ax.axhline(london, color=LONDON_COLOUR, linewidth=1, label=f'London baseline ({london:.1f}%)')
    ax.set_xlim(0, max([p['minutes'] for p in points] + [1]) * 1.1)
    ax.set_ylim(0, max([london * 1.6] + [p['dev']['percent'] * 1.15 for p in done]))
    ax.set_xlabel('minutes, whole pipeline')
    ax.set_ylabel('dev accuracy (%)')
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc='lower right')
    fig.savefig(path, dpi=100)
    return fig
