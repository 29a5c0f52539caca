"""The scripts' tests (scripts/, scripts/dev/, scripts/written/): each imports its script by name."""
from support import on_path

on_path('scripts', 'scripts/dev')
