#!/usr/bin/env bash
# Instructions per command on the NVMe-oF target's per-command path,
# counted by callgrind (repeatable where wall time is not): two
# fixed-count runs of bench's nvmf_path, the difference in instructions
# divided by the difference in commands. The target (its TCP transport
# over an in-memory stream: PDU receive, dispatch, checks, bdev
# submission and completion on a null bdev, response or C2HData, the send
# queue flush) and the host loop that drives it (a fixed cost: a memcpy of
# each PDU and a few loads to find its command id).
#   bench/callgrind_nvmf_path.sh [read|write|mixed] [QD]
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-mixed}; qd=${2:-32}
cargo build --release -q --bin nvmf_path
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        target/release/nvmf_path "$mode" "$qd" "$1" 2>&1 |
        awk '/Collected/{print $4}' | tr -d ,
}
a=$(count 50000); b=$(count 250000)
echo "nvmf $mode QD$qd: $(( (b - a) / 200000 )) instructions per command"
