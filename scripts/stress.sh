#!/usr/bin/env bash
# The bounded stress lane (issues 17 and 31): bdevperf verifies a passthru
# over a raid1 on two cores with a small bdev_io pool while RPC clients
# create, stack and delete bdevs, raid1 members fail, leave and come back
# (rebuilds), and 300 idle and half-sent connections are held open; at the
# same time our NVMe/TCP initiator verifies a bdev_tgt namespace through a
# proxy that corrupts PDUs (digests on), while slowloris connections and
# floods of 1000 idle ones hit the target's listener. Passes when the
# daemons answered throughout, verify found nothing, every corruption was
# caught, every stalled connection was cut, and every bdev, fd and byte of
# RSS the run took is given back. See scripts/stress.py, doc/testing.md.
#   scripts/stress.sh [SECONDS]   (default 40; the whole lane ~50 s)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p bdevperf -p bdevkit-bdev-tgt
exec python3 scripts/stress.py "${CARGO_TARGET_DIR:-target}/debug" "${1:-40}"
