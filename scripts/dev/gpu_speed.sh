#!/usr/bin/env bash
# The next loan's calls for #53 (docs/gpu.md): the faster arithmetics under CUDA graphs.
#   bash scripts/dev/gpu_speed.sh 1 SHA   # CUDA tests of the precisions, the packed steps and the
#                                         # recorded ones; the training loop's own cost
#                                         # (benchmark_loop.py); benchmark.py's step times in fp32,
#                                         # tf32, bf16: eager and --compile graphs, each also
#                                         # packed (--pack_multiple 512) (~6 min; at most 9)
#   bash scripts/dev/gpu_speed.sh 2 SHA [RUN.PY FLAGS]   # run_all's vanilla, whole, under
#                                         # --compile graphs (the step recorded, nothing compiled)
#                                         # and --pack_multiple 512, then the flags given (e.g.
#                                         # --pack_multiple 0: every position), in fp32, tf32,
#                                         # then bf16 (<= 9.2 min)
#   bash scripts/dev/gpu_speed.sh 3 SHA [RUN.PY FLAGS]   # the whole assignment (London, no
#                                         # pretraining, vanilla, synthesizer, perceiver, rope)
#                                         # in one run_all under --compile graphs and the flags
#                                         # given, e.g. --precision bf16 (<= 9.5 min)
# SHA: the commit of the tree sent (the lent machine's copy carries a stale .git). Writes
# $OUT/callN.txt (what it printed) and $OUT/callN.tgz (logs, reports, predictions; no params),
# also when a timeout stops a step. Work in runs/gpu_speed/.
set -u
cd "$(dirname "$0")/../.."  # the repository root: the paths below are its
call=${1:?call 1, 2 or 3}; export A5_COMMIT=${2:?the commit of the tree} PYTHONUNBUFFERED=1
case $call in 1|2|3) ;; *) echo "error: the call is 1, 2 or 3, not '$call'" >&2; exit 2 ;; esac
py=${PYTHON:-python3}  # the lent machines' python3 holds CUDA torch
"$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 2)' 2>/dev/null ||
  { echo "error: $py's torch sees no GPU (gpu_speed.sh is for a lent GPU machine)" >&2; exit 2; }
out=${OUT:-results/gpu_speed}; work=runs/gpu_speed; mkdir -p "$out" "$work"
summary=$out/call$call.txt
say() { echo "== $(date +%T) $*" | tee -a "$summary"; }
pack() { tar czf "$out/call$call.tgz" --exclude='*.params' --exclude='*.ckpt' "$work" 2>/dev/null; }
trap pack EXIT
if [ "$call" = 1 ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$summary"
  say "CUDA tests: the precisions' switches, the packed, compiled and recorded steps; run.py end to end"
  timeout 200 "$py" -m pytest -q -p no:cacheprovider tests/test_devices.py tests/test_fast_paths.py \
    tests/test_graphs.py tests/test_resume.py \
    -k "devices or graphs or (cuda and (compile or packed or skipped)) or end_to_end_on_cuda" \
    > "$work/tests.log" 2>&1
  echo "rc $?" >> "$work/tests.log"
  tail -3 "$work/tests.log" | tee -a "$summary"
  say "the loop's own cost beside a 2 ms step (simulated device): workers 4, 8, 12; afresh, ahead, ahead as bytes, and read a step behind"
  timeout 90 "$py" scripts/dev/benchmark_loop.py --workers 4,8,12 --step_ms 2 --epochs 15 \
    --rounds 1 --out "$work/loop.md" > "$work/loop.log" 2>&1
  echo "rc $?" >> "$work/loop.log"; grep -a "^[#|] " "$work/loop.md" | tee -a "$summary"
  for p in fp32 tf32 bf16; do
    say "benchmark $p"
    timeout 80 "$py" scripts/dev/benchmark.py --device cuda --compile graphs --precision $p \
      --pack_multiple 512 --variants vanilla --steps 20 --eval_questions 50 \
      --out "$work/bench_$p.md" > "$work/bench_$p.log" 2>&1
    echo "rc $?" >> "$work/bench_$p.log"; grep -a "^| pretrain" "$work/bench_$p.md" | tee -a "$summary"
  done
elif [ "$call" = 2 ]; then
  shift 2
  for p in fp32:250 tf32:150 bf16:150; do
    s=${p#*:}; p=${p%:*}
    say "run_all vanilla $p --compile graphs --pack_multiple 512 $* (at most $s s)"
    timeout $s "$py" scripts/run_all.py --preset handout --models vanilla --out "$work/$p" -- \
      --device cuda --precision $p --compile graphs --pack_multiple 512 "$@" \
      > "$work/$p.stdout.log" 2>&1
    echo "rc $?" >> "$work/$p.stdout.log"; grep -a "^| vanilla" "$work/$p/report.md" | tee -a "$summary"
  done
elif [ "$call" = 3 ]; then
  shift 2
  say "run_all, the whole assignment, --compile graphs $*"
  timeout 570 "$py" scripts/run_all.py --preset handout --out "$work/all" -- --device cuda \
    --compile graphs "$@" > "$work/all.stdout.log" 2>&1
  echo "rc $?" >> "$work/all.stdout.log"; grep -a "^| " "$work/all/report.md" | tee -a "$summary"
fi
say end
