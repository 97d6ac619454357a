#!/bin/sh
# The xnvme module's io_uring_cmd mechanism with poll queues (nvme
# poll_queues=2 on the kernel command line): a conserve_cpu false bdev
# uses the thread's IOPOLL ring (probed at creation) and passes every
# xnvme_vm check (admin commands still go through the plain ring: the
# kernel does not poll the admin queue), a conserve_cpu true bdev does not
# poll; then bdevperf -w verify on 2 cores over the IOPOLL ring, and
# bdev_dd through it agrees with the kernel.
# vm: --append nvme.poll_queues=2
# vm: --qemu-arg -set --qemu-arg drive.nvm.discard=unmap
. ./lib.sh

require_dev /dev/ng0n1 /dev/nvme0n1 /dev/nvme0
serial=$(cat /sys/class/nvme/nvme0/serial)
assert_eq "$(cat /sys/block/nvme0n1/queue/io_poll)" 1 "the namespace has poll queues"

step "io_uring_cmd over IOPOLL: conformance, passthrough, NVMe statuses (xnvme_vm)"
check "xnvme_vm: io_uring_cmd checks with poll queues" env XNVME_EXPECT_IOPOLL=1 xnvme_vm /dev/ng0n1 /dev/nvme0n1 "$serial"

bdev_config /tmp/poll.json "$(xnvme_bdev X0 /dev/ng0n1 io_uring_cmd false)"
step "io_uring_cmd, IOPOLL: bdevperf verify, cores 0x3"
verify_2cores /tmp/poll.json X0 "io_uring_cmd IOPOLL"
dd_roundtrip /tmp/poll.json X0 /dev/nvme0n1 128 "io_uring_cmd IOPOLL"

finish
