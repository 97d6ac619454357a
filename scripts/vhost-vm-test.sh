#!/usr/bin/env bash
# The vhost-user-blk VM test: bdev_tgt on this host serves an aio bdev (a
# file) over a vhost-user-blk controller, and QEMU guests of the shared VM
# harness (../shared/vm/run-vm-test.sh) use it as /dev/vda through
# vhost-user-blk-pci with shared guest memory (memory-backend-memfd,
# share=on). The guest side is test/vm/vhost/guest.sh; three boots:
#
#   1. io:      /dev/vda has the bdev's size and QUEUES blk-mq queues; a
#               pattern the guest writes is read back on the host from the
#               aio bdev's file; fio --verify=crc32c (two jobs), flush, discard.
#   2. busy:    fio writes; the host kills QEMU with SIGKILL mid-I/O; the
#               target lives and the controller's session goes.
#   3. restart: a new QEMU on the same controller reads boot 1's pattern,
#               verifies with fio again, then the host deletes the bdev
#               under the guest's writes: the guest sees EIO, not a hang;
#               the target lives, the controller shows no bdev and is
#               deleted; bdev_tgt stops cleanly.
#
# Usage: scripts/vhost-vm-test.sh [--queues N] [--out DIR] [--no-build]
# Needs root (QEMU), QEMU with vhost-user, fio on the host (copied into the
# guest with its libraries). Exit status 0 when every check passed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HARNESS=${VMTEST_HARNESS:-$ROOT/../shared/vm/run-vm-test.sh}
OUT=${VHOST_VM_OUT:-/tmp/vhost-vm}
QUEUES=2
BUILD=1
MEM=1024
BYTES=$((256 * 1024 * 1024))
PATTERN_OFF=$((8 * 1024 * 1024 * 25))
while [ $# -gt 0 ]; do
    case "$1" in
        --queues) QUEUES=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 3 ;;
    esac
done

FAILS=0
say() { echo "vhost-vm: $*"; }
ok() { say "OK: $*"; }
bad() { say "FAILED: $*"; FAILS=$((FAILS + 1)); }
die() { say "FATAL: $*"; exit 1; }

TGT_BIN=$ROOT/target/debug/bdev_tgt
if [ "$BUILD" = 1 ]; then (cd "$ROOT" && cargo build -q -p bdevkit-bdev-tgt); fi
[ -x "$TGT_BIN" ] || die "$TGT_BIN missing"
RPC_CLIENT=${SPDK_RPC:-$ROOT/.venv/bin/spdk-rpc}
[ -x "$RPC_CLIENT" ] || RPC_CLIENT=/work/main/.venv/bin/spdk-rpc
FIO=$(command -v fio) || die "fio not on the host"

rm -rf "$OUT"
mkdir -p "$OUT/sock"
DISK=$OUT/disk.img
truncate -s "$BYTES" "$DISK"
RPCSOCK=$OUT/rpc.sock
SOCK=$OUT/sock/vhost.0
rpc() { "$RPC_CLIENT" -s "$RPCSOCK" "$@"; }

"$TGT_BIN" -m 0x3 --interrupt-mode -r "$RPCSOCK" -S "$OUT/sock" > "$OUT/tgt.log" 2>&1 &
TGT=$!
cleanup() {
    if kill -0 "$TGT" 2>/dev/null; then kill "$TGT"; wait "$TGT" 2>/dev/null || true; fi
}
trap cleanup EXIT
for _ in $(seq 100); do rpc spdk_get_version > /dev/null 2>&1 && break; sleep 0.1; done
rpc bdev_aio_create "$DISK" Aio0 512 > /dev/null
rpc vhost_create_blk_controller --cpumask 0x3 vhost.0 Aio0 > /dev/null
[ -S "$SOCK" ] && ok "controller socket $SOCK" || die "no socket $SOCK"

sessions() { rpc vhost_get_controllers -n vhost.0 | python3 -c 'import json,sys; print(len(json.load(sys.stdin)[0]["sessions"]))'; }

# vm PHASE: starts a guest for PHASE in the background (VM_PID, VM_LOG).
vm() {
    local phase=$1 work=$OUT/vm-$1
    VM_LOG=$work/console.log
    "$HARNESS" -s "$ROOT/test/vm/vhost/guest.sh" --out "$work" --timeout 300 --quiet --retries 0 \
        -f "$ROOT/test/vm/lib.sh" -f "$FIO" \
        -e PHASE="$phase" -e BYTES="$BYTES" -e QUEUES="$QUEUES" -e PATTERN_OFF="$PATTERN_OFF" \
        --mem "$MEM" --smp "$QUEUES" --no-nvme --no-iommu --modules virtio_blk --boot-modules "" \
        --append no_timer_check \
        --qemu-arg -object --qemu-arg "memory-backend-memfd,id=mem0,size=${MEM}M,share=on" \
        --qemu-arg -machine --qemu-arg memory-backend=mem0 \
        --qemu-arg -chardev --qemu-arg "socket,id=vhu0,path=$SOCK" \
        --qemu-arg -device --qemu-arg "vhost-user-blk-pci,chardev=vhu0,num-queues=$QUEUES" \
        < /dev/null > "$work.harness.log" 2>&1 &
    VM_PID=$!
}
# wait_line TEXT: waits (up to 240 s) for TEXT on the running guest's console.
wait_line() {
    for _ in $(seq 2400); do
        grep -q "^$1" "$VM_LOG" 2>/dev/null && return 0
        kill -0 "$VM_PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
# qemu_pid: the QEMU process under the harness of VM_PID (by ancestry).
qemu_pid() {
    local p kids
    kids=$VM_PID
    while [ -n "$kids" ]; do
        local next=""
        for p in $kids; do
            [ "$(cat /proc/$p/comm 2>/dev/null)" = qemu-system-x86 ] && { echo "$p"; return 0; }
            next="$next $(cat /proc/$p/task/*/children 2>/dev/null)"
        done
        kids=$(echo $next)
    done
    return 1
}
guest_tail() { grep -a "CHECK\|===\|checks\|FATAL" "$VM_LOG" | sed 's/^/    guest: /'; }

say "boot 1 (io): $QUEUES queues"
vm io
if wait "$VM_PID"; then ok "boot 1: guest checks passed"; else bad "boot 1 (harness rc $?)"; fi
guest_tail
want=$OUT/pattern
python3 - "$want" <<'PY'
import sys
p = b"".join(b"VHOST-PATTERN-%04d-" % j for j in range(16))
d = (p * (1048576 // len(p) + 1))[:1048576]
open(sys.argv[1], "wb").write(d)
PY
if cmp -s "$want" <(dd if="$DISK" bs=1M skip=$((PATTERN_OFF / 1048576)) count=1 2>/dev/null); then
    ok "the guest's pattern is in the bdev's file"
else
    bad "the guest's pattern is not in the bdev's file"
fi

say "boot 2 (busy): QEMU killed under I/O"
vm busy
if wait_line VHOST-BUSY; then
    sleep 5
    q=$(qemu_pid) || die "no QEMU under the harness"
    [ "$(sessions)" = 1 ] && ok "one session while the guest runs" || bad "sessions while running: $(sessions)"
    kill -KILL "$q"
    ok "killed QEMU $q"
else
    bad "boot 2 never got busy"
fi
wait "$VM_PID" || true
for _ in $(seq 100); do [ "$(sessions)" = 0 ] && break; sleep 0.1; done
[ "$(sessions)" = 0 ] && ok "the session went with QEMU" || bad "session still there: $(sessions)"
kill -0 "$TGT" && ok "bdev_tgt alive after the kill" || die "bdev_tgt died"

say "boot 3 (restart): same controller, then the bdev hot-removed"
vm restart
if wait_line VHOST-REMOVE-ME; then
    sleep 3
    rpc bdev_aio_delete Aio0 > /dev/null && ok "bdev_aio_delete under guest I/O"
else
    bad "boot 3 never got to the removal"
fi
if wait "$VM_PID"; then ok "boot 3: guest checks passed"; else bad "boot 3 (harness rc $?)"; fi
guest_tail
kill -0 "$TGT" && ok "bdev_tgt alive after the removal" || die "bdev_tgt died"
bdev=$(rpc vhost_get_controllers -n vhost.0 | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["backend_specific"]["block"]["bdev"])')
[ "$bdev" = None ] && ok "the controller shows no bdev" || bad "controller bdev: $bdev"
rpc vhost_delete_controller vhost.0 > /dev/null && ok "vhost_delete_controller"
[ ! -e "$SOCK" ] && ok "socket removed" || bad "socket still there"
rpc spdk_kill_instance SIGTERM > /dev/null || true
if wait "$TGT"; then ok "bdev_tgt stopped cleanly"; else bad "bdev_tgt exit $?"; fi
trap - EXIT
say "target log: $(grep -c "ERROR\|panicked" "$OUT/tgt.log" || true) error lines"
if [ "$FAILS" = 0 ]; then say "PASS"; else say "$FAILS FAILED (logs in $OUT)"; exit 1; fi
