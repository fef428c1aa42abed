#!/bin/bash
# First device script of this set: GPU tests, a full calibration, then the four validation commands
# priced by the shipped profile (re-priced by the new calibration afterwards, without a GPU).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./dev-s7/sim; K=./dev-s7/gpu
mkdir -p $OUT/v
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv > $OUT/v/smi.txt 2>&1
timeout 60 $K --ignored --test-threads=1 > $OUT/v/tests.log 2>&1; echo "tests rc $?"; grep -E 'test result' $OUT/v/tests.log
date -u +%T
timeout 200 $S calibrate --out $OUT/v/p14.json --name h200-linux-p14 > $OUT/v/calibrate.log 2>&1; echo "calibrate rc $?"
grep -E "stream read|2560x640 slots 60 distinct 60 PerSlot \(" $OUT/v/calibrate.log | sed 's/calibrate: //' | head -4
date -u +%T
P=h200-linux
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw $P --json --repeat 3"
Q="--trace validate/data/validation/qwen3-30b-a3b.trace --dtype int4 --steps 12 --hw $P --json --repeat 3"
timeout 150 $S validate $G --policy e1,e4,region:256,os4k --out $OUT/v/gs.json >> $OUT/v/validate.log 2>&1; echo "gs $?"
timeout 150 $S validate $Q --policy e1,e4 --evict lru --budget 50% --out $OUT/v/ql.json >> $OUT/v/validate.log 2>&1; echo "ql $?"
timeout 150 $S validate $Q --policy e1,e4,region:256,os4k --out $OUT/v/qs.json >> $OUT/v/validate.log 2>&1; echo "qs $?"
timeout 150 $S validate $G --policy e1,e4,region:256 --evict lru --budget 50% --out $OUT/v/gl.json >> $OUT/v/validate.log 2>&1; echo "gl $?"
date -u +%T
cd $OUT && tar czf v.tgz v && rm -rf v
