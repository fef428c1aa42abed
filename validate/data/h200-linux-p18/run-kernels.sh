#!/bin/bash
# The kernel GPU tests, then three `sim calibrate --only kernels` with the default
# moe_dot_fd_r2j1s3b1 (tiles by ticket counter; launches whose slots repeat experts run its
# static walk moe_dot_fz_r2j1s3b1), 90 s apart. Results tarred after every step.
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
W=$OUT/w; mkdir -p $W
pack() { (cd $OUT && tar czf r.tgz w); }
date -u +%T; timeout 150 ./dev/gputests --ignored --test-threads=1 --nocapture > $W/gpu-tests.log 2>&1; echo "tests rc $?"; grep 'test result' $W/gpu-tests.log; pack
for i in 1 2 3; do
  [ $i -gt 1 ] && sleep 90
  date -u +%T; timeout 90 ./dev/sim calibrate --only kernels --out $W/k$i.json > $W/k$i.log 2>&1; echo "k$i rc $?"
  grep -E 'same-shape read|layer chain' $W/k$i.log | head -4; pack
done
date -u +%T
