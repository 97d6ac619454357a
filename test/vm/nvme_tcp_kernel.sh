#!/bin/sh
# The nvme module's NVMe/TCP initiator against the Linux kernel's target
# (nvmet + nvmet-tcp over the guest's loopback, a file-backed namespace):
# bdev_nvme_attach_controller over RPC (bdev_tgt + bdev_rpc) with its
# errors, bdev_nvme_get_controllers showing the TCP trid, detach; then
# through --json configs: bdevperf -w verify (4 KiB and 128 KiB I/O, so
# in-capsule and R2T writes), data written through bdev_dd read back from
# the kernel's file backend and the reverse; header and data digests on
# throughout.
# vm: --modules crc32c_generic --timeout 200
. ./lib.sh

NQN=nqn.2016-06.io.bdevkit:kernel-tgt
IMG=/tmp/ns.img
SOCK=/tmp/tgt.sock

step "nvmet: tcp port 127.0.0.1:4420, namespace 1 over $IMG (64 MiB)"
# nvmet computes digests with the kernel's crc32c (6.12 oopses without it).
must modprobe crc32c_generic
must modprobe nvmet-tcp
must dd if=/dev/zero of=$IMG bs=1M count=64 2>/dev/null
nvmet_subsystem $NQN $IMG
nvmet_tcp_port $NQN

ATTACH='"name":"Nvme0","trtype":"tcp","adrfam":"ipv4","traddr":"127.0.0.1","trsvcid":"4420","subnqn":"'$NQN'","hdgst":true,"ddgst":true'

step "bdev_tgt: attach over RPC, get_controllers, detach"
bdev_tgt -r $SOCK > /tmp/tgt.log 2>&1 &
TGT=$!
trap 'echo "--- bdev_tgt log"; tail -n 60 /tmp/tgt.log' EXIT
wait_rpc $SOCK $TGT
out=$(bdev_rpc -s $SOCK -t 30 bdev_nvme_attach_controller --json "{$ATTACH}")
echo "$out"
check "attach returns the namespace's bdev" sh -c "echo '$out' | grep -q Nvme0n1"
out=$(bdev_rpc -s $SOCK bdev_nvme_get_controllers)
echo "$out"
check "get_controllers: trtype TCP" sh -c "echo '$out' | grep -q '\"trtype\": *\"TCP\"'"
check "get_controllers: adrfam IPv4" sh -c "echo '$out' | grep -q '\"adrfam\": *\"IPv4\"'"
check "get_controllers: trsvcid 4420" sh -c "echo '$out' | grep -q '\"trsvcid\": *\"4420\"'"
check "get_controllers: subnqn" sh -c "echo '$out' | grep -q '$NQN'"
check "get_controllers: state enabled" sh -c "echo '$out' | grep -q '\"state\": *\"enabled\"'"
out=$(bdev_rpc -s $SOCK bdev_get_bdevs -p name=Nvme0n1)
# nvmet's file backend reports the file system's block size (tmpfs: 4 KiB).
check "bdev Nvme0n1: 16384 blocks of 4096 bytes" sh -c "echo '$out' | grep -q '\"num_blocks\": *16384' && echo '$out' | grep -q '\"block_size\": *4096'"
out=$(bdev_rpc -s $SOCK bdev_nvme_attach_controller --json "{$ATTACH}" 2>&1)
check "the same path twice: -114" sh -c "echo '$out' | grep -q -- '-114'"
out=$(bdev_rpc -s $SOCK bdev_nvme_attach_controller --json '{"name":"Bad","trtype":"tcp","traddr":"127.0.0.1","adrfam":"ipx","trsvcid":"4420","subnqn":"'$NQN'"}' 2>&1)
check "bad adrfam: Failed to parse adrfam" sh -c "echo '$out' | grep -q 'Failed to parse adrfam'"
out=$(bdev_rpc -s $SOCK -t 30 bdev_nvme_attach_controller --json '{"name":"Bad","trtype":"tcp","traddr":"127.0.0.1","trsvcid":"4420","subnqn":"nqn.2016-06.io.bdevkit:nobody"}' 2>&1)
echo "$out"
check "unknown subsystem: the Connect is refused" sh -c "echo '$out' | grep -q 'failed: error -'"
check "detach" bdev_rpc -s $SOCK bdev_nvme_detach_controller -p name=Nvme0
out=$(bdev_rpc -s $SOCK bdev_nvme_get_controllers)
assert_eq "$(echo $out)" "[]" "no controller left"
kill $TGT; wait $TGT 2>/dev/null || true
trap - EXIT

bdev_config /tmp/tcp.json "{\"method\":\"bdev_nvme_attach_controller\",\"params\":{$ATTACH}}"

step "bdevperf -w verify, 4 KiB and 128 KiB, digests on"
check "verify 4 KiB qd 32" bdevperf --json /tmp/tcp.json -q 32 -o 4096 -w verify -t 3
check "verify 128 KiB qd 8" bdevperf --json /tmp/tcp.json -q 8 -o 131072 -w verify -t 3

step "bdev_dd writes through NVMe/TCP, the kernel's file backend has the bytes"
must dd if=/dev/urandom of=/tmp/pattern-a bs=64k count=48 2>/dev/null
must bdev_dd --json /tmp/tcp.json --if /tmp/pattern-a --ob Nvme0n1 --bs 64k --qd 4 --seek 100
sync
must dd if=$IMG of=/tmp/back-a bs=64k skip=100 count=48 2>/dev/null
same_bytes /tmp/pattern-a /tmp/back-a "the file backend holds what we wrote"

step "the file written on the kernel side reads back through NVMe/TCP"
must dd if=/dev/urandom of=/tmp/pattern-b bs=64k count=48 2>/dev/null
must dd if=/tmp/pattern-b of=$IMG bs=64k seek=300 conv=notrunc 2>/dev/null
sync
must bdev_dd --json /tmp/tcp.json --ib Nvme0n1 --of /tmp/back-b --bs 64k --qd 4 --skip 300 --count 48
same_bytes /tmp/pattern-b /tmp/back-b "we read what the kernel side wrote"

step "the same without digests, 4 KiB units (in-capsule writes)"
bdev_config /tmp/plain.json "{\"method\":\"bdev_nvme_attach_controller\",\"params\":{\"name\":\"Nvme1\",\"trtype\":\"TCP\",\"traddr\":\"127.0.0.1\",\"trsvcid\":\"4420\",\"subnqn\":\"$NQN\"}}"
must bdev_dd --json /tmp/plain.json --if /tmp/pattern-b --ob Nvme1n1 --bs 4k --qd 8 --seek 9600
sync
must dd if=$IMG of=/tmp/back-c bs=4k skip=9600 count=768 2>/dev/null
same_bytes /tmp/pattern-b /tmp/back-c "the file backend holds the 4 KiB writes"

finish
