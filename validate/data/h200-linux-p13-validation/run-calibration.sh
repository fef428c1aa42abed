#!/bin/bash
# This session's own calibration, then granite streaming and LRU replayed again under it.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./dev-s6/sim
mkdir -p $OUT/c
timeout 240 $S calibrate --out $OUT/c/h200-linux-p13.json --name h200-linux > $OUT/c/calibrate.log 2>&1; echo "calibrate rc $?"
grep -E 'stream read|page-in of|vmm|commit' $OUT/c/calibrate.log | head -20
P=$OUT/c/h200-linux-p13.json
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw $P --json --repeat 3"
timeout 150 $S validate $G --policy e1,e4,region:256 --evict lru --budget 50% --out $OUT/c/gl.json >> $OUT/c/validate.log 2>&1; echo "gl $?"
timeout 150 $S validate $G --policy e1,e4,region:256,os4k --out $OUT/c/gs.json >> $OUT/c/validate.log 2>&1; echo "gs $?"
cd $OUT && tar czf c.tgz c && rm -rf c
