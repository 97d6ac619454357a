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
    bdevperf --json /tmp/$module.json -m 0x3 -C -q 16 -o 4096 -w verify -t 2 > /tmp/$module.out 2>&1
    rc=$?
    cat /tmp/$module.out
    assert_eq "$rc" 0 "bdevperf exit status ($module)"
    # One job per core, both on N0, and the Total line with IOPS > 0.
    for mask in 0x1 0x2; do
        check "a verify job on core mask $mask ($module)" \
            grep -q "Job: N0 (Core Mask $mask, workload: verify" /tmp/$module.out
    done
    # The Total line (after "\r Total :"): IOPS MiB/s Fail/s TO/s Average min max.
    total=$(grep -a 'Total *:' /tmp/$module.out | head -n 1 | sed 's/.*Total *: *//')
    iops=$(echo "$total" | awk '{ print $1 }')
    echo "$module: ${iops:-?} IOPS"
    check "I/O completed ($module)" awk -v v="${iops:-0}" 'BEGIN { exit !(v > 0) }'
    assert_eq "$(echo "$total" | awk '{ print $3 + $4 }')" 0 "no failed or timed-out I/O ($module)"
done

finish
