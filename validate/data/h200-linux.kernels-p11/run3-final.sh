#!/bin/bash
# Final check of this pass: GPU tests, 2 kernel calibrations, then the four validation
# commands priced by the shipped profile (no calibration).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./dev-s6/sim; K=./dev-s6/gpu
mkdir -p $OUT/v
timeout 60 $K --ignored --test-threads=1 --nocapture > $OUT/v/tests.log 2>&1; echo "tests rc $?"; grep -E 'test result|back to back' $OUT/v/tests.log
for i in 1 2; do
  timeout 100 $S calibrate --only kernels --out $OUT/v/k$i.json > $OUT/v/k$i.log 2>&1; echo "k$i rc $?"
  grep -E "stream read|window read expert|2560x640 slots 60 distinct (60|6) PerSlot \(|layer chain|2048x768 slots 8 distinct 8 PerSlot \(" $OUT/v/k$i.log | sed 's/calibrate: //'
done
P=h200-linux
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw $P --json --repeat 3"
Q="--trace validate/data/validation/qwen3-30b-a3b.trace --dtype int4 --steps 12 --hw $P --json --repeat 3"
timeout 150 $S validate $G --policy e1,e4,region:256,os4k --out $OUT/v/gs.json >> $OUT/v/validate.log 2>&1; echo "gs $?"
timeout 150 $S validate $Q --policy e1,e4 --evict lru --budget 50% --out $OUT/v/ql.json >> $OUT/v/validate.log 2>&1; echo "ql $?"
timeout 150 $S validate $Q --policy e1,e4,region:256,os4k --out $OUT/v/qs.json >> $OUT/v/validate.log 2>&1; echo "qs $?"
timeout 150 $S validate $G --policy e1,e4,region:256 --evict lru --budget 50% --out $OUT/v/gl.json >> $OUT/v/validate.log 2>&1; echo "gl $?"
cd $OUT && tar czf v.tgz v && rm -rf v
