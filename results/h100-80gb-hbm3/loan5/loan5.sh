# The fifth loan's calls (docs/gpu.md's plan, merged to fit 15 minutes): bash loan/loan5.sh 1|2
set -u
export A5_COMMIT=82301ed PYTHONUNBUFFERED=1
call=$1; W=runs/loan5; mkdir -p $W
S=$OUT/call$call.txt
log() { echo "== $(date +%T) $*" | tee -a $S; }
finish() { tar czf $OUT/call$call.tgz --exclude='*.params' --exclude='*.pt' --exclude='*.ckpt' $W 2>/dev/null; ls -la $OUT; }
trap finish EXIT
if [ "$call" = 1 ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee -a $S
  python3 - <<'PY' 2>&1 | tee -a $S
import torch, torch.nn.functional as F
print('torch', torch.__version__)
q = torch.randn(128, 8, 128, 32, device='cuda')
for dt in (torch.float32, torch.bfloat16):
    for p in (0.0, 0.1):
        x = q.to(dt)
        print('sdpa default choice', dt, 'dropout', p, torch._fused_sdp_choice(x, x, x, None, p, True))
print('enum', {b.name: int(b) for b in torch.nn.attention.SDPBackend if hasattr(b, 'name')})
PY
  log "compile tests (cuda)"
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_fast_paths.py -k "compile and cuda" > $W/compile_tests.log 2>&1; echo "rc $?" >> $W/compile_tests.log
  tail -5 $W/compile_tests.log | tee -a $S
  log "run_all handout vanilla fp32 reduce-overhead"
  timeout 330 python3 scripts/run_all.py --preset handout --models vanilla --out $W/ro -- --device cuda --compile reduce-overhead > $W/ro.stdout.log 2>&1; echo "rc $?" >> $W/ro.stdout.log
  tail -3 $W/ro.stdout.log | tee -a $S; grep -a "dev\|wall\|epochs\|tok/s" $W/ro/report.md | head -30 | tee -a $S
  log "bench fp32 reduce-overhead"
  timeout 100 python3 scripts/dev/benchmark.py --device cuda --compile reduce-overhead --variants vanilla --steps 40 --out $W/bench_ro.md > $W/bench_ro.log 2>&1; echo "rc $?" >> $W/bench_ro.log
  cat $W/bench_ro.md 2>/dev/null | tee -a $S; tail -3 $W/bench_ro.log | tee -a $S
  log "end"
elif [ "$call" = 2 ]; then
  log "run_all handout vanilla bf16 reduce-overhead"
  timeout ${RUN_S:-300} python3 scripts/run_all.py --preset handout --models vanilla --out $W/bf16 -- --device cuda --compile reduce-overhead --precision bf16 > $W/bf16.stdout.log 2>&1; echo "rc $?" >> $W/bf16.stdout.log
  tail -3 $W/bf16.stdout.log | tee -a $S; grep -a "dev\|wall\|epochs\|tok/s" $W/bf16/report.md | head -30 | tee -a $S
  log "bench tf32 (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1) reduce-overhead"
  TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 timeout ${BENCH_S:-90} python3 scripts/dev/benchmark.py --device cuda --compile reduce-overhead --variants vanilla --steps 40 --out $W/bench_tf32.md > $W/bench_tf32.log 2>&1; echo "rc $?" >> $W/bench_tf32.log
  cat $W/bench_tf32.md 2>/dev/null | tee -a $S
  log "end"
fi
if [ "$call" = 3 ]; then
  log "cProfile: 20 epochs fp32 eager"
  timeout 60 python3 -m cProfile -o $W/prof.out src/run.py pretrain vanilla wiki.txt --writing_params_path $W/p.params --max_epochs 20 --device cuda > $W/prof.run.log 2>&1
  python3 -c "import pstats; p=pstats.Stats('$W/prof.out'); p.sort_stats('tottime').print_stats(25); p.sort_stats('cumulative').print_stats(30)" > $W/prof.txt 2>&1
  grep -a -A28 "tottime" $W/prof.txt | head -60 | cut -c1-160 | tee -a $S
  for w in 0 4 12; do
    log "30 epochs num_workers $w"
    s0=$(date +%s.%N); timeout 60 python3 src/run.py pretrain vanilla wiki.txt --writing_params_path $W/p.params --max_epochs 30 --device cuda --num_workers $w > $W/w$w.log 2>&1
    echo "workers $w: $(python3 -c "print(round($(date +%s.%N)-$s0,1))") s rc $?" | tee -a $S
  done
  log "bf16 kernels 40 epochs"
  timeout 100 python3 scripts/dev/bf16_kernels.py --device cuda --epochs 40 --marks 1,10,20,30,40 --only bf16-cudnn,bf16-default --out $W/bf16_kernels.md > $W/bf16_kernels.log 2>&1
  cat $W/bf16_kernels.md | tee -a $S
  log "end"
fi
if [ "$call" = 4 ]; then
  for m in tb notb notb-ro tb notb; do
    log "$m"; timeout 100 python3 loan/tb.py $m 60 > $W/$m.log 2>&1; grep -a RESULT $W/$m.log | tee -a $S; tail -2 $W/$m.log | tr '\r' '\n' | tail -2 | tee -a $S
  done
  log end
fi
