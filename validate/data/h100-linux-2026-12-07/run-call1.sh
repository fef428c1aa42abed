#!/bin/bash
# Recorded 2026-12-07 on one NVIDIA H100 80GB HBM3 (driver 580.159.04), from the working tree
# with the binary in devbin/ (branch gpu, commit 29d33f1). devbin/ds.bin is validation/deepseek-v3.trace
# here (`sim trace gen --preset deepseek-v3 --skew 0.8 --locality 0.3 --tokens 24 --seed 7`);
# devbin/c2.json is c2.json here. $OUT/w/* were copied into this folder.
# Call 1 (H100): a full calibration (GPU arms, then the host arms as their own host profile),
# the live-set arm alone at 0/1k/4k/16k/32k granules and 90% of free VRAM, then the granite
# and Qwen3 LRU validations with --blocks 8 under that calibration's profile.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./devbin/sim; W=$OUT/w; mkdir -p $W /tmp/ssd
pack() { (cd $OUT && tar czf r.tgz w); }
T0=$(date +%s); left() { echo $(( 560 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,memory.total,memory.free --format=csv > $W/smi.txt 2>&1
lscpu > $W/lscpu.txt 2>&1; cat /proc/loadavg >> $W/lscpu.txt; df -h /tmp >> $W/lscpu.txt; cat $W/smi.txt
P=$W/c1.json
date -u +%T; timeout 210 $S calibrate --out $P --name h100-linux --ssd-path /tmp/ssd > $W/c1.log 2>&1; echo "c1 rc $?"; tail -4 $W/c1.log; pack
date -u +%T; timeout 240 $S calibrate --only live-set --out $W/l1.json > $W/l1.log 2>&1; echo "l1 rc $?"; tail -12 $W/l1.log; pack
[ -f $P ] || P=h200-linux
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw $P --json --blocks 8"
Q="--trace validate/data/validation/qwen3-30b-a3b.trace --dtype int4 --hw $P --json --blocks 8"
val() { n=$1; shift; t=$(left); [ $t -lt 30 ] && { echo "$n skipped"; return; }; date -u +%T; timeout $t $S validate "$@" --out $W/$n.json > $W/$n.log 2>&1; echo "$n rc $?"; tail -4 $W/$n.log; pack; }
val gl $G --policy e1,e4,region:256 --evict lru --budget 50%
val ql $Q --steps 8 --policy e1,e4 --evict lru --budget 50%
date -u +%T
