# [engine] Handout file: the starter's utils.py (its names: tests/handout/test_starter_names.py).
# [engine] The commands score with the engine's reading of a questions file (engine.command.inputs
# [engine] .score_places: blank lines and CRLF ends allowed), which counts as evaluate_places does
# [engine] on a well-formed file, and decode with the batched engine.fast.decode, which answers as
# [engine] `sample` does.
"""
Utilities: seeding, decoding one sequence at a time, and the accuracy of predicted places.
"""
import random
import numpy as np
import torch
import torch.nn as nn  # noqa: F401 (the starter imports it)
from torch.nn import functional as F


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def top_k_logits(logits, k):
    v, ix = torch.topk(logits, k)
    out = logits.clone()
    out[out < v[:, [-1]]] = -float('Inf')
    return out


@torch.no_grad()
def sample(model, x, steps, temperature=1.0, sample=False, top_k=None):
    """
    Continue each row of the indices x (b, t) by `steps` indices, one at a time: the model sees
    the sequence so far (its last block_size positions) and the next index is drawn from the
    softmax of the last position's logits (sample=True), or is its most likely one. Every step
    runs the whole sequence again: quadratic in its length.
    """
    block_size = model.get_block_size()
    model.eval()
    for k in range(steps):
        x_cond = x if x.size(1) <= block_size else x[:, -block_size:]  # crop context if needed
        logits, _ = model(x_cond)
        # pluck the logits at the final step and scale by temperature
        logits = logits[:, -1, :] / temperature
        # optionally crop probabilities to only the top k options
        if top_k is not None:
            logits = top_k_logits(logits, top_k)
        # apply softmax to convert to probabilities
        probs = F.softmax(logits, dim=-1)
        # sample from the distribution or take the most likely
        if sample:
            ix = torch.multinomial(probs, num_samples=1)
        else:
            _, ix = torch.topk(probs, k=1, dim=-1)
        # append to the sequence and continue
        x = torch.cat((x, ix), dim=1)

    return x


def get_name_prediction(model, dataset_object, input_string):  # [2022-23 2024-25]
    # The greedy answer to one question (input_string: the question and its ⁇). The starter's
    # version names objects it does not have; this one runs, on the model's own device.
    device = next(model.parameters()).device
    x = torch.tensor([dataset_object.stoi[s] for s in input_string], dtype=torch.long)[None, ...].to(device)
    pred = sample(model, x, 32, sample=False)[0]
    completion = ''.join([dataset_object.itos[int(i)] for i in pred])
    pred = completion.split('⁇')[1]
    return pred


def evaluate_places(filepath, predicted_places):
    """ Computes percent of correctly predicted birth places.

    Arguments:
      filepath: path to a file with our name, birth place data.
      predicted_places: a list of strings representing the
          predicted birth place of each person.

    Returns: (total, correct), floats
    """
    #[2021-22] with open(filepath) as fin:
    with open(filepath, encoding='utf-8') as fin:  # [2022-23 2024-25]
        lines = [x.strip().split('\t') for x in fin]
        if len(lines[0]) == 1:
            print('No gold birth places provided; returning (0,0)')
            return (0, 0)
        true_places = [x[1] for x in lines]
        total = len(true_places)
        assert total == len(predicted_places)
        correct = len(list(filter(lambda x: x[0] == x[1],
                                  zip(true_places, predicted_places))))
        return (float(total), float(correct))
