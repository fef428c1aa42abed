#!/bin/bash
# Three host calibrations of the H200 machine's CPU with banks beyond its 300 MiB L3, then the
# CPU-lane validation on that CPU (all and layers:8; granite and a generated Qwen3-30B-A3B).
S=./dev/sim; W=$OUT/w; mkdir -p $W /tmp/ssd
pack() { (cd $OUT && tar czf r.tgz w); }
cat /proc/loadavg > $W/load.txt
for n in 4 5 6; do date -u +%T; timeout 120 $S calibrate --only host --out $W/h$n.json --name h200-host --ssd-path /tmp/ssd > $W/h$n.log 2>&1; echo "h$n rc $?"; tail -1 $W/h$n.log; pack; done
$S trace gen --preset qwen3-30b-a3b --skew 0.8 --locality 0.3 --tokens 40 --seed 7 --out /tmp/q.bin > /dev/null 2>&1
date -u +%T; timeout 100 $S validate --cpu-experts all,layers:8 --hw-host $W/h4.json --trace traces/data/granite/prose.bin --dtype int4 --steps 40 --repeat 5 --out $W/vg.json > $W/vg.log 2>&1; echo "vg rc $?"; cat $W/vg.log | tail -12; pack
date -u +%T; timeout 100 $S validate --cpu-experts all,layers:8 --hw-host $W/h4.json --trace /tmp/q.bin --dtype int4 --steps 12 --repeat 5 --out $W/vq.json > $W/vq.log 2>&1; echo "vq rc $?"; cat $W/vq.log | tail -12; pack
cat /proc/loadavg >> $W/load.txt; date -u +%T
