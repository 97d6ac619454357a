#!/bin/sh
# fio 3.33 (Debian) in the guest on the emulated controller: 4 KiB random
# reads for a few seconds through io_uring_cmd NVMe passthrough on
# /dev/ng0n1 and through io_uring (O_DIRECT) on /dev/nvme0n1; prints IOPS.
# Run with: scripts/vm-test.sh --bench fio_nvme. Not a CI test. TCG
# emulation: expect thousands of IOPS, noisy from run to run.
# FIO_RUNTIME (s), FIO_QD and FIO_BS override the defaults (-e NAME=VALUE).
# vm: --deb fio --deb libaio1 --deb libnuma1 --deb libibverbs1 --deb librdmacm1
# vm: --deb libpmem1 --deb libpmemblk1 --deb libnbd0 --deb libgfapi0 --deb libglusterfs0
# vm: --deb libgfrpc0 --deb libgfxdr0 --deb librados2 --deb librbd1 --deb libfmt9
# vm: --deb libboost-thread1.74.0 --deb libboost-iostreams1.74.0 --deb libbz2-1.0
# (librados2 finds libceph-common through a RUNPATH the harness does not
# follow, so libceph-common's libraries are listed here: libbz2 is the one
# fio's own list lacks.)
. ./lib.sh

require_dev /dev/ng0n1 /dev/nvme0n1
runtime=${FIO_RUNTIME:-5}
qd=${FIO_QD:-8}
bs=${FIO_BS:-4k}
must fio --version

run() {  # NAME FIO-ARGS...
    name=$1; shift
    step "fio $name: randread bs=$bs iodepth=$qd ${runtime}s"
    fio --name="$name" --rw=randread --bs="$bs" --iodepth="$qd" --runtime="$runtime" --time_based \
        --size=128m --norandommap --group_reporting --output-format=normal,terse --terse-version=3 \
        "$@" > /tmp/$name.out 2>&1
    rc=$?
    cat /tmp/$name.out
    assert_eq "$rc" 0 "fio $name exit status"
    # Terse v3: field 8 is read IOPS.
    iops=$(grep -a '^3;' /tmp/$name.out | head -n 1 | cut -d';' -f8)
    echo "RESULT fio $name: ${iops:-?} IOPS"
    check "fio $name did I/O" awk -v v="${iops:-0}" 'BEGIN { exit !(v > 0) }'
}

run io_uring_cmd --ioengine=io_uring_cmd --cmd_type=nvme --filename=/dev/ng0n1
run io_uring --ioengine=io_uring --direct=1 --filename=/dev/nvme0n1

finish
