#!/bin/bash
# Kernel GPU tests, the kernel arms with the same-shape plain read, and the granite streaming
# validation that timed out in run 2 (--blocks 5). Results tarred after every step.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
W=$OUT/w; mkdir -p $W
pack() { (cd $OUT && tar czf r.tgz w); }
date -u +%T; timeout 90 ./dev/gputests --ignored --test-threads=1 --nocapture > $W/gpu-tests.log 2>&1; echo "tests rc $?"; grep 'test result' $W/gpu-tests.log; pack
date -u +%T; timeout 60 ./dev/sim calibrate --only kernels --out $W/k.json > $W/k.log 2>&1; echo "kernels rc $?"; grep -E 'same-shape read|union curve' -A8 $W/k.log | head -30; pack
G="--trace traces/data/granite/prose.bin --expert-mib 16 --steps 12 --hw h200-linux --json --blocks 5"
date -u +%T; timeout 230 ./dev/sim validate $G --policy e1,e4,region:256,os4k --out $W/gs.json > $W/gs.log 2>&1; echo "gs rc $?"; pack
date -u +%T
