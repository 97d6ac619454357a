#!/usr/bin/env bash
# RPC scale benchmark: 10 000 null bdevs through one spdk-rpc batch, list them,
# delete them (one batch), with wall times and the daemon's RSS.
#
#   bench/rpc_scale.sh [COUNT]            (default 10000)
#
# Environment:
#   CARGO_TARGET_DIR  where the release build goes (default: target)
#   SPDK_RPC          spdk-rpc executable (default: the repository's .venv, which
#                     scripts/test.sh installs, then PATH)
#   POLLING=1         run bdev_tgt in polling mode (default: --interrupt-mode)
#   SPDK_RPC_LIST=1   also time `spdk-rpc bdev_get_bdevs` over all bdevs. Off by
#                     default: spdk-rpc re-decodes its whole receive buffer after
#                     every 4 KiB recv(), which is quadratic in the response size
#                     (12 MiB here), so that step measures the Python client.
#
# Goals (issue #5): each step under 5 s; idle RSS under 20 MiB; RSS back near
# idle after the deletes.
set -euo pipefail

COUNT=${1:-10000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
if [[ -z "${SPDK_RPC:-}" && -x "$ROOT/.venv/bin/spdk-rpc" ]]; then
    SPDK_RPC=$ROOT/.venv/bin/spdk-rpc
fi
SPDK_RPC=${SPDK_RPC:-$(command -v spdk-rpc || true)}
if [[ -z "$SPDK_RPC" ]]; then
    echo "spdk-rpc not found: run scripts/test.sh once (installs it in .venv), pip install spdk==26.9, or set SPDK_RPC" >&2
    exit 1
fi

cargo build --release --quiet --bin bdev_tgt --bin bdev_rpc --manifest-path "$ROOT/Cargo.toml"
TGT=$TARGET/release/bdev_tgt
RPC=$TARGET/release/bdev_rpc

WORK=$(mktemp -d /tmp/bdk-scale.XXXXXX)
SOCK=$WORK/tgt.sock
MODE=--interrupt-mode
[[ "${POLLING:-0}" == 1 ]] && MODE=
PID=
cleanup() {
    if [[ -n "$PID" ]] && kill -0 "$PID" 2>/dev/null; then
        kill -TERM "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$PID/status"; }
rss() { awk -v k="$(rss_kib)" 'BEGIN {printf "%.1f MiB", k / 1024}'; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f s", b - a}'; }

# shellcheck disable=SC2086
RUST_LOG=warn "$TGT" -r "$SOCK" $MODE 2>"$WORK/tgt.log" &
PID=$!
for _ in $(seq 200); do
    "$RPC" -s "$SOCK" spdk_get_version >/dev/null 2>&1 && break
    sleep 0.05
done
sleep 0.5
echo "bdev_tgt pid $PID (${MODE:-polling mode}), $COUNT null bdevs"
echo "RSS idle:                  $(rss)"

for i in $(seq 0 $((COUNT - 1))); do echo "bdev_null_create Null$i 1 512"; done >"$WORK/create.txt"
for i in $(seq 0 $((COUNT - 1))); do echo "bdev_null_delete Null$i"; done >"$WORK/delete.txt"

t0=$(now)
"$SPDK_RPC" -s "$SOCK" -t 600 -b <"$WORK/create.txt" >/dev/null
t1=$(now)
echo "create (spdk-rpc -b):      $(secs "$t0" "$t1")"
sleep 0.5
echo "RSS after create:          $(rss)"

t0=$(now)
"$RPC" -s "$SOCK" bdev_get_bdevs >"$WORK/bdevs.json"
t1=$(now)
echo "bdev_get_bdevs (bdev_rpc): $(secs "$t0" "$t1") ($(wc -c <"$WORK/bdevs.json") bytes)"
n=$(grep -c '"product_name"' "$WORK/bdevs.json" || true)
[[ "$n" == "$COUNT" ]] || { echo "expected $COUNT bdevs, found $n" >&2; exit 1; }
echo "RSS after bdev_get_bdevs:  $(rss)"

if [[ "${SPDK_RPC_LIST:-0}" == 1 ]]; then
    t0=$(now)
    "$SPDK_RPC" -s "$SOCK" -t 600 bdev_get_bdevs >/dev/null
    t1=$(now)
    echo "bdev_get_bdevs (spdk-rpc): $(secs "$t0" "$t1")"
fi

t0=$(now)
"$SPDK_RPC" -s "$SOCK" -t 600 -b <"$WORK/delete.txt" >/dev/null
t1=$(now)
echo "delete (spdk-rpc -b):      $(secs "$t0" "$t1")"
n=$("$RPC" -s "$SOCK" bdev_get_bdevs | grep -c '"name"' || true)
[[ "$n" == 0 ]] || { echo "expected 0 bdevs, found $n" >&2; exit 1; }
sleep 0.5
echo "RSS after delete:          $(rss)"
echo "daemon CPU time (utime+stime): $(awk '{printf "%.2f s", ($14 + $15) / 100}' "/proc/$PID/stat")"
