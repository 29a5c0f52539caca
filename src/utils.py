"""Handout file: the starter's utils.py (names, results fixed: tests/test_starter_names.py).

The handout's utils.py: set_seed, top_k_logits, sample, get_name_prediction and
evaluate_places, as the starter names them (tests/test_starter_names.py). Handout file: its
names and results are the starter's; the engine's helpers are in common.py."""
import random

import torch
from torch.nn import functional as F


def set_seed(seed):
    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def top_k_logits(logits, k):
    v, ix = torch.topk(logits, k)
    out = logits.clone()
    out[out < v[:, [-1]]] = -float('Inf')
    return out


@torch.no_grad()
def sample(model, x, steps, temperature=1.0, sample=False, top_k=None):
    """The handout's decoding loop: take a conditioning sequence of indices in x (of shape (b,t))
    and predict the next token in the sequence, feeding the predictions back into the model each
    time. Clearly the sampling has quadratic complexity unlike an RNN that is only linear, and has
    a finite context window of block_size, unlike an RNN that has an infinite context window.
    Evaluation uses the equivalent batched decoder in decode.py; this one stays as the reference."""
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


def get_name_prediction(model, dataset_object, input_string):
    """The greedy answer to one question: `input_string` is the question and its \u2047 (as
    run.py's evaluate builds it), the answer the text between the first two \u2047 of the
    completion; `dataset_object` gives the vocabulary. (The 2022-23 and 2024-25 starters name
    objects here that the function does not have: this one runs.)"""
    device = next(model.parameters()).device
    x = torch.tensor([dataset_object.stoi[s] for s in input_string], dtype=torch.long)[None, ...]
    pred = sample(model, x.to(device), 32, sample=False)[0]
    completion = ''.join([dataset_object.itos[int(i)] for i in pred])
    return completion.split('\u2047')[1]


def evaluate_places(filepath, predicted_places):
    """ Computes percent of correctly predicted birth places.

    Arguments:
      filepath: path to a file with our name, birth place data.
      predicted_places: a list of strings representing the
          predicted birth place of each person.

    Returns: (total, correct), floats
    """
    with open(filepath, encoding='utf-8') as fin:
        lines = [[field.strip() for field in x.rstrip('\r\n').split('\t')] for x in fin]
    return score_places(lines, predicted_places)


def score_places(lines, predicted_places):
    """evaluate_places on a file's lines already read and split at the tab (stripped fields;
    [''] for a blank line)."""
    # One prediction per line of the file. Beyond the handout (which fails on them with an
    # IndexError): an empty file and blank lines have no gold place and are not counted, and
    # each line has a gold place or not by itself (the handout's x.strip() would take the tab of
    # a line with an empty name or place, and judged the whole file by its first line).
    asked = [x for x in lines if x != ['']]
    if not any(len(x) > 1 for x in asked):
        print('No gold birth places provided; returning (0,0)')
        return (0, 0)
    assert len(lines) == len(predicted_places), (len(lines), len(predicted_places))
    rows = [(x, pred) for x, pred in zip(lines, predicted_places) if x != ['']]
    true_places = [x[1] if len(x) > 1 else None for x, _ in rows]
    total = len(true_places)
    correct = len(list(filter(lambda x: x[0] == x[1],
                              zip(true_places, [pred for _, pred in rows]))))
    return (float(total), float(correct))


