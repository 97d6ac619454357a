#!/bin/sh
# DH-HMAC-CHAP (issue 26) with implementations nobody here wrote: the Linux
# kernel's NVMe/TCP host (nvme-cli, --dhchap-secret and
# --dhchap-ctrl-secret) against bdev_tgt's target, for sha256 + ffdhe2048
# and sha512 + null (the target's nvmf_set_config allows only that pair):
# the right keys connect and a dd pattern reads back, a wrong host key and
# a wrong controller key are refused. Then our initiator against the
# kernel's nvmet (configfs dhchap_key, dhchap_ctrl_key, dhchap_hash,
# dhchap_dhgroup): attach with the keys and verify with bdevperf, a wrong
# key refused.
# vm: --deb nvme-cli --deb libnvme1 --modules crc32c_generic --timeout 200
. ./lib.sh

NQN=nqn.2016-06.io.bdevkit:auth1
SOCK=/tmp/tgt.sock
nvme_tcp_host 5a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d

step "keys from nvme-cli"
# A key transformed with SHA-256 (01), a plain one (00), one nobody uses.
KEY=$(nvme gen-dhchap-key -m 1 -n "$HOSTNQN") || die "gen-dhchap-key"
CKEY=$(nvme gen-dhchap-key -m 0 -n "$NQN") || die "gen-dhchap-key"
WRONG=$(nvme gen-dhchap-key -m 1 -n "$HOSTNQN") || die "gen-dhchap-key"
for k in KEY CKEY WRONG; do
    eval "v=\$$k"
    echo "$k: ${v%%:*}:$(echo "$v" | cut -d: -f2):..."
    printf '%s' "$v" > /tmp/$k
    chmod 0600 /tmp/$k
done

# start_target DIGEST DHGROUP: bdev_tgt exports Malloc0 to $HOSTNQN with
# key KEY and controller key CKEY, allowing DIGEST and DHGROUP only.
start_target() {
    cat > /tmp/tgt.json <<EOF
{"subsystems":[
 {"subsystem":"keyring","config":[
  {"method":"keyring_file_add_key","params":{"name":"key0","path":"/tmp/KEY"}},
  {"method":"keyring_file_add_key","params":{"name":"ckey0","path":"/tmp/CKEY"}}]},
 {"subsystem":"bdev","config":[
  {"method":"bdev_malloc_create","params":{"name":"Malloc0","num_blocks":65536,"block_size":512}}]},
 {"subsystem":"nvmf","config":[
  {"method":"nvmf_set_config","params":{"dhchap_digests":["$1"],"dhchap_dhgroups":["$2"]}},
  {"method":"nvmf_create_transport","params":{"trtype":"TCP"}},
  {"method":"nvmf_create_subsystem","params":{"nqn":"$NQN","serial_number":"BDEVKITAUTH1","allow_any_host":false}},
  {"method":"nvmf_subsystem_add_host","params":{"nqn":"$NQN","host":"$HOSTNQN","dhchap_key":"key0","dhchap_ctrlr_key":"ckey0"}},
  {"method":"nvmf_subsystem_add_ns","params":{"nqn":"$NQN","namespace":{"bdev_name":"Malloc0"}}},
  {"method":"nvmf_subsystem_add_listener","params":{"nqn":"$NQN","listen_address":{"trtype":"tcp","adrfam":"ipv4","traddr":"127.0.0.1","trsvcid":"4420"}}}]}]}
EOF
    bdev_tgt -m 0x1 --interrupt-mode -r $SOCK --json /tmp/tgt.json > /tmp/tgt.log 2>&1 &
    TGT=$!
    trap 'echo "--- target log"; grep -v DEBUG /tmp/tgt.log | tail -n 80' EXIT
    wait_rpc $SOCK $TGT
}

stop_target() {
    kill $TGT
    wait $TGT 2>/dev/null || true
    trap - EXIT
}

wait_gone() {
    _i=0
    while [ -b "$1" ] && [ $_i -lt 100 ]; do sleep 0.1; _i=$((_i + 1)); done
}

# connect_ok LABEL ARGS...: nvme connect with ARGS works, a pattern reads
# back through the namespace, then it disconnects.
connect_ok() {
    _label=$1
    shift
    if ! nvme connect $ADDR -n $NQN "$@" > /tmp/connect.out 2>&1; then
        cat /tmp/connect.out
        fail "$_label: nvme connect failed"
        return
    fi
    _i=0
    until DEV=$(ns_dev 1) && [ -b "$DEV" ]; do
        [ $_i -lt 150 ] || { fail "$_label: no namespace device"; nvme disconnect -n $NQN; return; }
        sleep 0.1; _i=$((_i + 1))
    done
    pass "$_label: connected ($DEV)"
    must dd if=/dev/urandom of=/tmp/pattern bs=64k count=16 2>/dev/null
    must dd if=/tmp/pattern of="$DEV" oflag=direct bs=64k 2>/dev/null
    must dd if="$DEV" of=/tmp/back iflag=direct bs=64k count=16 2>/dev/null
    same_bytes /tmp/pattern /tmp/back "$_label: read back"
    must nvme disconnect -n $NQN
    wait_gone "$DEV"
}

# connect_refused LABEL ARGS...: nvme connect with ARGS fails and leaves
# no controller behind.
connect_refused() {
    _label=$1
    shift
    if nvme connect $ADDR -n $NQN "$@" > /tmp/connect.out 2>&1; then
        fail "$_label: nvme connect succeeded"
        nvme disconnect -n $NQN > /dev/null 2>&1
    else
        pass "$_label: refused ($(tr '\n' ' ' < /tmp/connect.out))"
    fi
    if ns_dev 1 > /dev/null 2>&1; then
        fail "$_label: a namespace device is left"
    else
        pass "$_label: no namespace device left"
    fi
}

for pair in "sha256 ffdhe2048" "sha512 null"; do
    set -- $pair
    step "our target allows $1 + $2 only"
    start_target "$1" "$2"
    connect_ok "$1/$2 unidirectional" --dhchap-secret="$KEY"
    connect_ok "$1/$2 bidirectional" --dhchap-secret="$KEY" --dhchap-ctrl-secret="$CKEY"
    check "$1/$2: the target chose digest=$1 dhgroup=$2" \
        grep -q "queue authenticated.*digest=\"$1\" dhgroup=\"$2\"" /tmp/tgt.log
    n=$(grep -c "DH-HMAC-CHAP: queue authenticated" /tmp/tgt.log)
    echo "$1/$2: $n queues authenticated"
    check "$1/$2: admin and I/O queues authenticated" sh -c "[ $n -ge 4 ]"
    connect_refused "$1/$2 wrong host key" --dhchap-secret="$WRONG"
    check "$1/$2: the target logged the failure" grep -q "DH-HMAC-CHAP: authentication failed" /tmp/tgt.log
    connect_refused "$1/$2 wrong controller key" --dhchap-secret="$KEY" --dhchap-ctrl-secret="$WRONG"
    connect_refused "$1/$2 no key"
    if grep -q -F -e "$(echo "$KEY" | cut -d: -f3)" -e "$(echo "$CKEY" | cut -d: -f3)" /tmp/tgt.log; then
        fail "$1/$2: key material in the target's log"
    else
        pass "$1/$2: no key material in the target's log"
    fi
    stop_target
done

step "our initiator against the kernel's nvmet with DH-HMAC-CHAP"
must modprobe nvmet-tcp
IMG=/tmp/ns.img
must dd if=/dev/zero of=$IMG bs=1M count=32 2>/dev/null
nvmet_subsystem $NQN $IMG
echo 0 > $NVMET/subsystems/$NQN/attr_allow_any_host
must mkdir $NVMET/hosts/$HOSTNQN
printf '%s' "$KEY" > $NVMET/hosts/$HOSTNQN/dhchap_key
printf '%s' "$CKEY" > $NVMET/hosts/$HOSTNQN/dhchap_ctrl_key
echo 'hmac(sha256)' > $NVMET/hosts/$HOSTNQN/dhchap_hash
echo ffdhe2048 > $NVMET/hosts/$HOSTNQN/dhchap_dhgroup
must ln -s $NVMET/hosts/$HOSTNQN $NVMET/subsystems/$NQN/allowed_hosts/$HOSTNQN
nvmet_tcp_port $NQN

cat > /tmp/keys.json <<EOF
{"subsystem":"keyring","config":[
  {"method":"keyring_file_add_key","params":{"name":"key0","path":"/tmp/KEY"}},
  {"method":"keyring_file_add_key","params":{"name":"ckey0","path":"/tmp/CKEY"}},
  {"method":"keyring_file_add_key","params":{"name":"wrong","path":"/tmp/WRONG"}}]}
EOF
ATTACH='"name":"Nvme0","trtype":"tcp","adrfam":"ipv4","traddr":"127.0.0.1","trsvcid":"4420","subnqn":"'$NQN'","hostnqn":"'$HOSTNQN'"'
cat > /tmp/host.json <<EOF
{"subsystems":[$(cat /tmp/keys.json),
 {"subsystem":"bdev","config":[{"method":"bdev_nvme_attach_controller","params":{$ATTACH,"dhchap_key":"key0","dhchap_ctrlr_key":"ckey0"}}]}]}
EOF
check "bdevperf verify through nvmet, bidirectional" bdevperf --json /tmp/host.json -q 8 -o 4096 -w verify -t 2

cat > /tmp/hostd.json <<EOF
{"subsystems":[$(cat /tmp/keys.json)]}
EOF
bdev_tgt -m 0x1 --interrupt-mode -r $SOCK --json /tmp/hostd.json > /tmp/host.log 2>&1 &
HOST=$!
trap 'echo "--- host log"; grep -v DEBUG /tmp/host.log | tail -n 60' EXIT
wait_rpc $SOCK $HOST
out=$(bdev_rpc -s $SOCK -t 60 bdev_nvme_attach_controller --json "{$ATTACH,\"dhchap_key\":\"wrong\"}" 2>&1)
echo "$out"
check "a wrong key is refused by nvmet" sh -c "echo '$out' | grep -q 'failed: error -'"
out=$(bdev_rpc -s $SOCK -t 60 bdev_nvme_attach_controller --json "{$ATTACH,\"dhchap_key\":\"key0\",\"dhchap_ctrlr_key\":\"wrong\"}" 2>&1)
echo "$out"
check "a wrong controller key: our host refuses nvmet" sh -c "echo '$out' | grep -q 'failed: error -'"
out=$(bdev_rpc -s $SOCK -t 60 bdev_nvme_attach_controller --json "{$ATTACH,\"dhchap_key\":\"key0\"}" 2>&1)
echo "$out"
check "the right key attaches" sh -c "echo '$out' | grep -q Nvme0n1"
kill $HOST; wait $HOST 2>/dev/null || true
trap - EXIT

finish
