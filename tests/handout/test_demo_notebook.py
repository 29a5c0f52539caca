"""mingpt-demo/play_char.ipynb runs headless in its CPU-sized setting (MINGPT_DEMO_SMALL=1):
training lowers the loss and a sample is printed. Needs nbclient, nbformat and ipykernel
(requirements-test.txt); skipped with the reason when they are missing."""
import json
import os
import re
import sys

import pytest

pytestmark = pytest.mark.slow  # (conftest.py: `-m "not slow"` leaves this file out)

nbformat = pytest.importorskip('nbformat', reason='nbformat not installed: pip install -r requirements-test.txt')
nbclient = pytest.importorskip('nbclient', reason='nbclient not installed: pip install -r requirements-test.txt')
pytest.importorskip('ipykernel', reason='ipykernel not installed: pip install -r requirements-test.txt')

from support import REPO
DEMO = os.path.join(REPO, 'mingpt-demo')
NOTEBOOK = os.path.join(DEMO, 'play_char.ipynb')
INPUT = os.path.join(REPO, 'data', 'input.txt')
CONTEXT = 'O God, O God!'


def stdout_of(cell):
    return ''.join(o.get('text', '') for o in cell.get('outputs', [])
                   if o.get('output_type') == 'stream' and o.get('name') == 'stdout')


@pytest.fixture
def kernel_name(tmp_path, monkeypatch):
    """A kernel spec for this very interpreter, so the notebook runs with the test's packages
    whatever other 'python3' kernels the machine has."""
    name = 'a5-mingpt-demo-test'
    spec_dir = tmp_path / 'jupyter' / 'kernels' / name
    spec_dir.mkdir(parents=True)
    (spec_dir / 'kernel.json').write_text(
        '{"argv": [%s, "-m", "ipykernel_launcher", "-f", "{connection_file}"], '
        '"display_name": "a5 test", "language": "python"}' % json.dumps(sys.executable))
    monkeypatch.setenv('JUPYTER_PATH', str(tmp_path / 'jupyter'))
    monkeypatch.setenv('IPYTHONDIR', str(tmp_path / 'ipython'))  # no user startup files
    monkeypatch.setenv('MINGPT_DEMO_SMALL', '1')
    return name


@pytest.mark.skipif(not os.path.isfile(INPUT) and not os.environ.get('MINGPT_DEMO_DATA'),
                    reason='data/input.txt missing: run `python src/engine/datafiles.py`')
def test_play_char_small_run_trains_and_samples(kernel_name):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # timeout: a guard against a hung kernel, not a speed limit (a busy machine is slow)
    client = nbclient.NotebookClient(nb, timeout=1800, kernel_name=kernel_name,
                                     resources={'metadata': {'path': DEMO}})
    client.execute()
    out = '\n'.join(stdout_of(c) for c in nb.cells if c.cell_type == 'code')

    assert 'SMALL = True' in out, 'the CPU-sized cell did not switch on'
    m = re.search(r'^steps: (\d+)$', out, re.M)
    assert m, out
    steps = int(m.group(1))
    assert 50 <= steps <= 500, f'a CPU-sized run should take a few hundred steps, not {steps}'

    m = re.search(r'^train loss: first ([\d.]+) -> last ([\d.]+)$', out, re.M)
    assert m, out
    first, last = float(m.group(1)), float(m.group(2))
    assert last < first - 0.5, f'training loss did not go down enough: {first} -> {last}'

    # the last code cell prints the context followed by the generated characters
    sample_out = stdout_of([c for c in nb.cells if c.cell_type == 'code'][-1])
    assert sample_out.startswith(CONTEXT), sample_out[:200]
    generated = sample_out[len(CONTEXT):].rstrip('\n')
    assert len(generated) >= 100, f'sample too short: {sample_out!r}'
    assert len(set(generated)) >= 10, f'sample is degenerate: {generated[:200]!r}'
