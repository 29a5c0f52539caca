#!/usr/bin/env bash
# The next GPU calls (docs/gpu.md): #53's faster arithmetics under CUDA graphs; #69's side by side;
# #77's models in one process, fp16.
#   bash scripts/dev/gpu_speed.sh 1 SHA   # CUDA tests of the recorded steps and of run.py end to
#                                         # end in the GPU defaults, of rows in groups of
#                                         # groups; profile_step.py: where the pretraining step's
#                                         # time goes in fp32 and bf16, attention kernels default
#                                         # and math, 1 or 4 groups (~3.5 min; at most 6).
#                                         # (an earlier call 1, the step and loop
#                                         # benchmarks: git show 184ea59:scripts/dev/gpu_speed.sh)
#   bash scripts/dev/gpu_speed.sh 2 SHA [RUN.PY FLAGS]   # run_all's vanilla, whole, under
#                                         # --compile graphs (the step recorded, nothing compiled)
#                                         # and --row_groups 4, then the flags given (e.g.
#                                         # --row_groups 1: each batch whole), in fp32, tf32,
#                                         # then bf16 (<= 9.2 min)
#   bash scripts/dev/gpu_speed.sh 3 SHA [RUN.PY FLAGS]   # the whole assignment (London, no
#                                         # pretraining, vanilla, synthesizer, perceiver, rope)
#                                         # in one run_all under --compile graphs and the flags
#                                         # given, e.g. --precision bf16 (<= 9.5 min)
#   bash scripts/dev/gpu_speed.sh 4 SHA [RUN.PY FLAGS]   # #69: the whole assignment side by
#                                         # side (--side_by_side 7: every model at once, the
#                                         # perceiver at 6e-4 and at its starter's 6e-3), in the
#                                         # GPU default fp32 and the flags given (<= 9.5 min)
#   bash scripts/dev/gpu_speed.sh 6 SHA [RUN.PY FLAGS]   # #77: call 4 as threads of one
#                                         # process (--one_process: each model's steps on a
#                                         # CUDA stream of its own, taking turns) (<= 9.5 min)
#   bash scripts/dev/gpu_speed.sh 5 SHA   # #77: run_all's vanilla, whole, in fp16 (autocast,
#                                         # loss scaling) then fp32, both eager (fp16 cannot be
#                                         # recorded) with grouped rows: dev accuracy, stage times and
#                                         # each run's loss log side by side (<= 9.5 min)
#   bash scripts/dev/gpu_speed.sh 7 SHA   # #77's first command: the CUDA test of models as
#                                         # threads of one process (60 s); the fastest option, the
#                                         # whole assignment in bf16 as threads of one process
#                                         # (call 6, at most 280 s), then as processes (call 4, 230 s)
#   bash scripts/dev/gpu_speed.sh 8 SHA   # #77's second: the GPU defaults (no precision flag)
#                                         # as threads of one process (at most 330 s), then
#                                         # vanilla in fp16 (call 5's first half, 230 s)
# SHA: the commit of the tree sent (a copied tree's .git may be stale). Writes
# $OUT/callN.txt (what it printed) and $OUT/callN.tgz (logs, reports, predictions; no params),
# also when a timeout stops a step. Work in runs/gpu_speed/.
set -u
cd "$(dirname "$0")/../.."  # the repository root: the paths below are its
call=${1:?call 1 to 8}; export A5_COMMIT=${2:?the commit of the tree} PYTHONUNBUFFERED=1
case $call in [1-8]) ;; *) echo "error: the call is 1 to 8, not '$call'" >&2; exit 2 ;; esac
py=${PYTHON:-python3}  # a GPU machine's python3 with CUDA torch
"$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 2)' 2>/dev/null ||
  { echo "error: $py's torch sees no GPU (gpu_speed.sh measures on a GPU machine)" >&2; exit 2; }
out=${OUT:-results/gpu_speed}; work=runs/gpu_speed; mkdir -p "$out" "$work"
summary=$out/call$call.txt
say() { echo "== $(date +%T) $*" | tee -a "$summary"; }
pack() { tar czf "$out/call$call.tgz" --exclude='*.params' --exclude='*.ckpt' "$work" 2>/dev/null; }
trap pack EXIT
# whole WAY SECONDS [--one_process] [RUN.PY FLAGS]: the whole assignment side by side (every
# model at once, the perceiver at 6e-4 and at its starter's 6e-3) into $work/WAY
whole() {
  local way=$1 s=$2 one=() as=processes; shift 2
  if [ "${1:-}" = --one_process ]; then one=(--one_process); as="threads of one process"; shift; fi
  say "run_all, the whole assignment side by side (7 models at once, $as), --device cuda $* (at most $s s)"
  timeout "$s" "$py" scripts/run_all.py --preset handout --side_by_side 7 "${one[@]}" \
    --out "$work/$way" \
    --models vanilla-nopretrain vanilla synthesizer perceiver rope perceiver-starter -- \
    --device cuda "$@" > "$work/$way.stdout.log" 2>&1
  echo "rc $?" >> "$work/$way.stdout.log"
  grep -a "^| \|wall time" "$work/$way/report.md" | tee -a "$summary"
}
# vanilla_eager PRECISION SECONDS: run_all's vanilla, whole, eager steps (fp16 cannot be
# recorded) with grouped rows, into $work/PRECISION
vanilla_eager() {
  local p=$1 s=$2
  say "run_all vanilla --precision $p --compile none --row_groups 4 (at most $s s)"
  timeout "$s" "$py" scripts/run_all.py --preset handout --models vanilla --out "$work/$p" -- \
    --device cuda --precision "$p" --compile none --row_groups 4 \
    > "$work/$p.stdout.log" 2>&1
  echo "rc $?" >> "$work/$p.stdout.log"; grep -a "^| vanilla" "$work/$p/report.md" | tee -a "$summary"
}
if [ "$call" = 1 ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$summary"
  say "CUDA tests: run.py end to end in the GPU defaults (recorded, rows in groups), resumed; the recorded steps; rows in groups; models as members of one process"
  timeout 150 "$py" -m pytest -q -p no:cacheprovider tests/test_graphs.py tests/test_resume.py \
    tests/test_fast_paths.py tests/test_turns.py \
    -k "graphs or end_to_end_on_cuda or (cuda and (grouped or groups_of_rows or members))" \
    > "$work/tests.log" 2>&1
  echo "rc $?" >> "$work/tests.log"
  tail -3 "$work/tests.log" | tee -a "$summary"
  say "where the pretraining step's time goes: fp32, bf16; attention kernels default, math; rows in 1 or 4 groups"
  timeout 180 "$py" scripts/dev/profile_step.py --device cuda --precision fp32,bf16 \
    --attention default,math --row_groups 1,4 --steps 20 --out "$work/profile.md" \
    > "$work/profile.log" 2>&1
  echo "rc $?" >> "$work/profile.log"; grep -a "^| [ft][pfb]\|failed:" "$work/profile.md" | tee -a "$summary"
elif [ "$call" = 2 ]; then
  shift 2
  for p in fp32:250 tf32:150 bf16:150; do
    s=${p#*:}; p=${p%:*}
    say "run_all vanilla $p --compile graphs --row_groups 4 $* (at most $s s)"
    timeout $s "$py" scripts/run_all.py --preset handout --models vanilla --out "$work/$p" -- \
      --device cuda --precision $p --compile graphs --row_groups 4 "$@" \
      > "$work/$p.stdout.log" 2>&1
    echo "rc $?" >> "$work/$p.stdout.log"; grep -a "^| vanilla" "$work/$p/report.md" | tee -a "$summary"
  done
elif [ "$call" = 3 ]; then
  shift 2
  say "run_all, the whole assignment, --compile graphs $*"
  timeout 570 "$py" scripts/run_all.py --preset handout --out "$work/all" -- --device cuda \
    --compile graphs "$@" > "$work/all.stdout.log" 2>&1
  echo "rc $?" >> "$work/all.stdout.log"; grep -a "^| " "$work/all/report.md" | tee -a "$summary"
elif [ "$call" = 4 ]; then
  shift 2; whole side 570 "$@"
elif [ "$call" = 6 ]; then
  shift 2; whole team 570 --one_process "$@"
elif [ "$call" = 5 ]; then
  vanilla_eager fp16 300; vanilla_eager fp32 260
elif [ "$call" = 7 ]; then
  say "CUDA test: models trained as threads of one process train as each does alone"
  timeout 60 "$py" -m pytest -q -p no:cacheprovider tests/test_turns.py -k cuda \
    > "$work/turns_tests.log" 2>&1
  echo "rc $?" >> "$work/turns_tests.log"; tail -2 "$work/turns_tests.log" | tee -a "$summary"
  whole team-bf16 280 --one_process --precision bf16; whole side-bf16 230 --precision bf16
elif [ "$call" = 8 ]; then
  whole team-defaults 330 --one_process; vanilla_eager fp16 230
fi
say end
