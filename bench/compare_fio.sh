#!/usr/bin/env bash
# Our bdevperf against fio on the same files, one core, O_DIRECT, 4 KiB:
#   uring vs fio --ioengine=io_uring, aio vs fio --ioengine=libaio,
#   randread at QD 1, 32, 128 and randwrite at QD 32,
#   on (a) a 1 GiB file in /dev/shm (tmpfs) and (b) a 2 GiB file on the
#   root disk (/var/tmp). Each pair alternates ours/fio RUNS times; the
#   table shows the median IOPS, the CPU % (process CPU time over wall time,
#   kernel worker threads included, measured the same way for both) and the
#   ratio ours/fio of the medians.
#
# Usage (as root, on an otherwise idle machine; the numbers are only as good
# as the machine is quiet):
#   bench/compare_fio.sh                 # everything (about 10 minutes)
#   SECS=3 RUNS=1 ONLY=tmpfs bench/compare_fio.sh
# Environment: SECS (per run, default 5), RUNS (default 3), CORE (default 0),
#   ONLY (tmpfs|disk), ENGINES ("uring aio"), SHM_FILE, DISK_FILE,
#   BDEVPERF (path; default: built with cargo build --release --bin bdevperf).
# fio is installed from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${SECS:-5}
RUNS=${RUNS:-3}
CORE=${CORE:-0}
ENGINES=${ENGINES:-"uring aio"}
SHM_FILE=${SHM_FILE:-/dev/shm/bdevkit-fio.img}
DISK_FILE=${DISK_FILE:-/var/tmp/bdevkit-fio.img}
MASK=$(printf '0x%x' $((1 << CORE)))
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

if ! command -v fio >/dev/null 2>&1; then
    echo "installing fio from Debian's packages..." >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null
fi
if [ -z "${BDEVPERF:-}" ]; then
    cargo build --release --quiet --bin bdevperf
    BDEVPERF="${CARGO_TARGET_DIR:-target}/release/bdevperf"
fi

# A file of $2 MiB at $1 with real data (reads of holes would not reach the
# device), written once and reused.
make_file() {
    local path=$1 mib=$2
    if [ ! -f "$path" ] || [ "$(stat -c %s "$path")" -ne $((mib << 20)) ]; then
        echo "writing $path ($mib MiB)..." >&2
        dd if=/dev/urandom of="$path" bs=1M count="$mib" oflag=direct status=none
    fi
}

# Runs a command; prints "<cpu%>" of it (children's CPU time / wall time).
cpu_of() {
    python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t = time.time()
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
wall = time.time() - t
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%.0f" % ((u.ru_utime + u.ru_stime) / wall * 100) if r.returncode == 0 else "fail")
PY
}

ours() { # engine file qd rw -> "iops cpu"
    local engine=$1 file=$2 qd=$3 rw=$4 conf="$WORK/conf.json" out="$WORK/out.json"
    if [ "$engine" = uring ]; then
        echo "{\"subsystems\":[{\"subsystem\":\"bdev\",\"config\":[{\"method\":\"bdev_uring_create\",\"params\":{\"name\":\"Bench0\",\"filename\":\"$file\"}}]}]}" >"$conf"
    else
        echo "{\"subsystems\":[{\"subsystem\":\"bdev\",\"config\":[{\"method\":\"bdev_aio_create\",\"params\":{\"name\":\"Bench0\",\"filename\":\"$file\",\"readonly\":false,\"fallocate\":false,\"nowait\":false}}]}]}" >"$conf"
    fi
    rm -f "$out"
    local cpu
    cpu=$(cpu_of "$BDEVPERF" --json "$conf" -m "$MASK" -q "$qd" -o 4096 -w "$rw" -t "$SECS" --output-json "$out")
    local iops
    iops=$(python3 -c 'import json,sys; print("%.0f" % sum(r["iops"] for r in json.load(open(sys.argv[1]))["results"]))' "$out" 2>/dev/null || echo 0)
    echo "$iops $cpu"
}

theirs() { # engine file qd rw -> "iops cpu"
    local engine=$1 file=$2 qd=$3 rw=$4 out="$WORK/fio.json"
    local ioengine=libaio
    [ "$engine" = uring ] && ioengine=io_uring
    local cpu
    cpu=$(cpu_of fio --name=bench --filename="$file" --ioengine="$ioengine" --direct=1 \
        --rw="$rw" --bs=4k --iodepth="$qd" --numjobs=1 --norandommap --time_based \
        --runtime="$SECS" --cpus_allowed="$CORE" --output-format=json --output="$out")
    local iops
    iops=$(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
print("%.0f" % (j["read"]["iops"] + j["write"]["iops"]))' "$out" 2>/dev/null || echo 0)
    echo "$iops $cpu"
}

median() { tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

printf '%-6s %-6s %-10s %4s | %10s %5s | %10s %5s | %6s\n' \
    where engine workload qd "ours IOPS" cpu% "fio IOPS" cpu% ratio
for where in tmpfs disk; do
    [ -n "${ONLY:-}" ] && [ "$ONLY" != "$where" ] && continue
    if [ "$where" = tmpfs ]; then
        file=$SHM_FILE
        make_file "$file" 1024
    else
        file=$DISK_FILE
        make_file "$file" 2048
    fi
    for engine in $ENGINES; do
        for case in "randread 1" "randread 32" "randread 128" "randwrite 32"; do
            set -- $case
            rw=$1 qd=$2
            oi="" oc="" fi_="" fc=""
            for _ in $(seq "$RUNS"); do
                read -r i c < <(ours "$engine" "$file" "$qd" "$rw")
                oi="$oi $i" oc="$oc $c"
                read -r i c < <(theirs "$engine" "$file" "$qd" "$rw")
                fi_="$fi_ $i" fc="$fc $c"
            done
            o=$(echo $oi | median) f=$(echo $fi_ | median)
            ratio=$(awk -v o="$o" -v f="$f" 'BEGIN { if (f > 0) printf "%.2f", o / f; else print "n/a" }')
            printf '%-6s %-6s %-10s %4s | %10s %5s | %10s %5s | %6s\n' \
                "$where" "$engine" "$rw" "$qd" "$o" "$(echo $oc | median)" \
                "$f" "$(echo $fc | median)" "$ratio"
        done
    done
done
