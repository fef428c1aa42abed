#!/bin/bash
# Recorded 2026-12-07 on one NVIDIA H100 80GB HBM3 (driver 580.159.04), from the working tree
# with the binary in devbin/ (branch gpu, commit 29d33f1). devbin/ds.bin is validation/deepseek-v3.trace
# here (`sim trace gen --preset deepseek-v3 --skew 0.8 --locality 0.3 --tokens 24 --seed 7`);
# devbin/c2.json is c2.json here. $OUT/w/* were copied into this folder.
# Call 2 (H100): a second full calibration, the granite and Qwen3 streaming validations with
# --blocks 8 under it, DeepSeek-V3-geometry LRU replays (int4, e1) at budgets whose live sets
# are about 8k, 16k and 31k granules, then a third full calibration if time is left.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./devbin/sim; W=$OUT/w; mkdir -p $W /tmp/ssd
pack() { (cd $OUT && tar czf r.tgz w); }
T0=$(date +%s); left() { echo $(( 560 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,memory.total,memory.free --format=csv > $W/smi2.txt 2>&1; cat /proc/loadavg >> $W/smi2.txt
P=$W/c2.json
date -u +%T; timeout 210 $S calibrate --out $P --name h100-linux --ssd-path /tmp/ssd > $W/c2.log 2>&1; echo "c2 rc $?"; tail -3 $W/c2.log; pack
[ -f $P ] || P=h200-linux
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw $P --json --blocks 8"
Q="--trace validate/data/validation/qwen3-30b-a3b.trace --dtype int4 --hw $P --json --blocks 8"
D="--trace devbin/ds.bin --dtype int4 --steps 12 --hw $P --json --blocks 8 --policy e1 --evict lru"
val() { n=$1; m=$2; shift 2; t=$(left); [ $t -lt $m ] && { echo "$n skipped"; return; }; date -u +%T; timeout $t $S validate "$@" --out $W/$n.json > $W/$n.log 2>&1; echo "$n rc $?"; tail -4 $W/$n.log; pack; }
val gs 40 $G --policy e1,e4,region:256,os4k
val qs 40 $Q --steps 12 --policy e1,e4,region:256,os4k
val d05 60 $D --budget 5%
val d10 60 $D --budget 10%
val d19 60 $D --budget 19%
t=$(left); if [ $t -gt 170 ]; then date -u +%T; timeout $((t-5)) $S calibrate --out $W/c3.json --name h100-linux --ssd-path /tmp/ssd > $W/c3.log 2>&1; echo "c3 rc $?"; tail -2 $W/c3.log; pack; else echo "c3 skipped"; fi
date -u +%T
