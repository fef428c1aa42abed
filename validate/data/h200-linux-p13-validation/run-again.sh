#!/bin/bash
# The four validation commands priced by the shipped profile, a third time this session.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./dev-s6/sim
mkdir -p $OUT/a
P=h200-linux
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw $P --json --repeat 3"
Q="--trace validate/data/validation/qwen3-30b-a3b.trace --dtype int4 --steps 12 --hw $P --json --repeat 3"
timeout 150 $S validate $G --policy e1,e4,region:256,os4k --out $OUT/a/gs.json >> $OUT/a/validate.log 2>&1; echo "gs $?"
timeout 150 $S validate $Q --policy e1,e4 --evict lru --budget 50% --out $OUT/a/ql.json >> $OUT/a/validate.log 2>&1; echo "ql $?"
timeout 150 $S validate $Q --policy e1,e4,region:256,os4k --out $OUT/a/qs.json >> $OUT/a/validate.log 2>&1; echo "qs $?"
timeout 150 $S validate $G --policy e1,e4,region:256 --evict lru --budget 50% --out $OUT/a/gl.json >> $OUT/a/validate.log 2>&1; echo "gl $?"
grep -h "error\|within" $OUT/a/validate.log | tail -20
cd $OUT && tar czf a.tgz a && rm -rf a
