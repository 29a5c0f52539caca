"""One configuration of a CPU-recipe experiment (docs/cpu-recipe.md): train the vanilla model on a
mix of views of wiki.txt and training questions for a fixed number of steps, then measure both
halves on people held out of every training set: *stored* (the person's own line continued up to
the place) and *extracted* (the question answered).

The validation people are VAL_PEOPLE of birth_places_train.tsv, drawn with a fixed seed; their
questions never train. Views are built from a line's characters and word boundaries only: no
code here reads a place out of wiki.txt (places come from the training questions alone).

    python scripts/dev/recipe_probe.py --views suffix --steps 2000 --out runs/recipe/E1
"""
import argparse
import json
import os
import random
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'src'))
import torch  # noqa: E402

from engine.fast import decode  # noqa: E402
from engine.command import inputs  # noqa: E402
import dataset  # noqa: E402
import model  # noqa: E402
from engine import presets  # noqa: E402
import trainer  # noqa: E402
from engine.command.cpu_recipe import BORN, born_cut, born_view, undated  # noqa: E402
from dataset import MASK_CHAR, PAD_CHAR  # noqa: E402
from engine.datafiles import resolve  # noqa: E402
from engine.fast.decode import greedy_complete  # noqa: E402
from recall_probe import probes  # noqa: E402

VAL_PEOPLE = 200
SPLIT_SEED = 224
LEAD = 'Where was '
FINETUNE_LR = presets.HANDOUT['finetune_pretrained']['learning_rate']


def split_questions(lines):
    """(training lines, validation lines) of birth_places_train.tsv: VAL_PEOPLE held out."""
    order = list(range(len(lines)))
    random.Random(SPLIT_SEED).shuffle(order)
    held = set(order[:VAL_PEOPLE])
    return ([l for i, l in enumerate(lines) if i not in held],
            [l for i, l in enumerate(lines) if i in held])


def name_and_rest(line):
    """A wiki.txt line is 'NAME. sentence': (NAME, sentence)."""
    name, _, rest = line.partition('. ')
    return name, rest


def view(line, kind, rng):
    """A view of one wiki.txt line, cut at characters or word boundaries only."""
    if kind == 'line':
        return line
    name, rest = name_and_rest(line)
    words = rest.split(' ')
    if kind == 'suffix':  # the name, then the sentence from a random word on
        return f'{name}. ' + ' '.join(words[rng.randrange(len(words)):])
    if kind == 'drop':  # the name, then each word of the sentence kept with probability 1/2
        return f'{name}. ' + ' '.join(w for w in words if rng.random() < 0.5)
    if kind == 'born':  # the name, then the sentence from its first "born" on
        return f'{name} ' + born_cut(rest)
    if kind == 'bornplain':  # the born view without dates: the place keyed on the name alone
        return born_view(line, chars=None)
    if kind == 'bornshort':  # bornplain cut to 40 characters: cpu-20min's (cpu_recipe.born_view)
        return born_view(line)
    if kind == 'borndrop':  # the born view with each word after "born" kept with probability 1/2
        head, *tail = born_cut(rest).split(' ')
        return f'{name} ' + ' '.join([head] + [w for w in tail if rng.random() < 0.5])
    raise ValueError(kind)


class Mix(torch.utils.data.Dataset):
    """`length` examples, each a view of a random line (led by LEAD with probability lead_share;
    the lead's targets are PAD) or, with probability `share`, a training question (the
    handout's NameDataset example: loss on the answer only)."""

    def __init__(self, wiki_lines, questions, stoi, kinds, share, length, block=presets.BLOCK_SIZE,
                 lead_share=0.5):
        self.lines, self.questions, self.stoi = wiki_lines, questions, stoi
        self.kinds, self.share, self.length, self.block = kinds, share, length, block
        self.lead_share = lead_share

    def __len__(self):
        return self.length

    def encode(self, text, targets_from):
        text = (text + PAD_CHAR * self.block)[:self.block]
        x = torch.tensor([self.stoi[c] for c in text[:-1]], dtype=torch.long)
        y = torch.tensor([self.stoi[c] for c in text[1:]], dtype=torch.long)
        y[:max(0, targets_from - 1)] = 0
        return x, y

    def __getitem__(self, idx):
        rng = random  # seeded per batch by batches.collate
        if rng.random() < self.share:
            question, place = rng.choice(self.questions).split('\t')
            return self.encode(question + MASK_CHAR + place + MASK_CHAR, len(question))
        text = view(rng.choice(self.lines), rng.choice(self.kinds), rng)
        lead = LEAD if rng.random() < self.lead_share else ''
        return self.encode(lead + text, len(lead))


def born_view_probes(found):
    """probes() in the `born` view's form: the name, then the line from its first "born" up to
    the place (people whose place comes before any "born" are left out)."""
    out = []
    for name, before, place in found:
        rest = before[len(name) + 2:]
        if BORN.search(rest):
            out.append((name, f'{name} ' + born_cut(rest), place))
    return out


def stored(gpt, vocab, wiki_lines, eval_lines, form='line'):
    """Share of eval people whose own text, given up to the place, is continued by the place:
    form 'line' the wiki.txt line as it is, 'born' the born view of it (what that mix trains),
    'bornplain' that view without its dates, 'name born in' the name then "born in"."""
    found = probes(wiki_lines, eval_lines)
    if form in ('born', 'bornplain', 'name born in'):
        found = born_view_probes(found)
    if form == 'name born in':  # the name alone before the place: what a question gives
        found = [(n, f'{n} born in ', p) for n, _, p in found]
    if form == 'bornplain':
        found = [(n, undated(b[:-1]) + b[-1:] if b.endswith(' ') else undated(b), p)
                 for n, b, p in found]
    hits = 0
    for length in sorted({len(p) for _, _, p in found}):
        group = [f for f in found if len(f[2]) == length]
        prompts = [[vocab.stoi[c] for c in before] for _, before, _ in group]
        for out, prompt, (_, _, place) in zip(greedy_complete(gpt, prompts, length), prompts, group):
            hits += ''.join(vocab.itos[int(i)] for i in out[len(prompt):]) == place
    return hits / max(1, len(found)), len(found)


def extracted(gpt, vocab, eval_lines):
    questions = [l.split('\t') for l in eval_lines]
    prompts = [[vocab.stoi[c] for c in q + MASK_CHAR] for q, _ in questions]
    answers = decode.predict(gpt, prompts, vocab, 'cpu')
    return sum(a == p for a, (_, p) in zip(answers, questions)) / len(questions), answers


def train_steps(gpt, data, steps, learning_rate, warmup_steps, batch_size, weight_decay=0.1,
                decay_rule=presets.MINGPT_TRAINER['decay_rule'], schedule='cosine'):
    """`steps` batches of `data` (one pass), the learning rate warmed up over `warmup_steps` and
    decayed by the cosine to its floor at the last step; the weight decay on the parameters
    `decay_rule` names (optim.optimizer_groups); schedule 'wsd': the peak held until the last
    fifth, then a straight line to the floor (TrainerConfig.decay_share, engine/machine/budget.py)."""
    row = (presets.BLOCK_SIZE - 1) * batch_size
    tconf = trainer.TrainerConfig(max_epochs=1, batch_size=batch_size,
                                  learning_rate=learning_rate, lr_decay=True,
                                  warmup_tokens=warmup_steps * row, final_tokens=steps * row,
                                  weight_decay=weight_decay, precision='auto', log_every=50,
                                  decay_share=0.2 if schedule == 'wsd' else None,
                                  **dict(presets.MINGPT_TRAINER, decay_rule=decay_rule))
    trainer.Trainer(gpt, data, None, tconf).train()


def finetune(gpt, wiki_lines, train_q, vocab, args):
    """args.finetune_epochs passes' worth of the training questions (loss on the answer) at
    args.finetune_lr, decayed as the handout's finetuning; with args.finetune_share < 1 every
    batch also holds the mix's views (the questions args.finetune_share of it)."""
    length = round(args.finetune_epochs * len(train_q) / args.finetune_share)
    questions = Mix(wiki_lines, train_q, vocab.stoi, args.views.split(','), args.finetune_share,
                    length, lead_share=args.lead_share)
    train_steps(gpt, questions, -(-length // args.batch_size), args.finetune_lr, 0,
                args.batch_size)


def measure_extraction(gpt, vocab, val_q, train_q, result):
    """The held-out questions and 200 training ones answered, into `result`; the held-out
    answers."""
    result['extracted_val'], answers = extracted(gpt, vocab, val_q)
    result['extracted_train200'] = extracted(gpt, vocab, random.Random(1).sample(train_q, 200))[0]
    return answers


def write_lines(path, lines):
    with open(path, 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines) + '\n')


def write_result(out, result):
    with open(os.path.join(out, 'result.json'), 'w', encoding='utf-8') as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


def main(argv=None):
    ap = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
    ap.add_argument('--views', default='suffix', help='comma-separated: line, suffix, drop, born, bornplain, bornshort, borndrop')
    ap.add_argument('--question_share', type=float, default=0.25)
    ap.add_argument('--lead_share', type=float, default=0.5,
                    help='the share of views led by "Where was "')
    ap.add_argument('--steps', type=int, default=2000)
    ap.add_argument('--batch_size', type=int, default=64)
    ap.add_argument('--learning_rate', type=float, default=3e-3)
    ap.add_argument('--warmup_steps', type=int, default=30)
    ap.add_argument('--schedule', choices=('cosine', 'wsd'), default='cosine',
                    help="the mix's learning rate after the warmup: the handout's cosine, or held "
                         "at its peak until the last fifth of the steps, then straight down")
    ap.add_argument('--weight_decay', type=float, default=0.1,
                    help='AdamW\'s, on the matmul weights (the handout\'s 0.1)')
    ap.add_argument('--decay_rule', choices=('matmul', 'names'),
                    default=presets.MINGPT_TRAINER['decay_rule'],
                    help="which parameters the weight decay reaches: minGPT's matmul weights (the "
                         "CPU presets', E0-E17) or the handout trainer's every-name-but-bias")
    ap.add_argument('--n_embd', type=int, default=presets.MODEL['n_embd'])
    ap.add_argument('--n_layer', type=int, default=presets.MODEL['n_layer'])
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--dev', action='store_true', help='also measure dev (only for a kept recipe)')
    ap.add_argument('--out', required=True)
    ap.add_argument('--remeasure', action='store_true',
                    help='pretrain nothing: start from OUT/model.params (result.json updated, or '
                         'with --finetune_epochs a new OUT/finetune-N/)')
    ap.add_argument('--finetune_epochs', type=int, default=0,
                    help='after the mix, this many epochs of the training questions alone')
    ap.add_argument('--finetune_lr', type=float, default=FINETUNE_LR)
    ap.add_argument('--finetune_share', type=float, default=1.0,
                    help='the questions\' share of each finetuning batch; the rest are --views '
                         '(1: the questions alone)')
    args = ap.parse_args(argv)

    torch.manual_seed(args.seed)
    random.seed(args.seed)
    vocab = inputs.read_corpus(resolve('wiki.txt', 'wiki.txt'), dataset.CharCorruptionDataset)
    wiki_lines = [line for line in vocab.data if line.strip()]
    train_lines = open(resolve('birth_places_train.tsv', 'train'), encoding='utf-8').read().splitlines()
    train_q, val_q = split_questions([l for l in train_lines if l.strip()])
    sizes = dict(presets.model_values('cpu-20min'), n_embd=args.n_embd, n_layer=args.n_layer)
    gpt = model.GPT(model.config_for('vanilla', vocab.vocab_size, presets.BLOCK_SIZE, **sizes))
    if args.remeasure:
        with open(os.path.join(args.out, 'result.json'), encoding='utf-8') as f:
            result = json.load(f)
        gpt.load_state_dict(torch.load(os.path.join(args.out, 'model.params'), weights_only=True))
        if args.finetune_epochs:
            start = time.time()
            finetune(gpt, wiki_lines, train_q, vocab, args)
            args.out = os.path.join(args.out, f'finetune-{args.finetune_epochs}' + (
                f'-share{args.finetune_share:g}' if args.finetune_share < 1 else '') + (
                f'-lr{args.finetune_lr:g}' if args.finetune_lr != FINETUNE_LR else ''))
            os.makedirs(args.out, exist_ok=True)
            result = dict(result, finetune_epochs=args.finetune_epochs,
                          finetune_lr=args.finetune_lr, finetune_share=args.finetune_share,
                          finetune_minutes=round((time.time() - start) / 60, 2))
            gpt.eval()
            write_lines(os.path.join(args.out, 'val.predictions'),
                        measure_extraction(gpt, vocab, val_q, train_q, result))
        gpt.eval()
        result['stored_val_born'], result['stored_val_born_n'] = stored(
            gpt, vocab, wiki_lines, val_q, 'born')
        write_result(args.out, result)
        return
    mix = Mix(wiki_lines, train_q, vocab.stoi, args.views.split(','), args.question_share,
              args.steps * args.batch_size, lead_share=args.lead_share)
    os.makedirs(args.out, exist_ok=True)
    start = time.time()
    train_steps(gpt, mix, args.steps, args.learning_rate, args.warmup_steps, args.batch_size,
                args.weight_decay, args.decay_rule, args.schedule)
    minutes = (time.time() - start) / 60
    gpt.eval()
    result = dict(vars(args), minutes=round(minutes, 2), machine=torch.backends.cpu.get_cpu_capability(),
                  threads=torch.get_num_threads())
    result['stored_val'], result['stored_val_n'] = stored(gpt, vocab, wiki_lines, val_q)
    result['stored_val_born'], result['stored_val_born_n'] = stored(gpt, vocab, wiki_lines, val_q,
                                                                    'born')
    result['stored_val_bornplain'] = stored(gpt, vocab, wiki_lines, val_q, 'bornplain')[0]
    result['stored_val_name_born_in'] = stored(gpt, vocab, wiki_lines, val_q, 'name born in')[0]
    answers = measure_extraction(gpt, vocab, val_q, train_q, result)
    if args.dev:
        dev = [l for l in open(resolve('birth_dev.tsv', 'dev'), encoding='utf-8').read().splitlines() if l]
        result['stored_dev'] = stored(gpt, vocab, wiki_lines, dev)[0]
        result['dev'], dev_answers = extracted(gpt, vocab, dev)
        write_lines(os.path.join(args.out, 'dev.predictions'), dev_answers)
    write_lines(os.path.join(args.out, 'val.predictions'), answers)
    torch.save(gpt.state_dict(), os.path.join(args.out, 'model.params'))
    write_result(args.out, result)


if __name__ == '__main__':
    main()
