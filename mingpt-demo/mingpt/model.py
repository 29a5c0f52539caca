"""
A GPT language model, small enough to read in one sitting.

- an embedding stem: a token embedding plus a learned position embedding
- a stack of identical Transformer blocks; each block is pre-LayerNorm masked self-attention
  followed by a position-wise MLP, both added onto a residual stream
- a final LayerNorm and a linear map back onto the vocabulary

Every hyperparameter lives in a GPTConfig, so a model is GPT(GPTConfig(vocab_size, block_size,
n_layer=..., n_head=..., n_embd=...)).
"""
import logging
import math

import torch
import torch.nn as nn
from torch.nn import functional as F

logger = logging.getLogger(__name__)


class GPTConfig:
    """Hyperparameters shared by every GPT; anything passed as a keyword becomes an attribute."""
    embd_pdrop = 0.1
    resid_pdrop = 0.1
    attn_pdrop = 0.1

    def __init__(self, vocab_size, block_size, **kwargs):
        self.vocab_size = vocab_size
        self.block_size = block_size
        for k, v in kwargs.items():
            setattr(self, k, v)


class GPT1Config(GPTConfig):
    """The size of the original GPT (about 125M parameters at a 50k vocabulary)."""
    n_layer = 12
    n_head = 12
    n_embd = 768


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t may only look at positions <= t, followed by
    an output projection. Written out by hand so every step is visible."""

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0, 'n_embd must be a multiple of n_head'
        self.key = nn.Linear(config.n_embd, config.n_embd)
        self.query = nn.Linear(config.n_embd, config.n_embd)
        self.value = nn.Linear(config.n_embd, config.n_embd)
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        # lower-triangular ones: entry (t, s) is 1 when position t is allowed to see position s
        mask = torch.tril(torch.ones(config.block_size, config.block_size))
        self.register_buffer('mask', mask.view(1, 1, config.block_size, config.block_size))
        self.n_head = config.n_head

    def forward(self, x):
        B, T, C = x.size()
        hs = C // self.n_head
        # (B, T, C) -> (B, n_head, T, head size) for each of keys, queries and values
        k = self.key(x).view(B, T, self.n_head, hs).transpose(1, 2)
        q = self.query(x).view(B, T, self.n_head, hs).transpose(1, 2)
        v = self.value(x).view(B, T, self.n_head, hs).transpose(1, 2)

        # scaled dot-product scores, the future masked out, normalised over the keys
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_drop(att)
        y = att @ v  # (B, n_head, T, hs)

        # the heads side by side again, then mix them
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    """One Transformer block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
            nn.Dropout(config.resid_pdrop),
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    """The full language model over a context of at most block_size tokens."""

    def __init__(self, config):
        super().__init__()
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd))
        self.drop = nn.Dropout(config.embd_pdrop)
        self.blocks = nn.Sequential(*[Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

        self.block_size = config.block_size
        self.apply(self._init_weights)
        logger.info('number of parameters: %e', sum(p.numel() for p in self.parameters()))

    def get_block_size(self):
        return self.block_size

    def _init_weights(self, module):
        # small normal weights, zero biases, identity LayerNorms
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)

    def configure_optimizers(self, train_config):
        """AdamW where only the weights of Linear layers are decayed: biases, LayerNorm weights,
        embeddings and the position embedding are not."""
        decay, no_decay = set(), set()
        for mn, m in self.named_modules():
            for pn, _ in m.named_parameters(recurse=False):
                fpn = f'{mn}.{pn}' if mn else pn
                if pn.endswith('weight') and isinstance(m, nn.Linear):
                    decay.add(fpn)
                else:
                    no_decay.add(fpn)
        params = dict(self.named_parameters())
        assert decay.isdisjoint(no_decay) and decay | no_decay == set(params), \
            'every parameter must be in exactly one optimizer group'
        groups = [
            {'params': [params[n] for n in sorted(decay)], 'weight_decay': train_config.weight_decay},
            {'params': [params[n] for n in sorted(no_decay)], 'weight_decay': 0.0},
        ]
        return torch.optim.AdamW(groups, lr=train_config.learning_rate, betas=train_config.betas)

    def forward(self, idx, targets=None):
        """idx: (B, T) token ids, T <= block_size. Returns (logits (B, T, vocab), loss or None)."""
        b, t = idx.size()
        assert t <= self.block_size, f'cannot forward {t} tokens: block size is {self.block_size}'
        x = self.drop(self.tok_emb(idx) + self.pos_emb[:, :t, :])
        x = self.blocks(x)
        logits = self.head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss
