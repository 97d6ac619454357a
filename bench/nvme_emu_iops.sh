#!/usr/bin/env bash
# IOPS of the nvme driver against the emulated controller's null namespace
# beside the null bdev's, 4 KiB randread at QD128 on one core (core 0):
# the emulator inline on the reactor's core, and spinning on core 1.
# Rounds alternate the three (the machine is shared: single runs move by
# +-30 %); prints each run, the medians and the ratios to the null bdev.
#   bench/nvme_emu_iops.sh            (RUNS=5 SECS=4 QD=128 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
RUNS=${RUNS:-5}; SECS=${SECS:-4}; QD=${QD:-128}
cargo build --release -q --bin bdevperf
cfgs=(null nvme_emu_null_inline nvme_emu_null_spin)
declare -A runs
for r in $(seq "$RUNS"); do
    for c in "${cfgs[@]}"; do
        v=$(target/release/bdevperf -c "bench/configs/$c.json" -q "$QD" -o 4096 -w randread \
            -t "$SECS" -m 0x1 | total_iops)
        runs[$c]+="$v "
        printf 'round %d  %-22s %12.0f IOPS\n' "$r" "$c" "$v"
    done
done
null=$(printf '%s\n' ${runs[null]} | median)
for c in "${cfgs[@]}"; do
    m=$(printf '%s\n' ${runs[$c]} | median)
    printf '%-22s median %12.0f IOPS  (%.2fx the null bdev)\n' "$c" "$m" "$(echo "$m / $null" | bc -l)"
done
