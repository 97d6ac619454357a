# test/vm/lib.sh - helpers for the guest scripts of the VM lane (busybox sh).
# scripts/vm-test.sh copies it next to the script, the binaries and the test
# files into /opt/vmtest (the guest's cwd, on PATH). Use:
#
#   . ./lib.sh
#   step "what comes next"
#   check "what it shows" COMMAND...      # a failed check is counted, the test goes on
#   must COMMAND...                       # a failure ends the test at once
#   finish                                # last line: exit 0 only if every check passed
#
# Nothing here prints the harness's result line: the guest init does, from
# the script's exit status.

VMT_FAILS=0
VMT_CHECKS=0

uptime_s() { cut -d' ' -f1 /proc/uptime; }

# step TEXT: a header in the console log.
step() { echo; echo "=== [$(uptime_s)s] $*"; }

pass() { VMT_CHECKS=$((VMT_CHECKS + 1)); echo "CHECK OK: $*"; }
fail() { VMT_CHECKS=$((VMT_CHECKS + 1)); VMT_FAILS=$((VMT_FAILS + 1)); echo "CHECK FAILED: $*"; }
die() { echo "FATAL: $*"; exit 1; }

# check DESC CMD...: runs CMD; counts a failure (with its exit status).
check() {
    _desc=$1; shift
    if "$@"; then pass "$_desc"; else fail "$_desc (exit $?: $*)"; fi
}

# must CMD...: runs CMD; ends the test when it fails.
must() {
    "$@" || die "exit $?: $*"
}

# assert_eq ACTUAL EXPECTED DESC
assert_eq() {
    if [ "$1" = "$2" ]; then pass "$3"; else fail "$3: expected '$2', got '$1'"; fi
}

# same_bytes FILE1 FILE2 DESC: byte-for-byte equal (cmp), with both md5sums in the log.
same_bytes() {
    echo "md5 $(md5sum < "$1" | cut -d' ' -f1) $1"
    echo "md5 $(md5sum < "$2" | cut -d' ' -f1) $2"
    check "$3" cmp "$1" "$2"
}

# require_dev PATH...: the device nodes exist, or the test ends.
require_dev() {
    for _d in "$@"; do [ -e "$_d" ] || die "$_d missing"; done
}

# bdev_config FILE ENTRY...: writes an SPDK-format JSON config with the given
# bdev subsystem entries (each a JSON object).
bdev_config() {
    _f=$1; shift
    _sep=""
    {
        printf '{"subsystems":[{"subsystem":"bdev","config":['
        for _e in "$@"; do printf '%s%s' "$_sep" "$_e"; _sep=","; done
        printf ']}]}\n'
    } > "$_f"
}

# kernel_bdev MODULE NAME FILENAME: the create entry of an aio or uring bdev.
kernel_bdev() {
    printf '{"method":"bdev_%s_create","params":{"name":"%s","filename":"%s"}}' "$1" "$2" "$3"
}

# xnvme_bdev NAME FILENAME MECHANISM [CONSERVE_CPU]: the create entry of an
# xnvme bdev (CONSERVE_CPU true or false, default false).
xnvme_bdev() {
    printf '{"method":"bdev_xnvme_create","params":{"name":"%s","filename":"%s","io_mechanism":"%s","conserve_cpu":%s}}' \
        "$1" "$2" "$3" "${4:-false}"
}

# verify_2cores CONFIG BDEV LABEL [BDEVPERF-ARGS...]: bdevperf -w verify
# for 2 s on 2 cores (-m 0x3 -C: one job per core, each on its own half of
# the bdev), QD 16, 4 KiB: writes a pattern, reads it back and compares.
# Checks the exit status, one job per core, I/O done and no failed or
# timed-out I/O.
verify_2cores() {
    _out=/tmp/verify.$$.out
    _cfg=$1 _bdev=$2 _label=$3
    shift 3
    bdevperf "$@" --json "$_cfg" -m 0x3 -C -q 16 -o 4096 -w verify -t 2 > "$_out" 2>&1
    _rc=$?
    cat "$_out"
    assert_eq "$_rc" 0 "bdevperf exit status ($_label)"
    for _mask in 0x1 0x2; do
        check "a verify job on core mask $_mask ($_label)" \
            grep -q "Job: $_bdev (Core Mask $_mask, workload: verify" "$_out"
    done
    # The Total line (after "\r Total :"): IOPS MiB/s Fail/s TO/s Average min max.
    _total=$(grep -a 'Total *:' "$_out" | head -n 1 | sed 's/.*Total *: *//')
    _iops=$(echo "$_total" | awk '{ print $1 }')
    echo "$_label: ${_iops:-?} IOPS"
    check "I/O completed ($_label)" awk -v v="${_iops:-0}" 'BEGIN { exit !(v + 0 > 0) }'
    assert_eq "$(echo "$_total" | awk '{ print $3 + $4 }')" 0 "no failed or timed-out I/O ($_label)"
}

# dd_roundtrip CONFIG BDEV DEVICE BASE LABEL: bdev_dd writes a 3 MiB random
# pattern onto BDEV at 64 KiB unit BASE and the kernel reads the same bytes
# back from the block device DEVICE (dd iflag=direct); then the kernel
# writes another pattern at unit BASE+64 (dd oflag=direct) and bdev_dd
# reads the same bytes back.
dd_roundtrip() {
    [ -f /tmp/pattern-a ] || must dd if=/dev/urandom of=/tmp/pattern-a bs=64k count=48 2>/dev/null
    [ -f /tmp/pattern-b ] || must dd if=/dev/urandom of=/tmp/pattern-b bs=64k count=48 2>/dev/null
    step "$5: bdev_dd writes, the kernel reads back"
    must bdev_dd --json "$1" --if /tmp/pattern-a --ob "$2" --bs 64k --qd 4 --seek "$4"
    must dd if="$3" of=/tmp/back-a iflag=direct bs=64k skip="$4" count=48 2>/dev/null
    same_bytes /tmp/pattern-a /tmp/back-a "kernel reads what bdev_dd wrote ($5)"
    step "$5: the kernel writes, bdev_dd reads back"
    must dd if=/tmp/pattern-b of="$3" oflag=direct conv=notrunc bs=64k seek=$(($4 + 64)) 2>/dev/null
    must bdev_dd --json "$1" --ib "$2" --of /tmp/back-b --bs 64k --qd 4 --skip $(($4 + 64)) --count 48
    same_bytes /tmp/pattern-b /tmp/back-b "bdev_dd reads what the kernel wrote ($5)"
}

# The kernel's NVMe-oF target (nvmet), set up through configfs.
NVMET=/sys/kernel/config/nvmet
# nvmet_subsystem NQN FILE: subsystem NQN (any host) with namespace 1 over
# FILE (which must exist), page-cache I/O (keeps the file's bytes coherent
# with dd on the guest side).
nvmet_subsystem() {
    must mkdir $NVMET/subsystems/$1
    echo 1 > $NVMET/subsystems/$1/attr_allow_any_host
    must mkdir $NVMET/subsystems/$1/namespaces/1
    echo -n "$2" > $NVMET/subsystems/$1/namespaces/1/device_path
    echo 1 > $NVMET/subsystems/$1/namespaces/1/buffered_io
    echo 1 > $NVMET/subsystems/$1/namespaces/1/enable
}
# nvmet_tcp_port NQN...: nvmet's port 1, TCP on 127.0.0.1:4420, serving
# the subsystems NQN...
nvmet_tcp_port() {
    must mkdir $NVMET/ports/1
    echo ipv4 > $NVMET/ports/1/addr_adrfam
    echo tcp > $NVMET/ports/1/addr_trtype
    echo 127.0.0.1 > $NVMET/ports/1/addr_traddr
    echo 4420 > $NVMET/ports/1/addr_trsvcid
    for _n in "$@"; do
        must ln -s $NVMET/subsystems/$_n $NVMET/ports/1/subsystems/$_n
    done
}

# nvme_tcp_host HOSTID: the kernel's NVMe/TCP host (modules loaded), with
# HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:HOSTID as nvme-cli's default
# host NQN and ID (/etc/nvme); sets HOSTID, HOSTNQN and ADDR (our target's
# TCP listener, 127.0.0.1:4420, as nvme-cli's arguments).
nvme_tcp_host() {
    HOSTID=$1
    HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:$HOSTID
    ADDR="-t tcp -a 127.0.0.1 -s 4420"
    must modprobe crc32c_generic
    must modprobe nvme-tcp
    mkdir -p /etc/nvme
    echo "$HOSTNQN" > /etc/nvme/hostnqn
    echo "$HOSTID" > /etc/nvme/hostid
}

# wait_rpc SOCK PID: waits until the daemon PID answers on its RPC socket
# SOCK (its config is loaded then), or dies if it exits or takes 30 s.
wait_rpc() {
    _i=0
    until bdev_rpc -s "$1" -t 5 spdk_get_version > /dev/null 2>&1; do
        [ $_i -lt 300 ] || die "bdev_tgt did not come up"
        kill -0 "$2" 2>/dev/null || die "bdev_tgt exited"
        sleep 0.1; _i=$((_i + 1))
    done
}

# ns_dev NSID: the kernel NVMe host's block device of namespace NSID of
# subsystem $NQN (names follow the order the host found them, not the nsid).
ns_dev() {
    for _b in /sys/block/nvme*n*; do
        [ -e "$_b/nsid" ] || continue
        [ "$(cat "$_b/nsid")" = "$1" ] || continue
        _s=$(cat "$_b/device/subsysnqn" 2>/dev/null || cat "$_b/device/../subsysnqn" 2>/dev/null)
        [ -z "$_s" ] || [ "$_s" = "$NQN" ] || continue
        # nvme0: the emulated PCIe controller; nvmeXcYnZ: a multipath
        # path's hidden disk (no /dev node).
        case $(basename "$_b") in nvme0n* | nvme*c*n*) continue ;; esac
        [ -b "/dev/$(basename "$_b")" ] || continue
        echo "/dev/$(basename "$_b")"
        return 0
    done
    return 1
}

# finish: the script's last command.
finish() {
    echo
    if [ "$VMT_FAILS" -eq 0 ]; then
        echo "all $VMT_CHECKS checks passed"
        exit 0
    fi
    echo "$VMT_FAILS of $VMT_CHECKS checks failed"
    exit 1
}
