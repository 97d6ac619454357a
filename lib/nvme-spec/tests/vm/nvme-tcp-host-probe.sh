#!/bin/sh
# Guest test (VM harness): the kernel's NVMe/TCP host (nvme-tcp) connects to
# `tcp_listen_probe` (this crate's examples/tcp_listen_probe.rs), which parses
# the host's ICReq and admin Connect with nvme-spec's controller-side parser
# and refuses the host with Connect Invalid Host; the kernel's log line about
# it proves the response. Without and with header/data digests.
# Exit 0 = every check passed. Needs `--modules crc32c_generic` (the host
# computes digests with the kernel's crc32c). How to run it: doc/nvme-spec.md.
set -e
modprobe crc32c_generic
modprobe nvme-tcp
SUBNQN=nqn.2024-01.io.bdevkit:listen-probe
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555
HOSTID=11111111-2222-3333-4444-555555555555
runs=0
for opt in "" ",hdr_digest,data_digest"; do
    runs=$((runs + 1))
    flag=""
    [ -n "$opt" ] && flag=--digests
    tcp_listen_probe 127.0.0.1:4421 $SUBNQN $HOSTNQN $flag > /tmp/probe.log 2>&1 &
    probe=$!
    sleep 0.5
    if echo "transport=tcp,traddr=127.0.0.1,trsvcid=4421,nqn=$SUBNQN,hostnqn=$HOSTNQN,hostid=$HOSTID$opt" \
        > /dev/nvme-fabrics 2>/tmp/connect.err; then
        echo "the host connected although the probe refused it"
        exit 1
    fi
    echo "connect failed as it should: $(cat /tmp/connect.err)"
    rc=0
    wait $probe || rc=$?
    cat /tmp/probe.log
    [ $rc -eq 0 ]
    # One more refusal logged by the kernel host per run.
    seen=$(dmesg | grep -c "Connect for subsystem $SUBNQN is not allowed, hostnqn: $HOSTNQN")
    echo "kernel host logged the refusal ($seen of $runs runs)"
    [ "$seen" -eq "$runs" ]
done
echo "host probe: the kernel host understood every PDU"
