#!/usr/bin/env python3
"""Bounded stress run against a live bdevperf -z (issue 17's stress lane)
and, at the same time, the NVMe/TCP part (issue 31, scripts/stress_nvmf.py).

While bdevperf verifies a passthru over a raid1 (one member behind an error
bdev) on two cores with a deliberately small bdev_io pool, this script:

* runs RPC clients that create, stack, list and delete bdevs,
* injects write and read failures into the raid1 member, removes it, adds
  another member back (a rebuild under load), and swaps again,
* holds 300 idle and half-sent RPC connections open,
* checks every half second that a fresh client is answered (of bdevperf
  and of the NVMe/TCP target).

It passes when the daemon answered throughout, verify saw no miscompare
and failed no I/O, and at the end every bdev the clients made is gone and
the daemon's fd count and RSS are back near where they started; and when
the NVMe/TCP part's checks pass (see stress_nvmf.py).

    scripts/stress.py BINDIR [SECONDS]   (BINDIR: bdevperf and bdev_tgt)
"""
import json
import os
import random
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time

import stress_nvmf

MIB = 1 << 20
# A fresh RPC client not answered within this is a failure.
LIVENESS_LIMIT_S = 15.0


class Client:
    """A JSON-RPC 2.0 client on a Unix socket (one connection)."""

    def __init__(self, path, timeout=10.0):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(path)
        self.buf = b""
        self.next_id = 1

    def call(self, method, params=None):
        req = {"jsonrpc": "2.0", "method": method, "id": self.next_id}
        self.next_id += 1
        if params is not None:
            req["params"] = params
        self.s.sendall(json.dumps(req).encode())
        dec = json.JSONDecoder()
        while True:
            try:
                text = self.buf.decode()
                obj, end = dec.raw_decode(text.lstrip())
                self.buf = text.lstrip()[end:].encode()
                return obj
            except (ValueError, UnicodeDecodeError):
                pass
            chunk = self.s.recv(1 << 16)
            if not chunk:
                raise ConnectionError("connection closed")
            self.buf += chunk

    def close(self):
        self.s.close()


def rpc(path, method, params=None, timeout=10.0):
    c = Client(path, timeout)
    try:
        return c.call(method, params)
    finally:
        c.close()


def ok(reply):
    if "error" in reply:
        raise RuntimeError(f"rpc error: {reply['error']}")
    return reply["result"]


def proc_stats(pid):
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return fds, rss


CONFIG = [
    # Small on purpose: submissions must wait for free bdev_ios (io_wait).
    {"method": "bdev_set_options",
     "params": {"bdev_io_pool_size": 512, "bdev_io_cache_size": 32}},
    {"method": "bdev_malloc_create",
     "params": {"name": "M0", "num_blocks": 8192, "block_size": 4096}},
    {"method": "bdev_malloc_create",
     "params": {"name": "M1", "num_blocks": 8192, "block_size": 4096}},
    {"method": "bdev_malloc_create",
     "params": {"name": "M2", "num_blocks": 8192, "block_size": 4096}},
    {"method": "bdev_error_create", "params": {"base_name": "M1"}},
    {"method": "bdev_raid_create",
     "params": {"name": "R1", "raid_level": "raid1", "strip_size_kb": 0,
                "base_bdevs": ["M0", "EE_M1"]}},
    {"method": "bdev_passthru_create",
     "params": {"name": "PT0", "base_bdev_name": "R1"}},
]


class Run:
    def __init__(self, sock, seconds):
        self.sock = sock
        self.seconds = seconds
        self.stop = threading.Event()
        self.problems = []
        self.lock = threading.Lock()
        self.answered = {}
        self.slowest = {}
        self.made = 0
        self.lost = 0
        self.swaps = 0
        self.rebuild_waits = 0

    def problem(self, what):
        with self.lock:
            self.problems.append(what)
        print(f"stress: PROBLEM: {what}", flush=True)

    def liveness(self, sock, name):
        """A fresh client every half second must be answered. The bound
        is a "something is broken" one (a debug build on two shared
        cores under load answers in well under a second, but not always
        in 3 s); the longest wait is reported."""
        while not self.stop.wait(0.5):
            t0 = time.monotonic()
            try:
                v = rpc(sock, "spdk_get_version", timeout=LIVENESS_LIMIT_S)
                assert "result" in v, v
                waited = time.monotonic() - t0
                with self.lock:
                    self.answered[name] = self.answered.get(name, 0) + 1
                    self.slowest[name] = max(self.slowest.get(name, 0.0), waited)
            except Exception as e:  # noqa: BLE001 - any failure is a finding
                self.problem(f"a fresh client of {name} was not answered: {e!r}")

    def storm(self, k):
        """Create, stack, list and delete bdevs. A client holding an idle
        connection may lose it to the connection abuse (the server closes
        the longest-idle one to make room): it reconnects and goes on."""
        rnd = random.Random(k)
        c = None
        n = 0
        while not self.stop.is_set():
            name = f"S{k}_{n}"
            n += 1
            try:
                if c is None:
                    c = Client(self.sock)
                ok(c.call("bdev_malloc_create",
                          {"name": name, "num_blocks": 256, "block_size": 512}))
                ok(c.call("bdev_passthru_create",
                          {"name": f"P{name}", "base_bdev_name": name}))
                if rnd.random() < 0.5:
                    # Stacks on the passthru: error bdev over it.
                    ok(c.call("bdev_error_create", {"base_name": f"P{name}"}))
                ok(c.call("bdev_get_bdevs"))
                ok(c.call("bdev_get_iostat", {"name": "PT0"}))
                # Delete the bottom: the stack above goes with it.
                ok(c.call("bdev_malloc_delete", {"name": name}))
                with self.lock:
                    self.made += 1
                if rnd.random() < 0.2:
                    c.close()
                    c = None
            except (ConnectionError, OSError):
                with self.lock:
                    self.lost += 1
                c = None
                self.cleanup(name)
            except Exception as e:  # noqa: BLE001
                self.problem(f"storm client {k}: {e!r}")
                c = None
                self.cleanup(name)
                time.sleep(0.2)
        if c:
            c.close()

    def cleanup(self, name):
        """Deletes what a storm step may have left (bottom first: the
        stacks above go with it; their configurations stay otherwise)."""
        for method, victim in [("bdev_malloc_delete", name),
                               ("bdev_error_delete", f"EE_P{name}"),
                               ("bdev_passthru_delete", f"P{name}")]:
            try:
                rpc(self.sock, method, {"name": victim})
            except (ConnectionError, OSError):
                pass

    def churn(self):
        """Fail, remove and re-add raid1 members under the verify load."""
        members = ["EE_M1", "M2"]
        steps = 0
        while not self.stop.wait(3.0):
            failing = members[steps % 2]
            spare = members[(steps + 1) % 2]
            try:
                if failing.startswith("EE_"):
                    # A failed write on the member degrades the raid1.
                    ok(rpc(self.sock, "bdev_error_inject_error",
                           {"name": failing, "io_type": "write",
                            "error_type": "failure", "num": 1}))
                    time.sleep(0.5)
                    rpc(self.sock, "bdev_error_inject_error",
                        {"name": failing, "io_type": "clear",
                         "error_type": "failure"})
                rpc(self.sock, "bdev_raid_remove_base_bdev", {"name": failing})
                self.wait_no_rebuild()
                ok(rpc(self.sock, "bdev_raid_add_base_bdev",
                       {"raid_bdev": "R1", "base_bdev": spare}, timeout=30.0))
                steps += 1
                with self.lock:
                    self.swaps += 1
            except Exception as e:  # noqa: BLE001
                self.problem(f"member churn: {e!r}")

    def wait_no_rebuild(self):
        """Waits until R1 runs no rebuild. Removing the member a rebuild
        writes to answers once the member is closed, while the rebuild
        stops at its next window; an add before that fails with EBUSY
        ("raid R1 is rebuilding"). SPDK completes that removal only
        after the process finished. Seen when a rebuild outlasts the 3 s
        between swaps (a loaded machine)."""
        end = time.monotonic() + 30
        waited = False
        while time.monotonic() < end:
            raid = ok(rpc(self.sock, "bdev_raid_get_bdevs", {"category": "all"}))
            if not any("process" in r for r in raid if r.get("name") == "R1"):
                if waited:
                    with self.lock:
                        self.rebuild_waits += 1
                return
            waited = True
            time.sleep(0.05)
        self.problem("member churn: R1 still rebuilding 30 s after its target left")

    def idle(self, held):
        for i in range(300):
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.sock)
                if i % 2:
                    s.sendall(b'{"jsonrpc": "2.0", "method": "bdev_get_bd')
                held.append(s)
            except OSError as e:
                self.problem(f"idle connection {i}: {e!r}")


def reads(sock, bdev):
    return ok(rpc(sock, "bdev_get_iostat", {"name": bdev}))["bdevs"][0]["num_read_ops"]


def wait_io(sock, bdev, before, run):
    """Waits until `bdev` completed reads since `before` (its verify job
    runs)."""
    end = time.monotonic() + 60
    while True:
        if reads(sock, bdev) > before:
            return
        if time.monotonic() > end:
            run.problem(f"no I/O on {bdev} 60 s after perform_tests")
            return
        time.sleep(0.05)


def raise_fd_limit():
    """The idle flood needs more than 1024 fds here and in the target."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 8192 if hard == resource.RLIM_INFINITY else min(hard, 8192)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < 2 * stress_nvmf.IDLE + 512:
        raise RuntimeError(f"RLIMIT_NOFILE hard limit {hard} is too low "
                           f"(the lane needs {2 * stress_nvmf.IDLE + 512})")


def main():
    bins = sys.argv[1]
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    raise_fd_limit()
    tmp = tempfile.mkdtemp(prefix="bdevkit-stress-")
    sock = os.path.join(tmp, "rpc.sock")
    cfg = os.path.join(tmp, "stress.json")
    with open(cfg, "w") as f:
        json.dump({"subsystems": [{"subsystem": "bdev", "config": CONFIG}]}, f)
    log = open(os.path.join(tmp, "bdevperf.log"), "w+")
    p = subprocess.Popen(
        [os.path.join(bins, "bdevperf"), "-z", "-r", sock, "-c", cfg, "-m", "0x3", "-C",
         "-T", "PT0", "-q", "32", "-o", "4096", "-w", "verify", "--interrupt-mode"],
        stdout=log, stderr=subprocess.STDOUT)
    t_start = time.monotonic()
    run = Run(sock, seconds)
    nv = stress_nvmf.NvmfStress(tmp, bins, rpc, run.problem)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(sock):
            if p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("bdevperf did not start")
            time.sleep(0.05)
        while "error" in rpc(sock, "bdev_get_bdevs", {"name": "PT0"}):
            time.sleep(0.05)
        nv.start()
        start_bdevs = sorted(b["name"] for b in ok(rpc(sock, "bdev_get_bdevs")))
        time.sleep(1)
        fds0, rss0 = proc_stats(p.pid)
        nv.baseline()
        result = {}

        def perform():
            try:
                r = rpc(sock, "perform_tests",
                        {"time_in_sec": seconds, "workload_type": "verify",
                         "queue_depth": 32, "io_size": "4096"},
                        timeout=seconds + 120)
                result["reply"] = r
            except Exception as e:  # noqa: BLE001
                result["error"] = repr(e)

        held = []
        performers = [threading.Thread(target=perform),
                      threading.Thread(target=nv.perform, args=(seconds, result))]
        threads = [threading.Thread(target=run.liveness, args=(sock, "bdevperf"))]
        threads += [threading.Thread(target=run.liveness, args=(nv.tsock, "bdev_tgt"))]
        threads += [threading.Thread(target=run.storm, args=(k,)) for k in range(3)]
        threads += [threading.Thread(target=run.churn)]
        abuse = threading.Thread(target=nv.abuse)
        before = (reads(sock, "PT0"), reads(nv.hsock, "Nvme0n1"))
        for t in performers:
            t.start()
        # The abuse starts once both verifies run: a perform_tests request
        # not yet read when the idle RPC connections arrive would look
        # idle, and be closed to make room.
        wait_io(sock, "PT0", before[0], run)
        wait_io(nv.hsock, "Nvme0n1", before[1], run)
        t_running = time.monotonic()
        for t in threads + [abuse]:
            t.start()
        run.idle(held)
        for t in performers:
            t.join(timeout=seconds + 150)
        t_verified = time.monotonic()
        # The slowloris connections may outlive verify (the target's
        # bound is 30 s from their start): liveness runs until they go.
        abuse.join(timeout=stress_nvmf.CUT_LIMIT_S + 60)
        run.stop.set()
        for t in threads:
            t.join(timeout=60)
        for s in held:
            s.close()
        # Let a rebuild in progress finish, and the server see the closes.
        for _ in range(100):
            raid = ok(rpc(sock, "bdev_raid_get_bdevs", {"category": "all"}))
            if all(r.get("state") == "online" and
                   r.get("num_base_bdevs_operational") == r.get("num_base_bdevs")
                   and "process" not in r for r in raid):
                break
            time.sleep(0.1)
        time.sleep(1)

        reply = result.get("reply")
        if reply is None:
            run.problem(f"perform_tests did not answer: {result.get('error')}")
        elif "error" in reply:
            run.problem(f"perform_tests failed: {reply['error']}")
        else:
            for r in reply["result"]["results"]:
                if r.get("io_failed", 0) or r.get("io_timeout", 0):
                    run.problem(f"job {r.get('job')}: {r.get('io_failed')} failed I/Os")
        nv.check_result(result)
        nvmf_line = nv.finish()
        log.seek(0)
        text = log.read()
        if "miscompare" in text:
            run.problem("verify reported a miscompare")
        end_bdevs = sorted(b["name"] for b in ok(rpc(sock, "bdev_get_bdevs")))
        leftovers = sorted(set(end_bdevs) - set(start_bdevs))
        if leftovers:
            run.problem(f"bdevs left behind: {leftovers}")
        fds1, rss1 = proc_stats(p.pid)
        if fds1 > fds0 + 4:
            run.problem(f"fd count {fds0} -> {fds1}")
        if rss1 > rss0 + 96 * MIB:
            run.problem(f"RSS {rss0 // MIB} -> {rss1 // MIB} MiB")
        rpc(sock, "spdk_kill_instance", {"sig_name": "SIGTERM"})
        try:
            code = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            run.problem("bdevperf did not exit")
            code = None
        if code not in (0, None):
            run.problem(f"bdevperf exited with {code}")
        print(f"stress: {seconds} s verify on PT0 (raid1 under churn), "
              f"{run.made} bdev stacks made and deleted, "
              f"{run.swaps} raid1 member swaps ({run.rebuild_waits} waited for a "
              f"rebuild to stop), "
              f"{run.lost} idle client connections closed to make room, "
              f"liveness answers {run.answered} (slowest "
              f"{ {k: round(v, 1) for k, v in run.slowest.items()} } s), fds {fds0}->{fds1}, "
              f"RSS {rss0 // MIB}->{rss1 // MIB} MiB", flush=True)
        print(nvmf_line, flush=True)
        t_end = time.monotonic()
        print(f"stress: {t_end - t_start:.0f} s: start {t_running - t_start:.0f} s, "
              f"verify {t_verified - t_running:.0f} s, checks {t_end - t_verified:.0f} s",
              flush=True)
        if run.problems:
            print("stress: FAIL ({} problems); logs in {}".format(len(run.problems), tmp))
            print(text[-4000:])
            return 1
        print("stress: PASS")
        return 0
    finally:
        if p.poll() is None:
            p.kill()
        nv.kill()


if __name__ == "__main__":
    sys.exit(main())
