"""The handout files' tests (src/*.py, the starters' own): the starter is read out of them by
scripts/grading/starter.py, which they import by name."""
from support import on_path

on_path('scripts/grading')
