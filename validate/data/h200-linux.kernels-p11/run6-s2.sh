#!/bin/bash
# 2 stages of 80 KiB tiles (moe_dot_fz_r2j1s2b1) against the default 3 x 40 KiB, interleaved in one calibration; twice.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
mkdir -p $OUT/s
timeout 60 dev-s6/gpu --ignored --test-threads 1 --nocapture > $OUT/s/tests.log 2>&1; echo "tests rc $?"; grep -E "test result|panicked|fz_r2j1s2b1" $OUT/s/tests.log | head -8
for r in 1 2; do
  timeout 100 dev-s6/sim calibrate --only kernels --out $OUT/s/k$r.json > $OUT/s/k$r.log 2>&1; echo "== $r rc $?"
  grep -E "stream read|window read expert|2560x640 slots 60 distinct (60|6) PerSlot|layer chain" $OUT/s/k$r.log | grep -E "fz_|stream|window|chain" | grep -v "/gate_up\|/down" | sed 's/calibrate: //;s/ of distinct weights//'
done
cd $OUT && tar czf s.tgz s && rm -rf s
