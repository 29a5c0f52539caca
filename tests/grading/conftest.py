"""The grader's tests (scripts/grading/): they import its modules as grade.py does, by name."""
from support import on_path

on_path('scripts/grading')
