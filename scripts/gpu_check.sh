#!/usr/bin/env bash
# The first run on a machine with one CUDA GPU, in stages that each fit one command of at most
# 10 minutes (a lent GPU machine's limit; on your own machine `--stage all` runs them in a row):
#
#   bash scripts/gpu_check.sh --stage tests      [--minutes 9] [--out DIR]   # CUDA tests
#   bash scripts/gpu_check.sh --stage bench      [--minutes 9] [--out DIR]   # benchmark.py
#   bash scripts/gpu_check.sh --stage assignment [--minutes 9] [--out DIR]   # again until done
#   bash scripts/gpu_check.sh [--stage all] [--minutes 25] [--out DIR]       # the three in order
#
# tests       the CUDA half of the test suite (every test parametrised over the devices, the
#             CUDA resume / DataLoader-worker / DDP tests), log in cuda_tests.log;
# bench       scripts/benchmark.py --device cuda --compile: plain vs fast vs compiled, every
#             variant, model FLOP utilisation -> benchmarks.md;
# assignment  scripts/run_all.py -- --device cuda at the handout's length (London, vanilla
#             without pretraining, vanilla, synthesizer, perceiver m=64, rope). At the time
#             limit the training step in progress writes its checkpoint and stops; the next call
#             continues it (run_all skips finished steps and resumes the interrupted one), so
#             call it again until it says it is done.
#
# It installs nothing and uses the Python it is given: $PYTHON, else python3, else .venv's, the
# first whose torch sees a GPU (set one up with `TORCH_SPEC=torch bash scripts/setup.sh --test`).
# The data must be in data/ (python src/datafiles.py puts it there; git does not hold it, so a
# copied working tree must bring data/ along). Everything is written in --work (default
# runs/gpu_check/, kept between calls); after each stage --out (default results/<gpu name>/)
# gets summary.md (what was done, what was not, the next command) and results.tgz (the logs,
# reports and predictions, no params or checkpoints). Exit status: 0 the stage is done, 1 it
# failed or did not finish (the next command continues it), 2 bad usage / no GPU / no data.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=all
minutes=""
out=""
work=runs/gpu_check
while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=${2:-}; shift 2 || { echo "error: --stage needs tests, bench, assignment or all" >&2; exit 2; } ;;
    --minutes) minutes=${2:-}; shift 2 || { echo "error: --minutes needs a number" >&2; exit 2; } ;;
    --out) out=${2:-}; shift 2 || { echo "error: --out needs a folder" >&2; exit 2; } ;;
    --work) work=${2:-}; shift 2 || { echo "error: --work needs a folder" >&2; exit 2; } ;;
    *) echo "error: unknown option $1 (use --stage tests|bench|assignment|all, --minutes N, --out DIR, --work DIR)" >&2; exit 2 ;;
  esac
done
case "$stage" in
  tests|bench|assignment) minutes=${minutes:-9} ;;
  all) minutes=${minutes:-25} ;;
  *) echo "error: --stage must be tests, bench, assignment or all, not '$stage'" >&2; exit 2 ;;
esac
case "$minutes" in  # whole minutes: bash's arithmetic below has no fractions
  ''|*[!0-9]*|0|00*) echo "error: --minutes must be a number of whole minutes (1 or more), not '$minutes'" >&2; exit 2 ;;
esac
deadline=$(( $(date +%s) + 10#$minutes * 60 ))
# time kept at the end for packing the results and for a stopped step's checkpoint
reserve=45
left() { echo $(( deadline - reserve - $(date +%s) )); }

has_cuda() { "$1" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; }
PY=""
for candidate in ${PYTHON:-} python3 .venv/bin/python; do
  if command -v "$candidate" >/dev/null 2>&1 && has_cuda "$candidate"; then PY=$candidate; break; fi
done
if [ -z "$PY" ]; then
  echo "error: no CUDA GPU is visible to torch (tried ${PYTHON:+$PYTHON, }python3, .venv/bin/python); this script installs nothing: on a GPU machine set up with TORCH_SPEC=torch bash scripts/setup.sh --test" >&2
  exit 2
fi
if ! "$PY" -c 'import tqdm, tensorboard, pytest' >/dev/null 2>&1; then
  echo "error: $PY lacks tqdm, tensorboard or pytest (pip install -r requirements.txt -r requirements-test.txt); this script installs nothing" >&2
  exit 2
fi
if ! (cd data 2>/dev/null && sha256sum --quiet -c SHA256SUMS >/dev/null 2>&1); then
  echo "error: data/ lacks the assignment's data files (or they do not match data/SHA256SUMS): run python src/datafiles.py, or bring data/ along with the working tree (it is not in git)" >&2
  exit 2
fi

gpu=$("$PY" -c 'import torch; print(torch.cuda.get_device_name())')
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | sed -e 's/nvidia //' -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//')
out=${out:-results/$slug}
mkdir -p "$out" "$work" || exit 2
torch_version=$("$PY" -c 'import torch; print(torch.__version__)')
echo "GPU: $gpu; torch $torch_version ($PY); stage $stage, $minutes minutes; work in $work, results to $out"

# run_for NAME SECONDS_AT_MOST COMMAND...: run it within what is left (at most SECONDS_AT_MOST),
# record the outcome in $work/stages.log
run_for() {
  local name=$1 cap=$2; shift 2
  local budget; budget=$(left)
  [ "$budget" -gt "$cap" ] && budget=$cap
  if [ "$budget" -lt 30 ]; then
    echo "$(date -u +%FT%TZ) $name: not started (no time left)" >> "$work/stages.log"; return 1
  fi
  echo "== $name (at most $budget s)"
  local start; start=$(date +%s)
  timeout --signal=TERM --kill-after=$reserve "$budget" "$@"
  local rc=$?
  local outcome="done"
  [ $rc -ne 0 ] && outcome="NOT done (exit $rc$( [ $rc -eq 124 ] && echo ': out of time'))"
  echo "$(date -u +%FT%TZ) $name: $outcome in $(( $(date +%s) - start )) s" >> "$work/stages.log"
  return $rc
}

stage_tests() {
  run_for "tests" 1800 bash -c "set -o pipefail; '$PY' -m pytest -q -rs -k cuda tests/ 2>&1 | tee '$work/cuda_tests.log'"
}
stage_bench() {
  run_for "bench" 1800 "$PY" scripts/benchmark.py --device cuda --compile --out "$work/benchmarks.md"
}
stage_assignment() {
  run_for "assignment" 86400 "$PY" scripts/run_all.py --out "$work/assignment" -- --device cuda
  local rc=$?
  if [ $rc -ne 0 ] && [ -d "$work/assignment" ]; then  # the report of what is there so far
    "$PY" scripts/run_all.py --report-only --out "$work/assignment" -- --device cuda >/dev/null 2>&1
  fi
  return $rc
}

rc=0
case "$stage" in
  tests) stage_tests || rc=1 ;;
  bench) stage_bench || rc=1 ;;
  assignment) stage_assignment || rc=1 ;;
  all) stage_tests || rc=1; stage_bench || rc=1; stage_assignment || rc=1 ;;
esac

if [ "$stage" = tests ]; then next="bash scripts/gpu_check.sh --stage bench --out $out"
elif [ "$stage" = bench ]; then next="bash scripts/gpu_check.sh --stage assignment --minutes 9 --out $out"
elif [ $rc -ne 0 ]; then next="bash scripts/gpu_check.sh --stage assignment --minutes 9 --out $out   (continues where this one stopped)"
else next="none: unpack $out/results.tgz into results/$slug/ and commit it"
fi
{
  echo "# gpu_check on $gpu"
  echo
  echo "torch $torch_version; last call: --stage $stage --minutes $minutes, $(date -u +%FT%TZ)"
  echo
  echo '```'
  cat "$work/stages.log"
  echo '```'
  [ -f "$work/assignment/report.md" ] && { echo; echo "## Assignment report (so far)"; echo; cat "$work/assignment/report.md"; }
  echo
  echo "next: $next"
} > "$out/summary.md"
tar czf "$out/results.tgz" --exclude='*.params' --exclude='*.ckpt' --exclude='expt' --exclude='*.tgz' \
  -C "$work" . 2>/dev/null
echo
cat "$work/stages.log" | tail -n 5
echo "summary: $out/summary.md; results: $out/results.tgz"
echo "next: $next"
exit $rc
