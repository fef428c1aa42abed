#!/bin/bash
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
S=./dev-s4/sim; P=h200-linux
mkdir -p $OUT/v
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw $P --json --repeat 2 --policy e4"
timeout 100 $S validate $G --out $OUT/v/gs-e4.json > $OUT/v/log.txt 2>&1; echo "gs $?"
for b in 12% 25% 50% 75%; do timeout 100 $S validate $G --evict lru --budget $b --out $OUT/v/gl-e4-$b.json >> $OUT/v/log.txt 2>&1; echo "gl $b $?"; done
timeout 100 $S validate $G --out $OUT/v/gs-e4-b.json >> $OUT/v/log.txt 2>&1; echo "gs2 $?"
cd $OUT && tar czf v.tgz v && rm -rf v
