#!/bin/sh
# bdevperf over our user-space NVMe driver (VFIO) vs fio io_uring (O_DIRECT,
# the kernel's nvme driver) on the same emulated controller: 4 KiB random
# reads at QD 1 and QD 32, alternating (bdevperf, fio, bdevperf, ...; each
# switch rebinds the controller with scripts/setup.sh), ROUNDS rounds of
# RUNTIME seconds each; prints every run, the medians and the ratio of
# medians (bdevperf / fio). Both on one core of the guest.
# Run with: scripts/vm-test.sh --bench nvme_vs_fio. Not a CI test. TCG
# emulation: QEMU's device model dominates both sides, so this shows
# whether our driver costs more than the kernel's on the same slow device,
# not what either would do on hardware; expect noise between runs.
# ROUNDS (default 3) and RUNTIME (s, default 3) override (-e NAME=VALUE).
# vm: --deb fio --deb libaio1 --deb libnuma1 --deb libibverbs1 --deb librdmacm1
# vm: --deb libpmem1 --deb libpmemblk1 --deb libnbd0 --deb libgfapi0 --deb libglusterfs0
# vm: --deb libgfrpc0 --deb libgfxdr0 --deb librados2 --deb librbd1 --deb libfmt9
# vm: --deb libboost-thread1.74.0 --deb libboost-iostreams1.74.0 --deb libbz2-1.0
. ./lib.sh

require_dev /sys/class/nvme/nvme0
BDF=$(basename "$(readlink /sys/class/nvme/nvme0/device)")
rounds=${ROUNDS:-3}
runtime=${RUNTIME:-3}
must fio --version
bdev_config /tmp/nvme.json \
    "{\"method\":\"bdev_nvme_attach_controller\",\"params\":{\"name\":\"Nvme0\",\"trtype\":\"PCIe\",\"traddr\":\"$BDF\"}}"

to_kernel() {
    ./setup.sh reset > /dev/null || return 1
    i=0; while [ $i -lt 100 ] && [ ! -e /dev/nvme0n1 ]; do sleep 0.1; i=$((i + 1)); done
    [ -e /dev/nvme0n1 ]
}

# ours QD: IOPS of bdevperf randread on Nvme0n1 (our driver), or nothing.
ours() {
    ./setup.sh > /dev/null || return 1
    bdevperf --json /tmp/nvme.json -m 0x1 -q "$1" -o 4096 -w randread -t "$runtime" > /tmp/bp.out 2>&1 ||
        { cat /tmp/bp.out >&2; return 1; }
    grep -a 'Total *:' /tmp/bp.out | head -n 1 | sed 's/.*Total *: *//' | awk '{ print $1 }'
}

# kernel QD: IOPS of fio io_uring randread on /dev/nvme0n1, or nothing.
kernel() {
    to_kernel || return 1
    taskset 0x1 fio --name=k --ioengine=io_uring --direct=1 --filename=/dev/nvme0n1 --rw=randread \
        --bs=4k --iodepth="$1" --runtime="$runtime" --time_based --size=128m --norandommap \
        --output-format=terse --terse-version=3 > /tmp/fio.out 2>&1 || { cat /tmp/fio.out >&2; return 1; }
    grep -a '^3;' /tmp/fio.out | head -n 1 | cut -d';' -f8
}

median() { tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

command -v taskset > /dev/null || taskset() { shift; "$@"; }
for qd in 1 32; do
    step "4 KiB randread QD $qd: $rounds rounds of ${runtime}s, alternating"
    a=""; b=""
    r=1
    while [ $r -le "$rounds" ]; do
        x=$(ours "$qd"); y=$(kernel "$qd")
        echo "round $r: bdevperf/VFIO ${x:-?} IOPS, fio io_uring ${y:-?} IOPS"
        a="$a ${x:-}"; b="$b ${y:-}"
        r=$((r + 1))
    done
    ma=$(echo "$a" | median); mb=$(echo "$b" | median)
    ratio=$(awk -v a="$ma" -v b="$mb" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }')
    echo "RESULT randread 4k QD$qd: bdevperf/VFIO median $ma IOPS (runs:$a), fio io_uring median $mb IOPS (runs:$b), ratio $ratio"
    check "bdevperf QD$qd did I/O in every round" test "$(echo "$a" | wc -w)" -eq "$rounds"
    check "fio QD$qd did I/O in every round" test "$(echo "$b" | wc -w)" -eq "$rounds"
done

finish
