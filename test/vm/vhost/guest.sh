#!/bin/sh
# Guest side of scripts/vhost-vm-test.sh: a VM whose only disk is
# bdev_tgt's vhost-user-blk controller on the host (/dev/vda). PHASE
# (from -e) says what this boot does:
#   io       /dev/vda is there with the bdev's size and $QUEUES blk-mq
#            queues; a pattern written at $PATTERN_OFF (the host reads it
#            back through the bdev); fio --verify=crc32c on two jobs.
#   busy     fio writes until the host kills QEMU (prints VHOST-BUSY).
#   restart  after the kill, against the same controller: the pattern of
#            `io` reads back; fio verify again; then prints VHOST-REMOVE-ME
#            and keeps writing while the host hot-removes the bdev: the
#            writes fail with EIO (no hang) and reads fail too.
. ./lib.sh

must modprobe virtio_blk
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
must test -b /dev/vda

# pattern FILE: 1 MiB of a fixed, recognisable pattern.
pattern() {
    _j=0
    : > "$1"
    while [ $_j -lt 16 ]; do
        printf 'VHOST-PATTERN-%04d-' $_j >> "$1"
        _j=$((_j + 1))
    done
    # 16 * 19 bytes, then repeated up to 1 MiB.
    while [ "$(stat -c %s "$1")" -lt 1048576 ]; do cat "$1" "$1" > "$1.2"; mv "$1.2" "$1"; done
    head -c 1048576 "$1" > "$1.2"; mv "$1.2" "$1"
}

case "$PHASE" in
io)
    step "the device: size and queues"
    assert_eq "$(cat /sys/block/vda/size)" "$((BYTES / 512))" "size is the bdev's ($BYTES bytes)"
    nq=$(ls /sys/block/vda/mq | wc -l)
    assert_eq "$nq" "$QUEUES" "$QUEUES blk-mq queues (num-queues=$QUEUES)"
    assert_eq "$(cat /sys/block/vda/ro)" 0 "read-write"
    step "a pattern at $PATTERN_OFF for the host"
    pattern /tmp/p
    must dd if=/tmp/p of=/dev/vda bs=1M seek=$((PATTERN_OFF / 1048576)) count=1 conv=fsync 2>/dev/null
    must dd if=/dev/vda of=/tmp/r bs=1M skip=$((PATTERN_OFF / 1048576)) count=1 iflag=direct 2>/dev/null
    same_bytes /tmp/p /tmp/r "pattern reads back in the guest"
    step "fio --verify=crc32c, two jobs over both queues"
    check "fio verify clean" fio --name=v --filename=/dev/vda --ioengine=libaio --direct=1 \
        --rw=randwrite --bs=4k --bsrange=512-64k --iodepth=8 --numjobs=2 --size=8M --offset_increment=8M \
        --verify=crc32c --verify_fatal=1 --do_verify=1 --cpus_allowed=0-$((QUEUES - 1)) --cpus_allowed_policy=split --group_reporting
    # Both rings carried requests: fio's split policy pins one job on each
    # CPU, blk-mq maps each queue to its own, and each virtqueue has its
    # own MSI-X vector ("virtioN-req.Q" in /proc/interrupts) that fires
    # when the target signals that ring's call eventfd.
    for h in /sys/block/vda/mq/*; do
        n=$(basename "$h")
        irqs=$(awk -v q="req.$n" '$NF ~ q"$" { for (i = 2; i < NF; i++) if ($i ~ /^[0-9]+$/) s += $i } END { print s + 0 }' /proc/interrupts)
        check "queue $n (CPU $(cat "$h/cpu_list")): $irqs completion interrupts" test "$irqs" -gt 0
    done
    check "flush (fsync)" sh -c 'dd if=/dev/zero of=/dev/vda bs=4k count=1 seek=100 conv=fsync 2>/dev/null'
    check "discard" sh -c 'blkdiscard -o 0 -l 1048576 /dev/vda 2>&1 || test "$(cat /sys/block/vda/queue/discard_max_bytes)" = 0'
    ;;
busy)
    step "writing until QEMU is killed"
    echo VHOST-BUSY
    fio --name=busy --filename=/dev/vda --ioengine=libaio --direct=1 --rw=randwrite --bs=4k \
        --iodepth=16 --size=16M --offset=32M --time_based --runtime=600 > /dev/null 2>&1
    fail "fio ended before the kill"
    ;;
restart)
    step "the pattern of the first boot reads back (same controller, QEMU restarted)"
    pattern /tmp/p
    must dd if=/dev/vda of=/tmp/r bs=1M skip=$((PATTERN_OFF / 1048576)) count=1 iflag=direct 2>/dev/null
    same_bytes /tmp/p /tmp/r "pattern of the first boot"
    check "fio verify clean after the restart" fio --name=v2 --filename=/dev/vda --ioengine=libaio \
        --direct=1 --rw=randwrite --bs=4k --iodepth=8 --size=4M --offset=16M --verify=crc32c --verify_fatal=1
    step "the bdev hot-removed under I/O"
    echo VHOST-REMOVE-ME
    fio --name=hr --filename=/dev/vda --ioengine=libaio --direct=1 --rw=randwrite --bs=4k \
        --iodepth=8 --size=16M --offset=64M --time_based --runtime=120 > /tmp/hr.log 2>&1
    rc=$?
    tail -n 5 /tmp/hr.log
    check "fio under hot-remove ends with an error (rc $rc), not a hang" test $rc -ne 0
    check "fio saw EIO" grep -q -i "input/output error\|err=  5\|error=Input/output" /tmp/hr.log
    check "a read after the removal fails" sh -c '! dd if=/dev/vda of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null'
    ;;
*) die "PHASE '$PHASE'" ;;
esac
finish
