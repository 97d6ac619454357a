#!/bin/sh
# Our user-space NVMe driver on QEMU's controller under trouble:
# bdev_nvme_reset_controller twice while bdevperf -w verify runs on 2
# cores (the verify stays clean: nothing lost, nothing corrupted);
# bdev_nvme_detach_controller while bdevperf (-z) reads at QD 32 (the job
# sees the bdev removed and ends long before its -t, bdevperf goes on
# serving, nothing hangs) and the controller works again afterwards;
# bdev_nvme_set_hotplug attaches the controller when setup.sh binds it to
# vfio-pci, and does not attach it again while bdev_tgt shuts down.
# (No harness options: see scripts/vm-test.sh for the "# vm:" header.)
. ./lib.sh

require_dev /sys/class/nvme/nvme0
BDF=$(basename "$(readlink /sys/class/nvme/nvme0/device)")
echo "controller $BDF, $(nproc) CPUs"
must ./setup.sh
SOCK=/tmp/bp.sock
rpc() { bdev_rpc -s $SOCK -t 30 "$@"; }
wait_rpc() {
    i=0; while [ $i -lt 100 ] && ! rpc rpc_get_methods > /dev/null 2>&1; do sleep 0.1; i=$((i + 1)); done
}
bdev_config /tmp/nvme.json \
    "{\"method\":\"bdev_nvme_attach_controller\",\"params\":{\"name\":\"Nvme0\",\"trtype\":\"PCIe\",\"traddr\":\"$BDF\"}}"

# watchdog SECS PID: kills PID after SECS unless it ended; prints the
# watchdog's pid (kill it once PID has ended).
watchdog() {
    (sleep "$1"; kill -9 "$2" 2>/dev/null && echo "WATCHDOG: killed $2 after $1 s") > /dev/null 2>&1 &
    echo $!
}

# total FILE: the Total line's fields (IOPS MiB/s Fail/s TO/s ...).
total() { grep -a 'Total *:' "$1" | head -n 1 | sed 's/.*Total *: *//'; }

step "bdev_nvme_reset_controller twice under bdevperf -w verify on cores 0x3"
bdevperf --json /tmp/nvme.json -r $SOCK -m 0x3 -C -q 16 -o 4096 -w verify -t 6 > /tmp/reset.out 2>&1 &
BP=$!
WD=$(watchdog 60 $BP)
wait_rpc
sleep 1.5
check "first reset answers" rpc bdev_nvme_reset_controller -p name=Nvme0
sleep 1
check "second reset answers" rpc bdev_nvme_reset_controller -p name=Nvme0
wait $BP
rc=$?
kill $WD 2>/dev/null
cat /tmp/reset.out
assert_eq "$rc" 0 "bdevperf exit status (verify across resets)"
t=$(total /tmp/reset.out)
check "I/O completed" awk -v v="$(echo "$t" | awk '{ print $1 }')" 'BEGIN { exit !(v > 0) }'
assert_eq "$(echo "$t" | awk '{ print $3 + $4 }')" 0 "no failed or timed-out I/O across resets"
check "no miscompare" sh -c '! grep -qi miscompare /tmp/reset.out'

step "bdev_nvme_detach_controller under bdevperf randread QD 32"
# bdevperf -z: it keeps serving RPCs when the test's only job ends, so the
# detach's answer is not lost with the process.
bdevperf -z --json /tmp/nvme.json -r $SOCK -m 0x1 -q 32 -o 4096 -w randread -t 60 > /tmp/detach.out 2>&1 &
BP=$!
WD=$(watchdog 40 $BP)
wait_rpc
bdev_rpc -s $SOCK -t 90 perform_tests > /tmp/perform.json 2>&1 &
PT=$!
sleep 2
check "detach answers" rpc bdev_nvme_detach_controller -p name=Nvme0
wait $PT
echo "perform_tests exit $?"
cat /tmp/perform.json
check "bdevperf still serves after the detach" rpc rpc_get_methods > /dev/null
assert_eq "$(rpc bdev_nvme_get_controllers | tr -d ' \n')" "[]" "no controller left"
check "bdevperf stops on request" rpc spdk_kill_instance -p sig_name=SIGTERM
wait $BP
rc=$?
kill $WD 2>/dev/null
cat /tmp/detach.out
check "bdevperf ended on its own (not the watchdog)" test "$rc" -ne 137
check "the job saw the bdev removed" grep -q "Nvme0n1: bdev removed while the test ran" /tmp/detach.out
check "the job ended early, with an error" grep -q "Job: Nvme0n1 ended in about .* with error" /tmp/detach.out

step "the controller works again after the detach"
bdevperf --json /tmp/nvme.json -m 0x1 -q 8 -o 4096 -w verify -t 1 > /tmp/again.out 2>&1
rc=$?
cat /tmp/again.out
assert_eq "$rc" 0 "bdevperf verify after the detach"

step "bdev_nvme_set_hotplug: the controller appears when setup.sh binds it"
must ./setup.sh reset
bdev_tgt -m 0x1 -r $SOCK > /tmp/tgt.log 2>&1 &
TGT=$!
wait_rpc
must rpc bdev_nvme_set_hotplug -p enable=true -p period_us=100000
check "no nvme bdev while the kernel has the device" sh -c "! bdev_rpc -s $SOCK bdev_get_bdevs | grep -q HotInNvme"
must ./setup.sh
i=0; while [ $i -lt 100 ] && ! rpc bdev_get_bdevs -p name=HotInNvme0n1 > /dev/null 2>&1; do sleep 0.1; i=$((i + 1)); done
rpc bdev_nvme_get_controllers > /tmp/hot.json
cat /tmp/hot.json
check "hotplug attached HotInNvme0 at $BDF" grep -q "\"traddr\": \"$BDF\"" /tmp/hot.json
check "its bdev HotInNvme0n1" rpc bdev_get_bdevs -p name=HotInNvme0n1
rpc save_config > /tmp/saved.json
check "save_config carries bdev_nvme_set_hotplug" grep -q bdev_nvme_set_hotplug /tmp/saved.json
kill $TGT; wait $TGT
echo "bdev_tgt exit $?"
tail -n 20 /tmp/tgt.log
check "nothing attached during shutdown" sh -c '! grep -q HotInNvme1 /tmp/tgt.log'
check "no VFIO map/unmap warnings" sh -c '! grep -q "VFIO DMA" /tmp/tgt.log /tmp/reset.out /tmp/detach.out'

finish
