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
