#!/bin/sh
# Guest test (VM harness): the kernel's NVMe/TCP target (nvmet) on loopback,
# exporting the emulated NVMe namespace, and `tcp_probe` (this crate's
# examples/tcp_probe.rs, a host made only of nvme-spec's PDU builders,
# parser and commands) talking to it without and with header/data digests.
# Exit 0 = every check passed. How to run it: doc/nvme-spec.md (the harness
# needs `--modules crc32c_generic`: nvmet computes digests with the kernel's
# crc32c, and without it the 6.12 nvmet-tcp oopses when a host asks for them).
set -e
modprobe crc32c_generic
modprobe nvmet-tcp
CFG=/sys/kernel/config/nvmet
NQN=nqn.2024-01.io.bdevkit:probe
mkdir $CFG/subsystems/$NQN
echo 1 > $CFG/subsystems/$NQN/attr_allow_any_host
mkdir $CFG/subsystems/$NQN/namespaces/1
echo -n /dev/nvme0n1 > $CFG/subsystems/$NQN/namespaces/1/device_path
echo 1 > $CFG/subsystems/$NQN/namespaces/1/enable
mkdir $CFG/ports/1
echo ipv4 > $CFG/ports/1/addr_adrfam
echo tcp > $CFG/ports/1/addr_trtype
echo 127.0.0.1 > $CFG/ports/1/addr_traddr
echo 4420 > $CFG/ports/1/addr_trsvcid
ln -s $CFG/subsystems/$NQN $CFG/ports/1/subsystems/$NQN
sleep 0.5
tcp_probe 127.0.0.1:4420 $NQN
tcp_probe 127.0.0.1:4420 $NQN --digests
