#!/bin/bash
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./dev-s5/sim; K=./dev-s5/gpu
mkdir -p $OUT/v
timeout 60 $K --ignored --test-threads=1 --nocapture > $OUT/v/tests.log 2>&1; echo "tests rc $?"; grep 'test result' $OUT/v/tests.log
timeout 200 $S calibrate --out $OUT/v/h200-linux-p12.json --name h200-linux > $OUT/v/calibrate.log 2>&1; echo "calibrate rc $?"
grep -E 'stream read|2560x640 slots 60 distinct (60|6) PerSlot(:moe_dot_xp_r2j1n3b4| )|2048x768 slots 8 distinct 8 PerSlot \(' $OUT/v/calibrate.log | head -12
P=$OUT/v/h200-linux-p12.json
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw $P --json --repeat 3"
Q="--trace validate/data/validation/qwen3-30b-a3b.trace --dtype int4 --steps 12 --hw $P --json --repeat 3"
timeout 150 $S validate $G --policy e1,e4,region:256,os4k --out $OUT/v/gs.json >> $OUT/v/validate.log 2>&1; echo "gs $?"
timeout 150 $S validate $Q --policy e1,e4 --evict lru --budget 50% --out $OUT/v/ql.json >> $OUT/v/validate.log 2>&1; echo "ql $?"
timeout 150 $S validate $Q --policy e1,e4,region:256,os4k --out $OUT/v/qs.json >> $OUT/v/validate.log 2>&1; echo "qs $?"
timeout 150 $S validate $G --policy e1,e4,region:256 --evict lru --budget 50% --out $OUT/v/gl.json >> $OUT/v/validate.log 2>&1; echo "gl $?"
grep "page-in of" $OUT/v/calibrate.log
grep -h "error\|within" $OUT/v/validate.log | tail -30
cd $OUT && tar czf v.tgz v && rm -rf v
