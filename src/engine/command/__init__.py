"""Engine (free to change): the command: run.py's flags and their checks, the stages it sets up,
the files it reads and writes (each checked before any work), and what it leaves behind."""
