#!/usr/bin/env bash
# NVMe/TCP with security, ours against SPDK's (issue 26's benchmark; host,
# not CI, which cannot build SPDK):
#
# 1. throughput on loopback, the target on core 0 with a null bdev, the
#    initiator (bdevperf) on core 1: 128 KiB sequential reads (-w read)
#    and 4 KiB random reads, QD32, for
#      ours-plain  bdev_tgt + our bdevperf, plain listener
#      ours-tls    bdev_tgt + our bdevperf, TLS 1.3 PSK (secure_channel)
#      spdk-tls    nvmf_tgt + SPDK's bdevperf, TLS (sock_impl ssl)
#      spdk-plain  nvmf_tgt + SPDK's bdevperf, plain
#      mixed-tls   bdev_tgt + SPDK's bdevperf, TLS (our target alone)
#    alternating, RUNS runs of SECS seconds each; medians and ratios;
# 2. connect time: the wall time of bdev_nvme_attach_controller (one
#    admin and one I/O queue connected), timed by a JSON-RPC client on
#    the initiator app's socket (bdev_tgt or SPDK's spdk_tgt, core 1)
#    against a target on core 0 (bdev_tgt or SPDK's nvmf_tgt), ATTACHES
#    attaches each: no authentication, DH-HMAC-CHAP sha256 + null,
#    sha384 + ffdhe2048, sha512 + ffdhe8192 (unidirectional; the
#    initiator's bdev_nvme_set_options dhchap_digests / dhchap_dhgroups
#    pick them), and TLS.
#
# Both apps read the same JSON configs (keyring_file_add_key,
# nvmf_subsystem_add_host psk / dhchap_key, nvmf_subsystem_add_listener
# secure_channel; SPDK picks sock_impl ssl for a secure listener and for
# an attach with a psk). Prints the load average before each part: the
# project's machine is shared.
#   bench/nvmf_tls_vs_spdk.sh   (RUNS=3 SECS=3 ATTACHES=10 PARTS="tput conn";
#   target/release/{bdev_tgt,bdevperf}, built when missing)
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}; SECS=${SECS:-3}; ATTACHES=${ATTACHES:-10}
PARTS=${PARTS:-"tput conn"}
R=${SPDK_REF:-${XDG_CACHE_HOME:-$HOME/.cache}/bdevkit-ref-spdk}
TGT=${TGT:-target/release/bdev_tgt}
PERF=${PERF:-target/release/bdevperf}
[ -x "$R/build/bin/nvmf_tgt" ] && [ -x "$R/build/examples/bdevperf" ] \
    && [ -x "$R/build/bin/spdk_tgt" ] \
    || { echo "no SPDK build in $R (run ../shared/ref-spdk/build.sh)" >&2; exit 2; }
[ -x "$TGT" ] && [ -x "$PERF" ] || cargo build --release -q --bins || exit 2
SPDK_RPC="python3 $R/scripts/rpc.py"
W=$(mktemp -d /tmp/nvmf-tls-bench.XXXXXX)
NQN=nqn.2016-06.io.bdevkit:bench
NQN_TLS=nqn.2016-06.io.bdevkit:benchtls
HOST=nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6
HOST_DH=nqn.2014-08.org.nvmexpress:uuid:0d6f4ae2-7dec-11d0-a765-00a0c91e6bf6
PORT=${PORT:-4451}; PORT_TLS=$((PORT + 1))
MEM=(-s 1100 --disable-cpumask-locks)
free=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
[ "${free:-0}" -ge 1100 ] || MEM=(--no-huge "${MEM[@]}")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    rm -rf "$W"
}
trap cleanup EXIT

# shellcheck source=bench/lib.sh
. bench/lib.sh

# The keys: SPDK's test PSK and two example DH-HMAC-CHAP keys (as in
# doc/nvmf.md); files not readable by others, as the keyrings want.
echo -n 'NVMeTLSkey-1:01:MDAxMTIyMzM0NDU1NjY3Nzg4OTlhYWJiY2NkZGVlZmZwJEiQ:' > "$W/psk0"
echo -n 'DHHC-1:00:itFl7sDByOGeaZtm1BbVH6BCWyy7SG1Zq/sjL8tH2Os8mDv2:' > "$W/dh0"
chmod 0600 "$W/psk0" "$W/dh0"
KEYRING='{"subsystem":"keyring","config":[
 {"method":"keyring_file_add_key","params":{"name":"key0","path":"'$W/psk0'"}},
 {"method":"keyring_file_add_key","params":{"name":"dh0","path":"'$W/dh0'"}}]}'

listener() { # NQN PORT SECURE
    echo '{"method":"nvmf_subsystem_add_listener","params":{"nqn":"'$1'","listen_address":
 {"trtype":"tcp","adrfam":"ipv4","traddr":"127.0.0.1","trsvcid":"'$2'"},"secure_channel":'$3'}}'
}
subsystem() { # NQN SERIAL BDEV
    echo '{"method":"nvmf_create_subsystem","params":{"nqn":"'$1'","serial_number":"'$2'","allow_any_host":false}},
 {"method":"nvmf_subsystem_add_ns","params":{"nqn":"'$1'","namespace":{"bdev_name":"'$3'"}}}'
}
host() { # NQN HOST EXTRA-PARAMS
    echo '{"method":"nvmf_subsystem_add_host","params":{"nqn":"'$1'","host":"'$2'"'$3'}}'
}

# target_json tput plain|tls, or target_json conn: the target's config,
# ours and SPDK's alike. tput: one subsystem on a 1 GiB null bdev, HOST
# with the PSK on a secure listener or without on a plain one. conn:
# $NQN on a plain listener (HOST without a key, HOST_DH with dh0) and
# $NQN_TLS on a secure one (HOST with the PSK).
target_json() {
    local nvmf
    if [ "$1" = tput ]; then
        if [ "$2" = tls ]; then
            nvmf="$(subsystem $NQN BENCH0001 Null0), $(host $NQN $HOST ',"psk":"key0"'), $(listener $NQN $PORT true)"
        else
            nvmf="$(subsystem $NQN BENCH0001 Null0), $(host $NQN $HOST ''), $(listener $NQN $PORT false)"
        fi
    else
        nvmf="$(subsystem $NQN BENCH0001 Null0), $(host $NQN $HOST ''), $(host $NQN $HOST_DH ',"dhchap_key":"dh0"'),
 $(listener $NQN $PORT false), $(subsystem $NQN_TLS BENCH0002 Null1), $(host $NQN_TLS $HOST ',"psk":"key0"'),
 $(listener $NQN_TLS $PORT_TLS true)"
    fi
    cat > "$W/tgt.json" <<J
{"subsystems":[$KEYRING,
 {"subsystem":"bdev","config":[
  {"method":"bdev_null_create","params":{"name":"Null0","num_blocks":262144,"block_size":4096}},
  {"method":"bdev_null_create","params":{"name":"Null1","num_blocks":262144,"block_size":4096}}]},
 {"subsystem":"nvmf","config":[{"method":"nvmf_create_transport","params":{"trtype":"TCP"}}, $nvmf]}]}
J
}

# attach_params NAME plain|tls|dh: bdev_nvme_attach_controller's params.
attach_params() {
    local sub=$NQN port=$PORT hn=$HOST extra=
    case $2 in
        tls) sub=$NQN_TLS; port=$PORT_TLS; extra=',"psk":"key0"'
             [ "${3:-}" = tput ] && { sub=$NQN; port=$PORT; } ;;
        dh) hn=$HOST_DH; extra=',"dhchap_key":"dh0"' ;;
    esac
    echo '{"name":"'$1'","trtype":"tcp","adrfam":"ipv4","traddr":"127.0.0.1","trsvcid":"'$port'",
 "subnqn":"'$sub'","hostnqn":"'$hn'"'$extra'}'
}

# start APP CORE_MASK SOCK JSON: an app in the background, its RPC up and
# its config applied.
start() {
    local app=$1 sock=$3 log=$W/$(basename "$1").$2.log
    rm -f "$sock"
    case $app in
        ours) "$TGT" -m "$2" -r "$sock" --json "$4" > "$log" 2>&1 & ;;
        nvmf_tgt|spdk_tgt) "$R/build/bin/$app" -m "$2" "${MEM[@]}" -r "$sock" --json "$4" > "$log" 2>&1 & ;;
    esac
    PIDS+=($!)
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    $SPDK_RPC -s "$sock" framework_wait_init > /dev/null 2>&1 || { echo "$app did not start:"; cat "$log"; return 1; }
}
stop_all() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    PIDS=()
}

if [[ " $PARTS " == *" tput "* ]]; then
    echo "== throughput: target core 0 (null bdev), bdevperf core 1, QD32, $RUNS x ${SECS} s, alternating"
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    declare -A V M
    kinds="ours-plain ours-tls spdk-tls spdk-plain mixed-tls"
    for wl in "read 131072" "randread 4096"; do
        set -- $wl; w=$1; io=$2
        for i in $(seq "$RUNS"); do
            for kind in $kinds; do
                sec=${kind#*-}
                target_json tput "$sec"
                cat > "$W/init.json" <<J
{"subsystems":[$KEYRING,{"subsystem":"bdev","config":[{"method":"bdev_nvme_attach_controller","params":$(attach_params Nvme0 "$sec" tput)}]}]}
J
                case $kind in ours-*|mixed-*) start ours 0x1 "$W/tgt.sock" "$W/tgt.json" || exit 1 ;;
                              *) start nvmf_tgt 0x1 "$W/tgt.sock" "$W/tgt.json" || exit 1 ;; esac
                case $kind in
                    ours-*) out=$("$PERF" -m 0x2 --json "$W/init.json" -q 32 -o "$io" -w "$w" -t "$SECS" 2>&1) ;;
                    *) out=$("$R/build/examples/bdevperf" -m 0x2 "${MEM[@]}" --json "$W/init.json" \
                            -q 32 -o "$io" -w "$w" -t "$SECS" 2>&1) ;;
                esac
                stop_all
                tot=$(echo "$out" | tr '\r' '\n' | awk '/^ *Total/ {print $3, $4}')
                set -- $tot
                echo "$w ${io} run $i $kind: ${1:-none} IOPS ${2:-none} MiB/s"
                [ -n "${1:-}" ] || echo "$out" | tail -n 15
                V[$w$kind]="${V[$w$kind]:-} ${1:-0}"; M[$w$kind]="${M[$w$kind]:-} ${2:-0}"
            done
        done
    done
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    declare -A MED
    r() { echo "scale=2; ${MED[$1]} / ${MED[$2]}" | bc -l 2>/dev/null || echo n/a; }
    for w in read randread; do
        for kind in $kinds; do
            MED[$kind]=$(printf '%s\n' ${V[$w$kind]} | median)
            mib=$(printf '%s\n' ${M[$w$kind]} | median)
            printf '%-8s %-10s median %10.0f IOPS %8.1f MiB/s  (runs:%s)\n' "$w" "$kind" "${MED[$kind]}" "$mib" "${V[$w$kind]}"
        done
        echo "$w ratios: ours tls/plain $(r ours-tls ours-plain)  spdk tls/plain $(r spdk-tls spdk-plain)" \
             " ours-tls/spdk-tls $(r ours-tls spdk-tls)  ours-plain/spdk-plain $(r ours-plain spdk-plain)" \
             " mixed-tls/spdk-tls $(r mixed-tls spdk-tls)"
    done
fi

# attach_time SOCK N PARAMS_JSON: N attaches (names Nvme0..), each timed
# from the request to its answer, then detached; prints "median min max" ms.
attach_time() {
    python3 - "$@" <<'PY'
import json, socket, statistics, sys, time
path, n, params = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
s = socket.socket(socket.AF_UNIX)
s.connect(path)
dec, buf, seq = json.JSONDecoder(), "", 0
def call(method, p):
    global buf, seq
    seq += 1
    s.sendall(json.dumps({"jsonrpc": "2.0", "id": seq, "method": method, "params": p}).encode())
    while True:
        try:
            obj, end = dec.raw_decode(buf.lstrip())
            buf = buf.lstrip()[end:]
            return obj
        except ValueError:
            d = s.recv(65536)
            if not d:
                sys.exit("socket closed")
            buf += d.decode()
ms = []
for i in range(n):
    params["name"] = f"Nvme{i}"
    t = time.monotonic()
    r = call("bdev_nvme_attach_controller", params)
    t = time.monotonic() - t
    if "error" in r:
        sys.exit(f"attach failed: {r['error']}")
    ms.append(t * 1000)
    call("bdev_nvme_detach_controller", {"name": f"Nvme{i}"})
    time.sleep(0.2)
print(f"{statistics.median(ms):.1f} {min(ms):.1f} {max(ms):.1f}")
PY
}

if [[ " $PARTS " == *" conn "* ]]; then
    echo "== connect time: bdev_nvme_attach_controller wall time, target core 0, initiator app core 1, $ATTACHES attaches"
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    target_json conn
    for tk in ours nvmf_tgt; do
        for ik in ours spdk_tgt; do
            for mode in none sha256:null sha384:ffdhe2048 sha512:ffdhe8192 tls; do
                bdev=
                case $mode in *:*) bdev=',{"subsystem":"bdev","config":[{"method":"bdev_nvme_set_options",
 "params":{"dhchap_digests":["'${mode%:*}'"],"dhchap_dhgroups":["'${mode#*:}'"]}}]}' ;; esac
                echo '{"subsystems":['"$KEYRING$bdev"']}' > "$W/init.json"
                start "$tk" 0x1 "$W/tgt.sock" "$W/tgt.json" || exit 1
                start "$ik" 0x2 "$W/init.sock" "$W/init.json" || exit 1
                case $mode in none) sec=plain ;; tls) sec=tls ;; *) sec=dh ;; esac
                t=$(attach_time "$W/init.sock" "$ATTACHES" "$(attach_params Nvme0 $sec)" 2>&1)
                stop_all
                tn=$tk; [ "$tk" = nvmf_tgt ] && tn=spdk
                in=$ik; [ "$ik" = spdk_tgt ] && in=spdk
                set -- $t
                printf 'target %-4s initiator %-4s %-18s median %s ms (min %s, max %s)\n' "$tn" "$in" "$mode" "$1" "${2:-}" "${3:-}"
            done
        done
    done
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
