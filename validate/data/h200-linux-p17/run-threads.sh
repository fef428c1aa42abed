#!/bin/bash
# Composed validation with the CPU lane on fewer threads than the host has: is the slowdown of
# VMM calls and CPU calls beside each other a fight for cores?
S=./dev/sim; W=$OUT/w; mkdir -p $W
pack() { (cd $OUT && tar czf r.tgz w); }
cat /proc/loadavg > $W/load.txt
$S trace gen --preset qwen3-30b-a3b --skew 0.8 --locality 0.3 --tokens 40 --seed 7 --out /tmp/q.bin > /dev/null 2>&1
C="--hw h200-linux --hw-host h200-host --cpu-experts layers:8,misses --policy e1 --evict lru --budget 50% --dtype int4 --json"
G="--trace traces/data/granite/prose.bin --steps 16"
for t in 16 15 12 8; do date -u +%T; timeout 120 $S validate $C $G --blocks 3 --repeat 2 --cpu-threads $t --out $W/g$t.json > $W/g$t.log 2>&1; echo "g$t rc $?"; pack; done
for t in 16 15 8; do timeout 60 $S validate --cpu-experts layers:8 --hw-host h200-host --dtype int4 --trace traces/data/granite/prose.bin --steps 40 --repeat 3 --cpu-threads $t --out $W/l$t.txt > $W/l$t.log 2>&1; echo "l$t rc $?"; pack; done
timeout 60 $S validate --hw h200-linux --policy e1 --evict lru --budget 50% --dtype int4 $G --blocks 3 --repeat 2 --json --out $W/gpu.json > $W/gpu.log 2>&1; echo "gpu rc $?"; pack
date -u +%T; timeout 150 $S validate $C --trace /tmp/q.bin --steps 12 --blocks 3 --repeat 2 --cpu-threads 15 --out $W/q15.json > $W/q15.log 2>&1; echo "q15 rc $?"; pack
cat /proc/loadavg >> $W/load.txt; date -u +%T
