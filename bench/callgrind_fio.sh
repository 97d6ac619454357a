#!/usr/bin/env bash
# Instructions per I/O of fio with an engine, counted by callgrind
# (repeatable where wall time on a shared machine is not): two runs of fio
# with a fixed number of I/Os (--number_ios), the difference in
# instructions divided by the difference in I/Os. The job is bench/
# fio_engine.sh's: 4 KiB random reads, one job, thread=1, gtod_reduce=1,
# norandommap, on the null bdev of bench/configs/null.json. Each run is
# counted per OS thread (--separate-threads): "job" is fio's job thread
# (the one that queues, commits and polls: the engine's whole I/O path),
# "all" is the process (fio's main and helper threads, and the engine's
# control reactor or SPDK's init thread, which tick with wall time and so
# blur the difference a little).
#   bdevkit   fio --ioengine=external:libbdevkit_fio.so (release build)
#   null      fio --ioengine=null (fio's own floor: no device at all)
#   spdk      fio --ioengine=external:$SPDK_FIO (SPDK's spdk_bdev plugin,
#             loaded as an external engine: LD_PRELOAD would reach the
#             valgrind launcher too), when that plugin exists, without
#             hugepages (see bench/fio_engine.sh). valgrind cannot run a
#             DPDK built with -march=native on an AVX-512 machine (an
#             "unrecognised instruction" at start-up): then the case fails
#             with that message and SPDK's engine is measured by wall time
#             only (bench/fio_engine.sh).
# The shorter run's fixed cost (start-up, on the job thread too) varies
# from run to run by some 20 M instructions, so N2 - N1 must be large for
# a repeatable count: at the default N1=100000 N2=500000 repeated runs
# agree to the instruction; at 20000/100000 they differ by up to ~230.
#   bench/callgrind_fio.sh [bdevkit|null|spdk|all] [QD]
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}; qd=${2:-128}
SPDK_REF=${SPDK_REF:-${XDG_CACHE_HOME:-$HOME/.cache}/bdevkit-ref-spdk}
SPDK_FIO=${SPDK_FIO:-$SPDK_REF/build/fio/spdk_bdev}
CONF=$PWD/bench/configs/null.json
T=${CARGO_TARGET_DIR:-target}
N1=${N1:-100000}
N2=${N2:-500000}

if [ "$which" = bdevkit ] || [ "$which" = all ]; then
    FIO_SRC=${FIO_SRC:-$(scripts/fetch-fio-src.sh)}
    export FIO_SRC
    cargo build --release -q -p bdevkit-fio
fi
ENGINE=$(realpath "$T/release/libbdevkit_fio.so")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

# The options bench/fio_engine.sh uses, with an I/O count (io_size: with
# norandommap fio does that many bytes of random reads over the 1 GiB, and
# stops; number_ios does not stop a time_based job) for a time limit.
common() {
    echo --name=cg --thread=1 --rw=randread --bs=4k --iodepth="$qd" --numjobs=1 \
        --io_size=$(($1 * 4096)) --norandommap=1 --randrepeat=0 \
        --gtod_reduce=1 --output-format=terse
}

# Prints one "THREAD INSTRUCTIONS" line per OS thread (callgrind numbers
# them in creation order, the same in both runs of a case).
count() {
    local kind=$1 n=$2 out="$WORK/cg.$1.$2"
    local -a cmd
    case $kind in
        bdevkit) cmd=(fio $(common "$n") --ioengine=external:"$ENGINE" --bdevkit_conf="$CONF"
            --filename=Null0) ;;
        null) cmd=(fio $(common "$n") --ioengine=null --size=1G) ;;
        spdk) cmd=(fio $(common "$n") --ioengine=external:"$SPDK_FIO"
            --spdk_json_conf="$CONF" --spdk_mem=2048
            --env_context=--mbuf-pool-ops-name=x--no-huge--legacy-mem --filename=Null0) ;;
    esac
    rm -f "$out"*
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out" \
        "${cmd[@]}" >"$out.log" 2>&1 || {
        echo "callgrind_fio: $kind failed:" >&2
        grep -m3 -E 'unhandled instruction|Unrecognised instruction' "$out.log" >&2 || tail -5 "$out.log" >&2
        return 1
    }
    # One file per thread ("$out-01", ...); each has a "summary:" (or
    # "totals:") line with its instruction count.
    awk '/^(summary|totals):/ {n = FILENAME; sub(/.*-/, "", n); print n, $2; nextfile}' "$out"-*
}

kinds=("$which")
if [ "$which" = all ]; then
    kinds=(bdevkit null)
    if [ -e "$SPDK_FIO" ]; then kinds+=(spdk); else
        echo "(no SPDK fio plugin at $SPDK_FIO: spdk left out)" >&2; fi
fi
for k in "${kinds[@]}"; do
    r1=$(count "$k" "$N1") && r2=$(count "$k" "$N2") || { echo "fio $k: not measured"; continue; }
    # The job thread is the one whose count grows with the I/Os (fio's
    # main thread has the larger fixed cost of a short run).
    read -r job all < <(join <(sort <<<"$r1") <(sort <<<"$r2") |
        awk '{d = $3 - $2; all += d; if (d > job) job = d} END {print job, all}')
    d=$((N2 - N1))
    echo "fio $k randread 4k QD$qd: $((job / d)) instructions per I/O (job thread)," \
        "$((all / d)) (whole process)"
done
