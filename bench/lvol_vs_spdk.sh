#!/usr/bin/env bash
# lvol benchmark (issue 24), ours against SPDK's lvol, on the host: our
# bdevperf and SPDK's bdevperf alternate, RUNS runs each, medians and the
# ratio ours/SPDK. One core, 4 KiB, QD128, a 1 GiB malloc base (4 KiB
# blocks):
#
#   base      randwrite / randread on the malloc bdev itself (the ceiling);
#   thick     randwrite / randread on a thick 768 MiB lvol (4 MiB clusters,
#             every cluster allocated at creation);
#   alloc     randwrite for 1 s on a fresh thin 768 MiB lvol with 16 KiB
#             clusters: most writes allocate a cluster.
#
# Needs the reference SPDK build ($SPDK_REF, default
# ~/.cache/bdevkit-ref-spdk); SPDK runs with --no-huge unless 2 MiB
# hugepages are free.
#   bench/lvol_vs_spdk.sh            (RUNS=5 SECS=3; target/release/bdevperf,
#                                     built when missing)
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}; SECS=${SECS:-3}
R=${SPDK_REF:-${XDG_CACHE_HOME:-$HOME/.cache}/bdevkit-ref-spdk}
PERF=${PERF:-target/release/bdevperf}
SPERF=$R/build/examples/bdevperf
[ -x "$SPERF" ] || { echo "no SPDK bdevperf in $R" >&2; exit 2; }
if [ ! -x "$PERF" ]; then cargo build --release -q --bin bdevperf || exit 2; fi
W=$(mktemp -d /tmp/lvol-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
MEM=(-s 2048)
free=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
[ "${free:-0}" -ge 1100 ] || MEM=(--no-huge -s 2048)

# shellcheck source=bench/lib.sh
. bench/lib.sh

# config NAME [CLUSTER THIN]: a 1 GiB malloc bdev, and with CLUSTER an
# lvstore on it with one 768 MiB lvol.
config() {
    local name=$1 cluster=${2:-} thin=${3:-false} lvol=""
    if [ -n "$cluster" ]; then
        lvol=",
  {\"method\": \"bdev_lvol_create_lvstore\", \"params\": {\"bdev_name\": \"Malloc0\", \"lvs_name\": \"lvs\", \"cluster_sz\": $cluster}},
  {\"method\": \"bdev_lvol_create\", \"params\": {\"lvs_name\": \"lvs\", \"lvol_name\": \"lv\", \"size_in_mib\": 768, \"thin_provision\": $thin}}"
    fi
    cat >"$W/$name.json" <<EOF
{"subsystems": [{"subsystem": "bdev", "config": [
  {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": 262144, "block_size": 4096}}$lvol
]}]}
EOF
}
config base
config thick 4194304 false
config alloc 16384 true

# iops ours|spdk CONFIG WORKLOAD SECS: the Total line's IOPS.
iops() {
    local out
    if [ "$1" = ours ]; then
        out=$("$PERF" -m 0x1 -c "$W/$2.json" -q 128 -o 4096 -w "$3" -t "$4" 2>&1)
    else
        out=$("$SPERF" -m 0x1 "${MEM[@]}" --json "$W/$2.json" -q 128 -o 4096 -w "$3" -t "$4" 2>&1)
    fi
    echo "$out" | awk '/Total +:/ {v=$(NF-6)} END {print v}'
}

# compare LABEL CONFIG WORKLOAD SECS: alternating runs, medians, ratio.
compare() {
    local ours=() theirs=()
    for _ in $(seq "$RUNS"); do
        ours+=("$(iops ours "$2" "$3" "$4")")
        theirs+=("$(iops spdk "$2" "$3" "$4")")
    done
    local mo ms
    mo=$(printf '%s\n' "${ours[@]}" | median)
    ms=$(printf '%s\n' "${theirs[@]}" | median)
    printf '%-26s ours %10.0f  spdk %10.0f  ratio %5.2fx   ours: %s | spdk: %s\n' \
        "$1" "$mo" "$ms" "$(echo "$mo / $ms" | bc -l)" "${ours[*]}" "${theirs[*]}"
}

compare "base randwrite" base randwrite "$SECS"
compare "base randread" base randread "$SECS"
compare "thick lvol randwrite" thick randwrite "$SECS"
compare "thick lvol randread" thick randread "$SECS"
compare "thin allocating randwrite" alloc randwrite 1
