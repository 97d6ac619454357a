#!/bin/sh
# The xnvme module's io_uring_cmd mechanism against fio 3.33 (Debian) on
# the same emulated NVMe namespace, 4 KiB random reads on one core,
# alternating runs: bdevperf on an xnvme io_uring_cmd bdev over /dev/ng0n1
# (conserve_cpu false and true), fio --ioengine=io_uring_cmd
# --cmd_type=nvme on /dev/ng0n1 (and with --fixedbufs: what registered
# buffers are worth here), and bdevperf on a uring bdev over /dev/nvme0n1; then the median of each and the ratios. Not a CI test:
# scripts/vm-test.sh --bench xnvme_vs_fio. TCG emulation: thousands of
# IOPS, noisy from run to run; read the medians, not single runs.
# ROUNDS, RUNTIME (s), QD override the defaults (-e NAME=VALUE).
# vm: --deb fio --deb libaio1 --deb libnuma1 --deb libibverbs1 --deb librdmacm1
# vm: --deb libpmem1 --deb libpmemblk1 --deb libnbd0 --deb libgfapi0 --deb libglusterfs0
# vm: --deb libgfrpc0 --deb libgfxdr0 --deb librados2 --deb librbd1 --deb libfmt9
# vm: --deb libboost-thread1.74.0 --deb libboost-iostreams1.74.0 --deb libbz2-1.0
. ./lib.sh

require_dev /dev/ng0n1 /dev/nvme0n1
rounds=${ROUNDS:-5}
runtime=${RUNTIME:-5}
qd=${QD:-8}
must fio --version
ENGINES="xnvme_cmd xnvme_cmd_intr fio_cmd fio_cmd_fixedbufs uring"
bdev_config /tmp/cmd.json "$(xnvme_bdev X0 /dev/ng0n1 io_uring_cmd false)"
bdev_config /tmp/cmdc.json "$(xnvme_bdev X0 /dev/ng0n1 io_uring_cmd true)"
bdev_config /tmp/uring.json "$(kernel_bdev uring U0 /dev/nvme0n1)"

# bdevperf_iops CONFIG BDEV [BDEVPERF-ARGS...]: IOPS of one randread run
# on core 0.
bdevperf_iops() {
    _cfg=$1
    shift 2
    bdevperf "$@" --json "$_cfg" -m 0x1 -q "$qd" -o 4096 -w randread -t "$runtime" > /tmp/bp.out 2>&1 || { cat /tmp/bp.out; return 1; }
    grep -a 'Total *:' /tmp/bp.out | head -n 1 | sed 's/.*Total *: *//' | awk '{ print $1 }'
}

# fio_iops [FIO-ARGS...]: IOPS of one fio io_uring_cmd randread run on CPU 0.
fio_iops() {
    fio --name=cmd --ioengine=io_uring_cmd --cmd_type=nvme "$@" --filename=/dev/ng0n1 --rw=randread --bs=4k \
        --iodepth="$qd" --runtime="$runtime" --time_based --norandommap --cpus_allowed=0 \
        --output-format=terse --terse-version=3 > /tmp/fio.out 2>&1 || { cat /tmp/fio.out; return 1; }
    grep -a '^3;' /tmp/fio.out | head -n 1 | cut -d';' -f8
}

for r in $(seq 1 "$rounds"); do
    step "round $r of $rounds"
    # Rotate the order: round r starts with engine r (mod the count).
    n=$(echo $ENGINES | wc -w)
    order="$(echo $ENGINES | tr ' ' '\n' | awk -v s=$(( (r - 1) % n )) -v n=$n '{ a[NR - 1] = $0 } END { for (i = 0; i < n; i++) print a[(i + s) % n] }')"
    for e in $order; do
        case $e in
            xnvme_cmd) v=$(bdevperf_iops /tmp/cmd.json X0) ;;
            xnvme_cmd_intr) v=$(bdevperf_iops /tmp/cmdc.json X0 --interrupt-mode) ;;
            fio_cmd) v=$(fio_iops) ;;
            fio_cmd_fixedbufs) v=$(fio_iops --fixedbufs) ;;
            uring) v=$(bdevperf_iops /tmp/uring.json U0) ;;
        esac
        echo "RESULT $e round $r: ${v:-?} IOPS"
        echo "${v:-0}" >> /tmp/results.$e
        check "$e did I/O (round $r)" awk -v v="${v:-0}" 'BEGIN { exit !(v + 0 > 0) }'
    done
done

median() { sort -n "$1" | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
step "medians of $rounds rounds (4 KiB randread, QD $qd, ${runtime}s, one core)"
for e in $ENGINES; do
    echo "MEDIAN $e: $(median /tmp/results.$e) IOPS (runs: $(tr '\n' ' ' < /tmp/results.$e))"
done
f=$(median /tmp/results.fio_cmd)
for e in $ENGINES; do
    [ $e = fio_cmd ] && continue
    echo "RATIO $e / fio_cmd: $(awk -v a="$(median /tmp/results.$e)" -v b="$f" 'BEGIN { printf "%.2f", a / b }')"
done

finish
