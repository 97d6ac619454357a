#!/usr/bin/env bash
# NVMe/TCP target, ours against SPDK's, on the host (issue 14's benchmark
# and SPDK interop check; not part of CI, which cannot build SPDK):
#
# 1. interop: SPDK's bdevperf (bdev_nvme_attach_controller -t tcp) runs
#    -w verify against bdev_tgt's malloc namespace, digests off and on,
#    4 KiB (in-capsule writes) and 128 KiB (R2T writes, several C2HData);
#    each must exit 0 with no failed I/O;
# 2. benchmark: 4 KiB randread at QD128, QD32 and QD1, the target on core 0
#    with a null bdev, SPDK's bdevperf initiator on core 1, 127.0.0.1;
#    bdev_tgt and SPDK's nvmf_tgt alternate, RUNS runs each of SECS
#    seconds; medians and the ratio ours/SPDK.
#
# 3. with our initiator too (PAIRS=1, the default): our bdevperf over our
#    NVMe/TCP initiator verifies against SPDK's nvmf_tgt (interop), and
#    the benchmark adds "pair": bdev_tgt + our bdevperf, to set beside
#    SPDK's pair (nvmf_tgt + SPDK's bdevperf), issue 15's comparison.
#
# Needs the reference SPDK build (../shared/ref-spdk/build.sh, in $SPDK_REF,
# default ~/.cache/bdevkit-ref-spdk). Runs SPDK with --no-huge unless 2 MiB
# hugepages are free.
#   bench/nvmf_tcp_vs_spdk.sh [path/to/bdev_tgt]   (RUNS=3 SECS=3; default
#   target/release/bdev_tgt, built when missing)
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}; SECS=${SECS:-3}
R=${SPDK_REF:-${XDG_CACHE_HOME:-$HOME/.cache}/bdevkit-ref-spdk}
TGT=${1:-target/release/bdev_tgt}
PERF=${PERF:-target/release/bdevperf}
PAIRS=${PAIRS:-1}
[ -x "$R/build/bin/nvmf_tgt" ] && [ -x "$R/build/examples/bdevperf" ] \
    || { echo "no SPDK build in $R (run ../shared/ref-spdk/build.sh)" >&2; exit 2; }
if [ ! -x "$TGT" ]; then cargo build --release -q -p bdevkit-bdev-tgt || exit 2; fi
if [ "$PAIRS" = 1 ] && [ ! -x "$PERF" ]; then cargo build --release -q --bin bdevperf || exit 2; fi
SPDK_RPC=${SPDK_RPC_CLIENT:-"python3 $R/scripts/rpc.py"}
W=$(mktemp -d /tmp/nvmf-bench.XXXXXX)
NQN=nqn.2016-06.io.bdevkit:bench
PORT=${PORT:-4431}
MEM=(-s 1100)
free=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
[ "${free:-0}" -ge 1100 ] || MEM=(--no-huge -s 1100)
TP=
cleanup() { [ -n "$TP" ] && kill "$TP" 2>/dev/null && wait "$TP" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT

# shellcheck source=bench/lib.sh
. bench/lib.sh

# start_target ours|spdk BDEV_METHOD_JSON: the target on core 0 with one
# namespace, listening on 127.0.0.1:$PORT.
start_target() {
    local kind=$1 bdev=$2 sock=$W/tgt.sock rpc
    rm -f "$sock"
    if [ "$kind" = ours ]; then
        "$TGT" -m 0x1 -r "$sock" > "$W/tgt.log" 2>&1 &
    else
        "$R/build/bin/nvmf_tgt" -m 0x1 "${MEM[@]}" -r "$sock" > "$W/tgt.log" 2>&1 &
    fi
    TP=$!
    for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
    rpc="$SPDK_RPC -s $sock"
    $rpc framework_wait_init > /dev/null || { cat "$W/tgt.log"; return 1; }
    $rpc $bdev > /dev/null
    $rpc nvmf_create_transport -t TCP > /dev/null
    $rpc nvmf_create_subsystem $NQN -a -s BENCH0001 > /dev/null
    $rpc nvmf_subsystem_add_ns $NQN Bench0 > /dev/null
    $rpc nvmf_subsystem_add_listener $NQN -t tcp -a 127.0.0.1 -s "$PORT" > /dev/null
}
stop_target() { kill "$TP" 2>/dev/null; wait "$TP" 2>/dev/null; TP=; }

# initiator_json DIGESTS(true|false): SPDK bdevperf's config.
initiator_json() {
    cat > "$W/init.json" <<J
{"subsystems":[{"subsystem":"bdev","config":[{"method":"bdev_nvme_attach_controller","params":{"name":"Nvme0","trtype":"tcp","adrfam":"ipv4","traddr":"127.0.0.1","trsvcid":"$PORT","subnqn":"$NQN","hdgst":$1,"ddgst":$1}}]}]}
J
}
bdevperf() { "$R/build/examples/bdevperf" -m 0x2 "${MEM[@]}" --json "$W/init.json" "$@" 2>&1 | tr '\r' '\n'; }
ourperf() { "$PERF" -m 0x2 --json "$W/init.json" "$@" 2>&1 | tr '\r' '\n'; }
# verify_with PERF_FN LABEL: -w verify, digests off and on, 4 KiB and 128 KiB.
verify_with() {
    local run=$1 label=$2 dg io out rc tot
    for dg in false true; do
        initiator_json $dg
        for io in 4096 131072; do
            out=$($run -q 32 -o $io -w verify -t "$SECS"); rc=$?
            tot=$(echo "$out" | awk '/^ *Total/ {print $3, $5}')
            set -- $tot
            if [ $rc -eq 0 ] && [ -n "${1:-}" ] && [ "${2:-1}" = "0.00" ]; then
                echo "$label digests=$dg io=$io: OK, $1 IOPS, 0 failed"
            else
                echo "$label digests=$dg io=$io: FAILED (rc $rc)"; echo "$out" | tail -n 20; fail=1
            fi
        done
    done
}

fail=0
echo "== interop: SPDK bdevperf -w verify against bdev_tgt (malloc 64 MiB, 512 B blocks)"
start_target ours "bdev_malloc_create -b Bench0 64 512" || exit 1
verify_with bdevperf "SPDK initiator -> our target"
stop_target
if [ "$PAIRS" = 1 ]; then
    echo "== interop: our bdevperf -w verify against SPDK's nvmf_tgt (malloc 64 MiB, 512 B blocks)"
    start_target spdk "bdev_malloc_create -b Bench0 64 512" || exit 1
    verify_with ourperf "our initiator -> SPDK target"
    stop_target
fi

echo "== 4 KiB randread, target core 0 (null bdev), SPDK bdevperf core 1, $RUNS x ${SECS} s, alternating"
initiator_json false
declare -A V
for qd in 128 32 1; do
    for i in $(seq "$RUNS"); do
        kinds="ours spdk"; [ "$PAIRS" = 1 ] && kinds="ours spdk pair"
        for kind in $kinds; do
            run=bdevperf tk=$kind
            [ "$kind" = pair ] && run=ourperf tk=ours
            start_target $tk "bdev_null_create Bench0 1024 4096" || exit 1
            v=$($run -q $qd -o 4096 -w randread -t "$SECS" | awk '/^ *Total/ {print $3}')
            stop_target
            echo "QD$qd run $i $kind: ${v:-none} IOPS"
            V[$kind$qd]="${V[$kind$qd]:-} ${v:-0}"
        done
    done
done
for qd in 128 32 1; do
    o=$(printf '%s\n' ${V[ours$qd]} | median); s=$(printf '%s\n' ${V[spdk$qd]} | median)
    printf 'QD%-4s our target %10.0f  spdk %10.0f  ratio %.2f (both with SPDK initiator)\n' $qd "$o" "$s" "$(echo "$o / $s" | bc -l)"
    if [ "$PAIRS" = 1 ]; then
        p=$(printf '%s\n' ${V[pair$qd]} | median)
        printf 'QD%-4s our pair   %10.0f  spdk pair %6.0f  ratio %.2f\n' $qd "$p" "$s" "$(echo "$p / $s" | bc -l)"
    fi
done
exit $fail
