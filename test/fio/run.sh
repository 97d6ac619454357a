#!/usr/bin/env bash
# End-to-end tests of the fio engine (apps/fio, doc/fio.md): Debian's fio
# runs through libbdevkit_fio.so on null, malloc, aio and lvol bdevs (an
# lvstore on a malloc bdev, made by the JSON config) and on a zoned bdev
# (zonemode=zbd on a zone_block), and every
# kind of bad input fails with our message and a non-zero exit status.
#
#   test/fio/run.sh            # installs fio + its source if missing, builds, runs
#   ENGINE=path/to/libbdevkit_fio.so test/fio/run.sh   # an engine already built
#
# Runs in well under a minute on a warm build (scripts/test.sh calls it).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
# What the tree holds before: fio writes files into its working directory
# (verify state, local-JOB-N-verify.state), so it runs in $WORK, and the
# last check is that the tree holds nothing new.
tree_before=$(git status --porcelain --untracked-files=all 2>/dev/null || true)

# fio, and the configured source of the installed fio (the engine is built
# against its headers).
FIO_SRC=${FIO_SRC:-$(scripts/fetch-fio-src.sh)}
export FIO_SRC
if [ -z "${ENGINE:-}" ]; then
    cargo build --quiet -p bdevkit-fio
    ENGINE="${CARGO_TARGET_DIR:-target}/debug/libbdevkit_fio.so"
fi
ENGINE=$(realpath "$ENGINE")

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
truncate -s 64M "$WORK/aio.img"
cat > "$WORK/bdevs.json" <<EOF
{
  "subsystems": [
    {
      "subsystem": "bdev",
      "config": [
        { "method": "bdev_null_create", "params": { "name": "Null0", "num_blocks": 65536, "block_size": 4096 } },
        { "method": "bdev_null_create", "params": { "name": "Null1", "num_blocks": 65536, "block_size": 512 } },
        { "method": "bdev_malloc_create", "params": { "name": "Malloc0", "num_blocks": 8192, "block_size": 4096 } },
        { "method": "bdev_malloc_create", "params": { "name": "Malloc1", "num_blocks": 16384, "block_size": 512 } },
        { "method": "bdev_aio_create", "params": { "name": "Aio0", "filename": "$WORK/aio.img", "block_size": 4096 } },
        { "method": "bdev_malloc_create", "params": { "name": "Malloc2", "num_blocks": 16384, "block_size": 4096 } },
        { "method": "bdev_lvol_create_lvstore", "params": { "bdev_name": "Malloc2", "lvs_name": "lvs0", "cluster_sz": 1048576 } },
        { "method": "bdev_lvol_create", "params": { "lvs_name": "lvs0", "lvol_name": "lv0", "size_in_mib": 32 } },
        { "method": "bdev_malloc_create", "params": { "name": "Malloc3", "num_blocks": 16384, "block_size": 4096 } },
        { "method": "bdev_zone_block_create", "params": { "name": "Z0", "base_bdev": "Malloc3", "zone_capacity": 1000, "optimal_open_zones": 4 } }
      ]
    }
  ]
}
EOF
cat > "$WORK/bad.json" <<'EOF'
{ "subsystems": [ { "subsystem": "bdev", "config": [
  { "method": "bdev_malloc_create", "params": { "name": "M", "num_blocks": 0, "block_size": 4096 } } ] } ] }
EOF

pass=0
fail=0
# run NAME TIMEOUT fio-args...: output in $WORK/NAME.log, status in $rc.
run() {
    local name=$1 secs=$2
    shift 2
    set +e
    timeout "$secs" fio --thread=1 --ioengine=external:"$ENGINE" "$@" >"$WORK/$name.log" 2>&1
    rc=$?
    set -e
}
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() {
    fail=$((fail + 1))
    echo "FAIL $1: $2"
    sed 's/^/    | /' "$WORK/$1.log" | tail -20
}
# expect_ok NAME fio-args...: exit 0, no error of ours, no fio error.
expect_ok() {
    local name=$1
    shift
    run "$name" 60 "$@"
    if [ "$rc" -ne 0 ]; then
        bad "$name" "exit status $rc"
    elif grep -qE "bdevkit: error|err= *[1-9]|verify: bad" "$WORK/$name.log"; then
        bad "$name" "errors in the output"
    else
        ok "$name"
    fi
}
# expect_fail NAME MESSAGE fio-args...: a non-zero exit, MESSAGE in the
# output, and no hang (timeout's 124 counts as a failure of the test).
expect_fail() {
    local name=$1 msg=$2
    shift 2
    run "$name" 30 "$@"
    if [ "$rc" -eq 124 ]; then
        bad "$name" "hung (killed after 30 s)"
    elif [ "$rc" -eq 0 ]; then
        bad "$name" "exit status 0, expected a failure"
    elif ! grep -qF -- "$msg" "$WORK/$name.log"; then
        bad "$name" "no \"$msg\" in the output"
    else
        ok "$name"
    fi
}

CONF=(--bdevkit_conf="$WORK/bdevs.json")
SMALL=(--bs=4k --size=16M --iodepth=16 --norandommap=1)

# randread / randwrite on each backend; verify where data is stored.
for b in Null0 Malloc0 Aio0; do
    expect_ok "randread-$b" "${CONF[@]}" --name=rr --filename=$b --rw=randread "${SMALL[@]}"
    expect_ok "randwrite-$b" "${CONF[@]}" --name=rw --filename=$b --rw=randwrite "${SMALL[@]}"
done
for b in Malloc0 Aio0; do
    expect_ok "verify-$b" "${CONF[@]}" --name=v --filename=$b --rw=randwrite --verify=crc32c \
        --bs=4k --size=16M --iodepth=16
done
# The lvol, by its alias (fio takes lvs0/lv0 as a name, not a path).
expect_ok randread-lvol "${CONF[@]}" --name=rr --filename=lvs0/lv0 --rw=randread "${SMALL[@]}"
expect_ok randwrite-lvol "${CONF[@]}" --name=rw --filename=lvs0/lv0 --rw=randwrite "${SMALL[@]}"
expect_ok verify-lvol "${CONF[@]}" --name=v --filename=lvs0/lv0 --rw=randwrite --verify=crc32c \
    --bs=4k --size=16M --iodepth=16
# The null bdev stores nothing: fio's verify must catch it (the check is real).
expect_fail verify-Null0-catches "verify: bad" "${CONF[@]}" --name=v --filename=Null0 \
    --rw=randwrite --verify=crc32c --bs=4k --size=4M --iodepth=8

# A zoned bdev (16 zones of 1024 blocks, 1000 writable) with fio's
# zonemode=zbd: fio reads the zones through the engine, writes at their
# write pointers and resets them through it to write them again (twice the
# bdev's capacity: every zone is reset at least once), and verifies.
ZBD=("${CONF[@]}" --filename=Z0 --zonemode=zbd --direct=1)
run zbd-write 60 "${ZBD[@]}" --name=zw --rw=write --bs=16k --iodepth=8 --io_size=128M
resets=$(sed -n 's/.*; \([0-9]*\) zone resets.*/\1/p' "$WORK/zbd-write.log")
if [ "$rc" -eq 0 ] && grep -q "err= 0" "$WORK/zbd-write.log" && [ "${resets:-0}" -ge 16 ]; then
    ok zbd-write
else
    bad zbd-write "exit status $rc, ${resets:-no} zone resets (expected 16 or more)"
fi
for rw in write randwrite; do
    expect_ok "zbd-verify-$rw" "${ZBD[@]}" --name=zv --rw=$rw --verify=crc32c --bs=4k \
        --iodepth=16 --size=32M
done
expect_ok zbd-randread "${ZBD[@]}" --name=zr --rw=randread --bs=4k --iodepth=16 --size=32M

# Several jobs on several bdevs each (':'-separated), a mixed workload with
# trims and flushes, sequential reads and writes, batched submission and
# completion.
cat > "$WORK/multi.fio" <<EOF
[global]
ioengine=external:$ENGINE
bdevkit_conf=$WORK/bdevs.json
thread=1
bs=4k
size=16M
iodepth=32
iodepth_batch_submit=8
iodepth_batch_complete_min=4
iodepth_batch_complete_max=16
[mix]
filename=Malloc0:Malloc1
rw=randrw
rwmixread=70
numjobs=2
fsync=16
[readers]
filename=Null0:Null1:Aio0
rw=randread
numjobs=2
[trimmer]
filename=Malloc1
rw=randtrim
size=4M
[sequential]
filename=Null1
rw=readwrite
bs=64k
EOF
run multi 60 "$WORK/multi.fio"
if [ "$rc" -eq 0 ] && [ "$(grep -c 'err= 0' "$WORK/multi.log")" -eq 6 ] &&
    grep -q "sync (usec)" "$WORK/multi.log" && grep -q "trim: IOPS" "$WORK/multi.log"; then
    ok multi
else
    bad multi "exit status $rc, expected 6 jobs with err= 0, syncs and trims"
fi

# verify across jobs, each on its own bdevs, in one run.
cat > "$WORK/verify.fio" <<EOF
[global]
ioengine=external:$ENGINE
bdevkit_conf=$WORK/bdevs.json
thread=1
rw=randwrite
verify=crc32c
iodepth=16
size=8M
[m0]
filename=Malloc0
bs=4k
[m1-aio]
filename=Malloc1:Aio0
bs=8k
EOF
expect_ok verify-jobs "$WORK/verify.fio"

# As SPDK's engine is used: preloaded, ioengine=bdevkit, spdk_json_conf.
set +e
LD_PRELOAD=$ENGINE timeout 60 fio --thread=1 --ioengine=bdevkit --spdk_json_conf="$WORK/bdevs.json" \
    --name=p --filename=Malloc0 --rw=randwrite --verify=crc32c --bs=4k --size=8M >"$WORK/preload.log" 2>&1
rc=$?
set -e
if [ "$rc" -eq 0 ] && grep -q "ioengine=bdevkit" "$WORK/preload.log" && ! grep -q "verify: bad" "$WORK/preload.log"; then
    ok preload
else
    bad preload "exit status $rc"
fi

# Bad input: our message, a non-zero exit status, no hang.
expect_fail unknown-bdev 'no bdev named "Nope"' "${CONF[@]}" --name=x --filename=Nope --rw=read --size=1M
expect_fail bad-config "cannot start bdevkit with config $WORK/bad.json" \
    --bdevkit_conf="$WORK/bad.json" --name=x --filename=M --rw=read --size=1M
expect_fail missing-config "Could not read JSON config file" \
    --bdevkit_conf="$WORK/none.json" --name=x --filename=Null0 --rw=read --size=1M
expect_fail block-size "read size 1000 (bs/bsrange/bssplit) is not a multiple of the block size 512 of bdev Malloc1" \
    "${CONF[@]}" --name=x --filename=Malloc1 --rw=read --bs=1000 --size=1M
expect_fail block-size-bssplit "write size 2048" "${CONF[@]}" --name=x --filename=Malloc0 \
    --rw=randwrite --bssplit=4k/50:2k/50 --size=1M
expect_fail no-config "no bdev config: give bdevkit_conf=FILE" --name=x --filename=Null0 --rw=read --size=1M
expect_fail forked "must run as threads with the bdevkit engine: add thread=1" \
    "${CONF[@]}" --name=x --filename=Null0 --rw=read --size=1M --thread=0
expect_fail zoned-without-zbd "bdev Z0 is zoned (written only at its zones' write pointers): add zonemode=zbd" \
    "${CONF[@]}" --name=x --filename=Z0 --rw=randwrite --size=1M

# A failing job next to good ones: the others run, the run fails, and
# bdevkit is torn down once (bdevs closed, reactor stopped).
set +e
RUST_LOG=bdevkit_fio=info timeout 60 fio --thread=1 --ioengine=external:"$ENGINE" "${CONF[@]}" \
    --size=4M --bs=4k \
    --name=good --filename=Malloc0 --rw=randwrite \
    --name=broken --filename=Nope --rw=read \
    --name=good2 --filename=Null0 --rw=randread >"$WORK/teardown.log" 2>&1
rc=$?
set -e
if [ "$rc" -ne 0 ] && [ "$(grep -c 'bdevkit started for fio' "$WORK/teardown.log")" -eq 1 ] &&
    [ "$(grep -c 'bdevkit stopped' "$WORK/teardown.log")" -eq 1 ] &&
    [ "$(grep -c 'err= 0' "$WORK/teardown.log")" -eq 2 ]; then
    ok teardown-after-failure
else
    bad teardown-after-failure "exit status $rc; expected one start, one stop, two good jobs"
fi

# doc/fio.md's job file, as pasted (in a directory of its own, where
# target/release/libbdevkit_fio.so is the engine under test).
mkdir -p "$WORK/doc/target/release"
ln -s "$ENGINE" "$WORK/doc/target/release/libbdevkit_fio.so"
awk '/<!-- fio-example -->/ {on=1; next} on && /^```sh/ {inb=1; next} inb && /^```/ {exit} inb' \
    "$REPO/doc/fio.md" >"$WORK/doc/example.sh"
set +e
(cd "$WORK/doc" && timeout 60 bash -e example.sh) >"$WORK/doc-example.log" 2>&1
rc=$?
set -e
if [ "$rc" -eq 0 ] && [ "$(grep -c 'err= 0' "$WORK/doc-example.log")" -eq 2 ] &&
    ! grep -q "verify: bad" "$WORK/doc-example.log"; then
    ok doc-example
else
    bad doc-example "exit status $rc (the job file of doc/fio.md)"
fi

# Another fio version: refused at load, naming both versions.
cat > "$WORK/otherfio.c" <<'EOF'
#include <dlfcn.h>
#include <stdio.h>
const char fio_version_string[] = "fio-0.0-other";
int main(int argc, char **argv)
{
	(void)argc;
	if (!dlopen(argv[1], RTLD_NOW)) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
	return 0;
}
EOF
cc -rdynamic -o "$WORK/otherfio" "$WORK/otherfio.c" -ldl
"$WORK/otherfio" "$ENGINE" >"$WORK/version.log" 2>&1 || true
built=$(fio --version)
if grep -qF "built for $built (ioengine ops version" "$WORK/version.log" &&
    grep -qF "but this fio is fio-0.0-other" "$WORK/version.log"; then
    ok version-check
else
    echo "(log of the version check)" >"$WORK/version-check.log"
    cat "$WORK/version.log" >>"$WORK/version-check.log"
    bad version-check "no message naming $built and fio-0.0-other"
fi

# Nothing left behind in the tree (fio's verify state went to $WORK).
if [ "$(cd "$REPO" && git status --porcelain --untracked-files=all 2>/dev/null || true)" = "$tree_before" ]; then
    ok clean-tree
else
    echo "(new in the tree)" >"$WORK/clean-tree.log"
    diff <(echo "$tree_before") <(cd "$REPO" && git status --porcelain --untracked-files=all) >>"$WORK/clean-tree.log" || true
    bad clean-tree "the test left files in $REPO"
fi

echo "fio engine: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
