#!/usr/bin/env bash
# Instructions per virtio-blk request on the vhost-user-blk data path,
# counted by callgrind (repeatable where wall time is not): two
# fixed-count runs of bdevkit-vhost's vhost_path example (one ring, 4 KiB
# reads, the guest played in-process), the difference in instructions
# less the guest's own (guest_driver, inclusive) divided by the
# difference in requests. Includes the ring poller, chain walk and
# request parsing, the bdev layer, the module, the completion (status,
# used ring, call eventfd write) and the kick eventfd reads. Compare with
# bench/callgrind_io_path.sh on the same bdev kind (the bdev layer alone).
#   bench/callgrind_vhost_path.sh [null|malloc] [QD]
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-null}; qd=${2:-32}
cargo build --release -q -p bdevkit-vhost --example vhost_path
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# count N: "total guest" instructions of a run of N requests.
count() {
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1" \
        target/release/examples/vhost_path "$kind" "$qd" "$1" > /dev/null 2>&1
    local total guest
    total=$(callgrind_annotate "$out/cg.$1" 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
    guest=$(callgrind_annotate --inclusive=yes "$out/cg.$1" 2>/dev/null |
        awk '/vhost_path::guest_driver/{gsub(",","",$1); print $1; exit}')
    echo "$total ${guest:-0}"
}
read -r ta ga <<< "$(count 5000)"
read -r tb gb <<< "$(count 25000)"
n=20000
echo "vhost $kind QD$qd: $(( ((tb - gb) - (ta - ga)) / n )) instructions per request" \
    "(guest driver: $(( (gb - ga) / n )) more, left out)"
