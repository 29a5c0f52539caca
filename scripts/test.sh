#!/usr/bin/env bash
# Set up (scripts/setup.sh --test), then the linter and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
. .venv/bin/activate
ruff check  # (ruff.toml: unused and undefined names, syntax errors)
python -m pytest -q -rs --durations=20 -n auto --dist worksteal tests "$@"
