#!/bin/bash
# Composed validation: CPU lane threads sleeping (default) or spinning between groups (--cpu-poll).
S=./dev/sim; W=$OUT/w; mkdir -p $W
pack() { (cd $OUT && tar czf r.tgz w); }
cat /proc/loadavg > $W/load.txt
$S trace gen --preset qwen3-30b-a3b --skew 0.8 --locality 0.3 --tokens 40 --seed 7 --out /tmp/q.bin > /dev/null 2>&1
C="--hw h200-linux --hw-host h200-host --cpu-experts layers:8,misses --policy e1 --evict lru --budget 50% --dtype int4 --json"
G="--trace traces/data/granite/prose.bin --steps 16 --blocks 3 --repeat 2"
Q="--trace /tmp/q.bin --steps 12 --blocks 3 --repeat 2"
for v in "gs16:$G" "gp16:$G --cpu-poll" "gp15:$G --cpu-poll --cpu-threads 15" "gs16b:$G" "gp16b:$G --cpu-poll" "qp16:$Q --cpu-poll" "qs16:$Q"; do
  n=${v%%:*}; a=${v#*:}; date -u +%T; timeout 150 $S validate $C $a --out $W/$n.json > $W/$n.log 2>&1; echo "$n rc $?"; pack
done
cat /proc/loadavg >> $W/load.txt; date -u +%T
