"""Engine (free to change): the training's optimizer, the handout's AdamW, and its weight-decay
groups: the handout trainer's rule (by name) and minGPT's (by module), which the CPU presets
were tuned with."""
import torch


def matmul_groups(model, weight_decay):
    """minGPT's configure_optimizers: a Linear's weight is decayed, its bias is not, nor are
    LayerNorm and Embedding parameters. A parameter held by a module of its own (the position
    table, the synthesizer's w2 and b2, the perceiver's basis C) is placed by that module's
    `weight_decay` table {name: decayed?}; a parameter no rule places is an error, so a new one
    cannot silently go without decay."""
    decay, no_decay = [], []
    for module_name, module in model.named_modules():
        declared = getattr(module, 'weight_decay', {})
        for name, p in module.named_parameters(recurse=False):
            if isinstance(module, torch.nn.Linear):
                decayed = name == 'weight'
            elif isinstance(module, (torch.nn.LayerNorm, torch.nn.Embedding)):
                decayed = False
            elif name in declared:
                decayed = declared[name]
            else:
                where = f'{module_name}.{name}' if module_name else name
                raise ValueError(f'optimizer_groups: no weight-decay rule places parameter {where} '
                                 f'({type(module).__name__}): name it in that module\'s '
                                 '`weight_decay` table')
            (decay if decayed else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def optimizer_groups(model, weight_decay, rule='names'):
    """AdamW's two groups, decayed and not. 'names', the handout's trainer: every parameter is
    decayed unless its name contains "bias" or "LayerNorm.weight" (this model has no such name:
    only its biases escape). 'matmul': minGPT's rule, which the CPU presets train with
    (matmul_groups, above)."""
    if rule == 'matmul':
        return matmul_groups(model, weight_decay)
    if rule != 'names':
        raise ValueError(f"optimizer_groups: rule must be 'names' or 'matmul', not {rule!r}")
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        escapes = 'bias' in name or 'LayerNorm.weight' in name
        (no_decay if escapes else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model, config, lr):
    groups = optimizer_groups(model, config.weight_decay, config.decay_rule)
    return torch.optim.AdamW(groups, lr=lr, betas=config.betas, fused='cuda' in str(config.device))
