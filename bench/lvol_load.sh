#!/usr/bin/env bash
# Load time of a large lvol store (issue 24), bdev_tgt against SPDK's
# spdk_tgt: a 1 TiB sparse file, an lvstore with 4 MiB clusters and 1000
# thick lvols of 1 GiB (made once by bdev_tgt), loaded by examine after
# `bdev_aio_create` in each daemon, alternating, RUNS runs each:
#
#   clean   the store was unloaded cleanly (super block clean = 1);
#   dirty   the daemon that last had it was killed with SIGKILL after a
#           metadata change (clean = 0): the load recovers it.
#
# A load is timed from `bdev_aio_create` to the answer of
# `bdev_wait_for_examine` (both through bdev_rpc, one process per call,
# for both daemons), then `bdev_lvol_get_lvols` must list the 1000 lvols.
# The file stays in the page cache between runs (both daemons read it
# warm). Goals: clean under 1 s; dirty at least 5x faster than spdk_tgt.
#
# Needs the reference SPDK build ($SPDK_REF, default
# ~/.cache/bdevkit-ref-spdk); without it only bdev_tgt is timed.
#   bench/lvol_load.sh     (RUNS=3; target/release/bdev_tgt, built when
#                           missing; DIR=/var/tmp for the file)
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
R=${SPDK_REF:-${XDG_CACHE_HOME:-$HOME/.cache}/bdevkit-ref-spdk}
TGT=${TGT:-target/release/bdev_tgt}
RPC=${RPC:-target/debug/bdev_rpc}
STGT=$R/build/bin/spdk_tgt
if [ ! -x "$TGT" ]; then cargo build --release -q -p bdevkit-bdev-tgt --bin bdev_tgt || exit 2; fi
if [ ! -x "$RPC" ]; then cargo build -q -p bdevkit-bdev-rpc --bin bdev_rpc || exit 2; fi
SPDK=1
[ -x "$STGT" ] || { echo "lvol_load: no spdk_tgt in $R: timing bdev_tgt only" >&2; SPDK=0; }
W=$(mktemp -d "${DIR:-/var/tmp}/lvol-load.XXXXXX")
IMG=$W/lvs.img
SOCK=$W/rpc.sock
PID=""
cleanup() {
    [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT

# shellcheck source=bench/lib.sh
. bench/lib.sh

rpc() { "$RPC" -s "$SOCK" -t 600 "$@"; }
now() { date +%s%N; }
die() { echo "lvol_load: $*" >&2; exit 1; }

# start ours|spdk: the daemon on $SOCK, waiting until it answers.
start() {
    rm -f "$SOCK"
    if [ "$1" = ours ]; then
        "$TGT" -m 0x1 -r "$SOCK" >"$W/$1.log" 2>&1 &
    else
        "$STGT" -m 0x1 --no-huge -s 2048 --disable-cpumask-locks -r "$SOCK" >"$W/$1.log" 2>&1 &
    fi
    PID=$!
    for _ in $(seq 300); do
        rpc spdk_get_version >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    cat "$W/$1.log" >&2
    die "$1 did not start"
}

# stop term|kill: SIGTERM (a clean shutdown) or SIGKILL, and wait.
stop() {
    if [ "$1" = term ]; then kill -TERM "$PID"; else kill -9 "$PID"; fi
    wait "$PID" 2>/dev/null
    PID=""
}

# The super block's clean field (byte 16).
clean_flag() { od -A n -t u4 -j 16 -N 4 "$IMG" | tr -d ' '; }

# load: aio bdev on the file, wait for examine; prints milliseconds.
load() {
    local t0 t1 n
    t0=$(now)
    rpc bdev_aio_create -p filename="$IMG" -p name=aio0 -p block_size=4096 >/dev/null || die "bdev_aio_create"
    rpc bdev_wait_for_examine >/dev/null || die "bdev_wait_for_examine"
    t1=$(now)
    n=$(rpc bdev_lvol_get_lvols | grep -c '"alias"')
    [ "$n" -ge 1000 ] || die "loaded $n lvols, not 1000 ($(tail -3 "$W"/*.log))"
    echo $(((t1 - t0) / 1000000))
}

echo "lvol_load: making the store (1 TiB sparse file, 4 MiB clusters, 1000 thick lvols of 1 GiB)"
truncate -s 1T "$IMG"
start ours
rpc bdev_aio_create -p filename="$IMG" -p name=aio0 -p block_size=4096 >/dev/null || die "bdev_aio_create"
rpc bdev_lvol_create_lvstore -p bdev_name=aio0 -p lvs_name=lvs -p cluster_sz=4194304 >/dev/null ||
    die "create_lvstore"
t0=$(now)
for i in $(seq 0 999); do
    rpc bdev_lvol_create -p lvs_name=lvs -p lvol_name="lv$i" -p size_in_mib=1024 >/dev/null ||
        die "bdev_lvol_create lv$i"
done
echo "lvol_load: 1000 lvols created in $((($(now) - t0) / 1000000)) ms; $(du -h "$IMG" | cut -f1) on disk"
stop term
[ "$(clean_flag)" = 1 ] || die "not clean after SIGTERM"

# runs STATE: alternating loads; STATE clean: stopped with SIGTERM
# (clean again); dirty: SIGKILL (stays dirty).
declare -A RES
runs() {
    local ours=() theirs=() who sig ms
    sig=term; [ "$1" = dirty ] && sig=kill
    for _ in $(seq "$RUNS"); do
        for who in ours spdk; do
            [ "$who" = spdk ] && [ "$SPDK" = 0 ] && continue
            [ "$(clean_flag)" = "$([ "$1" = clean ] && echo 1 || echo 0)" ] ||
                die "store not $1 before a $who load"
            start "$who"
            ms=$(load) || exit 1
            stop "$sig"
            if [ "$who" = ours ]; then ours+=("$ms"); else theirs+=("$ms"); fi
        done
    done
    RES[$1 ours]=$(printf '%s\n' "${ours[@]}" | median)
    printf '%-6s bdev_tgt %6s ms (%s)' "$1" "${RES[$1 ours]}" "${ours[*]}"
    if [ "$SPDK" = 1 ]; then
        RES[$1 spdk]=$(printf '%s\n' "${theirs[@]}" | median)
        printf '   spdk_tgt %6s ms (%s)   spdk/ours %.1fx' "${RES[$1 spdk]}" "${theirs[*]}" \
            "$(echo "${RES[$1 spdk]} / ${RES[$1 ours]}" | bc -l)"
    fi
    echo
}

runs clean
# Dirty: a metadata change (a thin lvol created), then SIGKILL.
start ours
rpc bdev_aio_create -p filename="$IMG" -p name=aio0 -p block_size=4096 >/dev/null && rpc bdev_wait_for_examine >/dev/null || die "load"
rpc bdev_lvol_create -p lvs_name=lvs -p lvol_name=dirt -p size_in_mib=4 -p thin_provision=true >/dev/null ||
    die "create dirt"
stop kill
runs dirty
