"""Engine (free to change): what makes the handout's files fast, safe and able to learn on a laptop.

The handout's files (src/*.py: dataset, attention, model, models, trainer, run, utils,
london_baseline) keep the starter's names, keys and printed lines and call this package at a few
named points. Nothing here is the handout's; each module says what it holds in its first line:

  presets      every hyperparameter, as named presets (the handout's values first)
  command      run.py's flags beyond the starter's, its checks, building, saving, predicting
  inputs, paths, datafiles   the files a command reads and may write, checked before any work
  cpu_recipe   the CPU recipes' data and model (presets cpu-20min, cpu-45min, cpu-rehearsal)
  loop         the training loop Trainer.train runs by default: the starter's steps, faster
  fastmodel    the fused kernel's branch; the forward over packed rows and decoding caches
  plan         the machine measured once, before training: the run's plan
  extras       what attaches to the trainer's named points, in order
  budget, checkpoint, cpu_load, cpu_paths, progress   those extras: time budget, resume,
               threads under load and the load said at the end, precision/attention path,
               the training log
  batches, measure, weight_decay, devices, distributed, fastpath, decode, common
               batching, timing steps, optimizer groups, device and precision, torchrun,
               the bookkeeping that skips padding, batched decoding, shared helpers
"""
