"""
Simple training loop; Boilerplate that could apply to any arbitrary neural network,
so nothing in this file really has anything to do with GPT specifically.

The optimisation is the handout's step for step (AdamW, grad clipping, the token-counted warmup
and cosine LR schedule, the same batches per epoch). What differs is only how fast each step runs:
- batches are drawn in-process (or by workers started once per run, not once per epoch);
- trailing columns that are padding in every row of a batch are dropped before the forward pass.
  This is exact: the model is causal, so no earlier position sees them, and their targets are
  PAD, which the loss ignores. The LR schedule still counts the full block of tokens per row, as
  the handout does;
- optional bf16 autocast, fused AdamW and torch.compile on a GPU;
- loss values are read back from the device in groups, not after every step.
"""
import math
import time

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from utils import save_state_dict


class TrainerConfig:
    # optimization parameters
    max_epochs = 10
    batch_size = 64
    learning_rate = 3e-4
    betas = (0.9, 0.95)
    grad_norm_clip = 1.0
    weight_decay = 0.1  # only applied on matmul weights
    # learning rate decay params: linear warmup followed by cosine decay to 10% of original
    lr_decay = False
    warmup_tokens = 375e6  # these default values are for GPT-1, but for our purposes they are overwritten by run.py
    final_tokens = 260e9  # (at what point we reach 10% of original LR)
    # checkpoint settings
    ckpt_path = None
    num_workers = 0  # for DataLoader
    writer = None
    # Not in the handout: how the steps are computed, not what they compute.
    device = 'cpu'  # 'cpu', 'cuda' or a torch.device
    precision = 'fp32'  # 'fp32' or 'bf16' (autocast)
    compile = False  # torch.compile the model (GPU)
    min_len = 0  # never trim a batch shorter than this (the perceiver's bottleneck_dim)
    pad_multiple = 8  # trimmed lengths are rounded up to this (fewer shapes for compile/kernels)
    log_every = 1  # read losses back every N steps (a GPU sync); tensorboard still gets every step

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)


def lr_multiplier(tokens, config):
    """The handout's schedule: linear warmup over warmup_tokens, then cosine down to a floor of
    10% at final_tokens. `tokens` counts every target position seen so far, padding included."""
    if tokens < config.warmup_tokens:
        return float(tokens) / float(max(1, config.warmup_tokens))
    progress = float(tokens - config.warmup_tokens) / float(max(1, config.final_tokens - config.warmup_tokens))
    return max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))


def optimizer_groups(model, weight_decay):
    """Weight decay on the matmul weights (Linear weights, the synthesizer's w2); none on biases,
    LayerNorm weights, embeddings, the position table or the perceiver's basis C."""
    decay, no_decay = [], []
    for module_name, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            matmul = (isinstance(module, torch.nn.Linear) and name == 'weight') or name == 'w2'
            (decay if matmul else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def trim_padding(x, y, min_len=0, multiple=1):
    """Drop the trailing columns whose targets are PAD (0) in every row."""
    used = (y != 0).any(dim=0).nonzero()
    keep = int(used[-1]) + 1 if len(used) else 1
    keep = max(keep, min_len)
    keep = min(x.size(1), -(-keep // multiple) * multiple)
    return x[:, :keep].contiguous(), y[:, :keep].contiguous()


def batches(dataset, batch_size, generator):
    """One epoch of shuffled batches, drawn in this process (the datasets are cheap to sample:
    worker processes cost more than they save on a small CPU)."""
    order = torch.randperm(len(dataset), generator=generator).tolist()
    for i in range(0, len(order), batch_size):
        xs, ys = zip(*(dataset[j] for j in order[i:i + batch_size]))
        yield torch.stack(xs), torch.stack(ys)


class Trainer:

    def __init__(self, model, train_dataset, test_dataset, config):
        self.model = model
        self.train_dataset = train_dataset
        self.test_dataset = test_dataset
        self.config = config
        self.device = torch.device(config.device)
        self.model = self.model.to(self.device)
        self.tokens = 0
        self.step = 0
        self.last_loss = float('nan')

    def save_checkpoint(self):
        if self.config.ckpt_path is not None:
            save_state_dict(self.model, self.config.ckpt_path)

    def _epoch_batches(self, dataset, generator, loader):
        if loader is not None:
            return iter(loader)
        return batches(dataset, self.config.batch_size, generator)

    def _loader(self, dataset, generator):
        """A DataLoader whose workers live for the whole run (GPU runs with num_workers > 0)."""
        if self.device.type == 'cpu' or self.config.num_workers == 0:
            return None
        return DataLoader(dataset, batch_size=self.config.batch_size, shuffle=True,
                          generator=generator, num_workers=self.config.num_workers,
                          pin_memory=True, persistent_workers=True, prefetch_factor=4)

    def train(self):
        model, config = self.model, self.config
        device = self.device
        raw_model = model
        if config.compile:
            model = torch.compile(model)

        optimizer = torch.optim.AdamW(optimizer_groups(raw_model, config.weight_decay),
                                      lr=config.learning_rate, betas=config.betas,
                                      fused=device.type == 'cuda')
        autocast = torch.autocast(device.type, dtype=torch.bfloat16,
                                  enabled=config.precision == 'bf16')

        generator = torch.Generator().manual_seed(torch.initial_seed())
        loader = self._loader(self.train_dataset, generator)
        steps_per_epoch = math.ceil(len(self.train_dataset) / config.batch_size)
        pbar = tqdm(total=steps_per_epoch * config.max_epochs, unit='step', dynamic_ncols=True)
        pending = []  # (step, loss tensor, lr) not yet read back from the device
        start_time, start_tokens = time.time(), self.tokens

        def flush(epoch, it):
            if not pending:
                return
            losses = torch.stack([loss for _, loss, _ in pending]).float().cpu().tolist()
            for (step, _, lr), loss in zip(pending, losses):
                if config.writer is not None:
                    config.writer.add_scalar('train/loss', loss, step)
                    config.writer.add_scalar('train/lr', lr, step)
            self.last_loss = losses[-1]
            pbar.set_description(f"epoch {epoch+1} iter {it}: train loss {losses[-1]:.5f}. lr {pending[-1][2]:e}")
            pbar.update(len(pending))
            tok_s = (self.tokens - start_tokens) / max(time.time() - start_time, 1e-9)
            pbar.set_postfix_str(f'{tok_s:,.0f} tok/s', refresh=False)
            pending.clear()

        model.train()
        for epoch in range(config.max_epochs):
            it = -1
            for it, (x, y) in enumerate(self._epoch_batches(self.train_dataset, generator, loader)):
                tokens = y.numel()  # the handout's (y >= 0).sum(): every position, padding too
                x, y = trim_padding(x, y, config.min_len, config.pad_multiple)
                x = x.to(device, non_blocking=True)
                y = y.to(device, non_blocking=True)

                with autocast:
                    logits, loss = model(x, y)

                model.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(raw_model.parameters(), config.grad_norm_clip)
                optimizer.step()

                # decay the learning rate based on our progress (after the step, as the handout)
                self.tokens += tokens
                if config.lr_decay:
                    lr = config.learning_rate * lr_multiplier(self.tokens, config)
                    for param_group in optimizer.param_groups:
                        param_group['lr'] = lr
                else:
                    lr = config.learning_rate

                pending.append((self.step, loss.detach(), lr))
                self.step += 1
                if len(pending) >= config.log_every:
                    flush(epoch, it)
            flush(epoch, it)
            if self.test_dataset is not None:
                self.evaluate_loss(self.test_dataset, autocast)
                model.train()
            self.save_checkpoint()
        pbar.close()

    @torch.no_grad()
    def evaluate_loss(self, dataset, autocast):
        self.model.eval()
        losses = []
        generator = torch.Generator().manual_seed(0)
        for x, y in batches(dataset, self.config.batch_size, generator):
            x, y = trim_padding(x, y, self.config.min_len)
            with autocast:
                _, loss = self.model(x.to(self.device), y.to(self.device))
            losses.append(float(loss))
        print("test loss: %f" % (sum(losses) / max(1, len(losses))))
