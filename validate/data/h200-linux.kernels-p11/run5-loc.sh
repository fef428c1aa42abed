#!/bin/bash
# Local quantization (default) vs the pre-pass (MOE_PREP=1): GPU tests in both, then ABAB kernel calibrations.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
mkdir -p $OUT/l
timeout 60 dev-s6/gpu --ignored --test-threads 1 --nocapture > $OUT/l/tests-local.log 2>&1; echo "tests local rc $?"; grep -E "test result|panicked|back to back, layer 0|partial" $OUT/l/tests-local.log | head -8
MOE_PREP=1 timeout 60 dev-s6/gpu --ignored --test-threads 1 > $OUT/l/tests-prep.log 2>&1; echo "tests prep rc $?"; grep -E "test result" $OUT/l/tests-prep.log
for r in 1 2; do for v in local prep; do
  if [ $v = prep ]; then export MOE_PREP=1; else unset MOE_PREP; fi
  timeout 100 dev-s6/sim calibrate --only kernels --out $OUT/l/$v-$r.json > $OUT/l/$v-$r.log 2>&1; echo "== $v $r rc $?"
  grep -E "stream read|window read expert|2560x640 slots 60 distinct (60|6) PerSlot \(|layer chain|2048x768 slots 8 distinct 8 PerSlot \(" $OUT/l/$v-$r.log | sed 's/calibrate: //;s/ of distinct weights//;s/ (moe_dot_fz_r2j1s3b1)//'
done; done
cd $OUT && tar czf l.tgz l && rm -rf l
