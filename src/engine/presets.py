"""Engine (free to change): every hyperparameter, as named presets.

`handout` is the assignment's run.py, value for value, and the default. The others are labelled
for what they are: shorter schedules for machines without a GPU, not the handout's settings.
The editions of the assignment (EDITIONS) differ in a few of these facts.
A preset only fills in what a command line leaves unset: `--max_epochs`, `--batch_size`,
`--pretrain_lr`, `--finetune_lr` given explicitly always win.
"""
import os
import sys

if __name__ == '__main__':  # python src/engine/presets.py: import engine from src/
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.common import UsageError

# The model: "known to work, don't change" (run.py's GPTConfig call and block_size)
MODEL = dict(n_layer=4, n_head=8, n_embd=256)
BLOCK_SIZE = 128
BOTTLENECK_DIM = 32  # --bottleneck_dim default; the perceiver handout's commands use 64

# The handout's trainer.py: its DataLoader takes the dataset in its order (no shuffle), and its
# optimizer decays every parameter whose name has neither "bias" nor "LayerNorm.weight" in it
# (TrainerConfig.shuffle, .decay_rule; optim.optimizer_groups). Its learning rate follows the
# cosine from the warmup on (decay_share None: no rate held at its peak, engine/training/schedule.py).
HANDOUT_TRAINER = dict(shuffle=False, decay_rule='names', decay_share=None)
HANDOUT = {
    # python src/run.py pretrain ...
    'pretrain': dict(max_epochs=650, batch_size=128, learning_rate=6e-3, lr_decay=True,
                     weight_decay=0.1, warmup_tokens=512 * 20,
                     final_tokens_per_example=200 * BLOCK_SIZE, num_workers=4, **HANDOUT_TRAINER),
    # python src/run.py finetune ... (no --reading_params_path: trained from scratch)
    'finetune_scratch': dict(max_epochs=75, batch_size=256, learning_rate=6e-4, lr_decay=True,
                             weight_decay=0.1, warmup_tokens=512 * 20,
                             final_tokens_per_example=200 * BLOCK_SIZE, num_workers=4,
                             **HANDOUT_TRAINER),
    # python src/run.py finetune ... --reading_params_path X (after pretraining)
    'finetune_pretrained': dict(max_epochs=10, batch_size=256, learning_rate=6e-4, lr_decay=True,
                                weight_decay=0.1, warmup_tokens=512 * 20,
                                final_tokens_per_example=200 * BLOCK_SIZE, num_workers=4,
                                **HANDOUT_TRAINER),
}
# weight_decay is the TrainerConfig default, which run.py keeps.
# final_tokens is 200 * len(pretrain_dataset) * block_size in every handout stage (the
# pretraining corpus's length, even when finetuning), hence "per example" of that corpus.


# How a run is carried out on one GPU rather than a CPU: the same function, other random draws
# (docs/gpu.md). Recorded pretraining steps computing a batch's rows in row_groups groups by
# length, each on the columns its rows need (batches.groups_for; finetuning's questions are of
# like lengths: one group); periodic checkpoints at most every checkpoint_seconds (a GPU's epochs
# take a fraction of a second, and each checkpoint writes the model and AdamW); the losses read
# back every log_every steps (each read waits for the GPU; tensorboard still gets every step).
GPU = dict(row_groups=4, checkpoint_seconds=30, log_every=25)


# The editions of the assignment, where their starter code differs. '2021-23': the synthesizer
# (2021-22) and perceiver (2022-23) handouts, the default. '2024-25': the RoPE edition (Spring
# 2024 and Winter 2025): its CharCorruptionDataset pads the masked string to block_size + 1
# characters (x and y block_size long, not block_size - 1), its pretraining's final_tokens is
# 650 x len(pretrain_dataset) x block_size (not 200 x), its tensorboard folder has no
# bottleneck_dim. Which one a command follows: see edition() below.
EDITION_ENV = 'CS224N_EDITION'
DEFAULT_EDITION = '2021-23'
# The edition this checkout follows, set once (`python src/engine/presets.py --edition 2024-25`; no
# file: the default), a file git ignores, so a switch leaves the clone clean. It lives in src/ so
# that it travels with the code: collect_submission.sh stamps the zip's copy with the
# zip's edition, and an autograder's bare `import dataset` in an unzipped submission follows it.
EDITION_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            'edition.txt')
EDITIONS = {
    '2021-23': dict(variants=('vanilla', 'synthesizer', 'perceiver'), extra_pad=0, torch_seed=1,
                    handout={}),
    '2024-25': dict(variants=('vanilla', 'rope'), extra_pad=1, torch_seed=0,
                    handout={'pretrain': dict(final_tokens_per_example=650 * BLOCK_SIZE)}),
}
# torch_seed: the starter's torch.manual_seed at the import of its model file (2022-23: 1; 2021-22
# seeds none, so 2022-23's is one of its runs; 2024-25: 0); every starter seeds python's with 0.
VARIANTS = ('vanilla', 'synthesizer', 'perceiver', 'rope')  # run.py's, every edition's together


def checkout_edition():
    """The edition named in src/edition.txt, or None (no file, or no name in it)."""
    try:
        with open(EDITION_FILE, encoding='utf-8') as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f'{EDITION_FILE}: cannot read this checkout\'s edition ({e})')


def edition_source(name=None, variant=None):
    """(edition, where it came from), from the first of: `name` (run.py's --edition); the only
    edition that has `variant` (rope: 2024-25; synthesizer, perceiver: 2021-23); $CS224N_EDITION;
    this checkout's setting (src/edition.txt); the default, 2021-23. A name that is no edition is
    a UsageError naming where it came from."""
    if name is not None:
        where = '--edition'
    else:
        having = [e for e, values in EDITIONS.items() if variant in values['variants']]
        if len(having) == 1:
            return having[0], f'the {variant} variant'
        if os.environ.get(EDITION_ENV):
            name, where = os.environ[EDITION_ENV], EDITION_ENV
        else:
            name, where = checkout_edition(), EDITION_FILE
            if name is None:
                return DEFAULT_EDITION, 'the default'
    if name not in EDITIONS:
        raise UsageError(f'{where} {name!r}: no such edition (choose from {", ".join(EDITIONS)}'
                         + ('; `python src/engine/presets.py --edition NAME` rewrites it)'
                            if where == EDITION_FILE else ')'))
    return name, where


def edition_note(name, where):
    """The one line (for stderr) a command prints as its work starts: the edition it follows and
    what chose it (edition_source). Unchosen, a 2024-25 student would otherwise get 2021-23's
    lengths unawares; a checkout switched to 2024-25 says so as plainly."""
    if where == 'the default':
        return (f'note: this command follows the {DEFAULT_EDITION} edition (the default: the '
                'synthesizer and perceiver handouts); RoPE-edition (2024-25) students set theirs '
                'once: python src/engine/presets.py --edition 2024-25')
    if where == EDITION_FILE:
        where = ('this checkout\'s setting, src/edition.txt (python src/engine/presets.py '
                 '--edition NAME changes it)')
    return f'note: this command follows the {name} edition (chosen by {where})'


def edition(name=None, variant=None):
    """The edition's name (see edition_source)."""
    return edition_source(name, variant)[0]


def set_checkout_edition(name):
    """Write src/edition.txt: every later command of this checkout follows `name`."""
    from engine.common import atomic_write
    if name not in EDITIONS:
        raise UsageError(f'--edition {name!r}: no such edition (choose from {", ".join(EDITIONS)})')

    def write(tmp):
        with open(tmp, 'w', encoding='utf-8') as f:
            f.write(name + '\n')
    atomic_write(EDITION_FILE, write)


# Not the handout's trainer: minGPT's (shuffled batches every epoch; weight decay on the matmul
# weights only). The CPU presets' pretraining and finetuning after it were tuned with it, and
# keep it; their finetuning from scratch is the handout's.
MINGPT_TRAINER = dict(shuffle=True, decay_rule='matmul')


def _preset(model=None, rehearsal_lead=None, mix=None, time_budget=None, slow=None,
            adapts=False, under_load=None, seed=None, **stage_changes):
    """The handout's model and stages, with some values replaced. rehearsal_lead: finetuning
    after pretraining also trains on the pretraining corpus, each example led by this text
    (cpu_recipe.LeadInDataset); None (the handout) finetunes on the questions alone. mix:
    pretraining, and finetuning after it, train on cpu_recipe.BornViewMix instead (dict(questions=
    the training questions' file, unless --finetune_corpus_path names one; question_share;
    lead)); None: the handout's CharCorruptionDataset, then the questions. time_budget:
    {stage: minutes}, the stage trains the epochs (up to its max_epochs) that end within them
    on the machine it runs on (run.py --time_budget, budget.py). slow: dict(model=changes,
    below_steps=N): where the model fits fewer than N steps into a budgeted pretraining here,
    and fewer than the run asks for, pretraining builds it with these changes instead
    (cpu_recipe.model_for); None: never. adapts: training on a CPU may trade exact reproducibility for
    speed: precision 'auto' measures bf16 against fp32 and torch's threads follow the machine's
    load (the same seed may then give params that differ by float noise); False computes in fp32
    on a fixed thread count, as the handout's starter does, unless --precision asks otherwise.
    under_load: the preset's runs measured by load ({source: the results page of the runs,
    runs: {condition: {layers, steps: (fewest, most), dev: what they answered}}}, one condition
    'idle'), which a run that trained fewer steps than the idle ones names at its end
    (cpu_load.SawLoad); None: nothing measured. seed: python's and torch's seed where --seed is not typed; None: the
    edition's starter's (stages.seeds)."""
    preset = {stage: {**values, **stage_changes.get(stage, {})} for stage, values in HANDOUT.items()}
    preset['model'] = {**MODEL, **(model or {})}
    preset['rehearsal_lead'] = rehearsal_lead
    preset['mix'] = dict(mix) if mix else None
    preset['time_budget'] = dict(time_budget or {})
    preset['slow'] = dict(slow) if slow else None
    preset['adapts'] = adapts
    preset['under_load'] = under_load
    preset['seed'] = seed
    return preset


# cpu-rehearsal's recipe, NOT the handout's settings: its model without dropout, pretrained at
# batch 64 and lr 1.5e-3 (the handout's 6e-3 stalled without dropout) for the epochs that fit the
# budget; finetuning also rehearses the corpus led by "Where was " (cpu_recipe.LeadInDataset), so
# that facts stored under a line's leading name are read where a question puts the name. What
# it reached, and the runs that chose it: docs/cpu-recipe.md.
CPU_RECIPE = dict(
    seed=0,  # (its runs were measured with it)
    model=dict(embd_pdrop=0.0, resid_pdrop=0.0, attn_pdrop=0.0),
    pretrain=dict(max_epochs=650, batch_size=64, learning_rate=1.5e-3,
                  final_tokens_per_example=650 * (BLOCK_SIZE - 1), **MINGPT_TRAINER),
    finetune_pretrained=MINGPT_TRAINER,
    rehearsal_lead='Where was ',
    adapts=True,
)

# cpu-20min's and cpu-45min's recipe (mixed training), NOT the handout's model or data: a
# 128-wide model (a smaller model stores more per second on a CPU) pretrained on short views of
# each wiki.txt line ("Where was NAME born ..." without dates, cpu_recipe.born_view), which store
# each place under the name where a question puts it, mixed with a quarter of the training
# questions, which teach reading it from there; finetuning continues the mix for one epoch. On a
# machine too slow for the 4-layer model's steps a 2-layer one learns more in the same minutes
# (the threshold lies between two measured probes). Figures and experiments: docs/cpu-recipe.md.
SLOW_BELOW_STEPS = 2200
MIX_STEP = 64 * (BLOCK_SIZE - 1)  # the positions of one step at batch 64, as the schedule counts
CPU_MIX = dict(
    seed=0,  # (its runs were measured with it)
    model=dict(n_embd=128, embd_pdrop=0.0, resid_pdrop=0.0, attn_pdrop=0.0),
    mix=dict(questions='birth_places_train.tsv', question_share=0.25, lead='Where was '),
    pretrain=dict(max_epochs=650, batch_size=64, learning_rate=3e-3, warmup_tokens=30 * MIX_STEP,
                  final_tokens_per_example=650 * (BLOCK_SIZE - 1), **MINGPT_TRAINER),
    finetune_pretrained=dict(max_epochs=1, batch_size=64,
                             final_tokens_per_example=1 * (BLOCK_SIZE - 1), **MINGPT_TRAINER),
    slow=dict(model=dict(n_layer=2), below_steps=SLOW_BELOW_STEPS),
    adapts=True,
)

# What cpu-20min's runs (`bash scripts/main.sh`) trained and answered by the machine's load, which
# a run that trained fewer steps than the idle ones names at its end (cpu_load.SawLoad). A
# setting of the preset, summed up from its runs on results/cpu-20min/ (runs 16-31, the rate held
# at its peak; tests/scripts/test_results_figures.py recomputes it from them); nothing reads that page.
CPU_20MIN_UNDER_LOAD = dict(
    source='results/cpu-20min/README.md: runs 16-31, the rate held at its peak',
    runs={
        'idle': dict(layers=4, steps=(2914, 3162), dev='32.0-37.6% (3 runs)'),
        'beside the light load': dict(layers=4, steps=(2294, 2604), dev='19.2-29.0% (3 runs)'),
        'with one core (beside the heavy load, or taskset)':
            dict(layers=2, steps=(3472, 3968), dev='10.8-14.0% (6 runs)'),
        'with one core, the 4 layers kept': dict(layers=4, steps=(2046, 2356),
                                                 dev='11.0-17.8% (4 runs)'),
    })

PRESETS = {
    'handout': _preset(),
    # A smoke run: the whole pipeline in a few minutes on a CPU, to see it work end to end
    # (`bash scripts/main.sh --preset cpu-quick`); too short to answer anything.
    'cpu-quick': _preset(
        seed=0,
        pretrain=dict(max_epochs=2, batch_size=32, learning_rate=3e-3),
        finetune_scratch=dict(max_epochs=2),
        finetune_pretrained=dict(max_epochs=2),
    ),
    # The handout's model shapes on a CPU (CPU_RECIPE): its params load into the handout's model.
    # 38 + 5 minutes leave 2 of 45 for the London baseline, the evaluations and each start.
    'cpu-rehearsal': _preset(**CPU_RECIPE, time_budget={'pretrain': 38, 'finetune_pretrained': 5}),
    # CPU_MIX in 41 + 1 minutes: the 20-minute recipe with more than twice its epochs.
    'cpu-45min': _preset(**CPU_MIX, time_budget={'pretrain': 41, 'finetune_pretrained': 1}),
    # `bash scripts/main.sh`'s default without a GPU: CPU_MIX in 17 + 1 minutes, its pretraining
    # rate held at the peak until the last fifth: the 2,000-2,600 steps a loaded machine gives
    # learn to answer (docs/cpu-recipe.md, E23-E26; cpu-45min's many steps keep the cosine).
    'cpu-20min': _preset(**dict(CPU_MIX, pretrain=dict(CPU_MIX['pretrain'], decay_share=0.2)),
                         time_budget={'pretrain': 17, 'finetune_pretrained': 1},
                         under_load=CPU_20MIN_UNDER_LOAD),
}


def stage_values(preset, stage, edition=DEFAULT_EDITION):
    """The trainer settings of `stage` ('pretrain', 'finetune_scratch', 'finetune_pretrained');
    the `handout` preset's are those of the edition's run.py."""
    values = dict(PRESETS[preset][stage])
    if preset == 'handout':
        values.update(EDITIONS[edition]['handout'].get(stage, {}))
    return values


def seed(preset):
    """The preset's own seed (python's and torch's), or None: the edition's starter's."""
    return PRESETS[preset]['seed']


def time_budget(preset, stage):
    """The preset's time budget for `stage` in minutes, or None (train all max_epochs)."""
    return PRESETS[preset]['time_budget'].get(stage)


def rehearsal_lead(preset):
    """The lead-in of the pretraining corpus rehearsed while finetuning pretrained params, or None."""
    return PRESETS[preset]['rehearsal_lead']


def mix(preset):
    """The preset's mixed training (see _preset), or None (the handout's datasets)."""
    return PRESETS[preset]['mix']


def slow_machine(preset):
    """The preset's model for a slow machine, dict(model=changes, below_steps=N) (see _preset),
    or None."""
    slow = PRESETS[preset]['slow']
    return None if slow is None else dict(slow, model=dict(slow['model']))


def recipe(preset):
    """Whether `preset` trains a CPU recipe's data or model (cpu_recipe.prepare): a mix, a
    rehearsal or a model for slow machines."""
    p = PRESETS[preset]
    return p['mix'] is not None or p['rehearsal_lead'] is not None or p['slow'] is not None


def adapts(preset):
    """Whether `preset` lets a CPU run choose its precision and thread count by measuring (see
    _preset); the handout's computes in fp32 on a fixed thread count."""
    return PRESETS[preset]['adapts']


def under_load(preset):
    """The preset's runs measured by load (see _preset), a copy, or None: none measured."""
    measured = PRESETS[preset]['under_load']
    if measured is None:
        return None
    return dict(measured, runs={name: dict(run) for name, run in measured['runs'].items()})


def model_values(preset):
    """The GPTConfig settings of `preset` (sizes, and dropout where it differs from GPTConfig's)."""
    return dict(PRESETS[preset]['model'])


def main(argv=None):
    """python src/engine/presets.py [--edition NAME]: say (or set, once for this checkout) the edition."""
    from engine.common import OneLineParser
    ap = OneLineParser(prog='python src/engine/presets.py',
                       description='Show, or set once for this checkout, the assignment edition '
                                   'its commands follow (src/edition.txt).')
    ap.add_argument('--edition', choices=sorted(EDITIONS), default=None,
                    help='2021-23 (synthesizer, perceiver handouts) or 2024-25 (RoPE handout)')
    args = ap.parse_args(argv)
    try:
        if args.edition is not None:
            set_checkout_edition(args.edition)
        name, where = edition_source()
    except UsageError as e:
        raise SystemExit(f'error: {e}')
    print(f'this checkout follows the {name} edition ({where}); --edition and ${EDITION_ENV} '
          'override it per command')


if __name__ == '__main__':
    main()
