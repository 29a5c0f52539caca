"""The whole suite's setup. Tests import the modules of src/ the way run.py does (`import
dataset`, `import model`), and the helpers they share from this folder (`from support import
REPO`, tiny_run, handout_reference); each job's folder adds its own (its conftest.py)."""
import atexit
import os
import shutil
import sys
import tempfile

TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [p for p in (os.path.join(os.path.dirname(TESTS), 'src'), TESTS) if p not in sys.path]

# Every run.py the suite starts (in process or as a child) leaves the user's files and its own
# output alone: the measured CPU choices go to a file of this session's, not the user's cache,
# and torch's thread count does not follow the machine's load (that has its own tests; under a
# busy suite it would print a line in some runs and not others).
_CACHE = tempfile.mkdtemp(prefix='cs224n-test-cache-')
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ['CS224N_PATH_CACHE'] = os.path.join(_CACHE, 'cpu_paths.json')
os.environ['CS224N_THREADS'] = 'fixed'

# Under pytest-xdist (scripts/test.sh: -n auto) each worker, and every process it starts, gets its
# share of the cores: two workers each spinning two OpenMP threads on two cores wait on each other.
_WORKERS = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
if _WORKERS > 1 and 'OMP_NUM_THREADS' not in os.environ:
    os.environ['OMP_NUM_THREADS'] = str(max(1, (os.cpu_count() or 1) // _WORKERS))

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line('markers', 'user_sandbox: runs a probe as another user, who must reach '
                            'this Python (.ci/run runs these again with its folder opened)')
    config.addinivalue_line('markers', 'slow: whole commands, fresh clones, sandboxed probes; '
                            '`pytest -m "not slow"` leaves them out for a change\'s first check')

# fp32 means fp32 on a GPU too: TF32 matmuls (10-bit mantissa) would put the fast and plain paths
# of the equivalence tests 1e-3 apart, beyond their tolerances, for a reason that is not theirs.
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision('highest')

# The equivalence tests (fast path = plain math) run on every device there is: the CPU always,
# CUDA when this machine has it (skipped otherwise, saying so: `pytest -rs` lists the reasons).
DEVICES = [
    pytest.param('cpu', id='cpu'),
    pytest.param('cuda', id='cuda', marks=pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason='no CUDA device here (on a GPU machine: bash scripts/gpu_check.sh)')),
]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param
