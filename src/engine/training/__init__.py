"""Engine (free to change): the training loop the handout's Trainer runs, and what attaches to
its named points: the time budget's checks, resume and stop, the training log."""
