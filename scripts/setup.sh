#!/usr/bin/env bash
# Set up everything the project needs: a virtualenv in .venv with the dependencies, and the data
# copied into data/ with its checksums verified; bubblewrap for the grader's sandbox where it can.
#   bash scripts/setup.sh          run-time dependencies
#   bash scripts/setup.sh --test   also the test dependencies
#   bash scripts/setup.sh --notebook  also Jupyter, for mingpt-demo/play_char.ipynb
# Environment: PYTHON (default python3), TORCH_SPEC (default torch==2.13.0: a CPU build on the
# project's machines; on a CUDA machine install torch first, e.g. `pip install torch`, or set
# TORCH_SPEC=torch), TORCH_INDEX (an index to take torch from: on Linux pip's default torch is the
# CUDA build, several GB; https://download.pytorch.org/whl/cpu gives the CPU build), A5_DATA_DIR (your starter's folder, where the data files are: read only where
# data/ does not hold them all already).
set -euo pipefail
cd "$(dirname "$0")/.."
test=""; notebook=""
for arg in "$@"; do
  case "$arg" in
    --test) test=1 ;;
    --notebook) notebook=1 ;;
    *) echo "error: scripts/setup.sh takes --test and --notebook, not $arg" >&2; exit 2 ;;
  esac
done
PYTHON=${PYTHON:-python3}
# the data first (it needs no package): a missing data folder is said before minutes of installing
"$PYTHON" src/engine/datafiles.py
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
if ! python -c 'import torch' 2>/dev/null; then
  python -m pip install -q ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} "${TORCH_SPEC:-torch==2.13.0}"
fi
python -m pip install -q -r requirements.txt
if [ -n "$test" ]; then
  python -m pip install -q -r requirements-test.txt
fi
if [ -n "$notebook" ]; then
  python -m pip install -q notebook
fi
# bubblewrap: the grader runs submissions' code in it (scripts/grading/README.md). Installed where
# this user can (root with apt-get); elsewhere the grader says so when it is needed.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    if ! apt-get install -y -q bubblewrap >/dev/null 2>&1; then
      { apt-get update -q && apt-get install -y -q bubblewrap; } >/dev/null 2>&1 ||
        echo "note: could not install bubblewrap (the grader's sandbox)"
    fi
  else
    echo "note: bubblewrap (bwrap) is not installed: grading submissions needs it (apt-get install bubblewrap)"
  fi
fi
# the grader's user sandbox runs submissions' code as an account of its own (user_sandbox.py):
# made here, as the grader makes it when it first needs it, for the tests, which only look for it
if [ -n "$test" ] && [ "$(id -u)" = 0 ]; then
  python - <<'PY'
import sys
sys.path.insert(0, 'scripts/grading')
import user_sandbox
if user_sandbox.make_account() is None:
    print(f"note: could not make the account {user_sandbox.USER} (the grader's user sandbox)")
PY
fi
# python3-seccomp (Debian's libseccomp for /usr/bin/python3): scripts/grading/gradescope_like.py
# refuses namespaces as Docker does with it; the tests run the autograder under those conditions.
if [ -n "$test" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 &&
    ! /usr/bin/python3 -c 'import seccomp' 2>/dev/null; then
  { apt-get install -y -q python3-seccomp || { apt-get update -q && apt-get install -y -q python3-seccomp; }; } >/dev/null 2>&1 ||
    echo "note: could not install python3-seccomp (the Gradescope-like test conditions)"
fi
