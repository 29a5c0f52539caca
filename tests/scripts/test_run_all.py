"""scripts/run_all.py: stage planning (the handout's commands and file names), skipping finished
stages, and the report built from predictions files and tensorboard logs."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from support import REPO

from engine import common  # noqa: E402
import dataset  # noqa: E402
import run_all  # noqa: E402

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)


def test_commands_are_the_handouts():
    steps = dict(run_all.commands('perceiver'))
    assert steps['pretrain'][:3] == ['pretrain', 'perceiver', 'wiki.txt']
    assert steps['pretrain'][3:7] == ['--bottleneck_dim', '64', '--pretrain_lr', '6e-4']
    assert run_all.output_of(steps['pretrain']) == 'perceiver.pretrain.params'
    assert run_all.output_of(steps['finetune']) == 'perceiver.finetune.params'
    assert steps['finetune'][steps['finetune'].index('--reading_params_path') + 1] == 'perceiver.pretrain.params'
    assert run_all.output_of(steps['evaluate-dev']) == 'perceiver.pretrain.dev.predictions'
    assert run_all.output_of(steps['evaluate-test']) == 'perceiver.pretrain.test.predictions'
    scratch = dict(run_all.commands('vanilla-nopretrain'))
    assert set(scratch) == {'finetune', 'evaluate-dev', 'evaluate-test'}
    assert '--reading_params_path' not in scratch['finetune']
    assert run_all.output_of(scratch['finetune']) == 'vanilla.model.params'
    assert run_all.output_of(scratch['evaluate-test']) == 'vanilla.nopretrain.test.predictions'
    # the 2024-25 edition's commands (scripts/run_rope.sh there), verbatim
    rope = dict(run_all.commands('rope'))
    assert rope['pretrain'][:3] == ['pretrain', 'rope', 'wiki.txt']
    assert run_all.output_of(rope['pretrain']) == 'rope.pretrain.params'
    assert run_all.output_of(rope['finetune']) == 'rope.finetune.params'
    assert run_all.output_of(rope['evaluate-dev']) == 'rope.pretrain.dev.predictions'
    assert run_all.output_of(rope['evaluate-test']) == 'rope.pretrain.test.predictions'
    assert '--bottleneck_dim' not in rope['pretrain']


@pytest.fixture
def finished_run(tmp_path):
    """An output folder as a finished run leaves it: predictions files and tensorboard logs."""
    from torch.utils.tensorboard import SummaryWriter
    gold = [line.rstrip('\n').split('\t')[1]
            for line in open(os.path.join(REPO, 'data', 'birth_dev.tsv'), encoding='utf-8')]
    preds = [g if i < 60 else 'Nowhere' for i, g in enumerate(gold)]  # 60/500 right = 12%
    (tmp_path / 'vanilla.pretrain.dev.predictions').write_text('\n'.join(preds) + '\n')
    for function in ('pretrain', 'finetune'):
        w = SummaryWriter(str(tmp_path / 'expt' / function / 'vanilla_vanilla_32_pt_lr_0.006000_ft_lr_0.000600'))
        for step in range(50):
            w.add_scalar('train/loss', 3.0 - step / 50, step)
        w.close()
    # what run.py records beside its params: 5 epochs of 10 steps
    (tmp_path / 'vanilla.pretrain.params.run.json').write_text('{"steps": 50, "epochs_trained": 5}')
    return tmp_path


def test_the_loss_curves_of_a_run_are_in_epochs_with_the_accuracies(finished_run, monkeypatch):
    import figures
    drawn = []
    draw = figures.loss_curves
    monkeypatch.setattr(figures, 'loss_curves', lambda *a: drawn.append(draw(*a)))
    run_all.report(str(finished_run), {}, [], 'cpu-20min', models=['vanilla'])
    fig, = drawn
    assert fig.get_suptitle() == ('Training loss (cpu-20min preset); dev accuracy: vanilla 12.0%; '
                                  'London baseline 5.0%')
    pre, fine = fig.axes
    assert pre.get_xlabel() == 'epoch' and pre.get_lines()[0].get_xdata()[-1] == 5.0
    assert fine.get_xlabel() == 'step'  # no finetune params' record: its epochs are not known
    assert [len(ax.get_lines()) for ax in fig.axes] == [1, 1]


def test_the_report_gives_each_pretraining_s_pace_and_flop_utilisation(finished_run):
    from engine.command import inputs
    from test_benchmark import handout_training_flops
    record = dict(variant='vanilla', preset='handout', n_layer=4, bottleneck_dim=None,
                  precision='fp32', steps=50, epochs_trained=5, tokens=50 * 128 * 127, seconds=2.0)
    (finished_run / 'vanilla.pretrain.params.run.json').write_text(json.dumps(record))
    pace = run_all.pretraining_pace(str(finished_run), 'vanilla', 'GPU: NVIDIA H100 80GB HBM3, torch x')
    assert pace['tokens_per_second'] == 50 * 128 * 127 / 2.0
    wiki = inputs.read_corpus(os.path.join(REPO, 'data', 'wiki.txt'), dataset.CharCorruptionDataset)
    # the FLOPs of the positions that can change the loss: about half of every position's
    lengths = run_all.wiki_needed_lengths()
    needed = sum(handout_training_flops(n, vocab=wiki.vocab_size) for n in lengths) / len(lengths)
    assert 0.4 < needed / handout_training_flops(127, vocab=wiki.vocab_size) < 0.55
    tflops = 50 * 128 * needed / 2.0 / 1e12
    assert pace['mfu'] == f'{tflops:,.1f} TFLOP/s, {tflops / 66.9:.1%}'  # the H100 SXM's fp32 peak
    assert run_all.pretraining_pace(str(finished_run), 'vanilla', 'CPU: x86_64')['mfu'] == '—'
    assert run_all.pretraining_pace(str(finished_run), 'vanilla-nopretrain', 'GPU: H100') is None
    run_all.report(str(finished_run), {}, [], 'handout', models=['vanilla'])
    row = [l for l in (finished_run / 'report.md').read_text().splitlines() if l.startswith('| vanilla |')]
    assert row[0].endswith(f"| {50 * 128 * 127 / 2.0:,.0f}, — |")  # this machine: no known peak
    # a record that splits the command's time: the utilisation of its training alone too
    record['phases'] = dict(imports=0.4, setup=0.3, training=1.25, after=0.05)
    (finished_run / 'vanilla.pretrain.params.run.json').write_text(json.dumps(record))
    pace = run_all.pretraining_pace(str(finished_run), 'vanilla', 'GPU: NVIDIA H100 80GB HBM3, torch x')
    assert pace['mfu'] == f'{tflops:,.1f} TFLOP/s, {tflops / 66.9:.1%}'
    tflops = 50 * 128 * needed / 1.25 / 1e12
    assert pace['training_mfu'] == f'{tflops:,.1f} TFLOP/s, {tflops / 66.9:.1%}'
    run_all.report(str(finished_run), {}, [], 'handout', models=['vanilla'])
    row = [l for l in (finished_run / 'report.md').read_text().splitlines() if l.startswith('| vanilla |')]
    assert row[0].endswith(f"| {50 * 128 * 127 / 2.0:,.0f}, —; training: — |")


def test_a_folder_of_main_sh_s_commands_reports_their_times_and_its_command(finished_run):
    """main.sh runs run.py itself (no timings.json) and asks for the report of its folder: the
    step times and the epochs its budget chose (where it cut those asked for) come from run.py's
    records, the command named is main.sh's; a record that is not run.py's says nothing."""
    records = {'vanilla.pretrain.params': dict(seconds=1069.4, time_budget_minutes=18.57,
                                               epochs_asked=650, epochs_trained=47, steps=2914),
               'vanilla.finetune.params': dict(seconds=27.0, time_budget_minutes=1, epochs_asked=1,
                                               epochs_trained=1),
               'vanilla.pretrain.dev.predictions': dict(seconds=2.9)}
    for name, record in records.items():
        (finished_run / f'{name}.run.json').write_text(json.dumps(record))
    (finished_run / 'vanilla.pretrain.test.predictions.run.json').write_text('[1, 2]')
    run_all.report(str(finished_run), {}, [], 'cpu-20min', models=['vanilla'],
                   command='bash scripts/main.sh')
    md = (finished_run / 'report.md').read_text()
    row = next(line for line in md.splitlines() if line.startswith('| vanilla |'))
    assert '| pretrain 1069, pretrain epochs 47, finetune 27, evaluate-dev 3 |' in row, row
    assert '- command: `bash scripts/main.sh`' in md
    # run_all's own times, where it ran the steps, come first
    run_all.report(str(finished_run), {'vanilla': {'pretrain': 5.0}}, [], 'cpu-20min', models=['vanilla'])
    row = next(line for line in (finished_run / 'report.md').read_text().splitlines()
               if line.startswith('| vanilla |'))
    assert '| pretrain 5 |' in row and 'finetune' not in row


def test_a_run_named_by_hand_is_drawn_as_its_model(finished_run):
    # main.sh's commands leave the handout's default name, 'run', on the tensorboard folder
    for function in ('pretrain', 'finetune'):
        folder = finished_run / 'expt' / function
        (folder / 'vanilla_vanilla_32_pt_lr_0.006000_ft_lr_0.000600').rename(
            folder / 'run_vanilla_32_pt_lr_0.006000_ft_lr_0.000600')
    curves = run_all.read_losses(str(finished_run))
    assert sorted(curves) == ['vanilla/finetune', 'vanilla/pretrain']
    assert run_all.steps_per_epoch(str(finished_run), curves) == {'vanilla/pretrain': 10.0}


def test_report_from_outputs(finished_run):
    subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'run_all.py'), '--report-only',
                    '--out', str(finished_run)], check=True, capture_output=True)
    report = json.loads((finished_run / 'report.json').read_text())
    dev = {m['model']: m['dev'] for m in report['models']}
    assert dev['london'] == {'correct': 25.0, 'total': 500.0, 'percent': 5.0}
    assert dev['vanilla'] == {'correct': 60.0, 'total': 500.0, 'percent': 12.0}
    assert dev['synthesizer'] is None  # not run: no predictions file
    md = (finished_run / 'report.md').read_text()
    assert '| vanilla | 12.0% (60/500) | 20.2% |' in md
    assert report['command'] == f'python scripts/run_all.py --preset handout --out {finished_run}'
    assert f'- command: `python scripts/run_all.py --preset handout --out {finished_run}`' in md
    png = (finished_run / 'loss_curves.png').read_bytes()
    assert png[:8] == b'\x89PNG\r\n\x1a\n'
    # the perceiver's pretraining rate has two readings: the report says which one ran
    assert report['readings'] == {'perceiver': run_all.READINGS['perceiver']}
    argv = dict(run_all.commands('perceiver'))['pretrain']
    assert argv[argv.index('--pretrain_lr') + 1] == '6e-4'
    assert '- perceiver: pretraining rate 6e-4, as the 2022-23 handout text types' in md
    assert 'run_perceiver.sh' in md


def test_the_perceiver_s_other_rate_is_a_model_of_its_own():
    # the starter script's 6e-3 runs only when named, into files that keep the handout's apart
    assert 'perceiver-starter' in run_all.MODELS and 'perceiver-starter' not in run_all.DEFAULT_MODELS
    argv = dict(run_all.commands('perceiver-starter'))['pretrain']
    assert argv[:2] == ['pretrain', 'perceiver'] and argv[argv.index('--pretrain_lr') + 1] == '6e-3'
    assert argv[argv.index('--writing_params_path') + 1] == 'perceiver-starter.pretrain.params'
    handout, starter = run_all.files_of('perceiver'), run_all.files_of('perceiver-starter')
    assert not set(handout.values()) & set(starter.values())
    assert '6e-3' in run_all.READINGS['perceiver-starter']
    # gpu_check.sh checks --models against its own list: the same names
    with open(os.path.join(REPO, 'scripts', 'gpu_check.sh'), encoding='utf-8') as f:
        listed = [line for line in f if line.startswith('known_models=')][0]
    assert listed.split('"')[1].split() == list(run_all.MODELS)


def test_finished_stages_are_skipped(tmp_path):
    # every output of the London-free plan exists: nothing may run (run.py would fail: no params)
    for name in run_all.MODELS:
        for _, argv in run_all.commands(name):
            (tmp_path / run_all.output_of(argv)).write_text('x\n')
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'run_all.py'),
                           '--out', str(tmp_path), '--models', 'vanilla', 'perceiver'],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count('skip ') == 2  # each model whole: its predictions are there
    assert 'skip perceiver: its dev and test predictions exist' in proc.stdout
    assert '+ python src/run.py' not in proc.stdout


def test_the_report_names_the_command_that_ran(finished_run):
    subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'run_all.py'), '--report-only',
                    '--preset', 'cpu-45min', '--models', 'vanilla', '--out', str(finished_run),
                    '--', '--seed', '3'], check=True, capture_output=True)
    report = json.loads((finished_run / 'report.json').read_text())
    assert report['command'] == ('python scripts/run_all.py --preset cpu-45min --models vanilla '
                                 f'--out {finished_run} -- --seed 3')
    assert report['seed'] == 3
    # the models asked for, as main.sh asks it of its folder for the loss curves' picture
    assert [m['model'] for m in report['models']] == ['london', 'vanilla']
    assert (finished_run / 'loss_curves.png').read_bytes()[:4] == b'\x89PNG'


def test_an_unknown_preset_is_one_error_line(tmp_path):
    out = tmp_path / 'out'
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'run_all.py'),
                           '--preset', 'cpu-5min', '--out', str(out)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count('\n') == 1 and proc.stderr.startswith('error: argument --preset')
    assert "'cpu-45min'" in proc.stderr  # the presets there are
    assert not out.exists()


def test_missing_data_is_one_error_line(tmp_path):
    # a checkout without data/ (setup not run): the London baseline, run first, names the file
    repo = tmp_path / 'repo'
    shutil.copytree(os.path.join(REPO, 'src'), repo / 'src', ignore=shutil.ignore_patterns('__pycache__'))
    shutil.copytree(os.path.join(REPO, 'scripts'), repo / 'scripts', ignore=shutil.ignore_patterns('__pycache__'))
    proc = subprocess.run([sys.executable, str(repo / 'scripts' / 'run_all.py'), '--out', str(tmp_path / 'out')],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode != 0
    assert proc.stderr.count('\n') == 1, proc.stderr
    assert proc.stderr.startswith('error: eval corpus: file not found') and 'birth_dev.tsv' in proc.stderr
    assert not (tmp_path / 'out' / 'timings.json').exists()


def test_a_whole_run_budget_is_shared_among_the_training_steps():
    """--time_budget: pretraining gets 8 parts of what is left after the evaluations' reserve,
    finetuning 1; a step's share grows when the steps before it took less than theirs."""
    after_pretrain = ['finetune', 'evaluate-dev', 'evaluate-test']
    reserve = 10 + 20 + 20
    assert run_all.stage_budget(3000, 'pretrain', after_pretrain) == \
        pytest.approx((3000 - reserve) * 8 / 9 / 60)
    assert run_all.stage_budget(600, 'finetune', ['evaluate-dev', 'evaluate-test']) == \
        pytest.approx((600 - 40) / 60)
    # two models: the first pretraining shares with both finetunings and the second pretraining
    two = after_pretrain + ['pretrain'] + after_pretrain
    assert run_all.stage_budget(6000, 'pretrain', two) == pytest.approx(
        (6000 - 2 * reserve - 10) * 8 / 18 / 60)


def test_a_whole_run_budget_must_be_positive(tmp_path):
    for bad, flag in ((['--time_budget', '0'], '--time_budget'),
                      (['--', '--time_budget', '5'], '--time_budget'),
                      (['--one_process'], '--one_process')):  # (one model at a time: no team)
        proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'run_all.py'),
                               '--out', str(tmp_path / 'out'), *bad], capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.count('\n') == 1, proc.stderr
        assert flag in proc.stderr
        assert not (tmp_path / 'out').exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason='this machine has a GPU')
def test_one_process_on_a_gpu_that_is_not_there_is_one_line(tmp_path):
    """The team's device is checked once, before any step (not a traceback, not one error per
    step): --device cuda on a machine without one."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'run_all.py'),
                           '--out', str(tmp_path / 'runs' / 'out'), '--side_by_side', '2',
                           '--one_process', '--', '--device', 'cuda'], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and proc.stderr.count('\n') == 1, proc.stderr
    assert '--one_process' in proc.stderr and 'no CUDA device' in proc.stderr
    # nothing run, not even the London baseline, and no folder left that the run made
    assert os.listdir(tmp_path) == []


def test_the_epochs_a_budget_chose_are_read_from_run_py():
    planned = 'time budget 38 min: 55 epochs of 46 steps (0.900 s per step measured, 41.4 s per epoch) -> about 38.0 min\n'
    assert run_all.epochs_trained('data has 10 characters\n' + planned) == 55
    assert run_all.epochs_trained(planned + '\ntime budget: stopping after epoch 50 of 55 (...)\n') == 50
    replanned = '\ntime budget: the first epoch took 43.1 s: 51 epochs instead of 55 -> about 36.6 min\n'
    assert run_all.epochs_trained(planned + replanned) == 51
    assert run_all.epochs_trained(planned + replanned + 'time budget: stopping after epoch 49 of 51') == 49
    assert run_all.epochs_trained('number of parameters: 3323392\n') is None
    # plans made again after later epochs: the last one printed is what ran
    later = ('\ntime budget: after epoch 1 (43.1 s per epoch): 51 epochs instead of 55 -> about 37.2 min in all\n'
             '\ntime budget: after epoch 9 (44.0 s per epoch): 50 epochs instead of 51 -> about 37.6 min in all\n')
    assert run_all.epochs_trained(planned + later) == 50
    assert run_all.epochs_trained(planned + later + 'time budget: stopping after epoch 48 of 50') == 48
    # a budget that holds what follows says so in its plan (main.sh's pretraining)
    followed = planned.replace('38 min:', "38 min (1.2 epochs' time of it kept for what follows):")
    assert followed != planned and run_all.epochs_trained(followed) == 55


@pytest.mark.parametrize('script,argv,words', [
    ('run_all.py', ['--out', 'afile', '--report-only'], '--out'),
    ('run_all.py', ['--time_budget', 'inf'], 'a week'),
    ('run_all.py', ['--time_budget', 'nan'], 'not nan'),
    ('budget_curve.py', ['--budgets', '20', '--out', 'afile'], '--out'),
    ('budget_curve.py', ['--budgets', '20', '1e308'], 'a week'),
])
def test_bad_whole_run_flags_are_one_error_line_before_any_work(tmp_path, script, argv, words):
    (tmp_path / 'afile').write_text('keep me')
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', script), *argv],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith('error: '), proc.stderr
    assert words in lines[0]
    assert sorted(os.listdir(tmp_path)) == ['afile'] and (tmp_path / 'afile').read_text() == 'keep me'


FAKE_STEP = '''
import pathlib, signal, sys, time
def stop(*_):
    pathlib.Path('checkpoint').write_text('written')  # what run.py does on SIGTERM
    sys.exit(130)
signal.signal(signal.SIGTERM, stop)
pathlib.Path('started').write_text('')
time.sleep(120)
'''
DRIVER = '''
import sys
import time
sys.path.insert(0, {scripts!r})
import run_all
run_all.RUN = sys.argv[1]
with run_all.Signals() as signals:
    run_all.run_step(['pretrain'], sys.argv[2], sys.argv[3], [], signals)
'''


def test_a_sigterm_to_run_all_alone_lets_the_step_checkpoint_then_stops(tmp_path):
    """`kill PID` of run_all (not its group): the training step it runs gets the SIGTERM too,
    writes its checkpoint, and run_all stops with 130 saying the same command continues. (Before:
    run_all died at once and its step trained on, orphaned, without a checkpoint.)"""
    fake = tmp_path / 'fake_run.py'
    fake.write_text(FAKE_STEP)
    proc = subprocess.Popen(
        [sys.executable, '-c', DRIVER.format(scripts=os.path.join(REPO, 'scripts')), str(fake),
         str(tmp_path), str(tmp_path / 'run.log')],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (tmp_path / 'started').exists() and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert (tmp_path / 'checkpoint').read_text() == 'written'
    assert 'interrupted: the same command continues' in err


def test_a_model_whose_predictions_exist_is_skipped_whole(tmp_path):
    """Predictions brought back from a GPU machine and carried to a fresh one: no params there,
    yet nothing of the model runs again."""
    for split in ('dev', 'test'):
        (tmp_path / run_all.files_of('vanilla')[split]).write_text('London\n')
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'run_all.py'),
                           '--out', str(tmp_path), '--models', 'vanilla'],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert 'skip vanilla: its dev and test predictions exist' in proc.stdout
    assert '+ python src/run.py' not in proc.stdout
    assert not (tmp_path / 'vanilla.pretrain.params').exists()


# run.py stood in for: the first pretraining is stopped (its checkpoint written, exit 130 as
# run.py after a SIGTERM); run again with --resume it finishes; every other step writes its output
FAKE_RUN = '''
import pathlib, sys, time
argv = sys.argv[1:]
flag = '--writing_params_path' if '--writing_params_path' in argv else '--outputs_path'
out = pathlib.Path(argv[argv.index(flag) + 1])
if argv[0] == 'pretrain' and '--resume' not in argv:
    pathlib.Path(str(out) + '.ckpt').write_text('ckpt')
    time.sleep(0.3)
    sys.exit(130)
time.sleep(0.2)
out.write_text('London\\n')
'''
TIMED_DRIVER = '''
import sys
sys.path.insert(0, {scripts!r})
import run_all
run_all.RUN = {fake!r}
sys.argv = ['run_all.py', '--out', {out!r}, '--models', 'vanilla']
run_all.main()
'''


def test_a_step_continued_by_a_later_call_is_timed_over_both(tmp_path):
    fake = tmp_path / 'fake_run.py'
    fake.write_text(FAKE_RUN)
    out = tmp_path / 'out'
    driver = TIMED_DRIVER.format(scripts=os.path.join(REPO, 'scripts'), fake=str(fake), out=str(out))
    first = subprocess.run([sys.executable, '-c', driver], capture_output=True, text=True)
    assert first.returncode == 130, first.stderr
    timings = json.loads((out / 'timings.json').read_text())
    assert 'evaluate-dev' in timings['london']  # kept though the first step was interrupted
    so_far = timings['vanilla']['pretrain so far']
    assert so_far >= 0.3
    wall_so_far = timings['wall_seconds so far']
    assert wall_so_far >= so_far and timings['calls so far'] == 1
    second = subprocess.run([sys.executable, '-c', driver], capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert '--resume' in second.stdout
    timings = json.loads((out / 'timings.json').read_text())
    assert 'pretrain so far' not in timings['vanilla']
    assert timings['vanilla']['pretrain'] >= so_far + 0.2  # both calls' seconds
    # the command's wall time is both calls' too (it was the last call's alone)
    assert 'wall_seconds so far' not in timings and timings['calls'] == 2
    assert timings['wall_seconds'] >= wall_so_far + 0.2
    report = json.loads((out / 'report.json').read_text())
    assert report['calls'] == 2 and report['wall_seconds'] == timings['wall_seconds']
    assert 'over 2 calls' in (out / 'report.md').read_text()
    # a model with a step left runs that step only
    (out / 'vanilla.pretrain.test.predictions').unlink()
    third = subprocess.run([sys.executable, '-c', driver], capture_output=True, text=True)
    assert third.returncode == 0, third.stderr
    assert [line.split(':')[0] for line in third.stdout.splitlines() if line.startswith('skip')] \
        == ['skip vanilla pretrain', 'skip vanilla finetune', 'skip vanilla evaluate-dev']
    assert third.stdout.count('+ python src/run.py evaluate') == 1


def test_a_truncated_timings_file_is_one_warning_not_a_traceback(finished_run):
    (finished_run / 'timings.json').write_text('{"london": {"evaluate-de')
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'run_all.py'),
                           '--report-only', '--models', 'vanilla', '--out', str(finished_run)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count('\n') == 1 and 'timings.json: unreadable' in proc.stderr
    assert (finished_run / 'report.md').exists()


def test_the_commit_passed_in_names_a_copied_tree(tmp_path, monkeypatch):
    copy = tmp_path / 'copy'
    shutil.copytree(os.path.join(REPO, 'scripts'), copy / 'scripts')
    monkeypatch.setenv('GIT_CEILING_DIRECTORIES', str(tmp_path))  # no repository above it
    monkeypatch.delenv(common.COMMIT_ENV, raising=False)
    assert common.source_commit(str(copy)) == 'unknown'
    assert common.source_commit() != 'unknown'  # this checkout has its commit
    monkeypatch.setenv(common.COMMIT_ENV, 'abc1234')
    assert common.source_commit(str(copy)) == 'abc1234'
    # the name passed in wins over a .git: the GPU machines' copies carry the session's first one
    assert common.source_commit() == 'abc1234'


def test_models_side_by_side_print_whole_lines(capsys, monkeypatch):
    """Models run side by side print from threads: each line is one model's, whole (a print
    writes its text and its newline apart, and threads switching between them shared lines)."""
    import threading
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can
    try:
        lock = threading.Lock()
        says = {name: run_all.labelled(name, lock) for name in 'abcd'}
        threads = [threading.Thread(target=lambda say=say: [say(f'+ python {i}\nline {i}')
                                                            for i in range(1500)])
                   for say in says.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 * 1500 * 2
    bad = [line for line in lines if line.count('[') != 1 or not line.startswith('[')]
    assert not bad, bad[:3]


def test_models_side_by_side_give_what_each_gives_alone(tmp_path, monkeypatch):
    """--side_by_side 2: two models' steps run at once (each model's steps in their order, a
    process each; with --one_process, threads of run_all's process taking turns at each training
    step), and every output is what the models give one after another: the same predictions
    byte for byte, the same params (a tiny corpus and question files in the output folder, one
    epoch; the same threads in all, as the CPU sums in their order). The report says how they
    ran, beside the command's wall time."""
    from tiny_run import CORPUS, DEV, TRAIN, tsv
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    models = ['vanilla-nopretrain', 'rope']
    outs = {}
    for way, flags in (('alone', ['--side_by_side', '1']), ('processes', ['--side_by_side', '2']),
                       ('threads', ['--side_by_side', '2', '--one_process'])):
        out = tmp_path / way
        out.mkdir()
        (out / 'wiki.txt').write_text(CORPUS, encoding='utf-8')
        (out / 'birth_places_train.tsv').write_text(tsv(TRAIN), encoding='utf-8')
        (out / 'birth_dev.tsv').write_text(tsv(DEV), encoding='utf-8')
        (out / 'birth_test_inputs.tsv').write_text(tsv(DEV[:4]), encoding='utf-8')
        proc = subprocess.run(
            [sys.executable, os.path.join(REPO, 'scripts', 'run_all.py'), '--out', str(out),
             '--models', *models, *flags, '--', '--max_epochs', '1',
             '--batch_size', '8', '--device', 'cpu'],
            capture_output=True, text=True, encoding='utf-8', timeout=600,
            env=dict(os.environ, PYTHONIOENCODING='utf-8'))
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs[way] = out, proc.stdout
    alone = outs['alone'][0]
    outputs = [f for name in models for f in run_all.files_of(name).values()]
    for way in ('processes', 'threads'):
        together, stdout = outs[way]
        for name in outputs:
            if name.endswith('.predictions'):
                assert (together / name).read_bytes() == (alone / name).read_bytes(), (way, name)
            else:
                a, b = (torch.load(d / name, weights_only=True) for d in (alone, together))
                assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), (way, name)
        # both models' first steps started before either's output came back
        lines = stdout.splitlines()
        started = [i for i, line in enumerate(lines) if '] + python src/run.py' in line]
        answered = [i for i, line in enumerate(lines) if line.startswith('[') and '+ python' not in line]
        assert {lines[i].split(']')[0] for i in started[:2]} == {'[vanilla-nopretrain', '[rope'}
        assert max(started[:2]) < min(answered)
        # in threads as in processes, each step's own printed lines, under its model's name
        assert any(line.startswith('[rope] Correct: ') for line in lines), way
    for way, (out, _) in outs.items():
        info = json.loads((out / 'report.json').read_text(encoding='utf-8'))
        assert info['side_by_side'] == (1 if way == 'alone' else 2) and info['wall_seconds'] > 0
        assert info['one_process'] == (way == 'threads')
        report = (out / 'report.md').read_text(encoding='utf-8')
        assert ('side by side' in report) == (way != 'alone')
        assert ('threads of one process' in report) == (way == 'threads')
        assert ('--one_process' in info['command']) == (way == 'threads')


# run.py stood in for, for a run cut by SIGTERM: every step writes its output at once (500 dev
# lines of London), except pretraining, which waits for the signal, then checkpoints and exits 130
FAKE_CUT_RUN = '''
import pathlib, signal, sys, time
argv = sys.argv[1:]
flag = '--writing_params_path' if '--writing_params_path' in argv else '--outputs_path'
out = pathlib.Path(argv[argv.index(flag) + 1])
if argv[0] == 'pretrain':
    def stop(*_):
        pathlib.Path(str(out) + '.ckpt').write_text('ckpt')
        sys.exit(130)
    signal.signal(signal.SIGTERM, stop)
    pathlib.Path('pretraining').write_text('')
    time.sleep(120)
out.write_text('London\\n' * 500)
'''


def test_a_run_cut_by_sigterm_reports_what_finished_and_says_it_was_cut(tmp_path):
    """A GPU loan's time limit ends run_all with a SIGTERM: report.md is there all the same, says
    the run was cut, and gives the model that finished (its accuracy and stage times) and the
    seconds the stopped step had so far. A model's report is also written as it finishes."""
    fake = tmp_path / 'fake_run.py'
    fake.write_text(FAKE_CUT_RUN)
    out = tmp_path / 'out'
    driver = TIMED_DRIVER.format(scripts=os.path.join(REPO, 'scripts'), fake=str(fake),
                                 out=str(out)).replace("'vanilla']", "'vanilla-nopretrain', 'vanilla']")
    proc = subprocess.Popen([sys.executable, '-c', driver], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / 'pretraining').exists() and time.time() < deadline:
        time.sleep(0.05)
    finished = (out / 'report.md').read_text()  # written when vanilla-nopretrain finished
    assert '| vanilla-nopretrain | 5.0% (25/500) |' in finished and '**cut**' not in finished
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    text = (out / 'report.md').read_text()
    assert '- **cut**: the command was stopped (Ctrl-C or SIGTERM) after ' in text
    rows = {line.split(' | ')[0]: line for line in text.splitlines() if line.startswith('| ')}
    assert 'finetune ' in rows['| vanilla-nopretrain'] and '5.0% (25/500)' in rows['| vanilla-nopretrain']
    assert 'pretrain so far ' in rows['| vanilla'] and '| - |' in rows['| vanilla']
    assert json.loads((out / 'report.json').read_text())['cut'] is True
    assert (out / 'vanilla.pretrain.params.ckpt').exists()
