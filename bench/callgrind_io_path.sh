#!/usr/bin/env bash
# Instructions per I/O on the bdev I/O path, counted by callgrind (repeatable
# where wall time is not): two fixed-count runs of bench's io_path, the
# difference in instructions divided by the difference in I/Os. Includes the
# consumer's completion and resubmission, the bdev layer and the module.
# For nvme (the nvme module over an inline emulated controller with a null
# namespace) the emulated device's own work is left out: its doorbell
# register (the emulator's DoorbellSink::ring, which runs the inline
# emulator's run_inline; on hardware a doorbell is one store), so the count
# is the driver's and the module's; EMU=1 keeps it in.
# For uring (a uring bdev over a file in /dev/shm) the kernel's work is not
# counted (callgrind sees user space only): the count is the module's.
# passthru and error are those virtual bdevs over a null bdev; lvol and
# lvol-thin a thick or thin lvol (4 MiB clusters) on a malloc bdev.
#   bench/callgrind_io_path.sh [null|malloc|passthru|error|lvol|lvol-thin|uring|nvme] [QD] [read|write]
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-null}; qd=${2:-128}; rw=${3:-read}
cargo build --release -q --bin io_path
# (--toggle-collect sets --collect-atstart=no: set it back after it.)
toggle=(--toggle-collect='*emu::Shared as*DoorbellSink*::ring*' --collect-atstart=yes)
[ "${EMU:-0}" = 1 ] && toggle=()
count() {
    IO_PATH_INTERRUPT=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null "${toggle[@]}" \
        "${CARGO_TARGET_DIR:-target}"/release/io_path "$kind" "$qd" "$1" "$rw" 2>&1 |
        awk '/Collected/{print $4}' | tr -d ,
}
a=$(count 200000); b=$(count 1200000)
echo "$kind $rw QD$qd: $(( (b - a) / 1000000 )) instructions per I/O"
