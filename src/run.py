# [engine] Handout file: the starters' run.py, every edition's (its flags, printed lines and files:
# [engine] tests/handout/test_cli.py; how a starter is read out of it: scripts/grading/starter.py).
# [engine] The engine (src/engine/) attaches on the lines marked [engine]: checks of every input
# [engine] before any work, presets, time budgets, resume, batched decoding, files written whole.
import random
import argparse
import sys  # [engine]

import dataset
import models
import trainer
import utils

import numpy as np  # [2021-22 2022-23] noqa: F401 (the starters import these)
import torch
import torch.nn as nn  # [2021-22 2022-23] noqa: F401
from tqdm import tqdm
from torch.nn import functional as F  # [2021-22 2022-23] noqa: F401
from torch.utils.tensorboard import SummaryWriter  # [2022-23 2024-25]

from engine import devices, distributed  # [engine]
from engine.command import cpu_recipe, flags, inputs, params, records, stages  # [engine]
from engine.common import LazyWriter as SummaryWriter  # [engine] its folder made at the first scalar

random.seed(0)

argp = argparse.ArgumentParser()
argp.add_argument('function', help="Choose pretrain, finetune, or evaluate")  # [2022-23 2024-25]
#[2021-22] argp.add_argument('function',
#[2021-22]     help="Whether to pretrain, finetune or evaluate a model",
#[2021-22]     choices=["pretrain", "finetune", "evaluate"])
argp.add_argument('variant', help="Choose vanilla or rope")  # [2024-25]
#[2022-23] argp.add_argument('variant', help="Choose vanilla or perceiver")
#[2021-22] argp.add_argument('variant',
#[2021-22]     help="Which variant of the model to run ('vanilla' or 'synthesizer')",
#[2021-22]     choices=["vanilla", "synthesizer"])
argp.add_argument('--bottleneck_dim', type=int, default=32)  # [2022-23]
argp.add_argument('pretrain_corpus_path', default=None)  # [2022-23 2024-25]
argp.add_argument('--reading_params_path', default=None)  # [2022-23 2024-25]
argp.add_argument('--writing_params_path', default=None)  # [2022-23 2024-25]
argp.add_argument('--finetune_corpus_path', default=None)  # [2022-23 2024-25]
argp.add_argument('--eval_corpus_path', default=None)  # [2022-23 2024-25]
#[2021-22] argp.add_argument('pretrain_corpus_path',
#[2021-22]     help="Path of the corpus to pretrain on", default=None)
#[2021-22] argp.add_argument('--reading_params_path',
#[2021-22]     help="If specified, path of the model to load before finetuning/evaluation",
#[2021-22]     default=None)
#[2021-22] argp.add_argument('--writing_params_path',
#[2021-22]     help="Path to save the model after pretraining/finetuning", default=None)
#[2021-22] argp.add_argument('--finetune_corpus_path',
#[2021-22]     help="Path of the corpus to finetune on", default=None)
#[2021-22] argp.add_argument('--eval_corpus_path',
#[2021-22]     help="Path of the corpus to evaluate on", default=None)
argp.add_argument('--outputs_path', default=None)
argp.add_argument('--pretrain_lr', default=6e-3, type=float)  # [2022-23 2024-25]
argp.add_argument('--finetune_lr', default=6e-4, type=float)  # [2022-23 2024-25]
argp.add_argument('--tb_expt_name', help='debug string for tb log.',  # [2022-23 2024-25]
                  default='run')
flags.add_engine_flags(argp)  # [engine] --preset, --time_budget, --resume, ...: one-line errors


def parse_args(argv=None):  # [engine] the command line as main() reads it (tests, the grader)
    return flags.parsed(argp, argv)  # [engine]


def main(argv=None, member=None):  # [wrapper] member: run_all --one_process's turn (turns.py)
    args = argp.parse_args(argv)  # [engine] (the command line a test or a script hands in)
    #[2021-22 2022-23 2024-25] args = argp.parse_args()
    args = flags.parsed(argp, argv, args, member)  # [engine] which flags were typed; when it started
    try:  # [wrapper]
        args = flags.check_args(args)  # [engine] every input checked, the command decided (flags.Command)

        device = 'cpu'  # [2024-25]
        if torch.cuda.is_available():  # [2024-25]
            device = torch.cuda.current_device()
        elif torch.backends.mps.is_available() and args.variant == 'vanilla':  # [2024-25]
            device = 'mps'
        # [2021-22 2022-23] Save the device
        #[2021-22 2022-23] device = torch.cuda.current_device() if torch.cuda.is_available() else 'cpu'
        device = stages.start(args)  # [engine] --device; torchrun's rank's GPU; seeds as its edition

        # [2022-23 2024-25] TensorBoard training log
        writer = SummaryWriter(log_dir='expt/%s/%s_%s_pt_lr_%f_ft_lr_%f' % (  # [2024-25]
            args.function,
            args.tb_expt_name,
            args.variant,
            args.pretrain_lr,
            args.finetune_lr))
        #[2022-23] writer = SummaryWriter(log_dir='expt/%s/%s_%s_%d_pt_lr_%f_ft_lr_%f' % (
        #[2022-23]     args.function,
        #[2022-23]     args.tb_expt_name,
        #[2022-23]     args.variant,
        #[2022-23]     args.bottleneck_dim,
        #[2022-23]     args.pretrain_lr,
        #[2022-23]     args.finetune_lr))
        writer = records.writer(args, SummaryWriter)  # [engine] the edition's folder, the rates trained at

        # Keep the block size 128
        # Why is the pretraining corpus always required (even if we're not pretraining?)
        # It's because we're using it as a hack to always have the same vocabulary
        # (that is, the same mapping from character to integer, and we build the
        # vocab from the pretraining corpus.)
        block_size = 128
        text = open(args.pretrain_corpus_path, encoding='utf-8').read()  # [2022-23 2024-25]
        #[2021-22] text = open(args.pretrain_corpus_path).read()
        text = stages.corpus_text(args, text)  # [engine] wiki.txt as the edition ships it
        pretrain_dataset = dataset.CharCorruptionDataset(text, block_size)
        pretrain_dataset.edition = args.edition  # [engine] the lengths of the command's edition

        # We don't suggest you change these hyperparameters, as they're known to work.
        # [2024-25] use them for both the vanilla and the RoPE models
        # [2022-23] use them for both the vanilla and the perceiver models
        # [2021-22] use them for both the vanilla and the synthesizer models
        mconf = models.GPTConfig(
            pretrain_dataset.vocab_size,
            pretrain_dataset.block_size,
            n_layer=4,
            n_head=8,
            n_embd=256)
        mconf = stages.model_config(args, mconf)  # [engine] the preset's sizes, --dropout, --plain

        #[2021-22 2022-23] """
        #[2021-22 2022-23] Don't change above here; write your code below
        #[2021-22 2022-23] """

        # [2022-23 2024-25] define models.
        # [2024-25] note: models should moved to device defined on lines 30-34.
        # [2022-23] note: models should moved to device defined on line 34.
        randoms = devices.random_states(device)  # [engine] (a slow machine's model drawn as this one)

        model = None  # [2024-25]
        if args.variant == 'vanilla':
            # TODO: [part c] Make some model here
            ### YOUR CODE HERE ###
            model = models.GPT(mconf).to(device)
            ### END YOUR CODE ###
        elif args.variant == 'rope':  # [2024-25]
            # TODO: [part g] Make some other model here
            # set mconf.rope parameter
            ### YOUR CODE HERE ###
            mconf.rope = True
            model = models.GPT(mconf).to(device)
            ### END YOUR CODE ###
        elif args.variant == 'perceiver':  # [2022-23]
            # TODO: [part g] Make some other model here
            # set mconf.perceiver, and mconf.bottleneck_dim parameters appropriately.
            ### YOUR CODE HERE ###
            mconf.perceiver = True
            mconf.bottleneck_dim = args.bottleneck_dim
            model = models.GPT(mconf).to(device)
            ### END YOUR CODE ###
        elif args.variant == 'synthesizer':  # [2021-22]
            # TODO: [part g] Make some other model here
            ### YOUR CODE HERE ###
            mconf.synthesizer = True
            model = models.GPT(mconf).to(device)
            ### END YOUR CODE ###
        else:  # [2022-23 2024-25]
            raise ValueError("Unknown model variant")
        # [2021-22] From here on, your code should be identical independent of which
        # [2021-22] variant (vanilla or synthesizer) has been chosen.
        # [engine] a CPU preset's model for a slow machine, where it may be trained instead:
        model, smaller = cpu_recipe.fit_model(args, model, mconf, models.GPT, device, randoms)  # [engine]

        if args.variant != 'synthesizer' and distributed.rank() == 0:  # [wrapper 2024-25]
            print('Model on device: ', next(model.parameters()).device)

        # Perform pretraining, finetuning, or evaluation
        if args.function == 'pretrain':
            assert args.pretrain_corpus_path is not None  # [2021-22]
            assert args.writing_params_path is not None
            # TODO [part f]:
            # - Given:
            #     1. A corpus specified in args.pretrain_corpus_path
            #     2. An output path args.writing_params_path for the model parameters
            # - Goals:
            #     1. Pretrain the model on this corpus
            #     2. Save the resulting model in args.writing_params_path
            # - Make sure to use the following hyperparameters for pretraining:
            #     max_epochs=650
            #     batch_size=128
            # [2021-22]     learning_rate=6e-3
            # [2022-23 2024-25]     learning_rate=args.pretrain_lr
            #     lr_decay=True
            #     warmup_tokens=512*20
            # [2021-22 2022-23]     final_tokens=200*len(pretrain_dataset)*block_size
            # [2024-25]     final_tokens=650*len(pretrain_dataset)*block_size
            #     num_workers=4
            # [2022-23 2024-25]     writer=writer

            ### YOUR CODE HERE ###
            if args.edition == '2024-25':  # [wrapper 2024-25]
                tconf = trainer.TrainerConfig(max_epochs=650, batch_size=128,
                                              learning_rate=args.pretrain_lr, lr_decay=True,
                                              warmup_tokens=512*20,
                                              final_tokens=650*len(pretrain_dataset)*block_size,
                                              num_workers=4, writer=writer)
            else:  # [wrapper 2021-22 2022-23]
                tconf = trainer.TrainerConfig(max_epochs=650, batch_size=128,  # [2022-23]
                                              learning_rate=args.pretrain_lr, lr_decay=True,
                                              warmup_tokens=512*20,
                                              final_tokens=200*len(pretrain_dataset)*block_size,
                                              num_workers=4, writer=writer)
                #[2021-22] tconf = trainer.TrainerConfig(max_epochs=650, batch_size=128,
                #[2021-22]                               learning_rate=6e-3, lr_decay=True,
                #[2021-22]                               warmup_tokens=512*20,
                #[2021-22]                               final_tokens=200*len(pretrain_dataset)*block_size,
                #[2021-22]                               num_workers=4)
            # [engine] a CPU preset's data (not the handout's), its settings, the flags typed:
            pretrain_dataset, tconf = stages.training(args, 'pretrain', pretrain_dataset,  # [engine]
                                                       tconf, device, writer,
                                                       questions=dataset.NameDataset,
                                                       smaller=smaller)
            trainer_obj = trainer.Trainer(model, pretrain_dataset, None, tconf)
            trainer_obj.train()
            records.save_params(args, trainer_obj.run)  # [engine] whole or not at all, its record
            #[2021-22 2022-23 2024-25] torch.save(model.state_dict(), args.writing_params_path)
            ### END YOUR CODE ###
        elif args.function == 'finetune':
            assert args.writing_params_path is not None
            assert args.finetune_corpus_path is not None
            # TODO [part c] [part f]:
            # - Given:
            #     1. A finetuning corpus specified in args.finetune_corpus_path
            #     2. A path args.reading_params_path containing pretrained model
            #         parameters, or None if finetuning without a pretrained model
            #     3. An output path args.writing_params_path for the model parameters
            # - Goals:
            #     1. If args.reading_params_path is specified, load these parameters
            #         into the model
            #     2. Finetune the model on this corpus
            #     3. Save the resulting model in args.writing_params_path
            # - Make sure to use the following hyperparameters:
            # [2022-23 2024-25]     [part d] Hyperparameters for finetuning WITHOUT a pretrained model:
            # [2021-22]     Hyperparameters for finetuning WITHOUT a pretrained model:
            #         max_epochs=75
            #         batch_size=256
            # [2021-22]         learning_rate=6e-4
            # [2022-23 2024-25]         learning_rate=args.finetune_lr
            #         lr_decay=True
            #         warmup_tokens=512*20
            #         final_tokens=200*len(pretrain_dataset)*block_size
            #         num_workers=4
            # [2022-23 2024-25]         writer=writer
            # [2022-23 2024-25]     [part f] Hyperparameters for finetuning WITH a pretrained model:
            # [2021-22]     Hyperparameters for finetuning WITH a pretrained model:
            #         max_epochs=10
            #         batch_size=256
            # [2021-22]         learning_rate=6e-4
            # [2022-23 2024-25]         learning_rate=args.finetune_lr
            #         lr_decay=True
            #         warmup_tokens=512*20
            #         final_tokens=200*len(pretrain_dataset)*block_size
            #         num_workers=4
            # [2022-23 2024-25]         writer=writer
            # [2022-23 2024-25]     You can use the args.reading_params_path flag to switch between the
            # [2022-23 2024-25]     number of epochs for each case.

            ### YOUR CODE HERE ###
            if args.reading_params_path is not None:
                params.load_params(model, args.reading_params_path, stages.describe_model(args),  # [engine]
                                   device)
                #[2021-22 2022-23 2024-25] model.load_state_dict(torch.load(args.reading_params_path))
                max_epochs = 10
            else:
                max_epochs = 75
            tconf = trainer.TrainerConfig(max_epochs=max_epochs, batch_size=256,  # [2022-23 2024-25]
                                          learning_rate=args.finetune_lr, lr_decay=True,
                                          warmup_tokens=512*20,
                                          final_tokens=200*len(pretrain_dataset)*block_size,
                                          num_workers=4, writer=writer)
            #[2021-22] tconf = trainer.TrainerConfig(max_epochs=max_epochs, batch_size=256,
            #[2021-22]                               learning_rate=6e-4, lr_decay=True,
            #[2021-22]                               warmup_tokens=512*20,
            #[2021-22]                               final_tokens=200*len(pretrain_dataset)*block_size,
            #[2021-22]                               num_workers=4)
            finetune_dataset = dataset.NameDataset(pretrain_dataset,
                                                   open(args.finetune_corpus_path, encoding='utf-8').read())
            # [engine] a CPU preset's data (not the handout's), its settings, the flags typed:
            finetune_dataset, tconf = stages.training(args, 'finetune', finetune_dataset,  # [engine]
                                                       tconf, device, writer, pretrain_dataset)
            trainer_obj = trainer.Trainer(model, finetune_dataset, None, tconf)
            trainer_obj.train()
            records.save_params(args, trainer_obj.run)  # [engine] whole or not at all, its record
            #[2021-22 2022-23 2024-25] torch.save(model.state_dict(), args.writing_params_path)
            ### END YOUR CODE ###
        elif args.function == 'evaluate':
            assert args.outputs_path is not None
            assert args.reading_params_path is not None
            assert args.eval_corpus_path is not None
            params.load_params(model, args.reading_params_path, stages.describe_model(args),  # [engine]
                               device)
            #[2021-22 2022-23 2024-25] model.load_state_dict(torch.load(args.reading_params_path))
            correct = 0
            total = 0
            if not args.plain:  # [engine] the same answers, decoded many at a time, written whole
                records.evaluate(model, args, pretrain_dataset, device)  # [engine]
            else:  # [starter]
                #[2021-22] with open(args.outputs_path, 'w') as fout:
                with open(args.outputs_path, 'w', encoding='utf-8') as fout:  # [2022-23 2024-25]
                    predictions = []
                    #[2021-22] for line in tqdm(open(args.eval_corpus_path)):
                    for line in tqdm(open(args.eval_corpus_path, encoding='utf-8')):  # [2022-23 2024-25]
                        x = line.split('\t')[0]
                        x = x + '⁇'
                        x = torch.tensor([pretrain_dataset.stoi[s] for s in x],
                                         dtype=torch.long)[None, ...].to(device)
                        pred = utils.sample(model, x, 32, sample=False)[0]
                        completion = ''.join([pretrain_dataset.itos[int(i)] for i in pred])
                        pred = completion.split('⁇')[1]
                        predictions.append(pred)
                        fout.write(pred + '\n')
                    total, correct = utils.evaluate_places(args.eval_corpus_path, predictions)
                if total > 0:
                    print(f'Correct: {correct} out of {total}: {correct/total*100}%')  # [2024-25]
                    #[2021-22 2022-23] print('Correct: {} out of {}: {}%'.format(correct, total, correct/total*100))
                else:
                    print(f'Predictions written to {args.outputs_path}; no targets provided')  # [2024-25]
                    #[2021-22 2022-23] print('Predictions written to {}; no targets provided'.format(args.outputs_path))
    except records.STOPS as e:  # [engine] bad input, a loss not finite, an interrupt: one line
        sys.exit(records.report(e))
    finally:  # [engine] the steps logged so far reach the events file; the outputs let go
        records.finish(args)  # [engine]


if __name__ == '__main__':  # [engine]
    main()
