#!/bin/bash
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./devlead/sim
mkdir -p $OUT/v
( $S calibrate --out $OUT/v/h200-linux-p7.json --name h200-linux ) > $OUT/v/calibrate.log 2>&1
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw $OUT/v/h200-linux-p7.json --json --repeat 3"
Q="--trace validate/data/validation/qwen3-30b-a3b.trace --dtype int4 --steps 12 --hw $OUT/v/h200-linux-p7.json --json --repeat 3"
$S validate $G --policy e1,e4,region:256,os4k --out $OUT/v/gs.json >> $OUT/v/validate.log 2>&1
$S validate $Q --policy e1,e4 --evict lru --budget 50% --out $OUT/v/ql.json >> $OUT/v/validate.log 2>&1
$S validate $Q --policy e1,e4,region:256,os4k --out $OUT/v/qs.json >> $OUT/v/validate.log 2>&1
$S validate $G --policy e1,e4,region:256 --evict lru --budget 50% --out $OUT/v/gl.json >> $OUT/v/validate.log 2>&1
cd $OUT && tar czf v.tgz v && rm -rf v
