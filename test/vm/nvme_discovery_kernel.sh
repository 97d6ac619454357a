#!/bin/sh
# NVMe-oF discovery (bdev_nvme_start_discovery) against the Linux kernel's
# nvmet discovery controller (nvmet + nvmet-tcp over the guest's loopback,
# file-backed namespaces): a saved-config style start with wait_for_attach
# in bdev_dd attaches both subsystems of the port and writes through one
# (the kernel's file backend has the bytes); then in bdev_tgt over RPC:
# get_controllers / get_discovery_info, SPDK's errors, a subsystem linked
# to the port later is attached (nvmet's Discovery Log Change event), one
# unlinked is detached, stop detaches the rest.
# vm: --modules crc32c_generic --timeout 150
. ./lib.sh

NQN1=nqn.2016-06.io.bdevkit:disc1
NQN2=nqn.2016-06.io.bdevkit:disc2
NQN3=nqn.2016-06.io.bdevkit:disc3
SOCK=/tmp/tgt.sock

# subsystem NQN IMG: a subsystem with namespace 1 over a 16 MiB file.
subsystem() {
    must dd if=/dev/zero of="$2" bs=1M count=16 2>/dev/null
    nvmet_subsystem "$1" "$2"
}

# eventually DESC CMD...: CMD succeeds within 15 s (polled; a check).
eventually() {
    _d=$1; shift; _i=0
    until "$@" > /dev/null 2>&1; do
        if [ $_i -ge 150 ]; then fail "$_d (not within 15 s)"; return; fi
        sleep 0.1; _i=$((_i + 1))
    done
    pass "$_d"
}

names() { bdev_rpc -s $SOCK bdev_nvme_get_controllers | grep -o '"name": *"[^"]*"' | sed 's/.*: *"//; s/"$//' | sort | xargs; }
has_bdev() { bdev_rpc -s $SOCK bdev_get_bdevs | grep -q "\"name\": *\"$1\""; }
no_bdev() { ! has_bdev "$1"; }

step "nvmet: two subsystems on tcp port 127.0.0.1:4420"
must modprobe crc32c_generic
must modprobe nvmet-tcp
subsystem $NQN1 /tmp/ns1.img
subsystem $NQN2 /tmp/ns2.img
nvmet_tcp_port $NQN1 $NQN2

START='"name":"nvme","trtype":"tcp","adrfam":"ipv4","traddr":"127.0.0.1","trsvcid":"4420","wait_for_attach":true'

step "bdev_dd: a config starting discovery attaches both, writes reach the kernel's file"
bdev_config /tmp/disc.json "{\"method\":\"bdev_nvme_start_discovery\",\"params\":{$START}}"
must dd if=/dev/urandom of=/tmp/pattern bs=64k count=16 2>/dev/null
must bdev_dd --json /tmp/disc.json --if /tmp/pattern --ob nvme1n1 --bs 64k --qd 4 --seek 20
sync
must dd if=/tmp/ns2.img of=/tmp/back bs=64k skip=20 count=16 2>/dev/null
same_bytes /tmp/pattern /tmp/back "the second subsystem's file holds what we wrote to nvme1n1"
must dd if=/tmp/ns1.img of=/tmp/back1 bs=64k skip=20 count=16 2>/dev/null
check "the first subsystem's file does not" sh -c '! cmp -s /tmp/pattern /tmp/back1'

step "bdev_tgt: start over RPC, controllers, discovery info, errors"
bdev_tgt -r $SOCK > /tmp/tgt.log 2>&1 &
TGT=$!
trap 'echo "--- bdev_tgt log"; tail -n 60 /tmp/tgt.log' EXIT
wait_rpc $SOCK $TGT
out=$(bdev_rpc -s $SOCK -t 30 bdev_nvme_start_discovery --json "{$START}")
assert_eq "$(echo $out)" "true" "start_discovery answers true"
assert_eq "$(names)" "nvme0 nvme1" "both subsystems attached as nvme0, nvme1"
check "bdev nvme0n1" has_bdev nvme0n1
check "bdev nvme1n1" has_bdev nvme1n1
out=$(bdev_rpc -s $SOCK bdev_nvme_get_controllers -p name=nvme0)
check "nvme0 is $NQN1" sh -c "echo '$out' | grep -q '$NQN1'"
out=$(bdev_rpc -s $SOCK bdev_nvme_get_discovery_info)
echo "$out"
check "discovery info: the service" sh -c "echo '$out' | grep -q '\"name\": *\"nvme\"'"
check "discovery info: the discovery NQN" sh -c "echo '$out' | grep -q 'nqn.2014-08.org.nvmexpress.discovery'"
out=$(bdev_rpc -s $SOCK bdev_nvme_start_discovery --json "{$START}" 2>&1)
check "the same name again: -17" sh -c "echo '$out' | grep -q 'error -17:'"
out=$(bdev_rpc -s $SOCK bdev_nvme_stop_discovery -p name=nope 2>&1)
check "stop of an unknown name: -2" sh -c "echo '$out' | grep -q 'error -2:'"

step "a subsystem linked to the port later: nvmet's event, attached"
subsystem $NQN3 /tmp/ns3.img
must ln -s $NVMET/subsystems/$NQN3 $NVMET/ports/1/subsystems/$NQN3
eventually "nvme2n1 attached after the log change" has_bdev nvme2n1
assert_eq "$(names)" "nvme0 nvme1 nvme2" "controllers after the link"

step "a subsystem unlinked from the port: detached"
must rm $NVMET/ports/1/subsystems/$NQN1
eventually "nvme0n1 gone after the log change" no_bdev nvme0n1
assert_eq "$(names)" "nvme1 nvme2" "controllers after the unlink"

step "stop detaches the rest"
out=$(bdev_rpc -s $SOCK -t 30 bdev_nvme_stop_discovery -p name=nvme)
assert_eq "$(echo $out)" "true" "stop_discovery answers true"
assert_eq "$(names)" "" "no controller left"
assert_eq "$(echo $(bdev_rpc -s $SOCK bdev_nvme_get_discovery_info))" "[]" "no discovery service left"
kill $TGT; wait $TGT 2>/dev/null || true
trap - EXIT

finish
