#!/bin/sh
# bdev_dd and the kernel agree on the bytes of /dev/nvme0n1, through an aio
# and a uring bdev over it: bdev_dd writes a pattern file onto the bdev and
# the kernel reads the same bytes back with dd iflag=direct; the kernel
# writes with dd oflag=direct and bdev_dd reads them back into a file.
# Also bdev_dd with /dev/nvme0n1 as a file (--of/--if, direct), and the
# host-written signature in LBA 0 read through the bdev.
. ./lib.sh

require_dev /dev/nvme0n1

step "pattern files"
must dd if=/dev/urandom of=/tmp/pattern-a bs=64k count=48 2>/dev/null
must dd if=/dev/urandom of=/tmp/pattern-b bs=64k count=48 2>/dev/null
# Not a multiple of 4 KiB: the last unit (1224 bytes) is short and ends
# inside a 512-byte LBA, which bdev_dd reads, merges and writes back.
must dd if=/dev/urandom of=/tmp/pattern-odd bs=1000 count=333 2>/dev/null
ls -l /tmp/pattern-*

unit=0
for module in aio uring; do
    bdev_config /tmp/$module.json "$(kernel_bdev $module N0 /dev/nvme0n1)"
    # Each module gets its own 8 MiB region (in 64 KiB units).
    base=$((128 * (unit + 1)))
    unit=$((unit + 1))

    step "$module: LBA 0 through the bdev carries the host's signature"
    must bdev_dd --json /tmp/$module.json --ib N0 --of /tmp/lba0 --bs 512 --count 1
    assert_eq "$(head -c 17 /tmp/lba0)" VMTEST-NVME-IMAGE "signature in LBA 0 ($module)"

    dd_roundtrip /tmp/$module.json N0 /dev/nvme0n1 $base "$module"

    step "$module: a short last unit"
    must bdev_dd --json /tmp/$module.json --if /tmp/pattern-odd --ob N0 --bs 4k --seek $(((base + 112) * 16))
    must dd if=/dev/nvme0n1 of=/tmp/back-odd iflag=direct bs=4k skip=$(((base + 112) * 16)) count=82 2>/dev/null
    head -c 333000 /tmp/back-odd > /tmp/back-odd.cut
    same_bytes /tmp/pattern-odd /tmp/back-odd.cut "kernel reads the short last unit ($module)"
done

step "/dev/nvme0n1 as a file: bdev_dd --of/--if with direct"
must bdev_dd --if /tmp/pattern-a --of /dev/nvme0n1 --oflag direct --bs 64k --seek 640
must dd if=/dev/nvme0n1 of=/tmp/back-f iflag=direct bs=64k skip=640 count=48 2>/dev/null
same_bytes /tmp/pattern-a /tmp/back-f "kernel reads what bdev_dd wrote to the device file"
must bdev_dd --if /dev/nvme0n1 --iflag direct --of /tmp/back-g --bs 64k --skip 640 --count 48
same_bytes /tmp/pattern-a /tmp/back-g "bdev_dd reads the device file"

finish
