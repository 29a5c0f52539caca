"""
A plain training loop, independent of what is being trained: it only needs a model whose
forward(x, y) returns (logits, loss), a dataset of (x, y) pairs and a TrainerConfig.
"""
import logging
import math

import torch
from torch.utils.data.dataloader import DataLoader
from tqdm import tqdm

logger = logging.getLogger(__name__)


class TrainerConfig:
    # optimisation
    max_epochs = 10
    batch_size = 64
    learning_rate = 3e-4
    betas = (0.9, 0.95)
    grad_norm_clip = 1.0
    weight_decay = 0.1  # only applied to the weights of Linear layers
    # learning rate schedule: linear warmup over warmup_tokens, then cosine decay to 10% of the
    # base rate at final_tokens (tokens = target positions seen so far)
    lr_decay = False
    warmup_tokens = 375e6
    final_tokens = 260e9
    # stop after this many optimizer steps in all (None: run every epoch to the end)
    max_iters = None
    # checkpoint after every epoch (the best one when there is a test set)
    ckpt_path = None
    num_workers = 0  # DataLoader worker processes

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)


class Trainer:

    def __init__(self, model, train_dataset, test_dataset, config):
        self.model = model
        self.train_dataset = train_dataset
        self.test_dataset = test_dataset
        self.config = config
        self.device = 'cuda' if torch.cuda.is_available() else 'cpu'
        self.model = self.model.to(self.device)
        self.tokens = 0          # target tokens processed so far (drives the lr schedule)
        self.iters = 0           # optimizer steps taken so far
        self.train_losses = []   # the training loss of every step
        self.test_losses = []    # the mean test loss of every epoch

    def save_checkpoint(self):
        logger.info('saving %s', self.config.ckpt_path)
        torch.save(self.model.state_dict(), self.config.ckpt_path)

    def learning_rate(self):
        config = self.config
        if not config.lr_decay:
            return config.learning_rate
        if self.tokens < config.warmup_tokens:
            mult = float(self.tokens) / float(max(1, config.warmup_tokens))
        else:
            progress = float(self.tokens - config.warmup_tokens) / \
                float(max(1, config.final_tokens - config.warmup_tokens))
            mult = max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))
        return config.learning_rate * mult

    def done(self):
        return self.config.max_iters is not None and self.iters >= self.config.max_iters

    def run_epoch(self, split, epoch, optimizer):
        config, model = self.config, self.model
        is_train = split == 'train'
        model.train(is_train)
        data = self.train_dataset if is_train else self.test_dataset
        loader = DataLoader(data, shuffle=is_train, pin_memory=self.device == 'cuda',
                            batch_size=config.batch_size, num_workers=config.num_workers)
        losses = []
        pbar = tqdm(enumerate(loader), total=len(loader)) if is_train else enumerate(loader)
        for it, (x, y) in pbar:
            x, y = x.to(self.device), y.to(self.device)
            with torch.set_grad_enabled(is_train):
                _, loss = model(x, y)
            losses.append(loss.item())
            if not is_train:
                continue

            model.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)
            self.tokens += (y >= 0).sum().item()
            lr = self.learning_rate()
            for group in optimizer.param_groups:
                group['lr'] = lr
            optimizer.step()
            self.iters += 1
            self.train_losses.append(loss.item())
            pbar.set_description(f'epoch {epoch + 1} iter {it}: train loss {loss.item():.5f}. lr {lr:e}')
            if self.done():
                pbar.close()
                break

        if not is_train:
            test_loss = float(sum(losses) / max(1, len(losses)))
            logger.info('test loss: %f', test_loss)
            self.test_losses.append(test_loss)
            return test_loss
        return None

    def train(self):
        optimizer = self.model.configure_optimizers(self.config)
        best_loss = float('inf')
        for epoch in range(self.config.max_epochs):
            self.run_epoch('train', epoch, optimizer)
            test_loss = None
            if self.test_dataset is not None:
                test_loss = self.run_epoch('test', epoch, optimizer)
            # without a test set every epoch is saved; with one, only improvements
            good = self.test_dataset is None or test_loss < best_loss
            if self.config.ckpt_path is not None and good:
                best_loss = test_loss if test_loss is not None else best_loss
                self.save_checkpoint()
            if self.done():
                break
        return self.train_losses
