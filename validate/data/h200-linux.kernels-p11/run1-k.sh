#!/bin/bash
# usage: dev-s6/k.sh TAG BIN...  — GPU tests, then one kernel calibration per binary (in order)
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
tag=$1; shift
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $OUT/$tag-smi.txt 2>&1
timeout 200 dev-s6/gpu --ignored --test-threads 1 --nocapture > $OUT/$tag-gpu-tests.log 2>&1; echo "gpu tests rc $?"
grep -E "test result|back to back|FAILED|panicked" $OUT/$tag-gpu-tests.log | head -12
for b in "$@"; do
  timeout 150 dev-s6/$b calibrate --only kernels --out $OUT/$tag-$b.json > $OUT/$tag-$b.log 2>&1; echo "$b rc $?"
  grep -E "stream read|window read expert|2560x640 slots 60 distinct (60|6) |layer chain" $OUT/$tag-$b.log | grep -E "fz_|stream|window|chain" | sed 's/calibrate: kernel //'
done
