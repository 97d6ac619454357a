#!/bin/sh
# Two NVMe/TCP initiators on the same Linux kernel target (nvmet-tcp over
# the guest's loopback, a 256 MiB file namespace in the page cache):
# bdevperf over the nvme module's TCP initiator against fio (libaio and
# io_uring, O_DIRECT) on the kernel nvme-tcp host's /dev/nvmeXnY, 4 KiB
# random reads at QD 1 and QD 32, both initiators on CPU 1, alternating
# runs; then the median of each and the ratios ours / kernel. Issue 15's
# "our initiator against the kernel target vs the kernel initiator".
# Not a CI test: scripts/vm-test.sh --bench nvme_tcp_vs_kernel. TCG
# emulation: slow and noisy (nvmet's own threads share the two vCPUs);
# read the medians, not single runs.
# ROUNDS, RUNTIME (s) and QDS ("1 32") override the defaults (-e NAME=VALUE).
# vm: --deb nvme-cli --deb libnvme1 --timeout 900
# vm: --deb fio --deb libaio1 --deb libnuma1 --deb libibverbs1 --deb librdmacm1
# vm: --deb libpmem1 --deb libpmemblk1 --deb libnbd0 --deb libgfapi0 --deb libglusterfs0
# vm: --deb libgfrpc0 --deb libgfxdr0 --deb librados2 --deb librbd1 --deb libfmt9
# vm: --deb libboost-thread1.74.0 --deb libboost-iostreams1.74.0 --deb libbz2-1.0
. ./lib.sh

rounds=${ROUNDS:-3}
runtime=${RUNTIME:-5}
qds=${QDS:-1 32}
NQN=nqn.2016-06.io.bdevkit:kernel-bench
IMG=/tmp/ns.img
must fio --version

step "nvmet: tcp port 127.0.0.1:4420, namespace 1 over $IMG (256 MiB, buffered)"
must modprobe nvmet-tcp
must modprobe nvme-tcp
must dd if=/dev/urandom of=$IMG bs=1M count=256 2>/dev/null
nvmet_subsystem $NQN $IMG
nvmet_tcp_port $NQN
# Warm the page cache, so both initiators read from memory.
must cat $IMG > /dev/null

bdev_config /tmp/tcp.json "{\"method\":\"bdev_nvme_attach_controller\",\"params\":{\"name\":\"Nvme0\",\"trtype\":\"tcp\",\"adrfam\":\"ipv4\",\"traddr\":\"127.0.0.1\",\"trsvcid\":\"4420\",\"subnqn\":\"$NQN\"}}"

step "the kernel host: nvme connect"
# nvme-cli refuses a generated hostnqn that does not match its hostid.
HOSTID=6b2c8a1e-3d4f-4a5b-9c6d-7e8f9a0b1c2d
mkdir -p /etc/nvme
echo "nqn.2014-08.org.nvmexpress:uuid:$HOSTID" > /etc/nvme/hostnqn
echo "$HOSTID" > /etc/nvme/hostid
must nvme connect -t tcp -a 127.0.0.1 -s 4420 -n $NQN
i=0
until DEV=$(ns_dev 1); do
    [ $i -lt 150 ] || { nvme list; die "no block device for $NQN"; }
    sleep 0.1; i=$((i + 1))
done
echo "kernel host device: $DEV"

# ours_iops QD: bdevperf on CPU 1 over our initiator.
ours_iops() {
    bdevperf --json /tmp/tcp.json -m 0x2 -q "$1" -o 4096 -w randread -t "$runtime" > /tmp/bp.out 2>&1 || { cat /tmp/bp.out; return 1; }
    grep -a 'Total *:' /tmp/bp.out | head -n 1 | sed 's/.*Total *: *//' | awk '{ print $1 }'
}
# fio_iops ENGINE QD: fio on CPU 1 over the kernel host's block device.
fio_iops() {
    fio --name=k --ioengine="$1" --direct=1 --filename="$DEV" --rw=randread --bs=4k \
        --iodepth="$2" --runtime="$runtime" --time_based --norandommap --cpus_allowed=1 \
        --output-format=terse --terse-version=3 > /tmp/fio.out 2>&1 || { cat /tmp/fio.out; return 1; }
    grep -a '^3;' /tmp/fio.out | head -n 1 | cut -d';' -f8
}

KINDS="ours kernel_libaio kernel_io_uring"
for r in $(seq 1 "$rounds"); do
    for qd in $qds; do
        step "round $r of $rounds, QD $qd"
        # Rotate the order from round to round.
        order="$(echo $KINDS | tr ' ' '\n' | awk -v s=$(( (r - 1) % 3 )) '{ a[NR - 1] = $0 } END { for (i = 0; i < 3; i++) print a[(i + s) % 3] }')"
        for k in $order; do
            case $k in
                ours) v=$(ours_iops "$qd") ;;
                kernel_libaio) v=$(fio_iops libaio "$qd") ;;
                kernel_io_uring) v=$(fio_iops io_uring "$qd") ;;
            esac
            echo "RESULT $k qd $qd round $r: ${v:-?} IOPS"
            echo "${v:-0}" >> /tmp/results.$k.$qd
            check "$k did I/O (QD $qd, round $r)" awk -v v="${v:-0}" 'BEGIN { exit !(v + 0 > 0) }'
        done
    done
done
must nvme disconnect -n $NQN

median() { sort -n "$1" | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
for qd in $qds; do
    step "medians of $rounds rounds (4 KiB randread, QD $qd, ${runtime}s, CPU 1)"
    for k in $KINDS; do
        echo "MEDIAN $k qd $qd: $(median /tmp/results.$k.$qd) IOPS (runs: $(tr '\n' ' ' < /tmp/results.$k.$qd))"
    done
    o=$(median /tmp/results.ours.$qd)
    for k in kernel_libaio kernel_io_uring; do
        echo "RATIO ours / $k qd $qd: $(awk -v a="$o" -v b="$(median /tmp/results.$k.$qd)" 'BEGIN { printf "%.2f", a / b }')"
    done
done

finish
