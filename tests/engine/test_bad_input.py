"""The command line on bad input (the issue "never a traceback, never a truncated file"):

- bad input of every kind gives one `error: ...` line naming the file or flag, exit status 2,
  no traceback, and leaves an existing --writing_params_path / --outputs_path byte-identical;
- malformed but answerable evaluation input (unknown characters, blank and CRLF lines, a last
  line without newline, a pipe) still gives one prediction per input line;
- params and predictions are written atomically and load with weights_only + map_location.

Error cases run in-process through run.main (fast). Inputs: tiny_run.py.
"""
import json
import os
import pickle
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch

from engine import common
from engine.command import inputs, params
import dataset
import model
import run

from support import RUN
from tiny_run import FAST, ENV, CORPUS, VOCAB, TRAIN, DEV, OLD_PARAMS, OLD_PREDICTIONS, tsv, corpus_gpt


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    """A folder with good and bad inputs and params files (random weights: the errors and the
    shape of the outputs do not depend on training)."""
    d = tmp_path_factory.mktemp('reliability')
    w = lambda name, text: (d / name).write_text(text, encoding='utf-8', newline='')
    w('corpus.txt', CORPUS)
    w('empty.txt', '')
    w('blank.txt', '\n  \n\n')
    lines = CORPUS.split('\n')
    w('mask.txt', '\n'.join(lines[:2] + [lines[2] + dataset.MASK_CHAR] + lines[3:]))
    w('pad.txt', '\n'.join(lines[:4] + [dataset.PAD_CHAR + lines[4]] + lines[5:]))
    (d / 'latin1.txt').write_bytes(CORPUS.encode('utf-8') + 'Zoë'.encode('latin-1'))
    (d / 'adir').mkdir()
    w('train.tsv', tsv(TRAIN))
    w('train_notab.tsv', tsv(TRAIN[:1]) + 'Where was Ben Carter born? Paris\n' + tsv(TRAIN[2:]))
    w('train_tabs.tsv', tsv(TRAIN[:2]) + 'Where was Cleo\tDunn born?\tBerlin\n' + tsv(TRAIN[3:]))
    w('dev.tsv', tsv(DEV))
    w('dev_mixed.tsv', tsv(DEV[:2]) + 'Where was Dan Evans born?\n' + tsv(DEV[3:]))
    w('dev_tabs.tsv', tsv(DEV[:1]) + 'Where was\tRex Stone born?\tCairo\n' + tsv(DEV[2:]))
    w('dev_unknown.tsv', tsv(DEV[:2]) + 'Where was Zoé Abel born?\tGeneva\n'
      + 'Where was Zo Abel born?\tGeneva\n' + tsv(DEV[2:]))
    w('dev_no_place.tsv', 'Where was Ada Brook born?\t\n' + tsv(DEV))
    w('dev_no_question.tsv', '\tLondon\n' + tsv(DEV))
    w('dev_mask.tsv', tsv(DEV[:3]) + f'Where was Ada {dataset.MASK_CHAR} Brook born?\tLondon\n')
    os.symlink('corpus.txt', d / 'corpus_link.txt')
    (d / 'adir' / 'ck.params.ckpt').mkdir()  # a folder where the checkpoint of ck.params goes
    gpt = corpus_gpt()
    torch.save(gpt.state_dict(), d / 'vanilla.params')
    torch.save(corpus_gpt(perceiver=True, bottleneck_dim=64).state_dict(), d / 'perceiver64.params')
    data = (d / 'vanilla.params').read_bytes()
    (d / 'truncated.params').write_bytes(data[:len(data) // 2])
    (d / 'text.params').write_text('Where was Ada Brook born?\tLondon\n')
    (d / 'empty.params').write_bytes(b'')
    (d / 'note.params').write_text('hi\n')
    w('empty.txt.bak', 'notes kept beside the corpus\n')
    torch.save(gpt, d / 'module.params')  # a pickled module: code, which weights_only refuses
    torch.save({'model': gpt.state_dict(), 'optimizer': {}, 'epoch': 1, 'it': 0},
               d / 'resume.params.ckpt')
    other = model.GPT(model.GPTConfig(VOCAB + 3, 128, n_layer=4, n_head=8, n_embd=256))
    torch.save({'model': other.state_dict(), 'optimizer': {}, 'epoch': 1, 'it': 0},
               d / 'adir' / 'vocab.params.ckpt')  # a checkpoint of a run on another corpus
    return d


@pytest.fixture
def cli(ws, monkeypatch, capsys):
    """run.main(argv) in-process in `ws`: (exit status, stdout, stderr). Any exception other than
    SystemExit escapes and fails the test, as a traceback would."""
    monkeypatch.chdir(ws)
    monkeypatch.delenv('WORLD_SIZE', raising=False)
    (ws / 'old.params').write_bytes(OLD_PARAMS)
    (ws / 'old.predictions').write_bytes(OLD_PREDICTIONS)

    def call(*argv):
        capsys.readouterr()
        try:
            run.main([str(a) for a in argv])
            code = 0
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        return code, out, err
    return call


def assert_one_error(result, ws, *words):
    """Exit status != 0, stderr ends in exactly one `error:` line holding `words`, no traceback,
    the old outputs untouched and no temporary files left beside them."""
    code, out, err = result
    assert code not in (0, None), (code, out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith('error: '), err
    assert sum(line.startswith('error') for line in lines) == 1, err
    assert 'Traceback' not in err and 'Traceback' not in out
    for word in words:
        assert word in lines[-1], (word, lines[-1])
    assert (ws / 'old.params').read_bytes() == OLD_PARAMS
    assert (ws / 'old.predictions').read_bytes() == OLD_PREDICTIONS
    assert not [p for p in os.listdir(ws) if p.startswith(('.tmp-', '.write-test-'))
                or (p.endswith('.ckpt') and p != 'resume.params.ckpt')]
    return lines[-1]


PT = ['--writing_params_path', 'old.params'] + FAST
FT = ['--writing_params_path', 'old.params'] + FAST
EV = ['--outputs_path', 'old.predictions'] + FAST

BAD_INPUT = {
    # pretraining corpus
    'corpus-missing': (['pretrain', 'vanilla', 'nothere.txt'] + PT, ['nothere.txt', 'not found']),
    'corpus-directory': (['pretrain', 'vanilla', 'adir'] + PT, ['adir', 'directory']),
    'corpus-empty': (['pretrain', 'vanilla', 'empty.txt'] + PT, ['empty.txt', 'empty']),
    'corpus-blank': (['pretrain', 'vanilla', 'blank.txt'] + PT, ['blank.txt', 'empty']),
    'corpus-mask-char': (['pretrain', 'vanilla', 'mask.txt'] + PT,
                         ['mask.txt', 'line 3', 'MASK_CHAR', 'U+2047']),
    'corpus-pad-char': (['pretrain', 'vanilla', 'pad.txt'] + PT,
                        ['pad.txt', 'line 5', 'PAD_CHAR', 'U+25A1']),
    'corpus-not-utf8': (['pretrain', 'vanilla', 'latin1.txt'] + PT, ['latin1.txt', 'UTF-8']),
    # finetuning TSV
    'finetune-missing': (['finetune', 'vanilla', 'corpus.txt', '--finetune_corpus_path', 'no.tsv']
                         + FT, ['--finetune_corpus_path', 'no.tsv', 'not found']),
    'finetune-directory': (['finetune', 'vanilla', 'corpus.txt', '--finetune_corpus_path', 'adir']
                           + FT, ['--finetune_corpus_path', 'adir', 'directory']),
    'finetune-no-tab': (['finetune', 'vanilla', 'corpus.txt', '--finetune_corpus_path',
                         'train_notab.tsv'] + FT, ['train_notab.tsv', 'line 2', '0 tabs']),
    'finetune-extra-tabs': (['finetune', 'vanilla', 'corpus.txt', '--finetune_corpus_path',
                             'train_tabs.tsv'] + FT, ['train_tabs.tsv', 'line 3', '2 tabs']),
    'finetune-empty': (['finetune', 'vanilla', 'corpus.txt', '--finetune_corpus_path',
                        'blank.txt'] + FT, ['blank.txt', 'no examples']),
    'finetune-not-utf8': (['finetune', 'vanilla', 'corpus.txt', '--finetune_corpus_path',
                           'latin1.txt'] + FT, ['--finetune_corpus_path', 'latin1.txt', 'UTF-8', 'at byte']),
    # evaluation TSV
    'eval-missing': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path', 'vanilla.params',
                      '--eval_corpus_path', 'no.tsv'] + EV, ['--eval_corpus_path', 'no.tsv', 'not found']),
    'eval-directory': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                        'vanilla.params', '--eval_corpus_path', 'adir'] + EV,
                       ['--eval_corpus_path', 'adir', 'directory']),
    'eval-no-tab-among-gold': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                                'vanilla.params', '--eval_corpus_path', 'dev_mixed.tsv'] + EV,
                               ['dev_mixed.tsv', 'line 3', 'no tab']),
    'eval-extra-tabs': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                         'vanilla.params', '--eval_corpus_path', 'dev_tabs.tsv'] + EV,
                        ['dev_tabs.tsv', 'line 2', '2 tabs']),
    'eval-empty': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path', 'vanilla.params',
                    '--eval_corpus_path', 'empty.txt'] + EV, ['empty.txt', 'empty']),
    'eval-not-utf8': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path', 'vanilla.params',
                       '--eval_corpus_path', 'latin1.txt'] + EV, ['--eval_corpus_path', 'latin1.txt', 'UTF-8']),
    'eval-unknown-char-strict': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                                  'vanilla.params', '--eval_corpus_path', 'dev_unknown.tsv',
                                  '--strict'] + EV, ['dev_unknown.tsv', 'line 3', "'é'", 'vocabulary']),
    # the handout's own loop (--plain) stops at a character outside the vocabulary: refused first
    'plain-eval-unknown-char': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                                 'vanilla.params', '--eval_corpus_path', 'dev_unknown.tsv',
                                 '--plain'] + EV, ['dev_unknown.tsv', 'line 3', "'é'", 'vocabulary']),
    'eval-question-with-mask': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                                 'vanilla.params', '--eval_corpus_path', 'dev_mask.tsv'] + EV,
                                ['dev_mask.tsv', 'line 4', 'mask character']),
    # params files
    'params-missing': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path', 'no.params',
                        '--eval_corpus_path', 'dev.tsv'] + EV,
                       ['--reading_params_path', 'no.params', 'not found']),
    'params-directory': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path', 'adir',
                          '--eval_corpus_path', 'dev.tsv'] + EV,
                         ['--reading_params_path', 'adir', 'directory']),
    'params-not-torch': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path', 'text.params',
                          '--eval_corpus_path', 'dev.tsv'] + EV,
                         ['text.params', 'not a readable params file (not a torch.save file of tensors)']),
    # (a text starting 'h' reads as a pickle opcode: torch's own error was a bare KeyError)
    'params-note': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path', 'note.params',
                     '--eval_corpus_path', 'dev.tsv'] + EV,
                    ['note.params', 'not a readable params file (not a torch.save file of tensors)']),
    'params-empty': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path', 'empty.params',
                      '--eval_corpus_path', 'dev.tsv'] + EV,
                     ['empty.params', 'not a readable params file (empty)']),
    'params-truncated': (['finetune', 'vanilla', 'corpus.txt', '--reading_params_path',
                          'truncated.params', '--finetune_corpus_path', 'train.tsv'] + FT,
                         ['truncated.params', 'not a readable params file']),
    'params-pickled-module': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                               'module.params', '--eval_corpus_path', 'dev.tsv'] + EV,
                              ['module.params', 'holds Python objects, not only tensors']),
    'params-resume-checkpoint': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                                  'resume.params.ckpt', '--eval_corpus_path', 'dev.tsv'] + EV,
                                 ['resume.params.ckpt', '--resume checkpoint']),
    'params-other-variant': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                              'perceiver64.params', '--eval_corpus_path', 'dev.tsv'] + EV,
                             ['params are a perceiver model with bottleneck_dim 64',
                              'you asked for a vanilla model']),
    'params-other-bottleneck': (['finetune', 'perceiver', 'corpus.txt', '--reading_params_path',
                                 'perceiver64.params', '--finetune_corpus_path', 'train.tsv'] + FT,
                                ['params are a perceiver model with bottleneck_dim 64',
                                 'you asked for a perceiver model with bottleneck_dim 32']),
    'params-vanilla-for-synthesizer': (['evaluate', 'synthesizer', 'corpus.txt',
                                        '--reading_params_path', 'vanilla.params',
                                        '--eval_corpus_path', 'dev.tsv'] + EV,
                                       ['params are a vanilla model', 'synthesizer']),
    # output paths
    'outputs-dir-missing': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                             'vanilla.params', '--eval_corpus_path', 'dev.tsv', '--outputs_path',
                             'nodir/x.predictions'] + FAST, ['--outputs_path', 'nodir', 'does not exist']),
    'outputs-is-directory': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                              'vanilla.params', '--eval_corpus_path', 'dev.tsv', '--outputs_path',
                              'adir'] + FAST, ['--outputs_path', 'adir', 'is a directory']),
    'params-dir-missing': (['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path',
                            'nodir/x.params'] + FAST, ['--writing_params_path', 'nodir', 'does not exist']),
    'params-under-a-file': (['finetune', 'vanilla', 'corpus.txt', '--finetune_corpus_path',
                             'train.tsv', '--writing_params_path', 'corpus.txt/x.params'] + FAST,
                            ['--writing_params_path', 'corpus.txt', 'not a directory']),
    # an output that is an input, or cannot be a file (nothing is trained, nothing is clobbered)
    'params-onto-the-corpus': (['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path',
                                'corpus.txt'] + FAST,
                               ['--writing_params_path corpus.txt', 'same file as pretrain_corpus_path']),
    'params-onto-the-corpus-by-a-link': (['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path',
                                          'corpus_link.txt'] + FAST, ['corpus_link.txt', 'same file']),
    'params-onto-the-corpus-spelled-otherwise': (['pretrain', 'vanilla', 'corpus.txt',
                                                  '--writing_params_path', './adir/../corpus.txt']
                                                 + FAST, ['same file as pretrain_corpus_path']),
    'params-onto-the-finetune-tsv': (['finetune', 'vanilla', 'corpus.txt', '--finetune_corpus_path',
                                      'train.tsv', '--writing_params_path', 'train.tsv'] + FAST,
                                     ['same file as --finetune_corpus_path']),
    'predictions-onto-the-questions': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                                        'vanilla.params', '--eval_corpus_path', 'dev.tsv',
                                        '--outputs_path', 'dev.tsv'] + FAST,
                                       ['--outputs_path dev.tsv', 'same file as --eval_corpus_path']),
    'predictions-onto-the-params': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                                     'vanilla.params', '--eval_corpus_path', 'dev.tsv',
                                     '--outputs_path', 'vanilla.params'] + FAST,
                                    ['same file as --reading_params_path']),
    # an output whose mistyped path names a file of another kind, which the command does not read
    'params-onto-a-question-file': (['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path',
                                     'dev.tsv'] + FAST,
                                    ['--writing_params_path dev.tsv', 'exists and is not a params file']),
    'params-onto-a-text-file': (['finetune', 'vanilla', 'corpus.txt', '--finetune_corpus_path',
                                 'train.tsv', '--writing_params_path', 'empty.txt.bak'] + FAST,
                                ['empty.txt.bak', 'not a params file']),
    'predictions-onto-other-params': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                                       'vanilla.params', '--eval_corpus_path', 'dev.tsv',
                                       '--outputs_path', 'perceiver64.params'] + FAST,
                                      ['--outputs_path perceiver64.params', 'is a params file']),
    'predictions-onto-the-training-questions': (['evaluate', 'vanilla', 'corpus.txt',
                                                 '--reading_params_path', 'vanilla.params',
                                                 '--eval_corpus_path', 'dev.tsv',
                                                 '--outputs_path', 'train.tsv'] + FAST,
                                                ['train.tsv', 'tab-separated questions']),
    'predictions-onto-a-device': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                                   'vanilla.params', '--eval_corpus_path', 'dev.tsv',
                                   '--outputs_path', '/dev/null'] + FAST,
                                  ['/dev/null', 'not a regular file']),
    # names longer than the file system holds (before: trained to the end, then a traceback)
    'params-name-too-long': (['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path',
                              'p' * 250 + '.params'] + FAST,
                             ['--writing_params_path', 'bytes long', 'file system allows']),
    'record-name-too-long': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                              'vanilla.params', '--eval_corpus_path', 'dev.tsv', '--outputs_path',
                              'p' * 245 + '.pred'] + FAST,
                             ['the run record of --outputs_path', 'bytes long']),
    'log-folder-name-too-long': (['pretrain', 'vanilla', 'corpus.txt', '--tb_expt_name', 't' * 300]
                                 + PT, ['tensorboard log folder', 'bytes long', '--tb_expt_name']),
    'params-empty-path': (['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path', '']
                          + FAST, ['--writing_params_path', 'empty path']),
    'params-ending-in-a-slash': (['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path',
                                  'newdir/'] + FAST, ['newdir/', 'folder, not a file']),
    'checkpoint-is-a-directory': (['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path',
                                   'adir/ck.params'] + FAST,
                                  ['checkpoint of --writing_params_path', 'ck.params.ckpt', 'directory']),
    # numbers: what they mean, not only their type
    'pretrain-lr-inf': (['pretrain', 'vanilla', 'corpus.txt', '--pretrain_lr', 'inf'] + PT,
                        ['--pretrain_lr', 'positive', 'inf']),
    'pretrain-lr-nan': (['pretrain', 'vanilla', 'corpus.txt', '--pretrain_lr', 'nan'] + PT,
                        ['--pretrain_lr', 'nan']),
    'pretrain-lr-negative': (['pretrain', 'vanilla', 'corpus.txt', '--pretrain_lr', '-1'] + PT,
                             ['--pretrain_lr', 'not -1']),
    'finetune-lr-nan': (['finetune', 'vanilla', 'corpus.txt', '--finetune_corpus_path', 'train.tsv',
                         '--finetune_lr', 'nan'] + FT, ['--finetune_lr', 'nan']),
    'finetune-lr-zero': (['finetune', 'vanilla', 'corpus.txt', '--finetune_corpus_path', 'train.tsv',
                          '--finetune_lr', '0'] + FT, ['--finetune_lr', 'not 0']),
    'time-budget-inf': (['pretrain', 'vanilla', 'corpus.txt', '--time_budget', 'inf'] + PT,
                        ['--time_budget', 'a week', 'not inf']),
    'time-budget-huge': (['pretrain', 'vanilla', 'corpus.txt', '--time_budget', '1e308'] + PT,
                         ['--time_budget', 'a week', '1e+308']),
    'dropout-nan': (['pretrain', 'vanilla', 'corpus.txt', '--dropout', 'nan'] + PT,
                    ['--dropout', 'not nan']),
    'seed-overflow': (['pretrain', 'vanilla', 'corpus.txt', '--seed', str(2 ** 70)] + PT,
                      ['--seed', str(2 ** 70)]),
    # gold files: judged line by line
    'eval-first-line-without-place': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                                       'vanilla.params', '--eval_corpus_path', 'dev_no_place.tsv']
                                      + EV, ['dev_no_place.tsv', 'line 1', 'empty place']),
    'eval-first-line-without-question': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                                          'vanilla.params', '--eval_corpus_path', 'dev_no_question.tsv']
                                         + EV, ['dev_no_question.tsv', 'line 1', 'empty question']),
    # flags
    'bottleneck-zero': (['pretrain', 'perceiver', 'corpus.txt', '--bottleneck_dim', '0'] + PT,
                        ['--bottleneck_dim', 'not 0']),
    'bottleneck-negative': (['evaluate', 'perceiver', 'corpus.txt', '--bottleneck_dim', '-4',
                             '--reading_params_path', 'perceiver64.params',
                             '--eval_corpus_path', 'dev.tsv'] + EV, ['--bottleneck_dim', 'not -4']),
    'bottleneck-over-block': (['pretrain', 'perceiver', 'corpus.txt', '--bottleneck_dim', '129']
                              + PT, ['--bottleneck_dim', '128', 'not 129']),
    'unknown-function': (['pretrian', 'vanilla', 'corpus.txt'] + PT, ["'pretrian'", 'invalid choice']),
    'unknown-variant': (['pretrain', 'vanila', 'corpus.txt'] + PT, ["'vanila'", 'invalid choice']),
    'resume-without-checkpoint': (['pretrain', 'vanilla', 'corpus.txt', '--resume'] + PT,
                                  ['--resume', 'old.params.ckpt']),
    # before: torch's two-line size mismatch
    'resume-another-vocabulary': (['pretrain', 'vanilla', 'corpus.txt', '--resume',
                                   '--writing_params_path', 'adir/vocab.params'] + FAST,
                                  ['--resume', 'vocab.params.ckpt', 'written for another model',
                                   'head.weight is']),
    'time-budget-zero': (['pretrain', 'vanilla', 'corpus.txt', '--time_budget', '0'] + PT,
                         ['--time_budget', 'positive', 'not 0']),
    'time-budget-negative': (['finetune', 'vanilla', 'corpus.txt', '--finetune_corpus_path',
                              'train.tsv', '--time_budget', '-3'] + FT, ['--time_budget', 'not -3']),
    'time-budget-evaluate': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                              'vanilla.params', '--eval_corpus_path', 'dev.tsv', '--time_budget',
                              '5'] + EV, ['--time_budget', 'pretrain and finetune']),
    # (in-process, the budget's clock started when run.py was imported: long spent)
    'time-budget-too-small': (['pretrain', 'vanilla', 'corpus.txt', '--time_budget', '0.001'] + PT,
                              ['--time_budget 0.001 min', 'too small for one epoch']),
    'time-budget-after-alone': (['pretrain', 'vanilla', 'corpus.txt', '--time_budget_after', '1']
                                + PT, ['--time_budget_after', 'needs --time_budget']),
    'time-budget-after-negative': (['pretrain', 'vanilla', 'corpus.txt', '--time_budget', '5',
                                    '--time_budget_after', '-1'] + PT,
                                   ['--time_budget_after', 'from 0 to 100', 'not -1']),
    'time-budget-after-nan': (['pretrain', 'vanilla', 'corpus.txt', '--time_budget', '5',
                               '--time_budget_after', 'nan'] + PT, ['--time_budget_after', 'not nan']),
    'tf32-on-a-cpu': (['pretrain', 'vanilla', 'corpus.txt'] + PT + ['--precision', 'tf32',
                                                                     '--device', 'cpu'],
                      ['--precision tf32', 'GPU', 'on a CPU use fp32 or bf16']),
    'tf32-evaluating-on-a-cpu': (['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                                  'vanilla.params', '--eval_corpus_path', 'dev.tsv'] + EV
                                 + ['--precision', 'tf32', '--device', 'cpu'],
                                 ['--precision tf32', 'GPU']),
    'fp16-on-a-cpu': (['pretrain', 'vanilla', 'corpus.txt'] + PT + ['--precision', 'fp16',
                                                                     '--device', 'cpu'],
                      ['--precision fp16', 'GPUs without bf16', 'a CPU', 'use fp32']),
    'graphs-on-a-cpu': (['pretrain', 'vanilla', 'corpus.txt'] + PT + ['--compile', 'graphs',
                                                                       '--device', 'cpu'],
                        ['--compile graphs', 'needs a GPU']),
    'row-groups-zero': (['pretrain', 'vanilla', 'corpus.txt', '--row_groups', '0'] + PT,
                        ['--row_groups', '1 or more', 'not 0']),
    'row-groups-with-plain': (['pretrain', 'vanilla', 'corpus.txt', '--row_groups', '4',
                               '--plain'] + PT, ['--row_groups and --plain', 'one call']),
    'edition-without-the-variant': (['pretrain', 'synthesizer', 'corpus.txt', '--edition', '2024-25']
                                    + PT, ['--edition 2024-25', 'vanilla, rope', 'synthesizer']),
}


@pytest.mark.parametrize('case', sorted(BAD_INPUT))
def test_bad_input_is_one_error_line(case, cli, ws):
    argv, words = BAD_INPUT[case]
    kept = {name: (ws / name).read_bytes() for name in
            ('dev.tsv', 'train.tsv', 'empty.txt.bak', 'perceiver64.params', 'corpus.txt')}
    code, out, err = cli(*argv)
    assert_one_error((code, out, err), ws, *words)
    # the error alone: the edition's note came first where the refusal followed the plan or the
    # resume (--time_budget, --resume)
    assert len([line for line in err.splitlines() if line.strip()]) == 1, err
    assert kept == {name: (ws / name).read_bytes() for name in kept}
    assert not (ws / 'nodir').exists()
    assert not (ws / 'expt').exists()  # not even a tensorboard folder (made at the first step)


def test_an_output_replaces_its_own_kind_only(ws, tmp_path):
    """A command run again replaces its own params or predictions (and an empty file). Params
    replace no other file; predictions (lines of text) replace no params or question file: a
    plain text file without tabs may be an earlier predictions file (BAD_INPUT: '...-onto-...')."""
    from engine.command.paths import kind_problem
    (tmp_path / 'old.predictions').write_text('London\nParis\n')
    (tmp_path / 'empty').write_bytes(b'')
    with zipfile.ZipFile(tmp_path / 'submission.zip', 'w') as z:
        z.writestr('src/run.py', 'print()\n')
    torch.save({'w': torch.zeros(2)}, tmp_path / 'legacy.params', _use_new_zipfile_serialization=False)
    may = {'params': ['vanilla.params', 'legacy.params', 'empty', 'nothing-yet'],
           'predictions': ['old.predictions', 'empty', 'nothing-yet', 'corpus.txt']}
    refused = {'params': ['dev.tsv', 'old.predictions', 'corpus.txt', 'submission.zip'],
               'predictions': ['vanilla.params', 'legacy.params', 'dev.tsv', 'train.tsv',
                               'submission.zip']}
    where = lambda name: ws / name if (ws / name).exists() else tmp_path / name
    for kind, names in may.items():
        assert [kind_problem(where(n), kind) for n in names] == [None] * len(names), kind
    for kind, names in refused.items():
        assert all(kind_problem(where(n), kind) for n in names), kind


def test_a_share_of_a_whole_run_budget_too_small_trains_one_epoch(cli, ws):
    """run_all.py's shares (--time_budget_share) are not the user's own budget: one too small
    for an epoch trains one, saying so, where the user's own is an error (BAD_INPUT)."""
    code, out, err = cli('pretrain', 'vanilla', 'corpus.txt', '--time_budget', '0.001',
                         '--time_budget_share', '--writing_params_path', 'share.params',
                         '--max_epochs', '3', *FAST)
    try:
        assert code == 0, err
        assert "warning: the time budget of 0.001 min is too small for one epoch" in out
        assert 'training one epoch' in out
        assert torch.load(ws / 'share.params', weights_only=True).keys() == \
            torch.load(ws / 'vanilla.params', weights_only=True).keys()
    finally:
        (ws / 'share.params').unlink(missing_ok=True)
        shutil.rmtree(ws / 'expt', ignore_errors=True)


def test_a_budget_that_holds_what_follows_says_so_and_records_its_epochs(cli, ws):
    """main.sh's pretraining (--time_budget_after): its plan line says what the budget keeps,
    its record holds that and each epoch's seconds (what scripts/dev/replay_budget.py replays).
    The budget is ten hours: the three epochs and the one kept fit at any machine's pace (five
    minutes refused the run beside heavy load)."""
    code, out, err = cli('pretrain', 'vanilla', 'corpus.txt', '--time_budget', '600',
                         '--time_budget_after', '1', '--writing_params_path', 'after.params',
                         '--max_epochs', '3', *FAST)
    try:
        assert code == 0, err
        assert "time budget 600 min (1 epoch' time of it kept for what follows): 3 epochs" in out, out
        record = json.loads((ws / 'after.params.run.json').read_text(encoding='utf-8'))
        assert record['time_budget_after'] == 1 and record['epochs_trained'] == 3
        assert len(record['epoch_seconds']) == 3 and all(s > 0 for s in record['epoch_seconds'])
    finally:
        for name in ('after.params', 'after.params.run.json'):
            (ws / name).unlink(missing_ok=True)
        shutil.rmtree(ws / 'expt', ignore_errors=True)


def test_unwritable_output_folder_fails_before_training(cli, ws, tmp_path):
    folder = tmp_path / 'readonly'
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):  # root ignores the mode: use a folder no one can write to
            folder = '/sys' if os.path.isdir('/sys') else pytest.skip('no unwritable folder')
        for flag, argv in (
                ('--writing_params_path', ['pretrain', 'vanilla', 'corpus.txt'] + FAST),
                ('--outputs_path', ['evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                                    'vanilla.params', '--eval_corpus_path', 'dev.tsv'] + FAST)):
            line = assert_one_error(cli(*argv, flag, os.path.join(folder, 'out.file')), ws,
                                    flag, 'not writable')
            assert str(folder) in line
        assert not (ws / 'expt').exists() or not list((ws / 'expt').glob('pretrain/*'))
    finally:
        (tmp_path / 'readonly').chmod(0o755)


def test_errors_through_the_real_command_line(ws):
    """Two of the cases above as a subprocess: what a student's shell sees."""
    for argv, words in (BAD_INPUT['unknown-variant'], BAD_INPUT['params-other-variant']):
        (ws / 'old.params').write_bytes(OLD_PARAMS)
        (ws / 'old.predictions').write_bytes(OLD_PREDICTIONS)
        proc = subprocess.run([sys.executable, RUN] + argv, cwd=ws, env=ENV, capture_output=True,
                              text=True, encoding='utf-8', timeout=120)
        assert proc.returncode == 2
        assert_one_error((proc.returncode, proc.stdout, proc.stderr), ws, *words)


def test_a_pickle_that_is_no_params_file_is_one_line_on_stderr(ws, tmp_path):
    """A dict pickled with protocol 4: torch warned about the protocol in two lines before the
    error line; the whole of stderr is now the error."""
    with open(ws / 'pickled.params', 'wb') as f:
        pickle.dump({'a': 1}, f, protocol=4)
    proc = subprocess.run([sys.executable, RUN, 'evaluate', 'vanilla', 'corpus.txt',
                           '--reading_params_path', 'pickled.params', '--eval_corpus_path',
                           'dev.tsv', '--outputs_path', str(tmp_path / 'out.predictions')] + FAST,
                          cwd=ws, env=ENV, capture_output=True, text=True, encoding='utf-8',
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        'error: --reading_params_path pickled.params: not a readable params file (not a torch.save '
        'file of tensors)'], proc.stderr


# ---- evaluation input that is malformed but answerable ---------------------------------------

def test_unknown_characters_are_dropped_with_a_warning(cli, ws):
    code, out, err = cli('evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                         'vanilla.params', '--eval_corpus_path', 'dev_unknown.tsv',
                         '--outputs_path', 'unknown.predictions', *FAST)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith('warning:')]
    assert len(warnings) == 1 and 'dev_unknown.tsv line 3' in warnings[0] and "'é'" in warnings[0]
    preds = (ws / 'unknown.predictions').read_text(encoding='utf-8').split('\n')
    assert len(preds) == len(DEV) + 2 + 1 and preds[-1] == ''
    # line 3 was answered as if the é were not there: as line 4, which is that question
    assert preds[2] == preds[3]
    assert f'out of {float(len(DEV) + 2)}' in out


def test_blank_crlf_and_unterminated_eval_lines(cli, ws):
    """One prediction per input line (blank lines get an empty one and are not counted); a CRLF
    line is answered as its LF twin; the last line needs no newline."""
    rows = DEV[:4]
    text = (tsv(rows[:2]) + '\n' + tsv(rows[:2], end='\r\n') + '\r\n'
            + f'Where was {rows[2][0]} born?\t{rows[2][1]}')  # no newline at the end
    (ws / 'messy.tsv').write_text(text, encoding='utf-8', newline='')
    code, out, err = cli('evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                         'vanilla.params', '--eval_corpus_path', 'messy.tsv',
                         '--outputs_path', 'messy.predictions', *FAST)
    assert code == 0, err
    preds = (ws / 'messy.predictions').read_text(encoding='utf-8').split('\n')
    assert preds[-1] == '' and len(preds) - 1 == 7
    assert preds[2] == '' and preds[5] == ''
    assert preds[0:2] == preds[3:5]
    assert 'Correct: ' in out and 'out of 5.0' in out

    # the same for an input file without gold places (the test set)
    text = 'Where was Ada Brook born?\n\r\nWhere was Ada Brook born?\r\n\nWhere was Ada Brook born?'
    (ws / 'messy_inputs.tsv').write_text(text, encoding='utf-8', newline='')
    code, out, err = cli('evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                         'vanilla.params', '--eval_corpus_path', 'messy_inputs.tsv',
                         '--outputs_path', 'messy_inputs.predictions', *FAST)
    assert code == 0, err
    assert 'Predictions written to messy_inputs.predictions; no targets provided' in out
    preds = (ws / 'messy_inputs.predictions').read_text(encoding='utf-8').split('\n')
    assert len(preds) - 1 == 5 and preds[1] == preds[3] == '' and preds[0] == preds[2]


def test_evaluate_places_on_messy_files(tmp_path):
    """The engine's reading of a questions file, as the commands score: the handout's signature and
    return values; blank lines are skipped, not a crash (utils.evaluate_places, the handout's, is
    the starter's as it is)."""
    path = tmp_path / 'gold.tsv'
    path.write_text('Q1\tParis\r\n\nQ2\tRome\r\n   \nQ3\tLima', encoding='utf-8', newline='')
    assert inputs.evaluate_places(str(path), ['Paris', '', 'Rome', '', 'Oslo']) == (3.0, 2.0)
    path.write_text('Q1\tParis\nQ2\tRome\n', encoding='utf-8')
    assert inputs.evaluate_places(str(path), ['Paris', 'Oslo']) == (2.0, 1.0)
    path.write_text('\nQ1\nQ2\n', encoding='utf-8')
    assert inputs.evaluate_places(str(path), ['', 'a', 'b']) == (0, 0)
    path.write_text('', encoding='utf-8')
    assert inputs.evaluate_places(str(path), []) == (0, 0)
    # each line is gold or not by itself: a first line with an empty name or place does not
    # make the whole file "no gold" (the handout's x.strip() took its tab away)
    path.write_text('\tParis\nQ2\tRome\n', encoding='utf-8')
    assert inputs.evaluate_places(str(path), ['Paris', 'Rome']) == (2.0, 2.0)
    path.write_text('Q1\t\nQ2\tRome\n', encoding='utf-8')
    assert inputs.evaluate_places(str(path), ['x', 'Rome']) == (2.0, 1.0)


def test_a_tensorboard_folder_that_cannot_be_made_fails_before_training(tmp_path, monkeypatch, capsys):
    """Training writes tensorboard logs under expt/ of the working folder: an `expt` that is a
    file there is one error line before any work, the old params untouched."""
    for name in ('corpus.txt',):
        (tmp_path / name).write_text(CORPUS, encoding='utf-8')
    (tmp_path / 'expt').write_text('not a folder')
    (tmp_path / 'old.params').write_bytes(OLD_PARAMS)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        run.main(['pretrain', 'vanilla', 'corpus.txt', '--writing_params_path', 'old.params', *FAST])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith('error: the tensorboard log folder expt/pretrain/') and 'expt' in err[0]
    assert (tmp_path / 'old.params').read_bytes() == OLD_PARAMS


def test_a_loss_that_becomes_nan_stops_the_run_and_writes_nothing(cli, ws):
    """A learning rate of 1e30 (finite, so the flags pass) sends the loss to nan within steps:
    the run stops with one error line saying when, and the params file is as it was."""
    try:
        line = assert_one_error(cli('pretrain', 'vanilla', 'corpus.txt', '--pretrain_lr', '1e30',
                                    '--max_epochs', '3', *PT), ws,
                                'training loss became', 'nothing was written')
        assert 'nan' in line or 'inf' in line
    finally:
        shutil.rmtree(ws / 'expt', ignore_errors=True)


def test_messy_finetune_tsv_gives_the_clean_examples(ws):
    """Blank lines, CRLF ends and a last line without newline change nothing: the examples (and
    so, with the same seed, the training) are the clean file's."""
    pre = dataset.CharCorruptionDataset(CORPUS, 128)
    clean = dataset.NameDataset(pre, tsv(TRAIN))
    messy = dataset.NameDataset(pre, '\n' + tsv(TRAIN[:5], end='\r\n') + '\n\n'
                                + tsv(TRAIN[5:]).rstrip('\n'))
    assert messy.data == clean.data and len(messy) == len(TRAIN)
    for i in range(len(clean)):
        assert all(torch.equal(a, b) for a, b in zip(messy[i], clean[i]))
    # a bad line is reported with its line number in the file, blank lines counted
    with pytest.raises(common.UsageError, match='line 4'):
        dataset.NameDataset(pre, '\n\n' + tsv(TRAIN[:1]) + 'no tab here\n')


# ---- atomic writes, weights_only, map_location -----------------------------------------------

def half_writes(folder):
    """The temporary files a write whole-or-nothing (or its folder check) would leave."""
    return [p for p in os.listdir(folder) if p.startswith('.tmp-') or p.startswith('.write-test-')]


def test_failed_params_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / 'model.params'
    path.write_bytes(OLD_PARAMS)
    real_save = torch.save

    def save_then_fail(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)
        with open(f, 'r+b') as fh:  # what a full disk or a kill midway leaves: half a file
            fh.truncate(os.path.getsize(f) // 2)
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(torch, 'save', save_then_fail)
    with pytest.raises(common.WriteFailed, match='No space left on device'):
        common.save_state_dict(corpus_gpt(), str(path))
    assert path.read_bytes() == OLD_PARAMS
    assert half_writes(tmp_path) == []


def test_interrupted_predictions_write_leaves_the_old_file(tmp_path):
    path = tmp_path / 'dev.predictions'
    path.write_bytes(OLD_PREDICTIONS)

    def write_half(tmp):
        with open(tmp, 'w') as f:
            f.write('Paris\nRo')
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        common.atomic_write(str(path), write_half)
    assert path.read_bytes() == OLD_PREDICTIONS
    assert half_writes(tmp_path) == []
    common.atomic_write(str(path), lambda tmp: open(tmp, 'w').write('Paris\nRome\n'))
    assert path.read_text() == 'Paris\nRome\n' and half_writes(tmp_path) == []


def test_atomic_params_are_the_bytes_torch_save_writes(tmp_path):
    gpt = corpus_gpt()
    torch.save(gpt.state_dict(), tmp_path / 'direct.params')
    (tmp_path / 'atomic').mkdir()
    common.save_state_dict(gpt, str(tmp_path / 'atomic' / 'direct.params'))
    assert (tmp_path / 'atomic' / 'direct.params').read_bytes() == \
        (tmp_path / 'direct.params').read_bytes()


def test_gpu_params_evaluate_on_cpu(cli, ws, monkeypatch):
    """A params file whose tensors are recorded as CUDA tensors (as one trained on a GPU is)
    evaluates on this CPU: load_params passes map_location and weights_only."""
    state = torch.load(ws / 'vanilla.params', weights_only=True)
    with monkeypatch.context() as m:
        m.setattr(torch.serialization, 'location_tag', lambda storage: 'cuda:0')
        torch.save(state, ws / 'gpu.params')
    if not torch.cuda.is_available():  # the file really is a "GPU" file
        with pytest.raises(RuntimeError, match='CUDA'):
            torch.load(ws / 'gpu.params', weights_only=True)
    calls = []
    real_load = torch.load
    monkeypatch.setattr(torch, 'load', lambda *a, **k: calls.append(k) or real_load(*a, **k))
    code, out, err = cli('evaluate', 'vanilla', 'corpus.txt', '--reading_params_path',
                         'gpu.params', '--eval_corpus_path', 'dev.tsv',
                         '--outputs_path', 'gpu.predictions', *FAST)
    assert code == 0, err
    assert calls == [dict(map_location='cpu', weights_only=True)]
    assert (ws / 'gpu.predictions').read_text().count('\n') == len(DEV)
    assert 'Correct: ' in out


def test_evaluation_reads_its_file_once_so_a_pipe_is_scored(ws, tmp_path):
    """`--eval_corpus_path <(cat dev.tsv)`: a pipe can be read once. Before, the questions were
    read, then the file again for the gold places: the second read found nothing, and the
    command said "no targets provided"."""
    proc = subprocess.run(['bash', '-c', f'"{sys.executable}" "{RUN}" evaluate vanilla corpus.txt '
                           '--reading_params_path vanilla.params --eval_corpus_path <(cat dev.tsv) '
                           f'--outputs_path "{tmp_path}/pipe.predictions" ' + ' '.join(FAST)],
                          cwd=ws, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f'out of {float(len(DEV))}' in proc.stdout, proc.stdout
    assert len((tmp_path / 'pipe.predictions').read_text().splitlines()) == len(DEV)


def test_malformed_params_are_one_problem_each_never_a_crash(tmp_path):
    """Params files crafted against the grader (torch.load reads them all with weights_only):
    a key that is no name, a sparse tensor, tensors with no data (the meta device), a
    perceiver's C that is not 3-D. Each is one
    ParamsProblem or a mismatch in words; before, a TypeError, a RuntimeError from
    load_state_dict and an IndexError ended the grading of the submission as 'grader error'."""
    from engine.command import params
    gpt = model.GPT(model.GPTConfig(10, 16, n_layer=2, n_head=2, n_embd=16, perceiver=True,
                                    bottleneck_dim=8))
    state = gpt.state_dict()
    cases = {'key': {**state, 7: torch.zeros(1)},
             'sparse': {**state, 'head.weight': state['head.weight'].to_sparse()},
             # the right keys and shapes on the meta device: load_state_dict's "Cannot copy
             # out of meta tensor" was a grader error
             'meta': {k: torch.empty(v.shape, dtype=v.dtype, device='meta') for k, v in state.items()}}
    said = {'key': "key 7 is not a parameter's name",
            'sparse': 'holds head.weight as a sparse_coo tensor',
            'meta': 'not a params file: its tensors hold no data'}
    for name, bad in cases.items():
        torch.save(bad, tmp_path / f'{name}.params')
        with pytest.raises(params.ParamsProblem) as e:
            params.read_state(str(tmp_path / f'{name}.params'))
        assert said[name] in str(e.value)
    flat = {**state, 'down_block.C': state['down_block.C'].reshape(-1)}
    torch.save(flat, tmp_path / 'flat.params')
    problem = params.params_mismatch(gpt, params.read_state(str(tmp_path / 'flat.params')),
                                     'a perceiver model')
    assert 'down_block.C is 1-D, not 3-D' in problem


def test_an_output_another_live_run_is_writing_is_refused_unless_replace(cli, ws):
    """Two runs writing the same params at once: each write was atomic, but the last one won
    without a word. A live run's claim on its output (a lock beside it) makes a second run
    refuse before any work, naming the other process; --replace writes it all the same; the
    claim goes with the run that held it (a later run, here in the same process, takes it)."""
    holder = subprocess.Popen([sys.executable, '-c', f'''import sys, time
sys.path.insert(0, {os.path.join(os.path.dirname(RUN), '')!r})
from engine.command import paths
paths.Claim('old.params').take()
print('held', flush=True)
time.sleep(60)'''], cwd=ws, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == 'held'
        argv = ['pretrain', 'vanilla', 'corpus.txt'] + PT + ['--max_epochs', '1']
        line = assert_one_error(cli(*argv), ws, '--writing_params_path old.params',
                                f'process {holder.pid}', '--replace')
        assert 'another run' in line
        code, _, err = cli(*argv, '--replace')
        assert code == 0, err
    finally:
        holder.kill()
        holder.wait()
    (ws / 'old.params').write_bytes(OLD_PARAMS)
    code, _, err = cli(*argv)  # the holder is gone: its lock with it
    assert code == 0, err
    code, _, err = cli(*argv)  # and this process's own claim ended with its run
    assert code == 0, err
    assert not [p for p in os.listdir(ws) if p.endswith('.lock')]


def test_params_whose_zip_metadata_reads_as_no_zip_kind_are_one_problem(tmp_path, monkeypatch):
    """Malformed metadata in a params file's zip raised, in the grader, kinds of errors that
    BadZipFile does not cover (a grader error): any error while reading the zip's records is
    "not a readable params file"."""
    import zipfile
    path = tmp_path / 'odd.params'
    path.write_bytes(b'PK\x03\x04 whatever')

    class Odd:
        def __init__(self, *a, **k):
            raise NotImplementedError('compression type 99')
    monkeypatch.setattr(zipfile, 'ZipFile', Odd)
    assert params.unpacked_size_problem(str(path), 1 << 20) == \
        'not a readable params file (a damaged or truncated zip)'


def test_a_corpus_and_questions_given_through_pipes_are_read_once(ws, tmp_path):
    """`pretrain vanilla <(cat corpus.txt)`: the check read the pipe, then the handout's
    open(...).read() found it empty and trained on nothing (exit 0). Each input is now read once
    and handed on: pretraining and finetuning through pipes train on what came, and an empty
    pipe is refused like an empty file."""
    def through_pipes(*words):
        return subprocess.run(['bash', '-c', f'"{sys.executable}" "{RUN}" ' + ' '.join(words)],
                              cwd=ws, env=ENV, capture_output=True, text=True, timeout=300)
    params = tmp_path / 'pipe.params'
    proc = through_pipes('pretrain vanilla <(cat corpus.txt)',
                         '--writing_params_path', str(params), '--max_epochs', '1', *FAST)
    assert proc.returncode == 0, proc.stderr
    assert f'data has {len(CORPUS)} characters' in proc.stdout, proc.stdout
    assert params.is_file()
    proc = through_pipes('finetune vanilla <(cat corpus.txt) --finetune_corpus_path <(cat train.tsv)',
                         '--writing_params_path', str(tmp_path / 'ft.params'), '--max_epochs', '1',
                         *FAST)
    assert proc.returncode == 0, proc.stderr
    steps = json.loads((tmp_path / 'ft.params.run.json').read_text())['steps']
    assert steps >= 1
    proc = through_pipes('pretrain vanilla <(cat empty.txt)', '--writing_params_path',
                         str(tmp_path / 'none.params'), *FAST)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].endswith('is empty'), \
        proc.stderr
    assert '/dev/fd/' in proc.stderr and 'cs224n-input-' not in proc.stderr  # the name given
    assert not (tmp_path / 'none.params').exists()


def test_london_scores_a_file_with_crlf_blank_lines_and_no_last_newline(tmp_path):
    """The handout's utils.evaluate_places raised an IndexError on a blank line (a 13-line
    traceback); London scores such a file as run.py evaluate does."""
    (tmp_path / 'dev.tsv').write_bytes(b'Where was Ada born?\tLondon\r\n\r\nWhere was Bo born?\tParis'
                                       b'\r\n\nWhere was Cy born?\tLondon')
    proc = subprocess.run([sys.executable, os.path.join(os.path.dirname(RUN), 'london_baseline.py'),
                           'dev.tsv'], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == 'Correct: 2.0 out of 3.0: 66.66666666666666%'
    assert (tmp_path / 'london_baseline_accuracy.txt').read_text() == '66.66666666666666\n'


def test_a_disk_that_fills_while_params_are_written_is_one_line(cli, ws, monkeypatch):
    """A plain write's ENOSPC (torch's own errors on a full disk: the small-disk test below):
    after training, one error line saying it could not write the params; the old params file is
    as it was and no temporary file is left beside it."""
    import errno
    real_save = torch.save

    def full_disk(obj, f, *a, **k):
        if not str(f).endswith('old.params'):  # (the checkpoints: written, then removed)
            return real_save(obj, f, *a, **k)
        with open(f, 'wb') as out:
            out.write(b'PK\x03\x04 half')
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(torch, 'save', full_disk)
    assert_one_error(cli('pretrain', 'vanilla', 'corpus.txt', '--max_epochs', '1', *PT), ws,
                     'cannot write', 'old.params', 'nothing replaced', 'No space left on device')


# in a mount namespace of its own: a tmpfs of `size` at `folder` (the command's folder, holding
# old.params; with `piped`, also its TMPDIR, the command given `piped`'s bytes on its stdin)
SMALL_DISK = '''import json, os, subprocess, sys
folder, size, old, piped, run_py = sys.argv[1:6]
subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', folder], check=True)
with open(os.path.join(folder, 'old.params'), 'wb') as f:
    f.write(old.encode('latin-1'))
env = dict(os.environ, TMPDIR=folder) if piped else os.environ
cat = subprocess.Popen(['cat', piped], stdout=subprocess.PIPE) if piped else None
proc = subprocess.run([sys.executable, run_py, *sys.argv[6:]], cwd=folder, capture_output=True,
                      text=True, env=env, stdin=cat.stdout if piped else None)
if cat is not None:
    cat.kill()
with open(os.path.join(folder, 'old.params'), 'rb') as f:
    kept = f.read() == old.encode('latin-1')
print(json.dumps(dict(rc=proc.returncode, err=proc.stderr, files=sorted(os.listdir(folder)),
                      kept=kept)))
'''
CAN_MOUNT = os.geteuid() == 0 and shutil.which('unshare') is not None and subprocess.run(
    ['unshare', '--mount', 'true'], capture_output=True).returncode == 0


def on_a_small_disk(tmp_path, size, piped, *argv):
    """run.py `argv` on a tmpfs of `size` (SMALL_DISK): its exit status, stderr, the files it
    left there and whether old.params was kept."""
    disk = tmp_path / 'disk'
    disk.mkdir()
    proc = subprocess.run(['unshare', '--mount', sys.executable, '-c', SMALL_DISK, str(disk), size,
                           OLD_PARAMS.decode('latin-1'), piped, RUN, *argv],
                          capture_output=True, text=True, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
@pytest.mark.skipif(not CAN_MOUNT, reason='needs root and a mount namespace (a small tmpfs)')
@pytest.mark.parametrize('size', ['64k', '4m', '12m'])
def test_a_disk_too_small_for_the_params_is_one_line_in_whatever_form_torch_fails(ws, tmp_path,
                                                                                   size):
    """A real small filesystem (a tmpfs in a mount namespace of the test's own), not a stand-in:
    the tiny model's params take 13 MB, and torch's writer fails at its start, midway or near
    its end, each with its own RuntimeError ("unexpected pos" at the end matched no word the
    old check knew). Each is one error line naming the params file; the old params are kept
    and nothing else is left on the disk."""
    got = on_a_small_disk(tmp_path, size, '', 'pretrain', 'vanilla', str(ws / 'corpus.txt'),
                          '--max_epochs', '1', *PT)
    lines = [line for line in got['err'].splitlines() if line.strip()]
    assert got['rc'] == 2 and 'Traceback' not in got['err'], got['err']
    assert sum(line.startswith('error') for line in lines) == 1, got['err']
    assert lines[-1].startswith('error: cannot write ') and 'nothing replaced' in lines[-1], lines
    assert 'no space left' in lines[-1].lower(), lines[-1]
    assert got['kept'] and [f for f in got['files'] if f != 'expt'] == ['old.params'], got


@pytest.mark.slow
@pytest.mark.skipif(not CAN_MOUNT, reason='needs root and a mount namespace (a small tmpfs)')
def test_a_piped_corpus_that_the_temporary_folder_cannot_hold_is_one_line(ws, tmp_path):
    """A piped corpus is copied into TMPDIR first (the handout's lines read it more than once):
    a full TMPDIR ended in a traceback (OSError from inputs.read_once). Now one error line naming
    the input and the folder, and no half copy left there."""
    big = tmp_path / 'big.txt'
    big.write_text(CORPUS * 4000, encoding='utf-8')  # about 4 MB, through a 1 MiB folder
    got = on_a_small_disk(tmp_path, '1m', str(big), 'pretrain', 'vanilla', '/dev/stdin',
                          '--max_epochs', '1', *PT)
    lines = [line for line in got['err'].splitlines() if line.strip()]
    assert got['rc'] == 2 and 'Traceback' not in got['err'], got['err']
    assert sum(line.startswith('error') for line in lines) == 1, got['err']
    assert lines[-1].startswith('error: /dev/stdin: cannot hold') and 'TMPDIR' in lines[-1] \
        and 'No space left on device' in lines[-1], lines
    assert got['kept'] and got['files'] == ['old.params'], got
