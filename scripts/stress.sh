#!/usr/bin/env bash
# The bounded stress lane (issue 17): bdevperf verifies a passthru over a
# raid1 on two cores with a small bdev_io pool while RPC clients create,
# stack and delete bdevs, raid1 members fail, leave and come back
# (rebuilds), and 300 idle and half-sent connections are held open. Passes
# when the daemon answered throughout, verify found nothing, and every bdev,
# fd and byte of RSS the run took is given back. See scripts/stress.py.
#   scripts/stress.sh [SECONDS]   (default 40; the whole lane ~50 s)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p bdevperf
exec python3 scripts/stress.py target/debug/bdevperf "${1:-40}"
