"""Engine (free to change): minGPT's weight-decay rule.

The CPU presets were tuned with it; the handout's trainer decays by name
(loop.optimizer_groups)."""
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
