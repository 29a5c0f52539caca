"""Engine (free to change): what a command leaves and how it ends: the tensorboard writer, the
params written whole, the run record, the evaluation's predictions and score, and the one line
a stop prints.

What a record says of the run's settings it asks of stages.py; what the command holds (its
claims, copies and writers: paths.Held) is let go at its end (finish)."""
import json
import os
import sys
import time

import torch

from engine.training import checkpoint
from engine import common
from engine import distributed
from engine.command import flags
from engine.command import inputs, params
from engine.command import stages
from engine.common import UsageError
from engine.fast.decode import predict
from engine.training.progress import LossNotFinite


def writer(args, make):
    """The tensorboard writer of a training command, make(log_dir) (common.LazyWriter: its
    folder made at the first scalar), in the edition's folder (tensorboard_dir); None where
    there is nothing to log (evaluate, ranks but 0)."""
    if args.function == 'evaluate' or distributed.rank() != 0:
        return None
    args.held.writers.append(make(stages.tensorboard_dir(args)))  # (closed as it ends: finish)
    return args.held.writers[-1]


def finish(args):
    """The command's end, however it ends (`args`: parsed or checked): every scalar logged so
    far written to the events file (also after an interrupt), its outputs' claims let go, its
    copies of piped inputs gone (paths.Held)."""
    args.held.release()


def write_record(args, output, device, seconds_before=0.0, **used):
    """Beside `output` (the params or predictions written), `output`.run.json: the settings this
    command actually used (the preset's and the flags', and what the run chose or planned on the
    way), for whoever reads the output later. Not read back by any command. seconds_before:
    what the interrupted calls of a resumed run spent (its seconds are all its calls')."""
    record = dict(function=args.function, variant=args.variant, preset=args.preset,
                  edition=args.edition, commit=common.source_commit(), torch=torch.__version__,
                  device=str(device), seed=dict(zip(('python', 'torch'), stages.seeds(args))),
                  reading_params_path=args.reading_params_path,
                  bottleneck_dim=stages.bottleneck_of(args),
                  **used, seconds=round(seconds_before + time.time() - args.started, 1))

    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as f:
            json.dump(record, f, indent=1)
            f.write('\n')
    common.atomic_write(output + '.run.json', write)


def phases(args, progress, before=0.0):
    """Seconds of the command so far: importing (torch's and ours), setting up (the data, the
    model, the device, the plan), training (the steps and what the epochs' ends do; with
    `before`, the interrupted calls' training) and after (the params written); where the parts
    of a short GPU stage go."""
    start, end = progress.start_time, progress.end_time
    if start is None or end is None or not args.started <= flags.IMPORTED <= start <= end:
        return None
    return dict(imports=round(flags.IMPORTED - args.started, 1), setup=round(start - flags.IMPORTED, 1),
                training=round(before + end - start, 1), after=round(time.time() - end, 1))


def save_params(args, run):
    """The handout's torch.save(model.state_dict(), args.writing_params_path) at the end of
    training, written whole or not at all and never cut short by a first Ctrl-C (that would lose
    the finished run); the resumable checkpoint, nothing left to resume, removed; the run's
    record beside the params. `run`: the run that trained it (loop.Run: its model is the one
    trained, which a CPU preset's plan may have chosen)."""
    if distributed.rank() != 0:
        return
    path, tconf, gpt = args.writing_params_path, run.config, run.model
    with checkpoint.StopRequest():
        common.save_state_dict(gpt, path)
        if os.path.exists(tconf.resume_path):
            os.remove(tconf.resume_path)
    budget = None if tconf.time_budget is None else tconf.time_budget / 60
    earlier = run.before  # (a resumed run: its interrupted calls, whose seconds count too)
    write_record(args, path, run.device, seconds_before=earlier['seconds'],
                 stage=args.stage, precision=run.precision,
                 plan=run.plan.record(),
                 learning_rate=tconf.learning_rate, batch_size=tconf.batch_size,
                 weight_decay=tconf.weight_decay, decay_rule=tconf.decay_rule,
                 shuffle=tconf.shuffle, compile=tconf.compile or None,
                 row_groups=tconf.row_groups or None,
                 warmup_tokens=tconf.warmup_tokens,
                 final_tokens=run.schedule.final_tokens, decay_share=tconf.decay_share,
                 n_layer=params.layers_of(gpt.state_dict()),
                 time_budget_minutes=budget, time_budget_after=tconf.budget_after or None,
                 epochs_asked=tconf.max_epochs,
                 epochs_planned=run.schedule.max_epochs, epochs_trained=run.epochs_trained,
                 steps=run.step, tokens=run.tokens,
                 epoch_seconds=[round(t, 2) for t in run.epoch_seconds] or None,
                 phases=phases(args, run.progress, earlier['training']),
                 calls=earlier['calls'] + 1 if earlier['calls'] else None,
                 epoch_walls=[round(t, 3) for t in run.epoch_walls] or None,
                 others_share=run.others_share and round(run.others_share, 4))


def evaluate(gpt, args, vocab, device):
    """The handout's evaluation, batched: its greedy answers (utils.sample's, engine.fast.decode's
    batches) to the questions of --eval_corpus_path (each line checked, blank lines answered
    blank), one a line in --outputs_path written whole or not at all, scored as
    utils.evaluate_places scores a well-formed file; the handout's printed line; the record."""
    prompts, gold_lines = inputs.read_evaluation(args.eval_corpus_path, vocab.stoi, args.strict)
    stages.say_edition(args)
    predictions = predict(gpt, prompts, vocab, device, args.precision, args.eval_batch_size)

    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as fout:
            for pred in predictions:
                fout.write(pred + '\n')
    common.atomic_write(args.outputs_path, write)
    total, correct = inputs.score_places(gold_lines, predictions)
    write_record(args, args.outputs_path, device, precision=args.precision,
                 eval_corpus_path=inputs.shown(args.eval_corpus_path), questions=len(predictions),
                 correct=int(correct) if total > 0 else None)
    if total > 0:
        print(f'Correct: {correct} out of {total}: {correct/total*100}%')
    else:
        print(f'Predictions written to {args.outputs_path}; no targets provided')


# What ends a command with one line instead of a traceback (run.py's except clause)
STOPS = (UsageError, LossNotFinite, checkpoint.TrainingInterrupted)


def report(e):
    """One line for a STOPS exception; the exit status."""
    if isinstance(e, UsageError):
        print(f'error: {e}', file=sys.stderr)
        return 2
    if isinstance(e, LossNotFinite):
        print(f'error: {e}; nothing was written (a lower learning rate may help)', file=sys.stderr)
        return 1
    print(f'\ninterrupted: checkpoint written to {e}; continue with the same command plus '
          '--resume', file=sys.stderr)
    return 130
