#!/bin/bash
# The deciding validation: a third calibration (pooled with the two of run 1 on the CPU), then
# the four standard commands with --blocks 5 (retention rows warmed up to steady state; Qwen3
# LRU with 8 measured steps so that its warm-up fits the 32-token trace). Results are tarred
# after every step, so a timeout still returns what ran.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./dev/sim
W=$OUT/w; mkdir -p $W
pack() { (cd $OUT && tar czf r.tgz w); }
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw h200-linux --json --blocks 5"
Q="--trace validate/data/validation/qwen3-30b-a3b.trace --dtype int4 --hw h200-linux --json --blocks 5"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $W/smi.txt 2>&1
date -u +%T; timeout 120 $S calibrate --out $W/c3.json --name h200-linux > $W/c3.log 2>&1; echo "calibrate rc $?"; pack
val() { n=$1; shift; date -u +%T; timeout 140 $S validate "$@" --out $W/$n.json > $W/$n.log 2>&1; echo "$n rc $?"; tail -4 $W/$n.log; pack; }
val gl $G --policy e1,e4,region:256 --evict lru --budget 50%
val ql $Q --steps 8 --policy e1,e4 --evict lru --budget 50%
val gs $G --policy e1,e4,region:256,os4k
val qs $Q --steps 12 --policy e1,e4,region:256,os4k
date -u +%T
