#!/bin/bash
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
N=/usr/local/cuda/bin/ncu
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,lts__t_sector_op_read_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_active.avg
timeout 250 $N -k regex:stream_read -c 30 --metrics $M --csv dev-s5/sim calibrate --only kernels --out /tmp/k1.json > $OUT/ncu-stream.csv 2> $OUT/ncu-stream.err; echo "stream rc $?"
timeout 250 $N -k regex:moe_dot_fz -c 6 --metrics $M --csv dev-s5/sim calibrate --only kernels --out /tmp/k2.json > $OUT/ncu-fz.csv 2> $OUT/ncu-fz.err; echo "fz rc $?"
timeout 250 $N -k regex:moe_dot_lo -c 6 --metrics $M --csv dev-s5/sim calibrate --only kernels --out /tmp/k3.json > $OUT/ncu-lo.csv 2> $OUT/ncu-lo.err; echo "lo rc $?"
for f in stream fz lo; do echo "== $f"; grep -E '"(gpu__time_duration.sum|dram__bytes_read.sum|dram__throughput|lts__t_sectors_op_read.sum|lts__t_sector_op_read_hit_rate)' $OUT/ncu-$f.csv | awk -F'","' '{print $1"|"$5"|"$(NF-2)"|"$(NF-1)"|"$NF}' | cut -c1-200 | head -60; done
