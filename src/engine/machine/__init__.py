"""Engine (free to change): fitting the run to the machine: measured once before training (the
plan), the time budget's schedule, the CPU's load, threads and fastest path."""
