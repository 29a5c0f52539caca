"""Handout file: the starter's run.py (flags, printed lines, files fixed: tests/test_cli.py).

Pretrain, finetune or evaluate one of the assignment's models: the handout's run.py.

    python src/run.py pretrain vanilla wiki.txt --writing_params_path vanilla.pretrain.params
    python src/run.py finetune vanilla wiki.txt --reading_params_path vanilla.pretrain.params \
        --writing_params_path vanilla.finetune.params --finetune_corpus_path birth_places_train.tsv
    python src/run.py evaluate vanilla wiki.txt --reading_params_path vanilla.finetune.params \
        --eval_corpus_path birth_dev.tsv --outputs_path vanilla.pretrain.dev.predictions

A handout file: its flags and defaults, its printed lines and the files it writes are the
starter's, every edition's (2021-22 synthesizer, 2022-23 perceiver, 2024-25 rope; guarded by
tests/test_cli.py and tests/test_model_compat.py). The engine beside it does the rest at a few
named points: engine.command (flags the handout lacks, checks, the preset's settings, saving),
engine.inputs (reading the files), engine.cpu_recipe (the CPU presets' data and model).
"""
import sys
import time

START = time.time()  # a --time_budget counts from here

from engine import checkpoint  # noqa: E402
from engine import command  # noqa: E402
from engine import common  # noqa: E402
from engine import cpu_recipe  # noqa: E402
from engine import devices  # noqa: E402
from engine import distributed  # noqa: E402
from engine import inputs  # noqa: E402
from engine import plan as planning  # noqa: E402
import models  # noqa: E402
from engine import presets  # noqa: E402
import trainer  # noqa: E402
import utils  # noqa: E402
from engine.common import UsageError  # noqa: E402

FUNCTIONS = ('pretrain', 'finetune', 'evaluate')
VARIANTS = tuple(models.VARIANTS)

argp = common.OneLineParser(prog='python src/run.py', description=__doc__.split('\n')[2])
argp.add_argument('function', choices=FUNCTIONS, help="Choose pretrain, finetune, or evaluate")
argp.add_argument('variant', choices=VARIANTS, help="Choose vanilla, synthesizer, perceiver or rope")
argp.add_argument('pretrain_corpus_path', default=None)
argp.add_argument('--bottleneck_dim', type=int, default=presets.BOTTLENECK_DIM)
argp.add_argument('--reading_params_path', default=None)
argp.add_argument('--writing_params_path', default=None)
argp.add_argument('--finetune_corpus_path', default=None)
argp.add_argument('--eval_corpus_path', default=None)
argp.add_argument('--outputs_path', default=None)
argp.add_argument('--pretrain_lr', default=None, type=float, help='default 6e-3')
argp.add_argument('--finetune_lr', default=None, type=float, help='default 6e-4')
argp.add_argument('--tb_expt_name', help='debug string for tb log.', default='run')
command.add_engine_flags(argp)

# Keep the block size 128. The pretraining corpus is always read, even to finetune or evaluate:
# it gives every stage the same vocabulary.
block_size = presets.BLOCK_SIZE


def parse_args(argv=None):
    args = argp.parse_args(argv)
    args.started = START
    return args


def run(args):
    command.check_args(args)  # everything the run will need, before spending any time on it
    device = distributed.init(devices.pick_device(args.device))
    utils.set_seed(args.seed)

    text = inputs.read_text(args.corpus_path, 'pretrain_corpus_path')
    pretrain_dataset = inputs.read_corpus(args.corpus_path, args.edition, text)

    # read and check the other inputs before building anything (none of this draws random numbers,
    # so the model's initialisation is the handout's)
    stage, data, schedule_length = None, None, len(pretrain_dataset)
    if args.function == 'pretrain':
        stage, data = 'pretrain', pretrain_dataset
    elif args.function == 'finetune':
        stage = 'finetune_pretrained' if args.reading_params_path is not None else 'finetune_scratch'
        data = inputs.read_finetune(args.finetune_path, pretrain_dataset)
    else:
        prompts, gold_lines = inputs.read_evaluation(args.eval_path, pretrain_dataset.stoi,
                                                     args.strict)

    # define the model: the variant's GPTConfig (models.VARIANTS) with the preset's sizes
    smaller = None  # a CPU recipe's model for a slow machine, which the run's plan may choose
    if presets.recipe(args.preset):  # not the handout's: a CPU recipe's data and model
        data, schedule_length, model, smaller = cpu_recipe.prepare(args, stage, pretrain_dataset,
                                                                   data, schedule_length, device)
    else:
        mconf = command.model_config(args, pretrain_dataset.vocab_size, block_size)
        model = models.GPT(mconf).to(device)
    if distributed.rank() == 0 and args.variant != 'synthesizer':  # (2021-22's run.py does not)
        print('Model on device: ', next(model.parameters()).device)
    if args.reading_params_path is not None and args.function != 'pretrain':
        inputs.load_params(model, args.reading_params_path, command.describe_model(args), device)

    writer = None if distributed.rank() != 0 else common.LazyWriter(command.tensorboard_dir(args))
    try:
        if args.function in ('pretrain', 'finetune'):
            tconf, budget = command.trainer_config(args, stage, schedule_length, device, writer)
            # the machine measured once, the handout's step timed: precision, threads, epochs
            plan, model = planning.make(model, data, tconf, trainer.train_step,
                                        trainer.make_optimizer, smaller=smaller)
            run = trainer.Trainer(model, data, None, tconf, plan)
            run.train()
            command.save_params(model, args, device, run, tconf, budget, stage)
        elif distributed.rank() == 0:
            evaluate(model, args, prompts, gold_lines, pretrain_dataset, device)
    finally:  # also on an interrupt: the steps logged so far reach the events file
        if writer is not None:
            writer.close()


def evaluate(model, args, prompts, gold_lines, pretrain_dataset, device):
    """The handout's greedy answers (utils.sample, batched) to the questions, one a line in
    --outputs_path, scored as utils.evaluate_places scores them."""
    precision = devices.pick_precision(args.precision, device, training=False)
    predictions = command.predict(model, prompts, pretrain_dataset, device, precision,
                                  args.eval_batch_size)
    total, correct = command.write_predictions(args, predictions, gold_lines, device, precision)
    if total > 0:
        print('Correct: {} out of {}: {}%'.format(correct, total, correct / total * 100))
    else:
        print('Predictions written to {}; no targets provided'.format(args.outputs_path))


def main(argv=None):
    args = parse_args(argv)
    try:
        run(args)
    except UsageError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)
    except trainer.LossNotFinite as e:
        print(f'error: {e}; nothing was written (a lower learning rate may help)', file=sys.stderr)
        sys.exit(1)
    except checkpoint.TrainingInterrupted as e:
        print(f'\ninterrupted: checkpoint written to {e}; continue with the same command '
              'plus --resume', file=sys.stderr)
        sys.exit(130)


if __name__ == '__main__':
    main()
