#!/usr/bin/env bash
# Set up everything the project needs: a virtualenv in .venv with the dependencies, and the data
# copied into data/ with its checksums verified.
#   bash scripts/setup.sh          run-time dependencies
#   bash scripts/setup.sh --test   also the test dependencies
# Environment: PYTHON (default python3), TORCH_SPEC (default torch==2.13.0: a CPU build on the
# project's machines; on a CUDA machine install torch first, e.g. `pip install torch`, or set
# TORCH_SPEC=torch), A5_DATA_DIR (where the data files are; default ../shared/data).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
if ! python -c 'import torch' 2>/dev/null; then
  python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
fi
python -m pip install -q -r requirements.txt
if [ "${1:-}" = "--test" ]; then
  python -m pip install -q -r requirements-test.txt
fi
python src/datafiles.py
