#!/usr/bin/env bash
# Instructions per I/O on the bdev I/O path, counted by callgrind (repeatable
# where wall time is not): two fixed-count runs of bench's io_path, the
# difference in instructions divided by the difference in I/Os. Includes the
# consumer's completion and resubmission, the bdev layer and the module.
#   bench/callgrind_io_path.sh [null|malloc] [QD] [read|write]
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-null}; qd=${2:-128}; rw=${3:-read}
cargo build --release -q --bin io_path
count() {
    IO_PATH_INTERRUPT=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/io_path "$kind" "$qd" "$1" "$rw" 2>&1 |
        awk '/Collected/{print $4}' | tr -d ,
}
a=$(count 200000); b=$(count 1200000)
echo "$kind $rw QD$qd: $(( (b - a) / 1000000 )) instructions per I/O"
