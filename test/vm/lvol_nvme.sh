#!/bin/sh
# Thin lvols on QEMU's emulated NVMe controller through our user-space
# driver (VFIO): an lvstore (1 MiB clusters) and a thin lvol made from the
# --json config, then bdevperf -w verify on 2 cores (-C: both cores write
# and allocate clusters of the one lvol at once, every read compares);
# then the store loads again from the namespace (examine, in bdev_tgt)
# with the clusters the writes allocated.
# (No harness options: see scripts/vm-test.sh for the "# vm:" header.)
. ./lib.sh

require_dev /sys/class/nvme/nvme0
BDF=$(basename "$(readlink /sys/class/nvme/nvme0/device)")
echo "controller $BDF, $(nproc) CPUs"
SOCK=/tmp/tgt.sock
rpc() { bdev_rpc -s $SOCK -t 30 "$@"; }

step "setup.sh binds the controller to vfio-pci"
must ./setup.sh

NVME="{\"method\":\"bdev_nvme_attach_controller\",\"params\":{\"name\":\"Nvme0\",\"trtype\":\"PCIe\",\"traddr\":\"$BDF\"}}"
LVS='{"method":"bdev_lvol_create_lvstore","params":{"bdev_name":"Nvme0n1","lvs_name":"lvs0","cluster_sz":1048576}}'
LVOL='{"method":"bdev_lvol_create","params":{"lvs_name":"lvs0","lvol_name":"t","size_in_mib":64,"thin_provision":true}}'
bdev_config /tmp/lvol.json "$NVME" "$LVS" "$LVOL"

step "bdevperf -w verify -C on cores 0x3 over a thin lvol on our driver"
bdevperf --json /tmp/lvol.json -m 0x3 -C -q 16 -o 4096 -w verify -t 2 > /tmp/verify.out 2>&1
rc=$?
cat /tmp/verify.out
assert_eq "$rc" 0 "bdevperf exit status"
for mask in 0x1 0x2; do
    check "a verify job on core mask $mask" grep -q "(Core Mask $mask, workload: verify" /tmp/verify.out
done
total=$(grep -a 'Total *:' /tmp/verify.out | head -n 1 | sed 's/.*Total *: *//')
echo "thin lvol verify: $(echo "$total" | awk '{ print $1 }') IOPS"
check "I/O completed" awk -v v="$(echo "$total" | awk '{ print $1 }')" 'BEGIN { exit !(v + 0 > 0) }'
assert_eq "$(echo "$total" | awk '{ print $3 + $4 }')" 0 "no failed or timed-out I/O"

step "bdev_tgt: the store on the namespace loads by examine, clusters allocated"
bdev_tgt -m 0x1 -r $SOCK > /tmp/tgt.log 2>&1 &
TGT=$!
i=0; while [ $i -lt 100 ] && ! rpc rpc_get_methods > /dev/null 2>&1; do sleep 0.1; i=$((i + 1)); done
must rpc bdev_nvme_attach_controller -p name=Nvme0 -p trtype=PCIe -p traddr="$BDF" > /dev/null
must rpc bdev_wait_for_examine > /dev/null
rpc bdev_lvol_get_lvols > /tmp/lvols.json
cat /tmp/lvols.json
check "lvs0/t listed" grep -q '"alias": "lvs0/t"' /tmp/lvols.json
check "thin" grep -q '"is_thin_provisioned": true' /tmp/lvols.json
n=$(sed -n 's/.*"num_allocated_clusters": \([0-9]*\).*/\1/p' /tmp/lvols.json | head -n 1)
echo "allocated clusters: ${n:-?}"
check "the writes allocated clusters" awk -v v="${n:-0}" 'BEGIN { exit !(v + 0 > 0 && v + 0 <= 64) }'
kill $TGT; wait $TGT
echo "bdev_tgt exit $?"

finish
