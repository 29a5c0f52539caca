"""Engine (free to change): what makes the handout's files fast, safe and able to learn on a laptop.

The handout's files (src/*.py: dataset, attention, model, models, trainer, run, utils,
london_baseline) keep the starter's names, keys and printed lines and call this package at a few
named points. Nothing here is the handout's, and nothing here imports a handout file: what it
needs of them is handed to it. Four rooms by job, each importing only from the rooms below it
(tests/handout/test_starter_names.py); each module says what it holds in its first line:

  command/   the command: run.py's flags and their checks (flags), the stages it sets up
             (stages: device, seeds, settings line, configs), the files it reads (inputs,
             params) and may write (paths), what it leaves (records), the CPU recipes' data and
             model (cpu_recipe)
  training/  the loop Trainer.train runs by default (loop) and what attaches to its named points
             (extras: checkpoint, progress, and the rooms below), minGPT's weight-decay rule,
             several commands as threads of one process taking turns (turns)
  machine/   fitting the run to the machine: the plan measured once before training (plan,
             measure), the time budget's schedule (budget), the CPU's load and fastest path
             (cpu_load, cpu_paths)
  fast/      the model's fast paths: the fused kernel's branch (fastmodel), a batch's rows in
             groups by length and cheaper dropout draws (fastpath), batches (batches), recorded
             CUDA graphs (graphs), batched decoding (decode), the model's FLOPs (flops)

and, under them all, what every room shares: presets (every hyperparameter, as named presets),
datafiles (the data set up and checked), devices (device and precision), distributed (torchrun)
and common (one-line errors, whole-or-nothing writes).
"""
