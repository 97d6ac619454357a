#!/usr/bin/env bash
# The numbers the issues ask for, each the median of RUNS runs of SECS
# seconds (single runs move by +-10% on a shared machine):
#   null 4 KiB randread QD128 and QD1 on 1 core, malloc 4 KiB randread and
#   randwrite QD128 on 1 core, null on 2 cores (one bdev per core) vs 1.
#   bench/bdevperf_suite.sh            (RUNS=5 SECS=5 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}; SECS=${SECS:-5}
cargo build --release -q --bin bdevperf
BP=target/release/bdevperf

# shellcheck source=bench/lib.sh
. bench/lib.sh

measure() { # label, args...
    local label=$1; shift
    local vals=()
    for _ in $(seq "$RUNS"); do
        vals+=("$("$BP" "$@" -t "$SECS" | total_iops)")
    done
    local m
    m=$(printf '%s\n' "${vals[@]}" | median)
    printf '%-34s median %12.0f IOPS   runs: %s\n' "$label" "$m" "${vals[*]}" >&2
    echo "$m"
}

null1=$(measure "null randread QD128, 1 core" -c bench/configs/null.json -q 128 -o 4096 -w randread)
measure "null randread QD1, 1 core" -c bench/configs/null.json -q 1 -o 4096 -w randread >/dev/null
measure "malloc randread QD128, 1 core" -c bench/configs/malloc.json -q 128 -o 4096 -w randread >/dev/null
measure "malloc randwrite QD128, 1 core" -c bench/configs/malloc.json -q 128 -o 4096 -w randwrite >/dev/null
null2=$(measure "null randread QD128, 2 cores" -c bench/configs/null2.json -m 0x3 -q 128 -o 4096 -w randread)
printf 'null QD128: 1 core %.0f, 2 cores %.0f, scaling %.2fx\n' "$null1" "$null2" "$(echo "$null2 / $null1" | bc -l)"
