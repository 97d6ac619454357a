#!/usr/bin/env bash
# The fio engine's cost, one core, 4 KiB random reads at QD 128 on a null
# bdev (1 GiB, 4 KiB blocks: bench/configs/null.json):
#   fio + bdevkit engine    fio --ioengine=external:libbdevkit_fio.so
#   fio + fio's null engine fio --ioengine=null (fio's own floor)
#   bdevperf                bdevkit's bdevperf on the same bdev
#   fio + SPDK's engine     LD_PRELOAD=spdk_bdev fio --ioengine=spdk_bdev,
#                           when $SPDK_FIO (default: the reference SPDK
#                           build's build/fio/spdk_bdev) exists
# Every case runs pinned to core $CORE (taskset: fio's threads, bdevkit's
# control reactor, bdevperf's reactor), RUNS times in alternation; the
# table has the median IOPS and the ratios. fio runs with gtod_reduce=1
# (no per-I/O clock reads: the engines' path is what differs), one job,
# thread=1, norandommap.
#
# Usage (root; release builds of the engine and bdevperf are made):
#   bench/fio_engine.sh                  # SECS=5 RUNS=5
#   SECS=3 RUNS=3 CORE=1 bench/fio_engine.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

SECS=${SECS:-5}
RUNS=${RUNS:-5}
CORE=${CORE:-0}
SPDK_REF=${SPDK_REF:-${XDG_CACHE_HOME:-$HOME/.cache}/bdevkit-ref-spdk}
SPDK_FIO=${SPDK_FIO:-$SPDK_REF/build/fio/spdk_bdev}
CONF=$PWD/bench/configs/null.json
T=${CARGO_TARGET_DIR:-target}

FIO_SRC=${FIO_SRC:-$(scripts/fetch-fio-src.sh)}
export FIO_SRC
cargo build --release --quiet -p bdevkit-fio -p bdevperf
ENGINE=$(realpath "$T/release/libbdevkit_fio.so")
BDEVPERF=$(realpath "$T/release/bdevperf")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# fio and bdevperf run there: nothing they write lands in the tree.
cd "$WORK"

FIO_COMMON=(--name=bench --thread=1 --rw=randread --bs=4k --iodepth=128 --numjobs=1
    --time_based --runtime="$SECS" --norandommap=1 --randrepeat=0 --gtod_reduce=1
    --output-format=json)

# The read IOPS of fio's JSON report on standard input.
fio_iops() {
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["jobs"][0]["read"]["iops"]))'
}

run_case() {
    local out="$WORK/out"
    case $1 in
        bdevkit)
            taskset -c "$CORE" fio "${FIO_COMMON[@]}" --ioengine=external:"$ENGINE" \
                --bdevkit_conf="$CONF" --filename=Null0 >"$out" 2>"$WORK/err" && fio_iops <"$out" ;;
        fionull)
            taskset -c "$CORE" fio "${FIO_COMMON[@]}" --ioengine=null --size=1G \
                >"$out" 2>"$WORK/err" && fio_iops <"$out" ;;
        bdevperf)
            taskset -c "$CORE" "$BDEVPERF" -c "$CONF" -m "[$CORE]" -q 128 -o 4096 -w randread \
                -t "$SECS" >"$out" 2>"$WORK/err" && total_iops <"$out" ;;
        spdk)
            taskset -c "$CORE" env LD_PRELOAD="$SPDK_FIO" fio "${FIO_COMMON[@]}" --ioengine=spdk_bdev \
                --spdk_json_conf="$CONF" "${SPDK_MEM[@]}" --filename=Null0 >"$out" 2>"$WORK/err" \
                && fio_iops <"$out" ;;
    esac || { echo "bench: $1 failed:" >&2; tail -5 "$WORK/err" >&2; echo 0; }
}

# SPDK's plugin comes from the reference build when that was configured
# with fio (its ./configure --with-fio=<fio source>: the source of
# scripts/fetch-fio-src.sh); only app/fio/bdev is built here.
if [ ! -f "$SPDK_FIO" ] && [ -f "$SPDK_REF/mk/config.mk" ]; then
    if grep -q '^CONFIG_FIO_PLUGIN?=y' "$SPDK_REF/mk/config.mk"; then
        make -s -C "$SPDK_REF/app/fio/bdev" >&2 || true
    else
        echo "(SPDK at $SPDK_REF has no fio plugin: rerun its ./configure with" \
            "--with-fio=$FIO_SRC and the options of mk/config.mk, then make -C app/fio/bdev)" >&2
    fi
fi

CASES=(bdevkit fionull bdevperf)
if [ -x "$SPDK_FIO" ] || [ -f "$SPDK_FIO" ]; then
    CASES+=(spdk)
    if [ "$(awk '/HugePages_Free/{print $2}' /proc/meminfo)" -ge 600 ]; then
        SPDK_MEM=(--spdk_mem=1024)
    else
        # Without hugepages. SPDK v26.05's env turns --no-huge in
        # env_context into its own --no-huge (and legacy memory) and then
        # appends env_context too, which DPDK refuses as a duplicate; so
        # the two words ride in a harmless option's value, where SPDK's
        # substring test still sees them.
        SPDK_MEM=(--spdk_mem=2048 --env_context=--mbuf-pool-ops-name=x--no-huge--legacy-mem)
    fi
else
    echo "(no SPDK fio plugin at $SPDK_FIO: SPDK's engine is left out)" >&2
fi

declare -A got
for ((r = 1; r <= RUNS; r++)); do
    for c in "${CASES[@]}"; do
        v=$(run_case "$c")
        got[$c]+="$v "
        echo "run $r $c $v" >&2
    done
done

med() { tr ' ' '\n' <<<"${got[$1]}" | grep . | median; }
printf '\n%-22s %12s   %s\n' "1 core, 4K randread QD128, null bdev" "median IOPS" "runs"
for c in "${CASES[@]}"; do
    printf '%-22s %12.0f   %s\n' "$c" "$(med "$c")" "${got[$c]}"
done
ratio() { awk -v a="$(med "$1")" -v b="$(med "$2")" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }
echo
echo "fio+bdevkit / fio+null engine: $(ratio bdevkit fionull)"
echo "bdevperf / fio+bdevkit:        $(ratio bdevperf bdevkit)"
if [[ " ${CASES[*]} " == *" spdk "* ]]; then
    echo "fio+bdevkit / fio+spdk_bdev:   $(ratio bdevkit spdk)"
    # The same ratio run by run (the two ran seconds apart, so a burst of
    # load elsewhere hits both), and its median: steadier on a busy machine.
    pairs=$(paste -d' ' <(tr ' ' '\n' <<<"${got[bdevkit]}" | grep .) \
        <(tr ' ' '\n' <<<"${got[spdk]}" | grep .) |
        awk '$2 > 0 { printf "%.2f\n", $1 / $2 }')
    echo "  per run: $(tr '\n' ' ' <<<"$pairs")(median $(median <<<"$pairs"))"
fi
