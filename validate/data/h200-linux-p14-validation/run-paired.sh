#!/bin/bash
# Paired: a full calibration right before each of the four validation commands, so each set of
# rows can be priced with constants measured minutes before it ran.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./dev-s7/sim
mkdir -p $OUT/w
P=h200-linux
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw $P --json --repeat 3"
Q="--trace validate/data/validation/qwen3-30b-a3b.trace --dtype int4 --steps 12 --hw $P --json --repeat 3"
cal() { date -u +%T; timeout 120 $S calibrate --out $OUT/w/c-$1.json --name h200-linux-p15-$1 > $OUT/w/c-$1.log 2>&1; echo "calibrate $1 rc $?"; grep "vmm at 0% fill" $OUT/w/c-$1.log; }
cal gs; timeout 150 $S validate $G --policy e1,e4,region:256,os4k --out $OUT/w/gs.json >> $OUT/w/validate.log 2>&1; echo "gs $?"
cal gl; timeout 150 $S validate $G --policy e1,e4,region:256 --evict lru --budget 50% --out $OUT/w/gl.json >> $OUT/w/validate.log 2>&1; echo "gl $?"
cal qs; timeout 150 $S validate $Q --policy e1,e4,region:256,os4k --out $OUT/w/qs.json >> $OUT/w/validate.log 2>&1; echo "qs $?"
cal ql; timeout 150 $S validate $Q --policy e1,e4 --evict lru --budget 50% --out $OUT/w/ql.json >> $OUT/w/validate.log 2>&1; echo "ql $?"
date -u +%T
cd $OUT && tar czf w.tgz w && rm -rf w
