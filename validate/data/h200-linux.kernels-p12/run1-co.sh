#!/bin/bash
# A/B of the preferred shared-memory carveout (MOE_CARVEOUT, experiment), one binary, alternating.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
mkdir -p $OUT/c
for r in 1 2 3 4; do
 for v in base 100; do
  if [ $v = base ]; then unset MOE_CARVEOUT; else export MOE_CARVEOUT=$v; fi
  timeout 100 dev-s7/sim calibrate --only kernels --out $OUT/c/$v-$r.json > $OUT/c/$v-$r.log 2>&1
  echo "== $v round $r rc $?"
  grep -E "stream read|window read expert|2560x640 slots 60 distinct (60|6) PerSlot \(|2048x768 slots 8 distinct 8 PerSlot \(|layer chain" $OUT/c/$v-$r.log | sed 's/calibrate: kernel //;s/ of distinct weights//;s/2560x640 slots 60 //;s/ (moe_dot_fz_r2j1s3b1)//;s/calibrate: //'
 done
done
cd $OUT && tar czf c.tgz c && rm -rf c
