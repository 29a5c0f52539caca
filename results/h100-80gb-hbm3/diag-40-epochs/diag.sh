#!/usr/bin/env bash
# Why did vanilla pretraining's loss rise on CUDA? 40 epochs each, per-epoch mean loss.
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."
run() {  # NAME FLAGS...
  local name=$1; shift
  local t0=$(date +%s)
  timeout 90 python3 src/run.py pretrain vanilla wiki.txt --writing_params_path /tmp/$name.params \
    --max_epochs 40 --device cuda --tb_expt_name $name "$@" > $OUT/$name.out 2> $OUT/$name.err
  echo "$name rc=$? $(( $(date +%s) - t0 ))s: $(tr '\r' '\n' < $OUT/$name.err | grep -oE 'epoch [0-9]+ iter 22: train loss [0-9.]+' | awk '!seen[$2]++' | awk '$2==1||$2==5||$2==10||$2==15||$2==20||$2==25||$2==30||$2==35||$2==40{printf "%s:%s ", $2, $7}')"
}
run A_default
run B_fp32 --precision fp32
run C_plain --plain
run D_fp32_plain --precision fp32 --plain
run E_workers0 --num_workers 0
run F_fp32_plain_w0 --precision fp32 --plain --num_workers 0
grep -h "precision\|attention\|workers" $OUT/A_default.out | head -5
tar czf $OUT/errs.tgz -C $OUT $(cd $OUT && ls *.err) && rm -f $OUT/*.err
