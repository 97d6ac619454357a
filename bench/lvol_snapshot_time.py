#!/usr/bin/env python3
"""Time to snapshot a volume under load (issue 25), ours against SPDK's.

Each bdevperf (ours, then SPDK's: alternating, RUNS rounds) starts with -z
on a 1 GiB malloc bdev with an lvstore (4 MiB clusters) and a thick 128 MiB
lvol (room for every snapshot's copies), runs randwrite on the lvol at QD128
on one core, and meanwhile takes SNAPS snapshots of it, one after another,
each timed from the RPC's request to its answer: the freeze, the drain of
the writes in flight, the metadata writes and the lineage switch. Prints the
median per implementation, the ratio, and the writes each failed meanwhile
(bdevperf runs with -f, so that a failure is counted rather than ending the
job: a store too small for the copies the snapshots cause fails writes with
ENOSPC in both). Needs the reference SPDK build ($SPDK_REF, default
~/.cache/bdevkit-ref-spdk) and target/release/bdevperf.

    bench/lvol_snapshot_time.py          (RUNS=3 SNAPS=5)
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

RUNS = int(os.environ.get("RUNS", "3"))
SNAPS = int(os.environ.get("SNAPS", "5"))
REF = os.environ.get("SPDK_REF", os.path.expanduser("~/.cache/bdevkit-ref-spdk"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OURS = os.path.join(ROOT, "target/release/bdevperf")
SPDK = os.path.join(REF, "build/examples/bdevperf")

CONFIG = {"subsystems": [{"subsystem": "bdev", "config": [
    {"method": "bdev_malloc_create",
     "params": {"name": "Malloc0", "num_blocks": 262144, "block_size": 4096}},
    {"method": "bdev_lvol_create_lvstore",
     "params": {"bdev_name": "Malloc0", "lvs_name": "lvs", "cluster_sz": 4194304}},
    {"method": "bdev_lvol_create",
     "params": {"lvs_name": "lvs", "lvol_name": "lv", "size_in_mib": 128}},
]}]}


def call(sock, method, params=None, timeout=60):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(sock)
    req = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        req["params"] = params
    s.sendall(json.dumps(req).encode())
    buf = b""
    while True:
        d = s.recv(65536)
        if not d:
            raise RuntimeError(f"{method}: connection closed")
        buf += d
        try:
            r = json.loads(buf)
        except ValueError:
            continue
        s.close()
        if "error" in r:
            raise RuntimeError(f"{method}: {r['error']}")
        return r["result"]


def one_run(which, work):
    sock = os.path.join(work, f"{which}.sock")
    cfg = os.path.join(work, "lvol.json")
    with open(cfg, "w") as f:
        json.dump(CONFIG, f)
    common = ["-z", "-r", sock, "-m", "0x1", "-T", "lvs/lv", "-q", os.environ.get("QD", "128"), "-o", "4096",
              "-w", "randwrite", "-t", "6", "-f"]
    if which == "ours":
        cmd = [OURS, "-c", cfg] + common
    else:
        free = 0
        with open("/proc/meminfo") as m:
            for line in m:
                if line.startswith("HugePages_Free"):
                    free = int(line.split()[1])
        mem = ["-s", "2048"] if free >= 1100 else ["--no-huge", "-s", "2048"]
        cmd = [SPDK, "--json", cfg] + mem + common
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(400):
            if os.path.exists(sock):
                try:
                    call(sock, "bdev_get_bdevs", {"name": "lvs/lv"}, timeout=5)
                    break
                except (OSError, RuntimeError):
                    pass
            time.sleep(0.05)
        result = {}
        runner = threading.Thread(
            target=lambda: result.update(r=call(sock, "perform_tests", None, 120)))
        runner.start()
        time.sleep(1.5)
        times = []
        for n in range(SNAPS):
            t0 = time.monotonic()
            call(sock, "bdev_lvol_snapshot", {"lvol_name": "lvs/lv", "snapshot_name": f"s{n}"})
            times.append((time.monotonic() - t0) * 1e3)
            time.sleep(0.2)
        runner.join()
        failed = sum(r.get("io_failed", 0) for r in result.get("r", {}).get("results", []))
        return times, failed
    finally:
        p.kill()
        p.wait()


def main():
    for exe in (OURS, SPDK):
        if not os.access(exe, os.X_OK):
            sys.exit(f"missing {exe}")
    all_t = {"ours": [], "spdk": []}
    failed = {"ours": 0, "spdk": 0}
    with tempfile.TemporaryDirectory() as work:
        for _ in range(RUNS):
            for which in ("ours", "spdk"):
                t, f = one_run(which, work)
                all_t[which] += t
                failed[which] += f
    mo, ms = statistics.median(all_t["ours"]), statistics.median(all_t["spdk"])
    for k, v in all_t.items():
        print(f"{k:5} snapshot under load: median {statistics.median(v):8.2f} ms, "
              f"{failed[k]} writes failed  ({' '.join(f'{x:.2f}' for x in v)})")
    print(f"ratio spdk/ours (time, >1 = ours faster): {ms / mo:.2f}x")


if __name__ == "__main__":
    main()
