#!/bin/bash
# usage: dev-s6/ab.sh TAG ROUNDS VARIANT...  — VARIANT is name=MOE_DEFINES (name "base" also sets MOE_PLAIN_PREP)
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
tag=$1; rounds=$2; shift 2
timeout 100 dev-s6/gpu --ignored --test-threads 1 > $OUT/$tag-gpu-tests.log 2>&1; echo "gpu tests rc $?"; grep "test result" $OUT/$tag-gpu-tests.log
for r in $(seq 1 $rounds); do
 for v in "$@"; do
  name=${v%%=*}; defs=${v#*=}
  if [ "$name" = base ]; then export MOE_PLAIN_PREP=1; else unset MOE_PLAIN_PREP; fi
  MOE_DEFINES="$defs" timeout 100 dev-s6/sim calibrate --only kernels --out $OUT/$tag-$name-$r.json > $OUT/$tag-$name-$r.log 2>&1
  echo "== $name round $r rc $?"
  grep -E "window read expert|2560x640 slots 60 distinct (60|6) PerSlot \(|layer chain" $OUT/$tag-$name-$r.log | sed 's/calibrate: kernel //;s/ of distinct weights//;s/2560x640 slots 60 //;s/ (moe_dot_fz_r2j1s3b1)//;s/calibrate: //'
 done
done
