"""The NVMe/TCP part of the stress lane (issue 31), run by scripts/stress.py
beside the raid part.

A bdev_tgt exports a malloc namespace over NVMe/TCP. Our initiator
(bdevperf -z, the nvme module, header and data digests on) runs -w verify
on it through a TCP proxy in this script, which flips one bit in the data
of every Nth data PDU, both directions, so that data digests fail (a bit
is flipped only in a PDU that carries a data digest, and never twice in
the same direction for the same LBA, so an I/O needs at most one retry).
Meanwhile, on the target's own listener:

* slowloris: connections that send an ICReq one byte at a time, stop
  half-way through one, drip a Connect capsule after the ICReq, or drip a
  capsule after a Connect with a keep alive timeout; the target must cut
  every one (no Connect within 30 s, or the keep alive timeout) and go on
  serving the real host;
* three floods of 1000 idle connections, some of them after an
  ICReq/ICResp exchange: the target accepts them all (its fd count shows
  them), answers RPC and the host's I/O goes on; they are closed again and
  the target's fds come back, its RSS does not grow from flood to flood.

Header digests of a few data PDUs are corrupted too: the receiver ends
that connection, and the host resets the controller and retries.

Every check counts events (PDUs corrupted, digest errors logged on each
side, connections cut, fds back) with generous wall-clock limits only as
"something is broken" bounds. See doc/testing.md, "The stress lane".
"""
import json
import os
import random
import selectors
import socket
import struct
import subprocess
import threading
import time

NQN = "nqn.2016-06.io.bdevkit:stress"
HOSTNQN = "nqn.2016-06.io.bdevkit:stress-host"
MIB = 1 << 20

# NVMe/TCP PDU types and common-header flags (TP 8000).
IC_REQ, IC_RESP, CAPSULE_CMD, CAPSULE_RESP = 0x00, 0x01, 0x04, 0x05
H2C_DATA, C2H_DATA = 0x06, 0x07
HDGSTF, DDGSTF = 0x01, 0x02
FABRICS, FCTYPE_CONNECT = 0x7F, 0x01
OP_WRITE, OP_READ, OP_KEEP_ALIVE = 0x01, 0x02, 0x18

# The real host's corruption schedule: one data PDU in EVERY per
# direction, bits chosen by a Random seeded with SEED; and the header
# digest of the data PDUs numbered HEADER_AT (per direction), which ends
# the connection: the host resets the controller and retries.
SEED = 31
EVERY = 41
HEADER_AT = {"h2c": (2000, 6000), "c2h": (4000, 8000)}
# Slowloris connections per kind, and the drip period.
SLOW_PER_KIND = 16
DRIP_S = 0.5
# Idle connections, of which IDLE_IC exchange ICReq/ICResp first.
IDLE = 1000
IDLE_IC = 200
FLOOD_ROUNDS = 3
# "Something is broken" bounds (the target cuts at 30 s / 10 s).
CUT_LIMIT_S = 120
WAIT_LIMIT_S = 60


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def icreq(dgst=0):
    """ICReq: PFV 0, HPDA 0, digests `dgst` (bit 0 header, bit 1 data)."""
    return struct.pack("<BBBBIHBBI", IC_REQ, 0, 128, 0, 128, 0, 0, dgst, 0) + bytes(112)


def sqe(opcode, cid, nsid=0, cdw10=0, cdw11=0, cdw12=0, data_len=0):
    """A 64-byte SQE with an in-capsule (offset) data block SGL."""
    b = bytearray(64)
    b[0] = opcode
    b[1] = 0x40  # PSDT: SGL
    struct.pack_into("<HI", b, 2, cid, nsid)
    struct.pack_into("<QI", b, 24, 0, data_len)
    b[39] = 0x01  # data block, offset subtype
    struct.pack_into("<III", b, 40, cdw10, cdw11, cdw12)
    return bytes(b)


def capsule(cmd, data=b""):
    """A CapsuleCmd PDU without digests."""
    plen = 72 + len(data)
    return struct.pack("<BBBBI", CAPSULE_CMD, 0, 72, 72 if data else 0, plen) + cmd + data


def connect_capsule(cid, kato_ms):
    """Fabrics Connect of an admin queue (32 entries, dynamic cntlid)."""
    data = bytearray(1024)
    data[0:16] = b"\x5a" * 16
    struct.pack_into("<H", data, 16, 0xFFFF)
    data[256:256 + len(NQN)] = NQN.encode()
    data[512:512 + len(HOSTNQN)] = HOSTNQN.encode()
    cmd = sqe(FABRICS, cid, nsid=FCTYPE_CONNECT, cdw10=0, cdw11=31, cdw12=kato_ms,
              data_len=1024)
    return capsule(cmd, bytes(data))


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise ConnectionError(f"closed after {len(b)} of {n} bytes")
        b += c
    return b


def handshake(s):
    """ICReq without digests; the ICResp must come back."""
    s.sendall(icreq())
    r = recv_exact(s, 128)
    if r[0] != IC_RESP:
        raise RuntimeError(f"PDU type {r[0]} instead of ICResp")


def admin_connect(s, kato_ms):
    s.sendall(connect_capsule(1, kato_ms))
    r = recv_exact(s, 24)
    status = struct.unpack_from("<H", r, 22)[0] >> 1
    if r[0] != CAPSULE_RESP or status != 0:
        raise RuntimeError(f"Connect answered type {r[0]} status {status:#x}")


class Slowloris:
    """Connections that never finish what they started. Each is counted
    as cut when the target closes it (EOF or reset on receive, a reset or
    broken pipe on the next drip)."""

    KINDS = {
        # kind: what the target's rule is
        "icreq_drip": "no Connect within 30 s",
        "icreq_half": "no Connect within 30 s",
        "connect_drip": "no Connect within 30 s",
        "kato_drip": "keep alive timeout (10 s)",
    }

    def __init__(self, port, problem):
        self.port = port
        self.problem = problem
        self.sel = selectors.DefaultSelector()
        self.conns = []
        self.cut = {k: [] for k in self.KINDS}

    def open(self):
        for kind in self.KINDS:
            for _ in range(SLOW_PER_KIND):
                s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                drip = b""
                if kind == "icreq_drip":
                    drip = icreq()
                elif kind == "icreq_half":
                    s.sendall(icreq()[:64])
                elif kind == "connect_drip":
                    handshake(s)
                    drip = connect_capsule(1, 0)
                else:
                    handshake(s)
                    admin_connect(s, 1000)  # raised to min_kato, 10 s
                    drip = capsule(sqe(OP_KEEP_ALIVE, 2))
                s.setblocking(False)
                c = {"kind": kind, "s": s, "drip": drip, "at": 0,
                     "t0": time.monotonic(), "cut": None}
                self.conns.append(c)
                self.sel.register(s, selectors.EVENT_READ, c)

    def _cut(self, c):
        if c["cut"] is None:
            c["cut"] = time.monotonic() - c["t0"]
            self.cut[c["kind"]].append(c["cut"])
            self.sel.unregister(c["s"])
            c["s"].close()

    def run(self):
        """Drips until every connection is cut (or the limit passes)."""
        end = time.monotonic() + CUT_LIMIT_S
        next_drip = time.monotonic()
        while any(c["cut"] is None for c in self.conns):
            if time.monotonic() > end:
                left = [c["kind"] for c in self.conns if c["cut"] is None]
                self.problem(f"slowloris: {len(left)} connections not cut after "
                             f"{CUT_LIMIT_S} s: {sorted(set(left))}")
                break
            for key, _ in self.sel.select(timeout=0.1):
                c = key.data
                try:
                    if not c["s"].recv(4096):
                        self._cut(c)
                except BlockingIOError:
                    pass
                except OSError:
                    self._cut(c)
            if time.monotonic() >= next_drip:
                next_drip += DRIP_S
                for c in self.conns:
                    if c["cut"] is None and c["at"] < len(c["drip"]):
                        try:
                            c["s"].send(c["drip"][c["at"]:c["at"] + 1])
                            c["at"] += 1
                        except BlockingIOError:
                            pass
                        except OSError:
                            self._cut(c)
        for c in self.conns:
            if c["cut"] is None:
                self.sel.unregister(c["s"])
                c["s"].close()
        # None may have finished what it dripped (the drips are longer
        # than the target's bounds): else the target did not cut it, the
        # client did.
        done = [c["kind"] for c in self.conns if c["drip"] and c["at"] >= len(c["drip"])]
        if done:
            self.problem(f"slowloris: drips completed before a cut: {done}")

    def summary(self):
        parts = []
        for k, ts in self.cut.items():
            if ts:
                parts.append(f"{k} {len(ts)}/{SLOW_PER_KIND} cut at "
                             f"{min(ts):.0f}-{max(ts):.0f} s")
            else:
                parts.append(f"{k} 0/{SLOW_PER_KIND} cut")
        return ", ".join(parts)

    def total_cut(self):
        return sum(len(ts) for ts in self.cut.values())


class Conn:
    """What the proxy knows of one connection: whether it is an I/O queue
    (its Connect had a QID), and each command id's opcode and SLBA."""

    def __init__(self):
        self.io = False
        self.cmds = {}
        # A header digest was corrupted: the connection ends, and what
        # follows it in either direction may never be read.
        self.doomed = False
        self.injected = {"h2c": 0, "c2h": 0}


class Proxy:
    """A TCP proxy between the host and the target that parses the PDU
    streams and flips one bit in the data of every EVERY-th data PDU of
    an I/O queue in each direction (in-capsule write data and H2CData
    towards the target, C2HData towards the host)."""

    def __init__(self, target_port, problem):
        self.target_port = target_port
        self.problem = problem
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.rnd = {d: random.Random(f"{SEED}-{d}") for d in ("h2c", "c2h")}
        self.seen = {"h2c": 0, "c2h": 0}
        self.injected = {"h2c": 0, "c2h": 0}
        self.header_injected = {"h2c": 0, "c2h": 0}
        self.header_pending = {"h2c": False, "c2h": False}
        self.no_digest = 0
        self.hit = set()
        self.pending = {"h2c": False, "c2h": False}
        self.connections = 0
        self.slowest_connect = 0.0
        self.conns = []
        self.closing = False

    def start(self):
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            t0 = time.monotonic()
            try:
                up = socket.create_connection(("127.0.0.1", self.target_port),
                                              timeout=WAIT_LIMIT_S)
                self.slowest_connect = max(self.slowest_connect, time.monotonic() - t0)
            except OSError as e:
                if not self.closing:
                    self.problem(f"proxy: cannot reach the target: {e!r}")
                c.close()
                continue
            up.settimeout(None)
            for s in (c, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.connections += 1
            st = Conn()
            self.conns.append(st)
            threading.Thread(target=self.pump, args=(c, up, "h2c", st), daemon=True).start()
            threading.Thread(target=self.pump, args=(up, c, "c2h", st), daemon=True).start()

    def pump(self, src, dst, d, st):
        buf = bytearray()
        try:
            while True:
                chunk = src.recv(1 << 18)
                if not chunk:
                    break
                buf += chunk
                pos = 0
                while len(buf) - pos >= 8:
                    plen = int.from_bytes(buf[pos + 4:pos + 8], "little")
                    if plen < 8 or len(buf) - pos < plen:
                        break
                    self.inspect(buf, pos, plen, d, st)
                    pos += plen
                if pos:
                    out = bytes(buf[:pos])
                    del buf[:pos]
                    dst.sendall(out)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def inspect(self, buf, pos, plen, d, st):
        t, flags, hlen, pdo = buf[pos], buf[pos + 1], buf[pos + 2], buf[pos + 3]
        key = None
        if t == CAPSULE_CMD:
            op = buf[pos + 8]
            cid = int.from_bytes(buf[pos + 10:pos + 12], "little")
            if op == FABRICS and buf[pos + 12] == FCTYPE_CONNECT:
                st.io = int.from_bytes(buf[pos + 50:pos + 52], "little") != 0
            elif st.io and op in (OP_READ, OP_WRITE):
                slba = int.from_bytes(buf[pos + 48:pos + 56], "little")
                st.cmds[cid] = (op, slba)
                if op == OP_WRITE and pdo and plen > pdo:
                    key = ("h2c", slba, 0)
        elif t in (H2C_DATA, C2H_DATA) and st.io:
            cid = int.from_bytes(buf[pos + 8:pos + 10], "little")
            datao = int.from_bytes(buf[pos + 12:pos + 16], "little")
            cmd = st.cmds.get(cid)
            if cmd is not None:
                key = (d, cmd[1], datao)
        if key is None or st.doomed:
            return
        dlen = plen - pdo - (4 if flags & DDGSTF else 0)
        with self.lock:
            self.seen[d] += 1
            if self.seen[d] in HEADER_AT[d]:
                self.header_pending[d] = True
            if self.header_pending[d] and key not in self.hit:
                if not flags & HDGSTF:
                    self.no_digest += 1
                    return
                self.header_pending[d] = False
                self.hit.add(key)
                self.header_injected[d] += 1
                st.doomed = True
                r = self.rnd[d]
                buf[pos + hlen + r.randrange(4)] ^= 1 << r.randrange(8)
                return
            if self.seen[d] % EVERY == 0:
                self.pending[d] = True
            if not self.pending[d] or key in self.hit or dlen <= 0:
                return
            if not flags & DDGSTF:
                # Without a digest nobody could see it: never flip.
                self.no_digest += 1
                return
            self.pending[d] = False
            self.hit.add(key)
            self.injected[d] += 1
            st.injected[d] += 1
            r = self.rnd[d]
            at = pos + pdo + r.randrange(dlen)
            buf[at] ^= 1 << r.randrange(8)

    def close(self):
        self.closing = True
        self.lsock.close()


def proc_stats(pid):
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return fds, rss


def wait_socket(path, p, what):
    end = time.monotonic() + WAIT_LIMIT_S
    while not os.path.exists(path):
        if p.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.05)


class NvmfStress:
    """The target, the proxy, the host, and the abuse of the listener."""

    def __init__(self, tmp, bins, rpc, problem):
        self.tmp = tmp
        self.bins = bins
        self.rpc = rpc
        self.problem = problem
        self.port = free_port()
        self.tsock = os.path.join(tmp, "tgt.sock")
        self.hsock = os.path.join(tmp, "host.sock")
        self.procs = []
        self.stats = {}
        self.rounds = []
        self.slow = None

    def ok(self, sock, method, params=None, timeout=10.0):
        r = self.rpc(sock, method, params, timeout=timeout)
        if "error" in r:
            raise RuntimeError(f"{method}: {r['error']}")
        return r["result"]

    def spawn(self, name, log_name, args):
        log = open(os.path.join(self.tmp, log_name), "w+")
        env = dict(os.environ, RUST_LOG="info")
        p = subprocess.Popen([os.path.join(self.bins, name)] + args, stdout=log,
                             stderr=subprocess.STDOUT, env=env)
        self.procs.append((p, log))
        return p, log

    def start(self):
        tcfg = os.path.join(self.tmp, "tgt.json")
        listen = {"trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1",
                  "trsvcid": str(self.port)}
        with open(tcfg, "w") as f:
            json.dump({"subsystems": [
                {"subsystem": "bdev", "config": [
                    {"method": "bdev_malloc_create",
                     "params": {"name": "TM0", "num_blocks": 8192, "block_size": 4096}}]},
                {"subsystem": "nvmf", "config": [
                    {"method": "nvmf_create_transport", "params": {"trtype": "TCP"}},
                    {"method": "nvmf_create_subsystem",
                     "params": {"nqn": NQN, "serial_number": "BDKSTRESS1",
                                "allow_any_host": True}},
                    {"method": "nvmf_subsystem_add_ns",
                     "params": {"nqn": NQN, "namespace": {"bdev_name": "TM0"}}},
                    {"method": "nvmf_subsystem_add_listener",
                     "params": {"nqn": NQN, "listen_address": listen}}]}]}, f)
        self.tgt, self.tlog = self.spawn(
            "bdev_tgt", "nvmf-target.log", ["--interrupt-mode", "-m", "0x1", "-r", self.tsock, "--json", tcfg])
        wait_socket(self.tsock, self.tgt, "bdev_tgt")
        end = time.monotonic() + WAIT_LIMIT_S
        while not any(ss["nqn"] == NQN and ss.get("listen_addresses")
                      for ss in self.ok(self.tsock, "nvmf_get_subsystems")):
            if time.monotonic() > end:
                raise RuntimeError("the target's listener did not come up")
            time.sleep(0.05)
        self.proxy = Proxy(self.port, self.problem)
        self.proxy.start()
        hcfg = os.path.join(self.tmp, "host.json")
        with open(hcfg, "w") as f:
            json.dump({"subsystems": [{"subsystem": "bdev", "config": [
                # A corrupted command comes back with Transient Transport
                # Error (no DNR) and goes again; one retry is all it needs.
                {"method": "bdev_nvme_set_options", "params": {"bdev_retry_count": 3}},
                {"method": "bdev_nvme_attach_controller", "params": {
                    "name": "Nvme0", "trtype": "tcp", "adrfam": "ipv4",
                    "traddr": "127.0.0.1", "trsvcid": str(self.proxy.port),
                    "subnqn": NQN, "hostnqn": HOSTNQN, "hdgst": True, "ddgst": True,
                    "ctrlr_loss_timeout_sec": 60, "reconnect_delay_sec": 1}}]}]}, f)
        self.host, self.hlog = self.spawn(
            "bdevperf", "nvmf-host.log", ["-z", "--interrupt-mode", "-r", self.hsock, "-c", hcfg, "-m", "0x1",
                         "-T", "Nvme0n1", "-q", "16", "-o", "4096", "-w", "verify"])
        wait_socket(self.hsock, self.host, "bdevperf (NVMe/TCP host)")
        end = time.monotonic() + WAIT_LIMIT_S
        while "error" in self.rpc(self.hsock, "bdev_get_bdevs", {"name": "Nvme0n1"}):
            if time.monotonic() > end:
                raise RuntimeError("Nvme0n1 did not appear on the host")
            time.sleep(0.05)

    def baseline(self):
        self.fds0, self.rss0 = proc_stats(self.tgt.pid)

    def host_ios(self):
        s = self.ok(self.hsock, "bdev_get_iostat", {"name": "Nvme0n1"})["bdevs"][0]
        return s["num_read_ops"] + s["num_write_ops"]

    def perform(self, seconds, result):
        try:
            result["nvmf"] = self.rpc(
                self.hsock, "perform_tests",
                {"time_in_sec": seconds, "workload_type": "verify", "queue_depth": 16,
                 "io_size": "4096"}, timeout=seconds + 120)
        except Exception as e:  # noqa: BLE001 - any failure is a finding
            result["nvmf_error"] = repr(e)

    def abuse(self):
        """Slowloris and the idle floods, at the same time; returns when
        every slowloris connection is cut and the idle ones are closed."""
        try:
            self.slow = Slowloris(self.port, self.problem)
            self.slow.open()
            io0 = self.host_ios()
            t = threading.Thread(target=self.slow.run)
            t.start()
            self.idle_flood()
            t.join()
            if self.host_ios() <= io0:
                self.problem("the host's verify made no progress while the "
                             "slowloris connections were held")
        except Exception as e:  # noqa: BLE001
            self.problem(f"NVMe/TCP listener abuse: {e!r}")

    def idle_flood(self):
        """FLOOD_ROUNDS floods one after the other: a leak per connection
        would show as RSS growing from one round to the next (a
        connection holds a 512-byte receive buffer until its Connect)."""
        for _ in range(FLOOD_ROUNDS):
            self.idle_round()
        if len(self.rounds) == FLOOD_ROUNDS:
            grew = self.rounds[-1]["rss_after"] - self.rounds[-2]["rss_after"]
            if grew > 4 * MIB:
                self.problem(f"target RSS grew {grew // MIB} MiB in flood "
                             f"{FLOOD_ROUNDS} of {IDLE} connections")

    def idle_round(self):
        held = []
        r = {}
        try:
            io0 = self.host_ios()
            for i in range(IDLE):
                s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
                if i < IDLE_IC:
                    s.sendall(icreq())
                held.append(s)
            for s in held[:IDLE_IC]:
                b = recv_exact(s, 128)
                if b[0] != IC_RESP:
                    self.problem(f"idle: PDU type {b[0]} instead of ICResp")
            # Accepted, not only queued by the kernel: the target holds
            # an fd for each.
            end = time.monotonic() + WAIT_LIMIT_S
            while True:
                fds, rss = proc_stats(self.tgt.pid)
                if fds >= self.fds0 + IDLE:
                    break
                if time.monotonic() > end:
                    self.problem(f"idle: the target holds {fds - self.fds0} of "
                                 f"{IDLE} connections")
                    break
                time.sleep(0.1)
            r["fds"], r["rss"] = fds - self.fds0, rss
            self.ok(self.tsock, "nvmf_get_subsystems")
            self.ok(self.tsock, "spdk_get_version")
            end = time.monotonic() + WAIT_LIMIT_S
            while self.host_ios() <= io0:
                if time.monotonic() > end:
                    self.problem(f"the host's verify made no progress while {IDLE} "
                                 "connections were held")
                    break
                time.sleep(0.1)
            r["io"] = self.host_ios() - io0
        finally:
            for s in held:
                s.close()
        # The target sees the closes: its fds go back (the slowloris
        # connections still open count).
        end = time.monotonic() + WAIT_LIMIT_S
        while True:
            fds, rss = proc_stats(self.tgt.pid)
            if fds <= self.fds0 + SLOW_PER_KIND * len(Slowloris.KINDS) + 2:
                break
            if time.monotonic() > end:
                self.problem(f"idle: the target still holds {fds - self.fds0} fds "
                             "after the closes")
                break
            time.sleep(0.1)
        r["rss_after"] = rss
        self.rounds.append(r)

    def finish(self):
        """After perform_tests: the leak checks, the digest counts; then
        the processes stop. Returns the summary line."""
        # Every connection the abuse opened is gone: the target's fds
        # come back to where they were (the host's connections remain).
        end = time.monotonic() + WAIT_LIMIT_S
        while True:
            fds1, rss1 = proc_stats(self.tgt.pid)
            if fds1 <= self.fds0 + 2 or time.monotonic() > end:
                break
            time.sleep(0.1)
        if fds1 > self.fds0 + 2:
            self.problem(f"target fd count {self.fds0} -> {fds1}")
        if rss1 > self.rss0 + 16 * MIB:
            self.problem(f"target RSS {self.rss0 // MIB} -> {rss1 // MIB} MiB")
        self.ok(self.tsock, "spdk_get_version")
        px = self.proxy
        if px.injected["h2c"] == 0 or px.injected["c2h"] == 0:
            self.problem(f"corruptions injected: {px.injected} (none in a direction)")
        if px.no_digest:
            self.problem(f"{px.no_digest} data PDUs without a data digest")
        for name, p in (("bdevperf", self.host), ("bdev_tgt", self.tgt)):
            try:
                self.rpc(self.hsock if p is self.host else self.tsock,
                         "spdk_kill_instance", {"sig_name": "SIGTERM"})
                code = p.wait(timeout=60)
            except Exception as e:  # noqa: BLE001
                self.problem(f"{name} (NVMe/TCP) did not exit: {e!r}")
                p.kill()
                code = None
            if code not in (0, None):
                self.problem(f"{name} (NVMe/TCP) exited with {code}")
        px.close()
        self.tlog.seek(0)
        ttext = self.tlog.read()
        self.hlog.seek(0)
        htext = self.hlog.read()
        # Each corrupted PDU is seen once by its receiver; each bad header
        # digest ends its connection, and the host resets the controller.
        t_dg = ttext.count("bdevkit_nvmf::tcp::qpair: data digest mismatch")
        h_dg = htext.count("nvme_driver::tcp::queue: NVMe/TCP data digest mismatch")
        t_hd = ttext.count("error=header digest mismatch")
        h_hd = htext.count("protocol error: header digest mismatch")
        resets = htext.count("resetting controller")
        done = htext.count("controller reset done")
        hi = px.header_injected
        if hi["h2c"] == 0 or hi["c2h"] == 0:
            self.problem(f"header digests corrupted: {hi} (none in a direction)")
        if (t_hd, h_hd) != (hi["h2c"], hi["c2h"]):
            self.problem(f"header digest errors logged: target {t_hd}, host {h_hd}, "
                         f"for {hi} corrupted")
        if not resets == done == hi["h2c"] + hi["c2h"]:
            self.problem(f"host: {resets} controller resets, {done} done, for "
                         f"{hi['h2c'] + hi['c2h']} bad header digests")
        # A corrupted PDU on a connection that ended with a bad header
        # digest may have been cut off unread; every other one is seen.
        for d, seen_by, n in (("h2c", "target", t_dg), ("c2h", "host", h_dg)):
            clean = sum(c.injected[d] for c in px.conns if not c.doomed)
            doomed = sum(c.injected[d] for c in px.conns if c.doomed)
            if not clean <= n <= clean + doomed:
                self.problem(f"{seen_by} logged {n} data digest errors for {clean} "
                             f"corrupted PDUs (+{doomed} on connections reset after)")
        if "miscompare" in htext:
            self.problem("verify (NVMe/TCP) reported a miscompare")
        t_slow = ttext.count("no connect in time")
        t_kato = ttext.count("keep alive timeout")
        slow_total = SLOW_PER_KIND * len(Slowloris.KINDS)
        if self.slow is not None and self.slow.total_cut() != slow_total:
            self.problem(f"slowloris: {self.slow.total_cut()} of {slow_total} cut")
        if t_slow < 3 * SLOW_PER_KIND or t_kato < SLOW_PER_KIND:
            self.problem(f"target logged {t_slow} 'no connect in time' and {t_kato} "
                         "keep alive timeouts")
        flood = ", ".join(
            f"target fds +{r['fds']} RSS {r['rss'] // MIB} MiB held, {r['io']} host "
            f"I/Os meanwhile, RSS {r['rss_after'] // MIB} MiB after" for r in self.rounds)
        self.stats = {"fds": (self.fds0, fds1), "rss": (self.rss0, rss1),
                      "t_dg": t_dg, "h_dg": h_dg, "t_slow": t_slow, "t_kato": t_kato,
                      "resets": resets, "connections": px.connections}
        self.text = htext
        return (f"stress: NVMe/TCP verify through the proxy, seed {SEED}: "
                f"{px.injected['h2c']} H2C and {px.injected['c2h']} C2H data PDUs "
                f"corrupted of {px.seen['h2c']} and {px.seen['c2h']}; digest errors "
                f"logged: target {t_dg}, host {h_dg}; header digests corrupted "
                f"{hi['h2c']} H2C / {hi['c2h']} C2H, logged target {t_hd} / host {h_hd}, "
                f"{resets} controller resets, {px.connections} host connections (slowest "
                f"{px.slowest_connect:.1f} s); slowloris: "
                f"{self.slow.summary() if self.slow else '-'}; target log: {t_slow} "
                f"'no connect in time', {t_kato} keep alive timeouts; {len(self.rounds)} "
                f"floods of {IDLE} idle connections ({IDLE_IC} after ICReq): "
                f"{flood}; target fds "
                f"{self.fds0}->{fds1}, RSS {self.rss0 // MIB}->{rss1 // MIB} MiB")

    def check_result(self, result):
        reply = result.get("nvmf")
        if reply is None:
            self.problem(f"perform_tests (NVMe/TCP) did not answer: "
                         f"{result.get('nvmf_error')}")
        elif "error" in reply:
            self.problem(f"perform_tests (NVMe/TCP) failed: {reply['error']}")
        else:
            jobs = reply["result"]["results"]
            if not jobs:
                self.problem("perform_tests (NVMe/TCP): no jobs")
            for r in jobs:
                if r.get("io_failed", 0) or r.get("io_timeout", 0):
                    self.problem(f"NVMe/TCP job {r.get('job')}: {r.get('io_failed')} "
                                 "failed I/Os")

    def kill(self):
        for p, _ in self.procs:
            if p.poll() is None:
                p.kill()
