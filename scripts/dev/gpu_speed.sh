#!/usr/bin/env bash
# The next GPU loan's two calls (docs/gpu.md, "The next measurements"); the calls of earlier
# loans are in git history (git log -p -- scripts/dev/gpu_speed.sh).
#   bash scripts/dev/gpu_speed.sh 1 SHA   # at most 4 min: the GPU's name; the CUDA tests
#       (models as threads of one process against each alone, 4 layers with dropout; the
#       recorded steps; rows in groups); training throughput summed over 1, 2, 3 and 5 models
#       pretraining at once, as threads of one process and as processes, in bf16 (and as
#       processes under CUDA MPS where its daemon can start); one model in tf32 against fp32;
#       one model's recorded fp32 step with its rows in 1 group against 4 (run.py's default)
#   bash scripts/dev/gpu_speed.sh 2 SHA [RUN_ALL FLAGS] [-- RUN.PY FLAGS]   # at most 9 min: the
#       whole assignment (London, no pretraining, vanilla, synthesizer, perceiver, rope) in one
#       run_all, sized from call 1's table, e.g. `--side_by_side 3 --one_process -- --precision
#       bf16`; its report is written as each model finishes, and when the limit cuts it
# SHA: the commit of the tree sent (a copied tree's .git may be stale). Writes $OUT/callN.txt
# (what it printed) and $OUT/callN.tgz (logs, reports, predictions; no params), also when a
# limit stops a step. Every limit is `timeout -k` (the step gets SIGTERM, then SIGKILL); a
# call's limits add up to at most 540 s of the device's 600. Work in runs/gpu_speed/.
set -u
cd "$(dirname "$0")/../.."  # the repository root: the paths below are its
call=${1:?call 1 or 2}; export A5_COMMIT=${2:?the commit of the tree} PYTHONUNBUFFERED=1
case $call in 1|2) ;; *) echo "error: the call is 1 or 2, not '$call'" >&2; exit 2 ;; esac
shift 2
py=${PYTHON:-python3}  # a GPU machine's python3 with CUDA torch
"$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 2)' 2>/dev/null ||
  { echo "error: $py's torch sees no GPU (gpu_speed.sh measures on a GPU machine)" >&2; exit 2; }
for f in wiki.txt birth_places_train.tsv birth_dev.tsv birth_test_inputs.tsv; do
  [ -s "data/$f" ] || { echo "error: data/$f is not there (carry data to the GPU machine)" >&2; exit 2; }
done
out=${OUT:-results/gpu_speed}; work=runs/gpu_speed; mkdir -p "$out" "$work"
summary=$out/call$call.txt
say() { echo "== $(date +%T) $*" | tee -a "$summary"; }
pack() { tar czf "$out/call$call.tgz" --exclude='*.params' --exclude='*.ckpt' "$work" 2>/dev/null; }
trap pack EXIT
# limited SECONDS LOG COMMAND...: COMMAND under `timeout -k 10 SECONDS`, its output in LOG
limited() {
  local s=$1 log=$2; shift 2
  timeout -k 10 "$s" "$@" > "$log" 2>&1
  echo "rc $?" >> "$log"
}
table=$work/throughput.md
throughput() {  # SECONDS LABEL FLAGS...: scripts/dev/throughput.py's rows into $table
  local s=$1 label=$2; shift 2
  limited "$s" "$work/throughput-$label.log" "$py" scripts/dev/throughput.py --device cuda \
    --out "$table" --label "$label" "$@"
  grep -a "^| \|^rc" "$work/throughput-$label.log" | tee -a "$summary"
}
if [ "$call" = 1 ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$summary"
  say "CUDA tests: models as threads of one process against each alone; recorded steps; rows in groups"
  limited 45 "$work/tests.log" "$py" -m pytest -q -p no:cacheprovider tests/engine/test_turns.py \
    tests/engine/test_graphs.py tests/engine/test_fast_paths.py -k "cuda and (members or graph or groups)"
  tail -3 "$work/tests.log" | tee -a "$summary"
  say "throughput, bf16: 1, 2, 3 and 5 models pretraining at once, as threads, then as processes"
  throughput 120 bf16 --models 1 2 3 5 --way threads processes --seconds 6 --precision bf16
  if command -v nvidia-cuda-mps-control >/dev/null 2>&1 && nvidia-cuda-mps-control -d 2>/dev/null; then
    say "throughput under CUDA MPS (its daemon started for this, stopped after): 3 and 5 processes"
    throughput 25 mps --models 3 5 --way processes --seconds 6 --precision bf16
    echo quit | nvidia-cuda-mps-control
  else
    say "no CUDA MPS here (nvidia-cuda-mps-control missing or its daemon would not start)"
  fi
  say "one model: tf32 against fp32"
  throughput 15 tf32 --models 1 --way threads --seconds 5 --precision tf32
  throughput 15 fp32 --models 1 --way threads --seconds 5 --precision fp32
  say "one model's recorded fp32 step (a process): its rows in 1 group, then in 4"
  throughput 10 groups1 --models 1 --way processes --seconds 4 --precision fp32 --compile graphs --row_groups 1
  throughput 10 groups4 --models 1 --way processes --seconds 4 --precision fp32 --compile graphs --row_groups 4
else
  say "run_all, the whole assignment, $*"
  run_all=() run_py=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do run_all+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  run_py=("$@")
  limited 520 "$work/all.log" "$py" scripts/run_all.py --preset handout --out "$work/all" \
    "${run_all[@]}" -- --device cuda "${run_py[@]}"
  tail -3 "$work/all.log" | tee -a "$summary"
  grep -a "^| \|^- \*\*cut\|wall time" "$work/all/report.md" | tee -a "$summary"
fi
say end
