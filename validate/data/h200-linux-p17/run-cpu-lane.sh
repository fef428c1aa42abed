#!/bin/bash
# Qwen3 CPU-lane diagnosis on the H200 host: reproduce, then distinct vs cycled banks, with
# Note: the two `trace gen` lines that combine --preset with --layers/--experts were refused by
# clap (a preset fixes the geometry), so the runs qd and gc did not happen; q and g did.
# steal time and CPU MHz sampled every 0.2 s.
S=./dev/sim; W=$OUT/w/diag; mkdir -p $W
pack() { (cd $OUT && tar czf r.tgz w); }
H=h200-host
lscpu > $W/lscpu.txt 2>&1; cat /sys/kernel/mm/transparent_hugepage/enabled > $W/thp.txt 2>&1
cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor >> $W/thp.txt 2>&1
sampler() { while true; do echo "$(date +%s.%N) $(head -1 /proc/stat) $(awk '/MHz/{s+=$4;n++}END{printf "%.0f", s/n}' /proc/cpuinfo)"; sleep 0.2; done; }
sampler > $W/samples.txt & SP=$!
$S trace gen --preset qwen3-30b-a3b --skew 0.8 --locality 0.3 --tokens 40 --seed 7 --out /tmp/q.bin > /dev/null 2>&1
$S trace gen --preset qwen3-30b-a3b --layers 12 --experts 24 --skew 0.8 --locality 0.3 --tokens 40 --seed 7 --out /tmp/qd.bin > /dev/null 2>&1
$S trace gen --preset granite-3.0-1b-a400m --experts 128 --skew 0.8 --locality 0.3 --tokens 40 --seed 7 --out /tmp/gc.bin > /dev/null 2>&1
run() { n=$1; shift; echo "$n start $(date +%s.%N)" >> $W/marks.txt; timeout 100 $S validate --cpu-experts all,layers:8 --hw-host $H --dtype int4 --repeat 5 --out $W/$n.json "$@" > $W/$n.log 2>&1; echo "$n rc $? end $(date +%s.%N)" >> $W/marks.txt; tail -4 $W/$n.log; pack; }
run q  --trace /tmp/q.bin --steps 12
run qd --trace /tmp/qd.bin --steps 12
run gc --trace /tmp/gc.bin --steps 40
run g  --trace traces/data/granite/prose.bin --steps 40
kill $SP; pack
