#!/usr/bin/env bash
# Build the Gradescope zip as the handout's collect_submission.sh does: assignment5_submission.zip
# (2021-22 and 2022-23: src/, the data files, the params files and the prediction files) or
# assignment4_submission.zip (2024-25, rope: src/, the params and prediction files and
# london_baseline_accuracy.txt, no data). Unlike the handout's script it first checks the
# submission and refuses to zip an incomplete one.
#
#   bash collect_submission.sh                         # files in the current folder, handout auto-detected
#   bash collect_submission.sh --handout perceiver     # 2022-23 handout (synthesizer: 2021-22; rope: 2024-25)
#   bash collect_submission.sh --dir runs/all-handout  # params/predictions from another folder
#   bash collect_submission.sh --output /tmp/a5.zip    # another zip path
#
# The file lists, the checks and the zipping are scripts/grading/submission.py's (a module a grader can
# import); this wrapper only finds a Python 3. Exit status: 0 zip written, 1 submission
# incomplete, 2 bad usage / handout unclear.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "error: $PYTHON not found (set PYTHON to a Python 3 interpreter)" >&2
  exit 2
fi
exec "$PYTHON" "$REPO/scripts/grading/submission.py" "$@"
