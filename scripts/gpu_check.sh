#!/usr/bin/env bash
# The first run on a machine with one CUDA GPU, in stages that each fit one command of at most
# 10 minutes (a shared GPU machine's usual limit; on your own machine `--stage all` runs them in a row):
#
#   bash scripts/gpu_check.sh --stage tests      [--minutes 9] [--out DIR]   # CUDA tests
#   bash scripts/gpu_check.sh --stage bench      [--variants vanilla,rope] [--minutes 9] [--out DIR]
#   bash scripts/gpu_check.sh --stage assignment [--models vanilla,rope] [--minutes 9] [--out DIR]
#   bash scripts/gpu_check.sh [--stage all] [--minutes 25] [--out DIR]       # the three in order
#   --commit SHA   the commit the tree is (recorded in the reports; default: git's, if any)
#   --seed N       assignment: run.py's --seed (default 0), its work in assignment-seedN/
#
# tests       the CUDA half of the test suite (every test parametrised over the devices, the
#             CUDA resume / DataLoader-worker / DDP tests, run.py --device cuda end to end),
#             log in cuda_tests.log;
# bench       scripts/dev/benchmark.py --device cuda --compile: plain vs fast vs compiled, every
#             variant (or --variants), model FLOP utilisation -> benchmarks.md, rewritten after
#             every row;
# assignment  scripts/run_all.py -- --device cuda (London, then the --models given, default all:
#             vanilla-nopretrain, vanilla, synthesizer, perceiver m=64, rope), each model whole
#             (pretrain, finetune, evaluate dev and test) within this call: run_all's
#             --time_budget is the call's minutes, so pretraining runs the handout's epochs where
#             they fit and as many as fit otherwise (the report gives the epochs). A model whose
#             dev and test predictions are already in the work folder is skipped, so predictions
#             carried back to a fresh machine are enough.
#
# It installs nothing and uses the Python it is given: $PYTHON, else python3, else .venv's, the
# first whose torch sees a GPU (set one up with `TORCH_SPEC=torch bash scripts/setup.sh --test`).
# The data must be in data/ (python src/engine/datafiles.py puts it there; git does not hold it, so a
# copied working tree must bring data/ along). Everything is written in --work (default
# runs/gpu_check/). --out (default results/<gpu name>/) gets two files, summary.md (what was done,
# what is under way, the next command) and results.tgz (the logs, reports and predictions, no
# params or checkpoints): at the start of the call, every GPU_CHECK_TICK seconds (default 20)
# while it runs, and at its end, each replaced whole, so a call killed at any moment leaves the
# last state. Exit status: 0 the stage is done, 1 it failed or did not finish (the next command
# continues it), 2 bad usage / no GPU / no data.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=all
minutes=""
out=""
work=runs/gpu_check
models=""
variants=""
commit=""
seed=""
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=${2:-}; shift 2 || { echo "error: --models needs names, e.g. vanilla,rope" >&2; exit 2; } ;;
    --variants) variants=${2:-}; shift 2 || { echo "error: --variants needs names, e.g. vanilla,rope" >&2; exit 2; } ;;
    --commit) commit=${2:-}; shift 2 || { echo "error: --commit needs a commit" >&2; exit 2; } ;;
    --seed) seed=${2:-}; shift 2 || { echo "error: --seed needs a number" >&2; exit 2; } ;;
    --stage) stage=${2:-}; shift 2 || { echo "error: --stage needs tests, bench, assignment or all" >&2; exit 2; } ;;
    --minutes) minutes=${2:-}; shift 2 || { echo "error: --minutes needs a number" >&2; exit 2; } ;;
    --out) out=${2:-}; shift 2 || { echo "error: --out needs a folder" >&2; exit 2; } ;;
    --work) work=${2:-}; shift 2 || { echo "error: --work needs a folder" >&2; exit 2; } ;;
    *) echo "error: unknown option $1 (use --stage tests|bench|assignment|all, --minutes N, --models A,B, --variants A,B, --commit SHA, --seed N, --out DIR, --work DIR)" >&2; exit 2 ;;
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
known_models="vanilla-nopretrain vanilla synthesizer perceiver rope perceiver-starter"
for m in ${models//,/ }; do
  case " $known_models " in *" $m "*) ;; *) echo "error: --models: no model '$m' (choose from ${known_models// /, })" >&2; exit 2 ;; esac
done
for v in ${variants//,/ }; do
  case " vanilla synthesizer perceiver rope " in *" $v "*) ;; *) echo "error: --variants: no variant '$v' (choose from vanilla, synthesizer, perceiver, rope)" >&2; exit 2 ;; esac
done
case "$seed" in *[!0-9]*|0?*) echo "error: --seed must be a whole number (0 or more), not '$seed'" >&2; exit 2 ;; esac
case "$commit" in *[!0-9a-zA-Z._+-]*) echo "error: --commit '$commit': not a commit name" >&2; exit 2 ;; esac
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
# (datafiles.missing: every file but the demo's optional input.txt, either edition's wiki.txt)
if ! "$PY" -c 'import sys; sys.path.insert(0, "src"); from engine import datafiles; sys.exit(1 if datafiles.missing() else 0)' >/dev/null 2>&1; then
  echo "error: data/ lacks the assignment's data files (or they do not match data/SHA256SUMS): run python src/engine/datafiles.py, or bring data/ along with the working tree (it is not in git)" >&2
  exit 2
fi

if [ -n "$commit" ]; then
  export A5_COMMIT=$commit  # the reports' commit: a copied tree's .git may be stale
else
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
fi
gpu=$("$PY" -c 'import torch; print(torch.cuda.get_device_name())')
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | sed -e 's/nvidia //' -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//')
out=${out:-results/$slug}
mkdir -p "$out" "$work" || exit 2
adir=$work/assignment${seed:+-seed$seed}  # run_all's work: a model whose predictions are there is done
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
  echo "$name since $(date -u +%FT%TZ), at most $budget s" > "$work/under_way"
  local start; start=$(date +%s)
  timeout --signal=TERM --kill-after=$reserve "$budget" "$@"
  local rc=$?
  local outcome="done"
  [ $rc -ne 0 ] && outcome="NOT done (exit $rc$( [ $rc -eq 124 ] && echo ': out of time'))"
  echo "$(date -u +%FT%TZ) $name: $outcome in $(( $(date +%s) - start )) s" >> "$work/stages.log"
  rm -f "$work/under_way"
  pack
  return $rc
}

stage_tests() {
  run_for "tests" 1800 bash -c "set -o pipefail; '$PY' -m pytest -q -rs -k cuda tests/ 2>&1 | tee '$work/cuda_tests.log'"
}
stage_bench() {
  run_for "bench" 1800 "$PY" scripts/dev/benchmark.py --device cuda --compile --out "$work/benchmarks.md" \
    ${variants:+--variants ${variants//,/ }}
}
stage_assignment() {
  # the call's time for run_all's own budget: every model it starts ends within the call
  local seconds; seconds=$(( $(left) - 30 ))
  if [ "$seconds" -lt 60 ]; then
    echo "$(date -u +%FT%TZ) assignment: not started (no time left)" >> "$work/stages.log"; return 1
  fi
  run_for "assignment" 86400 "$PY" scripts/run_all.py --out "$adir" \
    ${models:+--models ${models//,/ }} --time_budget $(( seconds / 60 )).$(( (seconds % 60) * 10 / 60 )) \
    -- --device cuda ${seed:+--seed $seed}
  local rc=$?
  if [ $rc -ne 0 ] && [ -d "$adir" ]; then  # the report of what is there so far
    "$PY" scripts/run_all.py --report-only --out "$adir" -- --device cuda ${seed:+--seed $seed} >/dev/null 2>&1
  fi
  return $rc
}

next_command() {  # what to run after this call, given its exit status (the README's order)
  if [ "$stage" = tests ]; then echo "bash scripts/gpu_check.sh --stage assignment --minutes 9 --out $out"
  elif [ "$stage" = assignment ] && [ "$1" -ne 0 ]; then echo "bash scripts/gpu_check.sh --stage assignment${models:+ --models $models}${seed:+ --seed $seed} --minutes 9 --out $out   (continues where this one stopped)"
  elif [ "$stage" = assignment ]; then echo "bash scripts/gpu_check.sh --stage bench --minutes 4 --out $out   (or --stage assignment with the models still to run)"
  else echo "none: unpack $out/results.tgz into results/$slug/ and commit it"
  fi
}
summary() {  # summary.md's text, now
  echo "# gpu_check on $gpu"
  echo
  echo "torch $torch_version; commit $commit; this call: --stage $stage --minutes $minutes${models:+ --models $models}${seed:+ --seed $seed}${variants:+ --variants $variants}, started $started"
  echo
  if [ -f "$work/under_way" ]; then echo "under way at $(date -u +%FT%TZ): $(cat "$work/under_way")"; echo; fi
  echo '```'
  cat "$work/stages.log" 2>/dev/null
  echo '```'
  [ -f "$adir/report.md" ] && { echo; echo "## Assignment report (so far)"; echo; cat "$adir/report.md"; }
  echo
  if [ -n "${finished:-}" ]; then echo "next: $(next_command "$rc")"
  else echo "next: this call had not ended when this was written; if it was stopped, run it again (finished models are skipped)"
  fi
}
pack() {  # summary.md and results.tgz in $out, each replaced whole (a kill leaves the last pair)
  local id=${BASHPID:-$$}
  summary > "$out/.summary.md.$id" && mv -f "$out/.summary.md.$id" "$out/summary.md"
  tar czf "$out/.results.tgz.$id" --exclude='*.params' --exclude='*.ckpt' --exclude='expt' \
    --exclude='*.tgz' --exclude='*.tmp' -C "$work" . 2>/dev/null
  mv -f "$out/.results.tgz.$id" "$out/results.tgz"
}

started=$(date -u +%FT%TZ)
rc=0
rm -f "$work/under_way" "$out"/.summary.md.* "$out"/.results.tgz.*  # a killed call's
pack
# while a stage runs, the pair is refreshed every GPU_CHECK_TICK seconds (a run_all step or a
# benchmark row that ended shows up there without waiting for the stage's end)
(
  trap 'kill $nap 2>/dev/null; exit 0' TERM
  while :; do
    sleep "${GPU_CHECK_TICK:-20}" & nap=$!
    wait $nap
    kill -0 $$ 2>/dev/null || exit 0
    pack
  done
) >/dev/null 2>&1 &
ticker=$!
trap 'kill $ticker 2>/dev/null' EXIT
case "$stage" in
  tests) stage_tests || rc=1 ;;
  bench) stage_bench || rc=1 ;;
  assignment) stage_assignment || rc=1 ;;
  all) stage_tests || rc=1; stage_bench || rc=1; stage_assignment || rc=1 ;;
esac
kill $ticker 2>/dev/null
wait $ticker 2>/dev/null
rm -f "$out"/.summary.md.* "$out"/.results.tgz.*  # a pack the ticker had under way
finished=1
pack
echo
tail -n 5 "$work/stages.log"
echo "summary: $out/summary.md; results: $out/results.tgz"
echo "next: $(next_command $rc)"
exit $rc
