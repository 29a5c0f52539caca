"""Engine (free to change): the params files a command reads: read as data (never code to run),
their size bounded before torch unpacks them, checked against the model they load into."""
import os
import pickle
import re
import warnings
import zipfile

import torch

from engine.command.inputs import shown
from engine.common import UsageError, state_difference


def describe_params(state):
    """Which variant a state_dict is of, in words."""
    if 'down_block.C' in state:
        c = state['down_block.C']
        return (f'a perceiver model with bottleneck_dim {c.shape[1]}' if c.dim() == 3 else
                f'a perceiver model whose down_block.C is {c.dim()}-D, not 3-D')
    if any(k.endswith('attn.w2') for k in state):
        return 'a synthesizer model'
    if any(k.endswith('attn.rope_cache') for k in state):
        return 'a rope model'
    return 'a vanilla model'


def layers_of(state):
    """The n_layer of the GPT a state_dict is of: its blocks (blocks.N.), and a perceiver's down
    and up blocks."""
    blocks = {key.split('.')[1] for key in state if re.match(r'blocks\.\d+\.', key)}
    return len(blocks) + (2 if 'down_block.C' in state else 0)


class ParamsProblem(Exception):
    """What is wrong with a params file, in words that follow its path."""


NOT_TORCH_SAVED = 'not a readable params file (not a torch.save file of tensors)'


def not_torch_saved(head):
    """Why a file whose first bytes are `head` is no params file, or None where it starts as
    torch.save's zip or its older pickle does (whether it reads, torch.load says)."""
    if not head:
        return 'not a readable params file (empty)'
    if not head.startswith((b'PK', b'\x80')):
        return NOT_TORCH_SAVED
    return None


def unpacked_size_problem(path, max_bytes):
    """Why torch.load must not read `path` (None: it may): torch.save's zip holds one record per
    tensor, and torch allocates each record's declared size before checking it, so a few
    deflated kilobytes can ask for gigabytes. Legacy (pre-zip) files declare their storages'
    sizes inside the pickle, where nothing can bound them unread."""
    try:
        with zipfile.ZipFile(path) as z:
            total = sum(info.file_size for info in z.infolist())
    except Exception:  # (malformed metadata raises more kinds than BadZipFile: all unreadable)
        with open(path, 'rb') as f:
            head = f.read(4)
        if head.startswith(b'PK'):
            return 'not a readable params file (a damaged or truncated zip)'
        if head.startswith(b'\x80'):  # a pickle: torch.save's format before 1.6
            return 'in torch.save\'s legacy format, not its zip format (torch 1.6 and later): refused unread'
        return not_torch_saved(head)
    if total > max_bytes:
        return (f'its records unpack to {total:,} bytes, more than the {max_bytes:,} allowed for '
                'this model: refused unread')
    return None


def read_state(path, device='cpu', max_bytes=None):
    """The state_dict in the params file at `path`, or a ParamsProblem saying why there is none.
    weights_only: a params file is data, never code to run (a pickle that would run code is
    refused); map_location: params trained on a GPU load on a machine without one. max_bytes
    (for a stranger's file): the most its records may unpack to (unpacked_size_problem)."""
    if os.path.isdir(path):
        raise ParamsProblem('is a directory, not a params file')
    if not os.path.isfile(path):
        raise ParamsProblem('file not found')
    if max_bytes is not None:
        problem = unpacked_size_problem(path, max_bytes)
        if problem is not None:
            raise ParamsProblem(problem)
    try:
        with warnings.catch_warnings():  # (torch's warnings about what it reads: the error says it)
            warnings.simplefilter('ignore')
            state = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as e:
        if 'Unsupported global' not in str(e):  # not a pickle weights_only refused: not a pickle
            raise ParamsProblem(NOT_TORCH_SAVED)
        # weights_only refused it; torch's message is a page of advice: say it in a line
        raise ParamsProblem('holds Python objects, not only tensors: refused unread (a params '
                            'file is data; loading this one could run code)')
    except Exception as e:  # not a torch file, truncated
        with open(path, 'rb') as f:
            problem = not_torch_saved(f.read(2))
        if problem is not None:
            raise ParamsProblem(problem)
        first = re.sub(r'\x1b\[[0-9;]*m', '', str(e)).splitlines()[0][:120] if str(e) else ''
        raise ParamsProblem(f'not a readable params file ({type(e).__name__}: {first})')
    if isinstance(state, dict) and {'model', 'optimizer', 'epoch'} <= set(state):
        raise ParamsProblem('is a --resume checkpoint, not a params file: continue that run with '
                            '--resume, or read its finished params')
    if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
        raise ParamsProblem('not a state_dict of tensors')
    odd = next((k for k in state if not isinstance(k, str)), None)
    if odd is not None:
        raise ParamsProblem(f'not a state_dict of tensors (key {odd!r} is not a parameter\'s name)')
    odd = next((k for k, v in state.items() if v.layout != torch.strided), None)
    if odd is not None:
        raise ParamsProblem(f'holds {odd} as a {str(state[odd].layout).split(".")[-1]} tensor '
                            '(a params file holds dense ones)')
    odd = next((k for k, v in state.items() if v.is_meta), None)
    if odd is not None:
        raise ParamsProblem(f'not a params file: its tensors hold no data ({odd} is on the meta '
                            'device: shapes only)')
    return state


def params_mismatch(gpt, state, wanted):
    """Why `state` does not load strictly into gpt (`wanted`: that model, in words), or None."""
    if state_difference(state, gpt.state_dict()) is None:
        return None
    found = describe_params(state)
    if found == wanted:  # same variant, other sizes (vocabulary, block size, widths)
        found += (' of other sizes (its keys or shapes differ: another corpus, or trained '
                  'with another --preset?)')
    return f'params are {found}, you asked for {wanted}'


def load_params(gpt, path, wanted, device):
    """Load a params file into gpt (`wanted`: the model asked for, in words, for the error)."""
    try:
        state = read_state(path, device)
        problem = params_mismatch(gpt, state, wanted)
    except ParamsProblem as e:
        problem = str(e)
    if problem is not None:
        sep = ' ' if problem.startswith('is ') else ': '
        raise UsageError(f'--reading_params_path {shown(path)}{sep}{problem}')
    gpt.load_state_dict(state)
