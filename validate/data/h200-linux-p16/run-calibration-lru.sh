#!/bin/bash
# Call 1: a full calibration (GPU arms, then the host arms as their own host profile), a
# host-only calibration, then the granite and Qwen3 LRU validations with --blocks 8.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./dev/sim; W=$OUT/w; mkdir -p $W /tmp/ssd
pack() { (cd $OUT && tar czf r.tgz w); }
T0=$(date +%s); left() { echo $(( 585 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $W/smi.txt 2>&1
lscpu > $W/lscpu.txt 2>&1; cat /proc/loadavg >> $W/lscpu.txt; df -h /tmp >> $W/lscpu.txt
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw h200-linux --json --blocks 8"
Q="--trace validate/data/validation/qwen3-30b-a3b.trace --dtype int4 --hw h200-linux --json --blocks 8"
date -u +%T; timeout 200 $S calibrate --out $W/c4.json --name h200-linux --ssd-path /tmp/ssd > $W/c4.log 2>&1; echo "c4 rc $?"; tail -3 $W/c4.log; pack
date -u +%T; timeout 90 $S calibrate --only host --out $W/h2.json --name h200-linux-host --ssd-path /tmp/ssd > $W/h2.log 2>&1; echo "h2 rc $?"; tail -2 $W/h2.log; pack
val() { n=$1; shift; t=$(left); [ $t -lt 30 ] && { echo "$n skipped"; return; }; date -u +%T; timeout $t $S validate "$@" --out $W/$n.json > $W/$n.log 2>&1; echo "$n rc $?"; tail -4 $W/$n.log; pack; }
val gl $G --policy e1,e4,region:256 --evict lru --budget 50%
val ql $Q --steps 8 --policy e1,e4 --evict lru --budget 50%
date -u +%T
