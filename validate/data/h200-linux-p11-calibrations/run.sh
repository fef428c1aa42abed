#!/bin/bash
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
mkdir -p $OUT/c
for i in 1 2 3; do timeout 90 ./dev-s4/sim calibrate --out $OUT/c/cal$i.json --name h200-linux > $OUT/c/cal$i.log 2>&1; echo "cal $i rc $?"; grep "page-in of 32\|vmm with 3072\|vmm at 0%" $OUT/c/cal$i.log; done
cd $OUT && tar czf c.tgz c && rm -rf c
