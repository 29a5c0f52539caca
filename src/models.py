"""Handout file: the 2024-25 starter's models.py (tests/handout/test_model_compat.py).

The model under the name the 2024-25 (RoPE) edition's starter code gives its file: its run.py
does `import models` and builds `models.GPT(models.GPTConfig(...))`. Everything is model.py's."""
from model import GPT, GPT1Config, GPTConfig, Block, VARIANTS  # noqa: F401
