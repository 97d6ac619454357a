#!/usr/bin/env bash
# The VM test lane: builds the static binaries the guest tests use, then runs
# each guest script test/vm/NAME.sh in its own throw-away QEMU VM with an
# emulated NVMe controller (../shared/vm/run-vm-test.sh), and reports PASS or
# FAIL per test with its time, then a summary. Exit status 1 if any test did
# not pass (a VM that gives no result counts as a failure: QEMU must run).
#
# Usage: scripts/vm-test.sh [options] [NAME...]
#   NAME            run only these (test/vm/NAME.sh; with --bench, bench/vm/NAME.sh)
#   --bench         run the benchmarks in bench/vm/ instead (not part of CI);
#                   their console streams to stdout
#   --list          list the tests (or benchmarks) and exit
#   --no-build      use the binaries already in target/vm
#   --no-setup      skip the harness's host set-up (packages, guest kernel)
#   -v, --verbose   stream each VM's console to stdout
#   --out DIR       work directory (default: $VMTEST_LANE_OUT or /tmp/vmtest-lane);
#                   each test keeps its console log in DIR/NAME/console.log
#   -e NAME=VALUE   environment variable for the guest scripts (repeatable)
#   -h, --help
#
# A guest script asks for harness options in header lines "# vm: OPTIONS"
# (e.g. "# vm: --deb nvme-cli --deb libnvme1"; several lines add up). Every
# script gets test/vm/lib.sh (assertions), scripts/setup.sh, bdevperf,
# bdev_dd, bdev_tgt, bdev_rpc and the test programs (the nvme_io_sizes and
# xnvme_vm examples) in /opt/vmtest, its working directory and on PATH.
# Must run as root (QEMU, apt-get); the harness installs QEMU and fetches a
# Debian kernel once.
#
# Environment: VMTEST_HARNESS (default ../shared/vm/run-vm-test.sh from the
# repository root), VMTEST_LANE_OUT, VMTEST_LANE_TIMEOUT (per VM, default 300 s),
# and the harness's own (VMTEST_CACHE, VMTEST_KERNEL, ...).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HARNESS=${VMTEST_HARNESS:-$ROOT/../shared/vm/run-vm-test.sh}
OUT=${VMTEST_LANE_OUT:-/tmp/vmtest-lane}
TIMEOUT=${VMTEST_LANE_TIMEOUT:-300}
TARGET=x86_64-unknown-linux-gnu
# The guest binaries: a separate target dir, so that the static build does
# not fight over fingerprints with the normal build.
TARGET_DIR=$ROOT/target/vm
# Tests use the vmtest profile (release without debuginfo and LTO: less
# than half the cold build time on 2 cores); benchmarks the release one.
PROFILE=vmtest
PACKAGES=(bdevperf bdev_dd bdevkit-bdev-tgt bdevkit-bdev-rpc)
BINARIES=(bdevperf bdev_dd bdev_tgt bdev_rpc)
# Guest test programs that are examples of library crates (PACKAGE:EXAMPLE,
# built into $BIN/examples).
EXAMPLES=(bdevkit-nvme:nvme_io_sizes bdevkit-xnvme:xnvme_vm)
# Files of the repository the guests get too.
EXTRA_FILES=(scripts/setup.sh)

BENCH=0
LIST=0
BUILD=1
SETUP=1
VERBOSE=0
ENVS=()
NAMES=()

say() { echo "vm-test: $*"; }
die() { echo "vm-test: ERROR: $*" >&2; exit 3; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --bench) BENCH=1; VERBOSE=1; shift ;;
        --list) LIST=1; shift ;;
        --no-build) BUILD=0; shift ;;
        --no-setup) SETUP=0; shift ;;
        -v|--verbose) VERBOSE=1; shift ;;
        --out) OUT=$2; shift 2 ;;
        -e) ENVS+=(-e "$2"); shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) NAMES+=("${1%.sh}"); shift ;;
    esac
done

if [ "$BENCH" = 1 ]; then DIR=$ROOT/bench/vm; KIND=benchmark; PROFILE=release; else DIR=$ROOT/test/vm; KIND=test; fi
BIN=$TARGET_DIR/$TARGET/$PROFILE
LIB=$ROOT/test/vm/lib.sh

ALL=()
for f in "$DIR"/*.sh; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .sh)
    [ "$n" = lib ] || ALL+=("$n")
done
if [ "$LIST" = 1 ]; then printf '%s\n' "${ALL[@]}"; exit 0; fi
[ ${#ALL[@]} -gt 0 ] || die "no ${KIND}s in $DIR"
if [ ${#NAMES[@]} -eq 0 ]; then
    # Benchmarks run only when named.
    [ "$BENCH" = 0 ] || die "name the benchmarks to run: ${ALL[*]}"
    NAMES=("${ALL[@]}")
fi
for n in "${NAMES[@]}"; do
    [ -f "$DIR/$n.sh" ] || die "no $KIND $n ($DIR/$n.sh); ${KIND}s: ${ALL[*]}"
done

[ "$(id -u)" = 0 ] || die "must run as root (QEMU and the harness's apt-get)"
[ -x "$HARNESS" ] || die "VM harness $HARNESS not found (set VMTEST_HARNESS)"

now() { date +%s.%N; }
since() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1f", e - s }'; }
LANE_START=$(now)

if [ "$SETUP" = 1 ]; then
    # Idempotent, and quick once done: host packages (QEMU, busybox, ...)
    # and the guest kernel, into the harness's cache.
    t=$(now)
    "$HARNESS" --setup-only >/dev/null 2>"$OUT.setup.log" || { cat "$OUT.setup.log" >&2; die "VM host set-up failed"; }
    say "host set-up: $(since "$t") s"
fi

if [ "$BUILD" = 1 ]; then
    t=$(now)
    # Static glibc binaries (the guest has only busybox); the explicit
    # --target keeps build scripts and proc-macros dynamic.
    args=()
    for p in "${PACKAGES[@]}"; do args+=(-p "$p"); done
    # --bins keeps the packages' binaries selected next to the examples.
    args+=(--bins)
    for e in "${EXAMPLES[@]}"; do args+=(-p "${e%%:*}" --example "${e#*:}"); done
    (cd "$ROOT" && RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR=$TARGET_DIR \
        cargo build --profile "$PROFILE" --quiet --target "$TARGET" "${args[@]}") || die "static build failed"
    say "static build (${PACKAGES[*]} ${EXAMPLES[*]}): $(since "$t") s"
fi
FILES=(-f "$LIB")
for b in "${BINARIES[@]}"; do
    [ -x "$BIN/$b" ] || die "$BIN/$b missing (run without --no-build)"
    FILES+=(-f "$BIN/$b")
done
for e in "${EXAMPLES[@]}"; do
    x=$BIN/examples/${e#*:}
    [ -x "$x" ] || die "$x missing (run without --no-build)"
    FILES+=(-f "$x")
done
for f in "${EXTRA_FILES[@]}"; do FILES+=(-f "$ROOT/$f"); done

mkdir -p "$OUT"
PASSED=()
FAILED=()
RESULTS=()
for n in "${NAMES[@]}"; do
    script=$DIR/$n.sh
    # Harness options from the script's "# vm:" lines (word-split on purpose).
    read -r -a opts <<< "$(sed -n 's/^# vm:[[:space:]]*//p' "$script" | tr '\n' ' ')"
    work=$OUT/$n
    log=$work/console.log
    quiet=(--quiet)
    [ "$VERBOSE" = 1 ] && quiet=()
    t=$(now)
    set +e
    # no_timer_check: under software emulation on a loaded host the guest
    # kernel's check that the timer works through the interrupt-remapped
    # IO-APIC can miss its window and panic at boot ("timer doesn't work
    # through Interrupt-remapped IO-APIC"); skip it, as VMs usually do.
    "$HARNESS" -s "$script" --out "$work" --timeout "$TIMEOUT" "${quiet[@]}" "${FILES[@]}" "${ENVS[@]}" \
        --append no_timer_check "${opts[@]}" \
        < /dev/null 2>&1 | if [ "$VERBOSE" = 1 ]; then tee "$work.harness.log"; else cat > "$work.harness.log"; fi
    rc=${PIPESTATUS[0]}
    set -e
    secs=$(since "$t")
    case $rc in
        0) verdict=PASS ;;
        1) verdict=FAIL ;;
        2) verdict="FAIL (no result: timeout, panic or QEMU error)" ;;
        *) verdict="FAIL (harness error $rc)" ;;
    esac
    line=$(printf '%-28s %s  %6.1f s' "$n" "${verdict%% *}" "$secs")
    if [ $rc = 0 ]; then
        PASSED+=("$n")
    else
        FAILED+=("$n")
        if [ "$VERBOSE" = 0 ]; then
            echo "----- $n: $verdict; console log $log (last lines):"
            if [ -f "$log" ]; then tail -n 60 "$log"; else tail -n 30 "$work.harness.log"; fi
            echo "-----"
        fi
    fi
    say "$line"
    RESULTS+=("$line")
done

echo
say "summary ($KIND):"
for r in "${RESULTS[@]}"; do echo "  $r"; done
say "${#PASSED[@]} passed, ${#FAILED[@]} failed, lane $(since "$LANE_START") s; logs in $OUT/<name>/console.log"
[ ${#FAILED[@]} -eq 0 ]
