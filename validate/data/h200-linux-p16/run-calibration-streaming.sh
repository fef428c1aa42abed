#!/bin/bash
# Call 2: a second host-only calibration, then the granite and Qwen3 streaming validations
# with --blocks 8.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./dev/sim; W=$OUT/w; mkdir -p $W /tmp/ssd
pack() { (cd $OUT && tar czf r.tgz w); }
T0=$(date +%s); left() { echo $(( 585 - ($(date +%s) - T0) )); }
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw h200-linux --json --blocks 8"
Q="--trace validate/data/validation/qwen3-30b-a3b.trace --dtype int4 --hw h200-linux --json --blocks 8"
date -u +%T; timeout 200 $S calibrate --out $W/c5.json --name h200-linux --ssd-path /tmp/ssd > $W/c5.log 2>&1; echo "c5 rc $?"; pack
date -u +%T; timeout 90 $S calibrate --only host --out $W/h3.json --name h200-linux-host --ssd-path /tmp/ssd > $W/h3.log 2>&1; echo "h3 rc $?"; tail -2 $W/h3.log; pack
val() { n=$1; shift; t=$(left); [ $t -lt 30 ] && { echo "$n skipped"; return; }; date -u +%T; timeout $t $S validate "$@" --out $W/$n.json > $W/$n.log 2>&1; echo "$n rc $?"; tail -4 $W/$n.log; pack; }
val qs $Q --steps 12 --policy e1,e4,region:256,os4k
val gs $G --policy e1,e4,region:256,os4k
date -u +%T
