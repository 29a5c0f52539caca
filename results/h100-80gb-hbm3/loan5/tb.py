import sys, time
sys.path.insert(0, 'src')
import torch
from engine import common
import run
mode, epochs = sys.argv[1], sys.argv[2]
if 'notb' in mode:
    common.LazyWriter.add_scalar = lambda self, *a: None
else:
    from torch.utils.tensorboard import SummaryWriter  # imported before the clock, as notb's
extra = ['--compile', 'reduce-overhead'] if 'ro' in mode else []
t = time.time()
run.main(['pretrain', 'vanilla', 'wiki.txt', '--writing_params_path', f'runs/loan5/{mode}.params',
          '--max_epochs', epochs, '--device', 'cuda'] + extra)
print(f'RESULT {mode} {epochs} epochs: {time.time() - t:.1f} s', flush=True)
