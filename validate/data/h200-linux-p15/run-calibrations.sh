#!/bin/bash
# Three full calibrations a few minutes apart, each followed by one of the four standard
# validations (recorded under the shipped profile; re-priced on the CPU afterwards).
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
S=./dev/sim
mkdir -p $OUT/w
P=h200-linux
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw $P --json --repeat 3"
Q="--trace validate/data/validation/qwen3-30b-a3b.trace --dtype int4 --steps 12 --hw $P --json --repeat 3"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/w/smi.txt 2>&1
lscpu > $OUT/w/lscpu.txt 2>&1; cat /proc/loadavg >> $OUT/w/lscpu.txt
cal() { date -u +%T; timeout 170 $S calibrate --out $OUT/w/c$1.json --name h200-linux > $OUT/w/c$1.log 2>&1; echo "calibrate $1 rc $?"; grep -E "live-set|vmm at 0% fill" $OUT/w/c$1.log; }
val() { date -u +%T; timeout 150 $S validate "$@" >> $OUT/w/validate.log 2>&1; echo "validate rc $?"; }
cal 1; val $G --policy e1,e4,region:256 --evict lru --budget 50% --out $OUT/w/gl.json
cal 2; val $Q --policy e1,e4 --evict lru --budget 50% --out $OUT/w/ql.json
cal 3; val $G --policy e1,e4,region:256,os4k --out $OUT/w/gs.json
val $Q --policy e1,e4,region:256,os4k --out $OUT/w/qs.json
date -u +%T
grep -h "error\|within" $OUT/w/validate.log | tail -20
