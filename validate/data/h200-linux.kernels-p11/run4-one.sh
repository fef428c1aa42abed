#!/bin/bash
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
timeout 100 dev-s6/sim calibrate --only kernels --out $OUT/k.json > $OUT/k.log 2>&1; echo "rc $?"
grep -E "stream read|window read expert|2560x640 slots 60 distinct (60|6) PerSlot \(|layer chain|wrote" $OUT/k.log
python3 -c "import json;print(json.load(open('$OUT/k.json'))['layer_chain'])"
