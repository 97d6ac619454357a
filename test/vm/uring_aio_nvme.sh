#!/bin/sh
# bdevperf -w verify on 2 cores (-m 0x3 -C: one job per core, each on its
# own half of the namespace) on a uring and on an aio bdev over the
# emulated controller's /dev/nvme0n1: writes a pattern, reads it back and
# compares, for 2 s each.
# (No harness options: see scripts/vm-test.sh for the "# vm:" header.)
. ./lib.sh

require_dev /dev/nvme0n1
echo "nvme0n1: $(cat /sys/block/nvme0n1/size) sectors of $(cat /sys/block/nvme0n1/queue/logical_block_size) bytes"

for module in uring aio; do
    step "bdevperf verify on a $module bdev over /dev/nvme0n1, cores 0x3"
    bdev_config /tmp/$module.json "$(kernel_bdev $module N0 /dev/nvme0n1)"
    verify_2cores /tmp/$module.json N0 "$module"
done

finish
