#!/bin/sh
# bdev_tgt's NVMe/TCP target against the Linux kernel's nvme-tcp host and
# nvme-cli, over the guest's loopback: discovery, connect, a dd pattern read
# back (also after a disconnect/reconnect), fio with crc32c verification,
# header and data digests, a host not on the allow-list refused, a Connect
# to an unknown NQN refused, and a namespace whose bdev is deleted under a
# connected host going away on the host (namespace change AEN).
# vm: --deb nvme-cli --deb libnvme1 --modules crc32c_generic --timeout 280
# vm: --deb fio --deb libaio1 --deb libnuma1 --deb libibverbs1 --deb librdmacm1
# vm: --deb libpmem1 --deb libpmemblk1 --deb libnbd0 --deb libgfapi0 --deb libglusterfs0
# vm: --deb libgfrpc0 --deb libgfxdr0 --deb librados2 --deb librbd1 --deb libfmt9
# vm: --deb libboost-thread1.74.0 --deb libboost-iostreams1.74.0 --deb libbz2-1.0
. ./lib.sh

NQN=nqn.2016-06.io.bdevkit:cnode1
OTHER=nqn.2014-08.org.nvmexpress:uuid:00000000-1111-2222-3333-444444444444
SOCK=/tmp/tgt.sock
nvme_tcp_host 6b2c8a1e-3d4f-4a5b-9c6d-7e8f9a0b1c2d

step "bdev_tgt exports Malloc0 (nsid 1) and Malloc1 (nsid 2) to $HOSTNQN only"
cat > /tmp/tgt.json <<EOF
{"subsystems":[
 {"subsystem":"bdev","config":[
  {"method":"bdev_malloc_create","params":{"name":"Malloc0","num_blocks":131072,"block_size":512}},
  {"method":"bdev_malloc_create","params":{"name":"Malloc1","num_blocks":8192,"block_size":4096}}]},
 {"subsystem":"nvmf","config":[
  {"method":"nvmf_create_transport","params":{"trtype":"TCP"}},
  {"method":"nvmf_create_subsystem","params":{"nqn":"$NQN","serial_number":"BDEVKIT0001","allow_any_host":false}},
  {"method":"nvmf_subsystem_add_host","params":{"nqn":"$NQN","host":"$HOSTNQN"}},
  {"method":"nvmf_subsystem_add_ns","params":{"nqn":"$NQN","namespace":{"bdev_name":"Malloc0"}}},
  {"method":"nvmf_subsystem_add_ns","params":{"nqn":"$NQN","namespace":{"bdev_name":"Malloc1","nsid":2}}},
  {"method":"nvmf_subsystem_add_listener","params":{"nqn":"$NQN","listen_address":{"trtype":"tcp","adrfam":"ipv4","traddr":"127.0.0.1","trsvcid":"4420"}}}]}]}
EOF
bdev_tgt -m 0x3 --interrupt-mode -r $SOCK --json /tmp/tgt.json > /tmp/tgt.log 2>&1 &
TGT=$!
# On the way out, the target's log.
trap 'echo "--- target log"; grep -v DEBUG /tmp/tgt.log | tail -n 150' EXIT
# The socket answers once the config is loaded (listeners up).
wait_rpc $SOCK $TGT

# ctrl_dev: the /dev/nvmeN controller of $NQN (none: empty).
ctrl_dev() {
    for _c in /sys/class/nvme/nvme*; do
        [ "$(cat "$_c/subsysnqn" 2>/dev/null)" = "$NQN" ] && { echo "/dev/$(basename "$_c")"; return 0; }
    done
    return 1
}
# wait_ns: waits until namespaces 1 and 2 have devices; sets DEV and DEV2.
wait_ns() {
    _i=0
    while [ $_i -lt 150 ]; do
        DEV=$(ns_dev 1) && DEV2=$(ns_dev 2) && [ -b "$DEV" ] && [ -b "$DEV2" ] && return 0
        sleep 0.1; _i=$((_i + 1))
    done
    return 1
}

step "nvme discover lists the subsystem"
nvme discover $ADDR > /tmp/disc.out 2>&1
rc=$?
cat /tmp/disc.out
assert_eq "$rc" 0 "nvme discover exit status"
check "discovery log names $NQN" grep -q "subnqn: *$NQN" /tmp/disc.out
check "discovery log says tcp 127.0.0.1 4420" grep -q "traddr: *127.0.0.1" /tmp/disc.out

step "a host not on the allow-list is refused"
nvme discover $ADDR -q $OTHER > /tmp/disc2.out 2>&1
cat /tmp/disc2.out
check "its discovery log hides $NQN" sh -c "! grep -q 'subnqn: *$NQN' /tmp/disc2.out"
if nvme connect $ADDR -n $NQN -q $OTHER 2>/tmp/refused.err; then
    fail "connect of a host not on the allow-list succeeded"
else
    pass "connect of a host not on the allow-list fails: $(cat /tmp/refused.err)"
fi
check "the kernel logs the refusal" sh -c "dmesg | grep -q 'Connect for subsystem $NQN is not allowed, hostnqn: $OTHER'"
if nvme connect $ADDR -n nqn.2016-06.io.bdevkit:nosuch 2>/tmp/unknown.err; then
    fail "connect to an unknown NQN succeeded"
else
    pass "connect to an unknown NQN fails: $(cat /tmp/unknown.err)"
fi

step "nvme connect creates the namespaces"
must nvme connect $ADDR -n $NQN
wait_ns || { ls /sys/block; nvme list; die "no devices for namespaces 1 and 2 after connect"; }
echo "namespace 1: $DEV, namespace 2: $DEV2"
nvme list
check "namespace 1 is 64 MiB" sh -c "[ \$(blockdev --getsize64 $DEV) -eq 67108864 ]"
check "namespace 2 is 32 MiB" sh -c "[ \$(blockdev --getsize64 $DEV2) -eq 33554432 ]"
CTRL=$(ctrl_dev)
nvme id-ctrl "$CTRL" | grep -E '^(vid|sn|mn|fr|mdts|cntlid|ver|oncs|vwc|sgls|subnqn|ioccsz|iorcsz|msdbd) ' || true
nvme list-ns "$CTRL" || true

step "a dd pattern reads back identically"
must dd if=/dev/urandom of=/tmp/pattern bs=64k count=32 2>/dev/null
must dd if=/tmp/pattern of="$DEV" oflag=direct bs=64k 2>/dev/null
must dd if="$DEV" of=/tmp/back iflag=direct bs=64k count=32 2>/dev/null
same_bytes /tmp/pattern /tmp/back "read back after write"
must dd if=/tmp/pattern of="$DEV" oflag=direct bs=4k seek=4096 2>/dev/null
must dd if="$DEV" of=/tmp/back4k iflag=direct bs=4k skip=4096 count=512 2>/dev/null
same_bytes /tmp/pattern /tmp/back4k "read back after 4 KiB in-capsule writes"

step "disconnect and reconnect: the data stays"
must nvme disconnect -n $NQN
i=0; while [ -b "$DEV" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
check "the device went away on disconnect" sh -c "[ ! -b $DEV ]"
must nvme connect $ADDR -n $NQN
wait_ns || die "no devices after reconnect"
must dd if="$DEV" of=/tmp/back2 iflag=direct bs=64k count=32 2>/dev/null
same_bytes /tmp/pattern /tmp/back2 "read back after reconnect"

step "fio --ioengine=libaio --direct=1 --verify=crc32c"
# In the upper half of namespace 1: the dd patterns below 32 MiB stay.
# 16 MiB each: the guest's budget (TCG) is ~90 s for the whole script.
for spec in "bs=4k 32" "bs=128k 8" "bsrange=4k-64k 16"; do
    set -- $spec
    fio --name=verify --filename="$DEV" --ioengine=libaio --direct=1 --rw=randwrite --"$1" \
        --iodepth="$2" --offset=32m --size=16m --verify=crc32c --verify_fatal=1 --do_verify=1 \
        --output-format=terse --terse-version=3 > /tmp/fio.out 2>&1
    rc=$?
    tail -n 3 /tmp/fio.out
    assert_eq "$rc" 0 "fio randwrite+verify $1 iodepth=$2"
done

step "header and data digests on"
must nvme disconnect -n $NQN
i=0; while [ -b "$DEV" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
must nvme connect $ADDR -n $NQN --hdr-digest --data-digest
wait_ns || die "no devices with digests"
check "the target negotiated both digests" grep -q 'digests=Digests { header: true, data: true }' /tmp/tgt.log
must dd if="$DEV" of=/tmp/back3 iflag=direct bs=64k count=32 2>/dev/null
same_bytes /tmp/pattern /tmp/back3 "read back with digests"
must dd if=/dev/urandom of=/tmp/pattern2 bs=128k count=8 2>/dev/null
must dd if=/tmp/pattern2 of="$DEV" oflag=direct bs=128k seek=64 2>/dev/null
must dd if="$DEV" of=/tmp/back5 iflag=direct bs=128k skip=64 count=8 2>/dev/null
same_bytes /tmp/pattern2 /tmp/back5 "R2T writes and reads with digests"
fio --name=dverify --filename="$DEV" --ioengine=libaio --direct=1 --rw=randwrite --bsrange=4k-128k \
    --iodepth=16 --offset=48m --size=8m --verify=crc32c --verify_fatal=1 --output-format=terse --terse-version=3 \
    > /tmp/fio.out 2>&1
rc=$?
tail -n 3 /tmp/fio.out
assert_eq "$rc" 0 "fio verify with digests"

step "deleting the bdev under the connected host removes namespace 2"
must test -b "$DEV2"
must bdev_rpc -s $SOCK bdev_malloc_delete --json '{"name":"Malloc1"}'
i=0; while [ -b "$DEV2" ] && [ $i -lt 150 ]; do sleep 0.1; i=$((i + 1)); done
check "the host saw namespace 2 go ($DEV2 gone)" sh -c "[ ! -b $DEV2 ]"
check "namespace 1 stays" test -b "$DEV"
dmesg | grep -i -E 'nvme.*(rescan|ns|namespace)' | tail -n 5 || true
must dd if="$DEV" of=/tmp/back6 iflag=direct bs=64k count=32 2>/dev/null
same_bytes /tmp/pattern /tmp/back6 "namespace 1 still reads back"
bdev_rpc -s $SOCK nvmf_subsystem_get_controllers --json "{\"nqn\":\"$NQN\"}"
bdev_rpc -s $SOCK nvmf_subsystem_get_qpairs --json "{\"nqn\":\"$NQN\"}" | head -n 30

step "disconnect; the target stops cleanly"
must nvme disconnect -n $NQN
kill -TERM $TGT
i=0; while kill -0 $TGT 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
check "bdev_tgt exited on SIGTERM" sh -c "! kill -0 $TGT 2>/dev/null"
wait $TGT
assert_eq "$?" 0 "bdev_tgt exit status"
check "no panic in the target log" sh -c "! grep -q panicked /tmp/tgt.log"

finish
