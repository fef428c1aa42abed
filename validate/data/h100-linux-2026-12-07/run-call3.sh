#!/bin/bash
# Recorded 2026-12-07 on one NVIDIA H100 80GB HBM3 (driver 580.159.04), from the working tree
# with the binary in devbin/ (branch gpu, commit 29d33f1). devbin/ds.bin is validation/deepseek-v3.trace
# here (`sim trace gen --preset deepseek-v3 --skew 0.8 --locality 0.3 --tokens 24 --seed 7`);
# devbin/c2.json is c2.json here. $OUT/w/* were copied into this folder.
# Call 3 (H100): the DeepSeek-V3-geometry LRU replay at 19% (about 31k live granules), a
# second live-set arm, a third full calibration, then DeepSeek at 15% if time is left.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./devbin/sim; W=$OUT/w; mkdir -p $W /tmp/ssd
pack() { (cd $OUT && tar czf r.tgz w); }
T0=$(date +%s); left() { echo $(( 500 - ($(date +%s) - T0) )); }
P=devbin/c2.json
D="--trace devbin/ds.bin --dtype int4 --steps 12 --hw $P --json --blocks 8 --policy e1 --evict lru"
val() { n=$1; m=$2; shift 2; t=$(left); [ $t -lt $m ] && { echo "$n skipped"; return; }; date -u +%T; timeout $t $S validate "$@" --out $W/$n.json > $W/$n.log 2>&1; echo "$n rc $?"; tail -3 $W/$n.log; pack; }
val d19 60 $D --budget 19%
date -u +%T; timeout 100 $S calibrate --only live-set --out $W/l2.json > $W/l2.log 2>&1; echo "l2 rc $?"; tail -1 $W/l2.log; pack
t=$(left); if [ $t -gt 170 ]; then date -u +%T; timeout $((t-5)) $S calibrate --out $W/c3.json --name h100-linux --ssd-path /tmp/ssd > $W/c3.log 2>&1; echo "c3 rc $?"; tail -1 $W/c3.log; pack; else echo "c3 skipped"; fi
val d15 60 $D --budget 15%
date -u +%T
