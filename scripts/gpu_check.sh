#!/usr/bin/env bash
# The first run on a machine with one CUDA GPU, in one command, within a time limit:
#
#   bash scripts/gpu_check.sh                   # 25 minutes, outputs in results/<gpu-name>/
#   bash scripts/gpu_check.sh --minutes 40 --out /tmp/gpu
#
# 1. what it needs: a Python whose torch sees the GPU (python3, else .venv, else it makes .venv
#    with the CUDA build of torch: TORCH_SPEC=torch scripts/setup.sh), tqdm, tensorboard and
#    pytest (installed from requirements*.txt when missing), and the data (src/datafiles.py);
# 2. the CUDA half of the equivalence tests (fast path = plain math on the GPU: attention
#    kernels, trimmed batches, decoding, dropout, trainer vs plain loop, torch.compile, rope),
#    log in cuda_tests.log;
# 3. scripts/benchmark.py --device cuda --compile: plain vs fast vs compiled, every variant, with
#    model FLOP utilisation -> benchmarks.md;
# 4. the whole assignment at the handout's length, scripts/run_all.py -- --device cuda (London;
#    vanilla without pretraining; vanilla, synthesizer, perceiver m=64, rope: pretrain,
#    finetune, dev and test predictions), with the time left as its --time_budget (a stage the
#    budget cannot fit at full length is shortened, and its report says how many epochs ran),
#    -> report.md, report.json, loss_curves.png and the predictions (params stay beside them;
#    they are not committed: *.params is ignored).
# Each step stops at the time limit; the end says what was done and what was not. Exit status:
# 0 all done, 1 something failed or did not fit, 2 no GPU.
# Through this workplace's device tool (files come back from $OUT, 8 at most):
#   bash scripts/gpu_check.sh --out /tmp/gpu; tar czf $OUT/gpu.tgz --exclude='*.params' --exclude=expt -C /tmp gpu
set -uo pipefail
cd "$(dirname "$0")/.."
minutes=25
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=${2:?--minutes needs a number}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    *) echo "error: unknown option $1 (use --minutes N, --out DIR)" >&2; exit 2 ;;
  esac
done
case "$minutes" in  # whole minutes: bash's arithmetic below has no fractions
  ''|*[!0-9]*|0|00*) echo "error: --minutes must be a number of whole minutes (1 or more), not '$minutes'" >&2; exit 2 ;;
esac
deadline=$(( $(date +%s) + 10#$minutes * 60 ))
left() { echo $(( deadline - $(date +%s) )); }

has_cuda() { "$1" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }
PY=${PYTHON:-python3}
if ! has_cuda "$PY"; then
  if [ -x .venv/bin/python ] && has_cuda .venv/bin/python; then
    PY=.venv/bin/python
  else
    echo "no CUDA torch in $PY: setting up .venv with the CUDA build of torch"
    TORCH_SPEC=torch bash scripts/setup.sh --test && PY=.venv/bin/python
  fi
fi
if ! has_cuda "$PY"; then
  echo "error: no CUDA GPU is visible to torch ($PY); this script is for a machine with one" >&2
  exit 2
fi
if ! "$PY" -c 'import tqdm, tensorboard, pytest' 2>/dev/null; then
  "$PY" -m pip install -q -r requirements.txt -r requirements-test.txt || {
    echo "error: could not install requirements.txt / requirements-test.txt for $PY" >&2; exit 2; }
fi
"$PY" src/datafiles.py || exit 2

gpu=$("$PY" -c 'import torch; print(torch.cuda.get_device_name())')
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | sed -e 's/nvidia //' -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//')
out=${out:-results/$slug}
mkdir -p "$out"
echo "GPU: $gpu; torch $("$PY" -c 'import torch; print(torch.__version__)'); outputs in $out; $minutes minutes"

done_steps=()
missed_steps=()
# step NAME SECONDS_AT_MOST COMMAND...: run it with what is left (at most SECONDS_AT_MOST)
step() {
  local name=$1 cap=$2; shift 2
  local budget; budget=$(left)
  [ "$budget" -gt "$cap" ] && budget=$cap
  if [ "$budget" -lt 30 ]; then
    missed_steps+=("$name (no time left)"); return
  fi
  echo "== $name (at most $budget s)"
  timeout --signal=TERM --kill-after=30 "$budget" "$@"
  local rc=$?
  if [ $rc -eq 0 ]; then done_steps+=("$name"); else missed_steps+=("$name (exit $rc$([ $rc -eq 124 ] && echo ': out of time'))"); fi
}

step "CUDA equivalence tests" 480 bash -c "set -o pipefail; '$PY' -m pytest -q -rs -k cuda \
  tests/test_fast_paths.py tests/test_model_compat.py 2>&1 | tee '$out/cuda_tests.log'"
step "benchmark" 420 "$PY" scripts/benchmark.py --device cuda --compile --out "$out/benchmarks.md"
# run_all gets what is left, less a minute for its report and the summary
run_minutes=$(( ($(left) - 60) / 60 ))
if [ "$run_minutes" -ge 2 ]; then
  step "whole assignment (run_all, $run_minutes min)" $(( run_minutes * 60 + 60 )) \
    "$PY" scripts/run_all.py --out "$out" --time_budget "$run_minutes" -- --device cuda
else
  missed_steps+=("whole assignment (no time left)")
fi

echo
echo "== gpu_check on $gpu: done ${#done_steps[@]}, not done ${#missed_steps[@]}"
for s in "${done_steps[@]}"; do echo "  done: $s"; done
for s in "${missed_steps[@]}"; do echo "  NOT done: $s"; done
if [ -f "$out/report.json" ]; then
  "$PY" - "$out/report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for m in report['models']:
    dev = m['dev']
    print(f"  {m['model']}: " + (f"{dev['percent']:.1f}% dev" if dev else 'no dev predictions'))
PY
fi
[ ${#missed_steps[@]} -eq 0 ]
