#!/bin/sh
# Our user-space NVMe driver on QEMU's emulated controller (an NVMe
# implementation nobody here wrote), through VFIO and the vIOMMU:
# scripts/setup.sh binds it to vfio-pci; bdev_tgt attaches it over RPC
# (bdev_nvme_attach_controller -t pcie), bdev_nvme_get_controllers and
# bdev_get_bdevs show it, bdev_nvme_send_cmd Identify returns QEMU's serial
# number; the nvme_io_sizes example writes and reads back 512 B ... 1 MiB
# from aligned, unaligned and multi-segment buffers (PRP lists); bdev_dd
# (--json config) writes through our driver and the kernel's nvme driver
# reads the bytes back after `setup.sh reset`, and the reverse; last,
# bdevperf -w verify on 2 cores from the --json config. Resets, detach
# under I/O and hotplug: nvme_vfio_faults.sh.
# (No harness options: see scripts/vm-test.sh for the "# vm:" header.)
. ./lib.sh

require_dev /sys/class/nvme/nvme0
BDF=$(basename "$(readlink /sys/class/nvme/nvme0/device)")
SERIAL=$(sed 's/ *$//' /sys/class/nvme/nvme0/serial)
echo "controller $BDF, serial '$SERIAL', $(nproc) CPUs"
SOCK=/tmp/tgt.sock
rpc() { bdev_rpc -s $SOCK -t 30 "$@"; }

step "pattern files; the kernel writes one (read back through our driver below)"
must dd if=/dev/urandom of=/tmp/pattern-a bs=64k count=32 2>/dev/null
must dd if=/dev/urandom of=/tmp/pattern-b bs=64k count=32 2>/dev/null
# 64 KiB units: region A at unit 256 (16 MiB), B at unit 320 (20 MiB).
must dd if=/tmp/pattern-b of=/dev/nvme0n1 oflag=direct conv=notrunc bs=64k seek=320 2>/dev/null

step "setup.sh binds the controller to vfio-pci"
must ./setup.sh
./setup.sh status
assert_eq "$(basename "$(readlink /sys/bus/pci/devices/$BDF/driver)")" vfio-pci "driver after setup.sh"
check "no kernel block device left" test ! -e /dev/nvme0n1
check "a VFIO group node" sh -c 'ls /dev/vfio | grep -q "^[0-9]"'

step "bdev_tgt: bdev_nvme_attach_controller over RPC"
bdev_tgt -m 0x1 -r $SOCK > /tmp/tgt.log 2>&1 &
TGT=$!
i=0; while [ $i -lt 100 ] && ! rpc rpc_get_methods > /dev/null 2>&1; do sleep 0.1; i=$((i + 1)); done
must rpc bdev_nvme_attach_controller -p name=Nvme0 -p trtype=PCIe -p traddr="$BDF" > /tmp/attach.out
cat /tmp/attach.out
assert_eq "$(tr -d ' \n' < /tmp/attach.out)" '["Nvme0n1"]' "attach answers the bdev names"
rpc bdev_nvme_get_controllers > /tmp/ctrlrs.json
cat /tmp/ctrlrs.json
check "get_controllers: Nvme0 at $BDF" grep -q "\"traddr\": \"$BDF\"" /tmp/ctrlrs.json
rpc bdev_get_bdevs -p name=Nvme0n1 > /tmp/bdev.json
check "bdev_get_bdevs: driver_specific.nvme with the PCI address" grep -q "\"pci_address\": \"$BDF\"" /tmp/bdev.json
check "bdev_get_bdevs: 512-byte blocks" grep -q '"block_size": 512' /tmp/bdev.json

step "bdev_nvme_send_cmd: Identify Controller returns the serial number"
# 64-byte SQE: opcode 0x06, CDW10 CNS = 1 (byte 40), base64url.
CMD=BgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==
rpc bdev_nvme_send_cmd -p name=Nvme0 -p cmd_type=admin -p data_direction=c2h \
    -p cmdbuf=$CMD -p data_len=4096 > /tmp/ident.json
sed -n 's/.*"data": "\([^"]*\)".*/\1/p' /tmp/ident.json | tr '_-' '/+' | base64 -d > /tmp/ident.bin
sn=$(dd if=/tmp/ident.bin bs=1 skip=4 count=20 2>/dev/null | sed 's/ *$//')
assert_eq "$sn" "$SERIAL" "serial number from Identify through send_cmd"
must rpc bdev_nvme_detach_controller -p name=Nvme0
check "bdev gone after detach" sh -c "! bdev_rpc -s $SOCK bdev_get_bdevs -p name=Nvme0n1 > /dev/null 2>&1"
kill $TGT; wait $TGT
echo "bdev_tgt exit $?"

step "nvme_io_sizes: 512 B ... 1 MiB, 4 buffer layouts each, on QEMU's controller"
# From LBA 2048 (1 MiB) on: about 8 MiB, below regions A and B.
nvme_io_sizes "$BDF" 2048 > /tmp/sizes.out 2>&1
rc=$?
cat /tmp/sizes.out
assert_eq "$rc" 0 "nvme_io_sizes exit status"
check "every size verified" grep -q "all sizes verified" /tmp/sizes.out

NVME_CFG="{\"method\":\"bdev_nvme_attach_controller\",\"params\":{\"name\":\"Nvme0\",\"trtype\":\"PCIe\",\"traddr\":\"$BDF\"}}"
bdev_config /tmp/nvme.json "$NVME_CFG"

step "bdev_dd through our driver: write region A, read the kernel's region B"
must bdev_dd --json /tmp/nvme.json --if /tmp/pattern-a --ob Nvme0n1 --bs 64k --qd 4 --seek 256
must bdev_dd --json /tmp/nvme.json --ib Nvme0n1 --of /tmp/back-b --bs 64k --qd 4 --skip 320 --count 32
same_bytes /tmp/pattern-b /tmp/back-b "our driver reads what the kernel wrote"
must bdev_dd --json /tmp/nvme.json --ib Nvme0n1 --of /tmp/lba0 --bs 512 --count 1
assert_eq "$(head -c 17 /tmp/lba0)" VMTEST-NVME-IMAGE "the host's signature in LBA 0 through our driver"

step "setup.sh reset: the kernel driver reads back what our driver wrote"
must ./setup.sh reset
i=0; while [ $i -lt 100 ] && [ ! -e /dev/nvme0n1 ]; do sleep 0.1; i=$((i + 1)); done
assert_eq "$(basename "$(readlink /sys/bus/pci/devices/$BDF/driver)")" nvme "driver after setup.sh reset"
require_dev /dev/nvme0n1
must dd if=/dev/nvme0n1 of=/tmp/back-a iflag=direct bs=64k skip=256 count=32 2>/dev/null
same_bytes /tmp/pattern-a /tmp/back-a "the kernel reads what our driver wrote"

step "bdevperf -w verify on cores 0x3 over our driver, --json config (overwrites the whole namespace)"
must ./setup.sh
bdevperf --json /tmp/nvme.json -m 0x3 -C -q 16 -o 4096 -w verify -t 3 > /tmp/verify.out 2>&1
rc=$?
cat /tmp/verify.out
assert_eq "$rc" 0 "bdevperf exit status"
for mask in 0x1 0x2; do
    check "a verify job on core mask $mask" grep -q "Job: Nvme0n1 (Core Mask $mask, workload: verify" /tmp/verify.out
done
total=$(grep -a 'Total *:' /tmp/verify.out | head -n 1 | sed 's/.*Total *: *//')
check "I/O completed" awk -v v="$(echo "$total" | awk '{ print $1 }')" 'BEGIN { exit !(v > 0) }'
assert_eq "$(echo "$total" | awk '{ print $3 + $4 }')" 0 "no failed or timed-out I/O"
check "no VFIO map/unmap warnings" sh -c '! grep -q "VFIO DMA" /tmp/verify.out /tmp/tgt.log /tmp/sizes.out'

finish
