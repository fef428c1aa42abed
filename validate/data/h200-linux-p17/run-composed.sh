#!/bin/bash
# The composed validation on the H200: the CPU lane (`--cpu-experts layers:8` and `misses`) on
# the H200 host's CPU, run beside the GPU doing the resident experts, against the engine's
# prediction. First the ignored GPU test (a 2-step composed replay of a tiny trace), then
# granite prose and a generated Qwen3-30B-A3B trace, e1 under LRU 50% (the budget at which the
# engine runs misses with both CPU calls and GPU hits: granite 36% of keys on the CPU, Qwen
# 30%), int4, 4 blocks of 3 rounds. Expected device time (engine's step times, 64 / 40 steps
# a replay with the warm-up, 24 replays each): test ~10 s, granite ~60 s, Qwen ~100 s.
S=./dev/sim; T=./dev/gputests-composed; W=$OUT/w; mkdir -p $W
pack() { (cd $OUT && tar czf r.tgz w); }
cat /proc/loadavg > $W/load.txt; nvidia-smi --query-gpu=name,clocks.sm,memory.used --format=csv >> $W/load.txt 2>&1
date -u +%T; timeout 60 $T --ignored --exact validation::composed_tests::a_two_step_composed_replay_runs_every_planned_call_beside_the_gpu > $W/test.log 2>&1; echo "test rc $?"; tail -5 $W/test.log; pack
$S trace gen --preset qwen3-30b-a3b --skew 0.8 --locality 0.3 --tokens 40 --seed 7 --out /tmp/q.bin > /dev/null 2>&1
C="--hw h200-linux --hw-host h200-host --cpu-experts layers:8,misses --policy e1 --evict lru --budget 50% --dtype int4 --blocks 4 --repeat 3 --json"
date -u +%T; timeout 200 $S validate $C --trace traces/data/granite/prose.bin --steps 16 --out $W/cg.json > $W/cg.log 2>&1; echo "cg rc $?"; grep -v "^validate: .* replaying" $W/cg.log | tail -8; pack
date -u +%T; timeout 240 $S validate $C --trace /tmp/q.bin --steps 12 --out $W/cq.json > $W/cq.log 2>&1; echo "cq rc $?"; grep -v "^validate: .* replaying" $W/cq.log | tail -8; pack
cat /proc/loadavg >> $W/load.txt; date -u +%T
