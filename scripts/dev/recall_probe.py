"""How many birthplaces a pretrained model can recall from its own wiki.txt line.

Finetuning can only surface what pretraining stored. For each question of an eval file whose
person has a wiki.txt line naming the gold place within its first 112 characters (the longest
text span corruption trains on), the model continues that line's text, up to the place,
greedily for as many characters as the place has. Recall is the share of those continuations
that are the place. A model that recalls a place from its line but answers the question wrongly
holds the fact but cannot reach it from a question (docs/cpu-recipe.md).

Two more prompts (--prompt) tell what the fact is stored under: `name` gives only "Name." (how
the line starts) and counts the place anywhere in the next CONTINUE characters; `shifted` gives
"Where was Name." (the same name, 10 characters later, where a question puts it), counted alike.

    python scripts/dev/recall_probe.py vanilla.pretrain.params
    python scripts/dev/recall_probe.py runs/x/vanilla.pretrain.params --preset cpu-rehearsal --prompt name
"""
import argparse
import os
import re
import sys
from types import SimpleNamespace

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'src'))
from engine.command import stages  # noqa: E402
from engine.command import cpu_recipe  # noqa: E402
from engine import devices  # noqa: E402
from engine.command import inputs, params  # noqa: E402
import dataset  # noqa: E402
import model  # noqa: E402
from engine import presets  # noqa: E402
from engine.common import UsageError  # noqa: E402
from engine.datafiles import resolve  # noqa: E402
from engine.fast.decode import greedy_complete  # noqa: E402

QUESTION = re.compile(r'^Where was (.+) born\?$')
LONGEST = int(presets.BLOCK_SIZE * 7 / 8)  # CharCorruptionDataset's longest truncation
CONTINUE = 80  # characters generated after a `name` / `shifted` prompt


def probes(wiki_lines, eval_lines):
    """[(name, text before the place in the person's wiki line, place)] for the eval lines whose
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
            found.append((name, doc[:at], place))
    return found


def prompt_of(kind, name, before):
    return {'line': before, 'name': f'{name}.', 'shifted': f'Where was {name}.'}[kind]


def main(argv=None):
    ap = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('params')
    ap.add_argument('--variant', default='vanilla', 
                    choices=[v for v in model.VARIANTS if v != 'rope'])  # (rope not probed yet)
    ap.add_argument('--preset', default='handout', choices=sorted(presets.PRESETS))
    ap.add_argument('--bottleneck_dim', type=int, default=presets.BOTTLENECK_DIM)
    ap.add_argument('--pretrain_corpus_path', default='wiki.txt')
    ap.add_argument('--eval_corpus_path', default='birth_dev.tsv')
    ap.add_argument('--prompt', default='line', choices=('line', 'name', 'shifted'),
                    help='line: the line up to the place (default); name: "Name."; '
                         'shifted: "Where was Name."')
    args = ap.parse_args(argv)
    try:
        wiki_path = resolve(args.pretrain_corpus_path, '--pretrain_corpus_path')
        eval_path = resolve(args.eval_corpus_path, '--eval_corpus_path')
        eval_lines = inputs.read_text(eval_path, '--eval_corpus_path', lines=True)
        vocab = inputs.read_corpus(wiki_path, dataset.CharCorruptionDataset)
        settings = SimpleNamespace(preset=args.preset, plain=False, dropout=None,
                                   variant=args.variant, bottleneck_dim=args.bottleneck_dim,
                                   function='evaluate', resume=False, reading_params_path=args.params)
        settings = SimpleNamespace(**vars(settings), slow_model=cpu_recipe.slow_model(settings))
        mconf = stages.model_config(settings, model.config_for(
            args.variant, vocab.vocab_size, presets.BLOCK_SIZE, args.bottleneck_dim))
        randoms = devices.random_states('cpu')
        gpt, _ = cpu_recipe.fit_model(settings, model.GPT(mconf), mconf, model.GPT, 'cpu', randoms)
        params.load_params(gpt, args.params, stages.describe_model(settings), 'cpu')
    except UsageError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)
    found = probes(vocab.data, eval_lines)
    recalled = 0
    # one batch per continuation length: a line prompt is continued by exactly its place's length
    lengths = [len(place) if args.prompt == 'line' else CONTINUE for _, _, place in found]
    for length in sorted(set(lengths)):
        group = [f for f, n in zip(found, lengths) if n == length]
        prompts = [[vocab.stoi[c] for c in prompt_of(args.prompt, name, before)]
                   for name, before, _ in group]
        for out, prompt, (_, _, place) in zip(greedy_complete(gpt, prompts, length), prompts, group):
            text = ''.join(vocab.itos[int(i)] for i in out[len(prompt):])
            recalled += text == place if args.prompt == 'line' else place in text
    print(f'recalled {recalled} of {len(found)} places ({100 * recalled / max(1, len(found)):.1f}%), '
          f'prompt: {args.prompt}')


if __name__ == '__main__':
    main()
