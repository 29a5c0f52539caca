"""How many birthplaces a pretrained model can recall from its own wiki.txt line.

Finetuning can only surface what pretraining stored. For each question of an eval file whose
person has a wiki.txt line naming the gold place within its first 112 characters (the longest
text span corruption trains on), the model continues that line's text, up to the place,
greedily for as many characters as the place has. Recall is the share of those continuations
that are the place. A model that recalls a place from its line but answers the question wrongly
holds the fact but cannot reach it from a question (see results/cpu/README.md).

    python scripts/recall_probe.py vanilla.pretrain.params
    python scripts/recall_probe.py runs/x/vanilla.pretrain.params --preset cpu-45min
"""
import argparse
import os
import re
import sys
from types import SimpleNamespace

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, 'src'))
import presets  # noqa: E402
import run  # noqa: E402
from datafiles import resolve  # noqa: E402
from decode import greedy_complete  # noqa: E402
from utils import UsageError  # noqa: E402

QUESTION = re.compile(r'^Where was (.+) born\?$')
LONGEST = int(presets.BLOCK_SIZE * 7 / 8)  # CharCorruptionDataset's longest truncation


def probes(wiki_lines, eval_lines):
    """[(text before the place in the person's wiki line, place)] for the eval lines whose
    person has a line (starting "Name.") that names the place within its first LONGEST chars."""
    found = []
    for line in eval_lines:
        question, _, place = line.rstrip('\r\n').partition('\t')
        match = QUESTION.match(question)
        if not match or not place:
            continue
        name = match.group(1)
        doc = next((d for d in wiki_lines if d.startswith(name + '.')), None)
        if doc is None or place not in doc:
            continue
        at = doc.index(place)
        if at > 0 and at + len(place) <= LONGEST:
            found.append((doc[:at], place))
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('params')
    ap.add_argument('--variant', default='vanilla', choices=('vanilla', 'synthesizer', 'perceiver'))
    ap.add_argument('--preset', default='handout', choices=sorted(presets.PRESETS))
    ap.add_argument('--bottleneck_dim', type=int, default=presets.BOTTLENECK_DIM)
    ap.add_argument('--pretrain_corpus_path', default='wiki.txt')
    ap.add_argument('--eval_corpus_path', default='birth_dev.tsv')
    args = ap.parse_args(argv)
    try:
        wiki_path = resolve(args.pretrain_corpus_path, '--pretrain_corpus_path')
        eval_path = resolve(args.eval_corpus_path, '--eval_corpus_path')
        vocab = run.read_corpus(wiki_path)
        settings = SimpleNamespace(preset=args.preset, plain=False, dropout=None,
                                   variant=args.variant, bottleneck_dim=args.bottleneck_dim)
        gpt = run.build_model(settings, vocab.vocab_size, presets.BLOCK_SIZE, 'cpu')
        run.load_params(gpt, args.params, settings, 'cpu')
    except UsageError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)
    found = probes(vocab.data, open(eval_path, encoding='utf-8').readlines())
    recalled = 0
    for length in sorted({len(place) for _, place in found}):
        # one batch per place length: each line is continued by exactly its place's length
        group = [(before, place) for before, place in found if len(place) == length]
        prompts = [[vocab.stoi[c] for c in before] for before, _ in group]
        for out, (before, place) in zip(greedy_complete(gpt, prompts, length), group):
            recalled += ''.join(vocab.itos[int(i)] for i in out[len(before):]) == place
    print(f'recalled {recalled} of {len(found)} places from their wiki lines '
          f'({100 * recalled / max(1, len(found)):.1f}%)')


if __name__ == '__main__':
    main()
