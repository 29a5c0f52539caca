"""scripts/dev/benchmark_loop.py: its simulated device counts idle time only where work arrives
after the queue ran dry (a clock the test drives), and the stand-in loop runs the trainer's
epochs with the loader restarted or not."""
import os
import sys

from support import REPO, Clock

import benchmark_loop  # noqa: E402
from engine.fast import batches  # noqa: E402
import dataset  # noqa: E402


def test_the_device_is_idle_only_when_work_comes_after_its_queue_ran_dry():
    clock = Clock()
    device = benchmark_loop.Device(clock, clock.sleep)
    device.run(0, 2.0)  # the first step: no idle time (nothing was waited for)
    clock.now = 1.0
    device.run(1, 2.0)  # queued behind step 0: ends at 4
    device.wait(0)  # step 0's work only (a lagged read): step 1's goes on
    assert clock.now == 2.0
    clock.now = 5.5
    device.run(2, 2.0)  # 1.5 s after the queue ran dry
    device.wait()
    assert clock.now == 7.5
    assert device.idle == [(0, 0.0), (1, 0.0), (2, 1.5)]


def test_the_stand_in_loop_trains_every_step_either_way():
    data = dataset.CharCorruptionDataset('\n'.join(f'line {i} of the corpus' for i in range(300)), 64)
    for mode in benchmark_loop.MODES:
        idle, at_starts, steps = benchmark_loop.measure(data, 2, mode, 3, 0.0005, 0.0)
        assert steps == 2 * batches.steps_per_epoch(len(data), 128)  # the first epoch left out
        assert idle >= 0 and at_starts >= 0
        assert benchmark_loop.receive(data, 1, mode, count=3, pause=0.0) > 0
    assert batches.Batches.across is True and batches.Batches.as_bytes is True  # put back
    assert benchmark_loop.loop.Progress is benchmark_loop.progress.Progress


def test_the_report_gives_a_row_per_configuration_and_the_receive_costs():
    results = {(4, 'afresh'): [(0.004, 0.030, 10), (0.002, 0.050, 10)],
               (4, 'ahead, bytes'): [(0.001, 0.003, 10)]}
    received = {'ahead': [0.0018], 'ahead, bytes': [0.0008]}
    lines = benchmark_loop.table('# head', results, received, 0.002, 4).splitlines()
    assert lines[0] == '# head'
    assert '| 4 | afresh | 3.00 | 40.0 | 60% |' in lines  # medians of the two rounds
    assert '| 4 | ahead, bytes | 1.00 | 3.0 | 33% |' in lines
    assert '| as tensors | 1.80 |' in lines and '| as bytes | 0.80 |' in lines


def test_too_few_epochs_to_measure_is_one_error_line():
    """The first epoch (the workers' start-up) is left out: one epoch leaves nothing to count."""
    import subprocess
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'scripts', 'dev', 'benchmark_loop.py'),
                           '--epochs', '1'], capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith('error: --epochs 2')
