#!/bin/sh
# The xnvme module against the emulated controller, for each mechanism:
# io_uring_cmd on /dev/ng0n1, io_uring and libaio on /dev/nvme0n1.
# * io_uring_cmd, both conserve_cpu settings (xnvme_vm, the crate's
#   examples/xnvme_vm.rs): the conformance suite, unmap and write zeroes
#   reading back zeroes (the namespace's DLFEAT says deallocated blocks
#   read 0; the drive discards for real with discard=unmap, below), flush,
#   compare and miscompare, nvme_admin Identify returning the serial number
#   sysfs shows, invalid opcodes and an out-of-range read answered with
#   their NVMe status, bdev_xnvme_create failures (missing device, a block
#   device given to io_uring_cmd, unknown mechanism, duplicate name)
#   answering SPDK's error with nothing registered. No poll queues here
#   (nvme poll_queues=0): conserve_cpu false falls back to the plain ring
#   (xnvme_iopoll.sh has them).
# * every mechanism: bdevperf -w verify on 2 cores; bdev_dd writes a
#   pattern onto the bdev and the kernel reads the same bytes back from
#   /dev/nvme0n1, and the reverse.
# * io_uring_cmd with conserve_cpu true: bdevperf --interrupt-mode verify
#   (completions wake sleeping reactors through the ring's eventfd).
# QEMU's -drive ignores discards by default (the namespace would still
# claim that deallocated blocks read 0): discard=unmap makes it punch holes.
# vm: --qemu-arg -set --qemu-arg drive.nvm.discard=unmap
. ./lib.sh

require_dev /dev/ng0n1 /dev/nvme0n1 /dev/nvme0
serial=$(cat /sys/class/nvme/nvme0/serial)
echo "nvme0: serial '$serial', poll queues $(cat /sys/module/nvme/parameters/poll_queues)"

step "io_uring_cmd: conformance, passthrough, NVMe statuses, create errors (xnvme_vm)"
check "xnvme_vm: io_uring_cmd checks" env XNVME_EXPECT_IOPOLL=0 xnvme_vm /dev/ng0n1 /dev/nvme0n1 "$serial"

unit=0
for mech in io_uring_cmd io_uring libaio; do
    dev=/dev/nvme0n1
    [ $mech = io_uring_cmd ] && dev=/dev/ng0n1
    bdev_config /tmp/$mech.json "$(xnvme_bdev X0 $dev $mech)"
    step "$mech: bdevperf verify on an xnvme bdev over $dev, cores 0x3"
    verify_2cores /tmp/$mech.json X0 "$mech"
    # Each mechanism gets its own 8 MiB region (in 64 KiB units).
    base=$((128 * (unit + 1)))
    unit=$((unit + 1))
    dd_roundtrip /tmp/$mech.json X0 /dev/nvme0n1 $base "$mech"
done

# conserve_cpu true in an interrupt-mode app: the reactors sleep, and the
# ring's eventfd (in their wake-up set) must wake them for completions.
bdev_config /tmp/intr.json "$(xnvme_bdev X0 /dev/ng0n1 io_uring_cmd true)"
step "io_uring_cmd, conserve_cpu true: bdevperf --interrupt-mode verify, cores 0x3"
verify_2cores /tmp/intr.json X0 "io_uring_cmd interrupt mode" --interrupt-mode

finish
