"""Tests import the modules of src/ the way run.py does (`import dataset`, `import model`)."""
import atexit
import os
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(REPO, 'src')
if SRC not in sys.path:
    sys.path.insert(0, SRC)
RUN = os.path.join(REPO, 'src', 'run.py')

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

# Made-up people and places for tiny corpora and TSVs (the CLI tests train on these)
PEOPLE = [('Ada Brook', 'London'), ('Ben Carter', 'Paris'), ('Cleo Dunn', 'Berlin'),
          ('Dan Evans', 'Rome'), ('Eve Fox', 'Madrid'), ('Finn Gray', 'Dublin'),
          ('Gus Hale', 'Vienna'), ('Hana Ito', 'Tokyo'), ('Ivan Jones', 'Moscow'),
          ('Jude Kim', 'Seoul'), ('Kai Lowe', 'Oslo'), ('Lena Marx', 'Prague'),
          ('Milo Nash', 'Lisbon'), ('Nora Owen', 'Athens'), ('Otto Pike', 'Zurich'),
          ('Pia Quinn', 'Quebec'), ('Rex Stone', 'Cairo'), ('Sara Tate', 'Lima'),
          ('Tom Ueda', 'Kyoto'), ('Uma Vale', 'Delhi'), ('Vera Wolf', 'Warsaw'),
          ('Walt Xu', 'Beijing'), ('Yuri Zane', 'Kiev'), ('Zoe Abel', 'Geneva'),
          ('Amy Bell', 'Boston'), ('Bob Cole', 'Chicago'), ('Cy Dow', 'Denver'),
          ('Di Ely', 'Exeter'), ('Ed Ford', 'Florence'), ('Flo Gibb', 'Glasgow'),
          ('Gil Hart', 'Havana'), ('Hal Irwin', 'Istanbul')]

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


class LossLog:
    """A tensorboard writer stand-in for trainer.TrainerConfig(writer=...): the losses logged."""

    def __init__(self):
        self.values = []

    def add_scalar(self, tag, value, step):
        if tag == 'train/loss':
            self.values.append(value)
