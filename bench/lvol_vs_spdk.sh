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
#             clusters: most writes allocate a cluster;
#   clone     (issue 25) a thick 768 MiB lvol, its snapshot and a clone of
#             the snapshot: randread on the clone (every read served by the
#             snapshot), and randwrite for 1 s on a fresh clone (of a
#             256 MiB lvol) with 16 KiB clusters (after the first
#             ~100 000 writes, mostly writes into copied clusters);
#   cow       (issue 25) first writes into a fresh clone: a thick 3 GiB
#             lvol of 16 KiB clusters on a 4 GiB malloc base (metadata
#             ratio 10 %), its snapshot and clone; 4 KiB sequential writes
#             for 1 s on the clone, which never reach a cluster written
#             before: every fourth write copies a 16 KiB cluster from the
#             snapshot, the next three wait for it (SPDK needs -s 6144).
#
# Needs the reference SPDK build ($SPDK_REF, default
# ~/.cache/bdevkit-ref-spdk); SPDK runs with --no-huge unless 2 MiB
# hugepages are free.
#   bench/lvol_vs_spdk.sh            (RUNS=5 SECS=3; target/release/bdevperf,
#                                     built when missing; ONLY=clone: only
#                                     the rows whose label holds it)
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

# config NAME [CLUSTER THIN [MIB [BLOCKS RATIO]]]: a malloc bdev of BLOCKS
# (262144: 1 GiB) 4 KiB blocks, and with CLUSTER an lvstore on it (metadata
# pages per cluster RATIO %, 100) with one lvol of MIB (768) MiB.
config() {
    local name=$1 cluster=${2:-} thin=${3:-false} mib=${4:-768} lvol=""
    local blocks=${5:-262144} ratio=${6:-100}
    if [ -n "$cluster" ]; then
        lvol=",
  {\"method\": \"bdev_lvol_create_lvstore\", \"params\": {\"bdev_name\": \"Malloc0\", \"lvs_name\": \"lvs\", \"cluster_sz\": $cluster, \"num_md_pages_per_cluster_ratio\": $ratio}},
  {\"method\": \"bdev_lvol_create\", \"params\": {\"lvs_name\": \"lvs\", \"lvol_name\": \"lv\", \"size_in_mib\": $mib, \"thin_provision\": $thin}}"
    fi
    cat >"$W/$name.json" <<EOF
{"subsystems": [{"subsystem": "bdev", "config": [
  {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": $blocks, "block_size": 4096}}$lvol
]}]}
EOF
}
config base
config thick 4194304 false
config alloc 16384 true

# clone NAME CLUSTER MIB [BLOCKS RATIO]: config CLUSTER's lvol, then its
# snapshot `snap` and the clone `cl` of that snapshot (SPDK runs these RPCs
# from its JSON config as we do).
clone() {
    config "$1" "$2" false "$3" "${4:-}" "${5:-}"
    sed -i "s|^]}]}|,\n  {\"method\": \"bdev_lvol_snapshot\", \"params\": {\"lvol_name\": \"lvs/lv\", \"snapshot_name\": \"snap\"}},\n  {\"method\": \"bdev_lvol_clone\", \"params\": {\"snapshot_name\": \"lvs/snap\", \"clone_name\": \"cl\"}}\n]}]}|" "$W/$1.json"
}
clone clone_read 4194304 768
# (A thick 768 MiB lvol of 16 KiB clusters does not fit the store's
# metadata, in SPDK as here: ENOSPC.)
clone clone_cow 16384 256
clone cow 16384 3072 1048576 10

# iops ours|spdk CONFIG WORKLOAD SECS [BDEV]: the Total line's IOPS (on
# BDEV only when given).
iops() {
    local out only=() mem=("${MEM[@]}")
    [ -n "${5:-}" ] && only=(-T "$5")
    [ "$2" = cow ] && mem=("${MEM[@]:0:${#MEM[@]}-1}" 6144)
    if [ "$1" = ours ]; then
        out=$("$PERF" -m 0x1 -c "$W/$2.json" "${only[@]}" -q 128 -o 4096 -w "$3" -t "$4" 2>&1)
    else
        out=$("$SPERF" -m 0x1 "${mem[@]}" --json "$W/$2.json" "${only[@]}" -q 128 -o 4096 -w "$3" -t "$4" 2>&1)
    fi
    echo "$out" | awk '/Total +:/ {v=$(NF-6)} END {print v}'
}

# compare LABEL CONFIG WORKLOAD SECS [BDEV]: alternating runs, medians, ratio.
compare() {
    # ONLY=clone: just the rows whose label says so.
    [[ "$1" == *"${ONLY:-}"* ]] || return 0
    local ours=() theirs=()
    for _ in $(seq "$RUNS"); do
        ours+=("$(iops ours "$2" "$3" "$4" "${5:-}")")
        theirs+=("$(iops spdk "$2" "$3" "$4" "${5:-}")")
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
compare "clone randread (snapshot)" clone_read randread "$SECS" lvs/cl
compare "clone randwrite (16 KiB clusters, 1 s)" clone_cow randwrite 1 lvs/cl
compare "clone first writes (CoW)" cow write 1 lvs/cl
