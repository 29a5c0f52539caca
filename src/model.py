# [engine] Handout file: the starter's model.py, models.py in the 2024-25 edition (names,
# [engine] state_dict keys fixed: tests/handout/test_model_compat.py). Its forwards compute every training
# [engine] step and loss; the engine (engine/fast/fastmodel.py) is reached on marked lines only.
# [engine] The evaluation's batched, cached decoder is the one other forward (engine/fast/decode.py).
"""
The GPT model, after Andrej Karpathy's minGPT:
- an embedding of each character, plus one of its position,
- a stack of identical Transformer blocks, each a self-attention layer then a one-hidden-layer
  MLP, both added onto a residual stream,
- a final layer norm and a linear map to the logits over the vocabulary.
"""
# [2024-25] The rope variant has no position embedding: its attention layers rotate queries and
# [2024-25] keys by position instead.
# [2022-23] The perceiver variant reads the input into a few learned slots first and back out at
# [2022-23] the end, so that the blocks between work on those slots only.

#[2021-22 2022-23] import math

import torch
import torch.nn as nn
from torch.nn import functional as F

import attention
from engine.fast import fastmodel  # [engine]

#[2022-23] torch.manual_seed(1)
#[2024-25] torch.manual_seed(0)
# [engine] (run.py seeds as each edition's model file does at import: engine.command.stages.seeds)


class GPTConfig:
    """ base GPT config, params common to all GPT versions """
    embd_pdrop = 0.1
    resid_pdrop = 0.1
    attn_pdrop = 0.1
    rope = False  # [2024-25]
    synthesizer = False  # [2021-22 solved]
    additive = False  # [2021-22 empty]
    perceiver = False  # [2022-23]
    bottleneck_dim = None  # [2022-23 2024-25]
    # [engine] Each False computes as the handout does. fast_attention: F.scaled_dot_product_
    # [engine] attention, the masked softmax's function through fused kernels; fast_dropout:
    # [engine] nn.Dropout's distribution, drawn faster on a CPU (fastpath.Dropout).
    fast_attention = True  # [engine]
    fast_dropout = True  # [engine]

    def __init__(self, vocab_size, block_size, **kwargs):
        self.vocab_size = vocab_size
        self.block_size = block_size
        for k,v in kwargs.items():
            setattr(self, k, v)


# [engine] The variants by name, as minGPT's model_type table names sizes: the GPTConfig settings
# [engine] each turns on (a bottleneck_dim here is the handout's default, replaced by the flag's).
VARIANTS = {  # [engine]
    'vanilla': {},
    'synthesizer': {'synthesizer': True},
    'perceiver': {'perceiver': True, 'bottleneck_dim': 32},
    'rope': {'rope': True},
}


def config_for(variant, vocab_size, block_size, bottleneck_dim=None, **kwargs):  # [engine]
    """The GPTConfig of a variant named in VARIANTS, with kwargs (sizes, dropout, paths) set."""
    settings = dict(VARIANTS[variant])
    if bottleneck_dim is not None and 'bottleneck_dim' in settings:
        settings['bottleneck_dim'] = bottleneck_dim
    return GPTConfig(vocab_size, block_size, **settings, **kwargs)


class GPT1Config(GPTConfig):
    """ GPT-1 like network roughly 125M params """
    n_layer = 12
    n_head = 12
    n_embd = 768


class Block(nn.Module):
    """ an unassuming Transformer block """

    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        # [engine] additive: the empty 2021-22 starter's stub that its part g replaces (not taken)
        if config.synthesizer:  # [2021-22 solved]
            self.attn = attention.SynthesizerAttention(config)
        elif config.additive:  # [2021-22 empty]
            self.attn = attention.AdditiveSelfAttention(config)
        else:
            self.attn = attention.CausalSelfAttention(config)
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


class DownProjectBlock(nn.Module):  # [2022-23]
    """Transformer block used for down projection: cross-attention from the learned basis
    `self.C` (1 x bottleneck_dim x n_embd: its first dimension broadcasts over the batch) as the
    queries onto the input sequence as keys and values (eq. 5 of the handout), then the MLP.

    Build it as the Block class above, with CausalCrossAttention in place of
    CausalSelfAttention, and initialize `self.C` with xavier_uniform.
    """
    weight_decay = {'C': False}  # [engine] query vectors, like an embedding (minGPT's rule)

    def __init__(self, config):
        super().__init__()
        ### YOUR CODE HERE
        ### Hint: begin from Block's code and change what differs.
        self.C = nn.Parameter(torch.empty(1, config.bottleneck_dim, config.n_embd))
        nn.init.xavier_uniform_(self.C)
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = attention.CausalCrossAttention(config)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
            nn.Dropout(config.resid_pdrop),
        )
        ### END YOUR CODE

    def forward(self, x_input):
        """Cross-attention from self.C onto x_input: the layer norm on C, and then on the MLP's
        input."""
        ### YOUR CODE HERE
        ### Hint: Block's forward, changed where it differs: 3 to 5 lines.
        x = self.C + self.attn(x_input, self.ln1(self.C))
        x = x + self.mlp(self.ln2(x))
        return x
        ### END YOUR CODE


class UpProjectBlock(nn.Module):  # [2022-23]
    """Transformer block used for up projection: cross-attention from the original input as the
    queries onto the bottleneck's outputs as keys and values (eq. 6), then the MLP, back to the
    input's length. Build it as the Block class above, with CausalCrossAttention.
    """

    def __init__(self, config):
        super().__init__()
        ### YOUR CODE HERE
        ### Hint: begin from Block's code and change what differs.
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = attention.CausalCrossAttention(config)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
            nn.Dropout(config.resid_pdrop),
        )
        ### END YOUR CODE

    def forward(self, y, x_input):
        """Cross-attention from x_input onto the previous layer's output y: the layer norm on y,
        and then on the MLP's input."""
        ### YOUR CODE HERE
        ### Hint: Block's forward, changed where it differs: 3 to 5 lines.
        x = x_input + self.attn(self.ln1(y), x_input)
        x = x + self.mlp(self.ln2(x))
        return x
        ### END YOUR CODE


class GPT(nn.Module):
    """  the full GPT language model, with a context size of block_size """
    weight_decay = {'pos_emb': False}  # [engine] a lookup table, like tok_emb (minGPT's rule)

    def __init__(self, config):
        super().__init__()
        fastmodel.check_variant(config)  # [engine] rope is the vanilla model's variant only

        # input embedding stem
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        #[2021-22 2022-23] self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd))
        if not config.rope:  # [2024-25]
            self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd))
        self.drop = nn.Dropout(config.embd_pdrop)
        self.rope = config.rope  # [2024-25]
        # transformer
        self.perceiver = config.perceiver  # [2022-23]
        if config.perceiver:  # [2022-23]
            input_block_size = config.block_size

            # input sequence based causal mask
            self.down_block = DownProjectBlock(config)

            # bottleneck basis based causal mask
            config.block_size = config.bottleneck_dim
            self.blocks = nn.Sequential(*[Block(config) for _ in range(config.n_layer-2)])

            # reset value of the block size back to the original.
            config.block_size = input_block_size
            self.up_block = UpProjectBlock(config)
        else:
            self.blocks = nn.Sequential(*[Block(config) for _ in range(config.n_layer)])
        # decoder head
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        fastmodel.model_paths(self, config)  # [engine] what the decoder reads; cheaper dropout draws

        self.block_size = config.block_size
        self.apply(self._init_weights)

        print(f"number of parameters: {sum(p.numel() for p in self.parameters())}")  # [2024-25]
        #[2021-22 2022-23] print("number of parameters: {}".format(sum(p.numel() for p in self.parameters())))

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)

    def get_block_size(self):
        return self.block_size

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward, model block size ({t}, {self.block_size}) is exhausted."  # [2024-25]
        #[2022-23] assert t <= self.block_size, "Cannot forward, model block size (%d, %d) is exhausted." % (t, self.block_size)
        #[2021-22] assert t <= self.block_size, "Cannot forward, model block size is exhausted."

        # forward the GPT model
        token_embeddings = self.tok_emb(idx) # each index maps to a (learnable) vector
        if self.rope:  # [2024-25]
            x_input = token_embeddings
        else:
            position_embeddings = self.pos_emb[:, :t, :] # each position maps to a (learnable) vector
            x_input = token_embeddings + position_embeddings  # [2024-25]
            #[2022-23] x_input = self.drop(token_embeddings + position_embeddings)

        x = self.drop(x_input)  # [2024-25]
        #[2021-22] x = self.drop(token_embeddings + position_embeddings)
        if self.perceiver:  # [2022-23]
            x_input = x  # [engine] the up projection's queries: the input, after dropout
            x = self.down_block(x_input)
        #[2022-23] else:
        #[2022-23]     x = x_input
        x = self.blocks(x)
        if self.perceiver:  # [2022-23]
            x = self.up_block(x, x_input)
        x = self.ln_f(x)
        logits = self.head(x)

        # if we are given some desired targets also calculate the loss
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=0)

        return logits, loss


class CustomLayerNorm(nn.Module):  # [2021-22]
    pass
