"""scripts/budget_curve.py: the table and figure of dev accuracy against time budget, from the
run folders run_all.py leaves (made here without training)."""
import json
import os
import subprocess
import sys

import pytest

from support import REPO

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)

SCRIPT = os.path.join(REPO, 'scripts', 'budget_curve.py')


def finished_budget_run(folder, right, pretrain_s, finetune_s, epochs):
    """A run_all output folder: dev predictions with `right` of 500 right, timings as a budgeted
    run records them, a pretraining loss log (3 epochs of 1.0, then a last one of 0.5), and the
    report run_all.py --report-only builds from them."""
    from torch.utils.tensorboard import SummaryWriter
    gold = [line.rstrip('\n').split('\t')[1]
            for line in open(os.path.join(REPO, 'data', 'birth_dev.tsv'), encoding='utf-8')]
    folder.mkdir(parents=True)
    (folder / 'vanilla.pretrain.dev.predictions').write_text(
        '\n'.join(g if i < right else 'Nowhere' for i, g in enumerate(gold)) + '\n')
    (folder / 'vanilla.pretrain.test.predictions').write_text('London\n' * 437)
    (folder / 'timings.json').write_text(json.dumps({
        'london': {'evaluate-dev': 6.0},
        'vanilla': {'pretrain': pretrain_s, 'pretrain epochs': epochs, 'finetune': finetune_s,
                    'finetune epochs': 2, 'evaluate-dev': 3.0, 'evaluate-test': 3.0}}))
    with open(os.path.join(REPO, 'data', 'wiki.txt'), encoding='utf-8') as f:
        steps = -(-sum(1 for _ in f) // 64)  # cpu-rehearsal pretrains at batch 64
    w = SummaryWriter(str(folder / 'expt' / 'pretrain' / 'vanilla_vanilla_32_pt_lr_0.001500_ft_lr_0.000600'))
    for step in range(4 * steps):
        w.add_scalar('train/loss', 1.0 if step < 3 * steps else 0.5, step)
    w.close()
    subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'run_all.py'), '--report-only',
                    '--preset', 'cpu-rehearsal', '--out', str(folder)], check=True, capture_output=True)


def test_the_curve_from_finished_runs(tmp_path):
    runs, out = tmp_path / 'runs', tmp_path / 'curve'
    finished_budget_run(runs / 'vanilla-10', 10, 480.0, 60.0, 11)
    finished_budget_run(runs / 'vanilla-20', 40, 1020.0, 114.0, 23)
    got = subprocess.run([sys.executable, SCRIPT, '--budgets', '20', '10', '45', '--report-only',
                          '--runs', str(runs), '--out', str(out)], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert 'no run for 45 min' in got.stdout
    md = (out / 'report.md').read_text()
    # took: pretrain + finetune + 2 evaluations + London's = 480 + 60 + 3 + 3 + 6 s = 9.2 min
    assert '| 10 | 9.2 | 11 | 8.0 | 0.500 | 2 | 1.0 | 2.0% (10/500) |' in md
    assert '| 20 | 19.1 | 23 | 17.0 | 0.500 | 2 | 1.9 | 8.0% (40/500) |' in md
    assert md.index('| 10 |') < md.index('| 20 |')
    assert (out / 'budget_curve.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    data = json.loads((out / 'budget_curve.json').read_text())
    assert [r['dev']['percent'] for r in data['runs']] == [2.0, 8.0]
    assert (out / '20min' / 'vanilla.pretrain.dev.predictions').read_text().count('\n') == 500
    assert (out / '10min' / 'vanilla.pretrain.test.predictions').exists()


@pytest.mark.parametrize('argv,words', [
    (['--budgets', '0'], ['--budgets', 'positive', 'not 0']),
    (['--budgets', '10', '--report-only'], ['no finished run', '10']),
])
def test_bad_input_is_one_error_line(tmp_path, argv, words):
    got = subprocess.run([sys.executable, SCRIPT, *argv, '--runs', str(tmp_path / 'none'),
                          '--out', str(tmp_path / 'curve')], capture_output=True, text=True)
    lines = got.stderr.strip().splitlines()
    assert got.returncode != 0 and len(lines) == 1 and all(w in lines[0] for w in words), got.stderr
    assert not (tmp_path / 'curve').exists()
