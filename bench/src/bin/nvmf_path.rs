//! Fixed-count NVMe/TCP command loop through the target's whole
//! per-command path, on one core:
//! `nvmf_path [read|write|mixed] [QD] [COUNT]`. Prints ns per command. Run
//! it under callgrind with two counts and divide the difference in
//! instructions by the difference in commands for a repeatable
//! per-command cost (`bench/callgrind_nvmf_path.sh`).
//!
//! The target is `bdevkit_nvmf` with its TCP transport, driven through
//! `bdevkit_nvmf::tcp::Connection` over an in-memory byte stream (no
//! sockets, so no kernel time and nothing for callgrind to miss): PDU
//! receive and parsing, command dispatch and checks, bdev submission on a
//! null bdev (4 KiB blocks) and its completion, the response or C2HData
//! (SUCCESS flag) and the send queue flush. A poller on the app thread
//! plays the host: it feeds prebuilt capsules (4 KiB reads; 4 KiB writes
//! with in-capsule data) and answers every completion with the next
//! command. Left out: the poll group's socket events (one `epoll_wait`
//! per poll, not per command).

use std::cell::{Cell, RefCell};
use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::rc::Rc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bdevkit::bdev::BdevManager;
use bdevkit::thread::{PollerStatus, Runtime, RuntimeOptions, Thread};
use bdevkit_nvme_spec::cmd::{Command, Psdt};
use bdevkit_nvme_spec::fabrics::{Connect, ConnectData, PropertySet, CNTLID_DYNAMIC};
use bdevkit_nvme_spec::io::{BlockRange, Read as NvmRead, Write as NvmWrite};
use bdevkit_nvme_spec::regs::{offset, Cc, PropertySize};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::tcp::{self, Digests, TxConfig};
use bdevkit_nvme_spec::zerocopy::IntoBytes;
use bdevkit_nvme_spec::Sqe;
use bdevkit_nvmf::params::NamespaceParams;
use bdevkit_nvmf::tcp::Connection;
use bdevkit_nvmf::{
    CreateSubsystemParams, CreateTransportParams, ListenAddressParams, ListenerParams, Target,
};

const SUBNQN: &str = "nqn.2016-06.io.bdevkit:bench";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
const BLOCKS: u64 = 65536;

/// An in-memory byte stream: the target reads `input[at..]` (WouldBlock
/// when it is all read) and appends to `output`. Both are plain vectors,
/// so the host's side costs a `memcpy` per PDU.
#[derive(Debug, Default)]
struct Pipe {
    input: Vec<u8>,
    at: usize,
    output: Vec<u8>,
}

impl Read for Pipe {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        let left = &self.input[self.at..];
        if left.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = b.len().min(left.len());
        b[..n].copy_from_slice(&left[..n]);
        self.at += n;
        if self.at == self.input.len() {
            self.input.clear();
            self.at = 0;
        }
        Ok(n)
    }
}

impl Write for Pipe {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(b);
        Ok(b.len())
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut n = 0;
        for b in bufs {
            self.output.extend_from_slice(b);
            n += b.len();
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn capsule(sqe: &Sqe, icd: &[u8], tx: &TxConfig) -> Vec<u8> {
    let mut s = *sqe;
    s.set_psdt(Psdt::SglContiguousMetadata);
    let mut b = vec![0u8; 256];
    let len = u32::try_from(icd.len()).expect("small");
    let n = tcp::build_capsule_cmd(&mut b, &s, len, tx).expect("capsule");
    b.truncate(n);
    b.extend_from_slice(icd);
    b
}

/// Feeds `bytes`, polls until the connection has answered, and returns
/// what it sent.
fn exchange(conn: &Connection<Pipe>, bytes: &[u8]) -> Vec<u8> {
    conn.with_sock(|p| p.input.extend_from_slice(bytes));
    for _ in 0..16 {
        conn.poll();
    }
    conn.with_sock(|p| std::mem::take(&mut p.output))
}

/// A connection through ICReq/ICResp and Connect (queue `qid` of `cntlid`);
/// the controller id the Connect answered.
fn connect(target: &Target, via: SocketAddr, qid: u16, cntlid: u16) -> (Connection<Pipe>, u16) {
    let peer: SocketAddr = "127.0.0.1:50000".parse().expect("address");
    let conn = Connection::new(target, Pipe::default(), peer, via).expect("connection");
    let mut ic = [0u8; 128];
    let n = tcp::build_ic_req(&mut ic, 0, Digests::default(), 0).expect("icreq");
    assert!(!exchange(&conn, &ic[..n]).is_empty(), "no ICResp");
    let tx = TxConfig::default();
    let mut s = Connect::new(qid, 128, 0).to_sqe(1);
    s.set_sgl1(&SglDescriptor::offset_data_block(0, 1024));
    let data = ConnectData::new([1; 16], cntlid, SUBNQN, HOSTNQN).expect("connect data");
    let out = exchange(&conn, &capsule(&s, data.as_bytes(), &tx));
    // CapsuleResp: the CQE at byte 8, its dword 0 (the controller id) first.
    assert!(out.len() >= 24 && out[0] == 5, "no Connect response");
    let status = u16::from_le_bytes([out[8 + 14], out[8 + 15]]) >> 1;
    assert_eq!(status, 0, "Connect failed");
    let got = u16::from_le_bytes([out[8], out[9]]);
    if qid == 0 {
        let mut p =
            PropertySet::new(PropertySize::Four, offset::CC, u64::from(Cc::enabled(0).0)).to_sqe(2);
        p.set_sgl1(&SglDescriptor::transport_data_block(0));
        exchange(&conn, &capsule(&p, &[], &tx));
    }
    (conn, got)
}

/// The host side of the loop.
struct Host {
    conn: Connection<Pipe>,
    /// Per command id: its read capsule and its write capsule.
    cmds: Vec<(Vec<u8>, Vec<u8>)>,
    mode: u8,
    issued: Cell<u64>,
    left: Cell<u64>,
    inflight: Cell<u64>,
    /// What the target sent this round.
    out: RefCell<Vec<u8>>,
    /// The commands to send next.
    input: RefCell<Vec<u8>>,
}

impl Host {
    fn submit(&self, cid: u16, input: &mut Vec<u8>) {
        let (r, w) = &self.cmds[usize::from(cid)];
        let n = self.issued.get();
        self.issued.set(n + 1);
        let write = match self.mode {
            b'r' => false,
            b'w' => true,
            _ => n % 2 == 1,
        };
        input.extend_from_slice(if write { w } else { r });
    }

    /// One round: the target's service step, then an answer to every
    /// completion. Whether the run is still going.
    fn round(&self) -> bool {
        self.conn.poll();
        let mut out = self.out.borrow_mut();
        let mut input = self.input.borrow_mut();
        self.conn
            .with_sock(|p| std::mem::swap(&mut p.output, &mut *out));
        let mut at = 0;
        while at + 24 <= out.len() {
            let b = &out[at..];
            let plen = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
            // C2HData (7) carries its command id at byte 8, a CapsuleResp
            // (5) in its CQE (byte 8 + 12).
            let cid = match b[0] {
                7 => u16::from_le_bytes([b[8], b[9]]),
                5 => u16::from_le_bytes([b[20], b[21]]),
                t => panic!("unexpected PDU type {t}"),
            };
            at += plen;
            if self.left.get() > 0 {
                self.left.set(self.left.get() - 1);
                self.submit(cid, &mut input);
            } else {
                self.inflight.set(self.inflight.get() - 1);
            }
        }
        assert_eq!(at, out.len(), "a partial PDU");
        out.clear();
        self.conn.with_sock(|p| {
            p.input.extend_from_slice(&input);
        });
        input.clear();
        self.inflight.get() > 0
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("mixed", String::as_str).as_bytes()[0];
    let qd: u16 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(32);
    let count: u64 = args
        .get(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let rt = Runtime::start(RuntimeOptions {
        interrupt_mode: true,
        cpumask: "0x1".parse().expect("mask"),
        ..RuntimeOptions::default()
    })
    .expect("runtime");
    let mgr = BdevManager::default();
    bdevkit_null::register(&mgr);
    let target = Target::new(rt.handle(), mgr.clone());
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let via: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    let (tx, rx) = mpsc::channel();
    let t = target.clone();
    rt.app_thread()
        .send_msg(move || {
            t.start().expect("start");
            t.create_transport(&CreateTransportParams {
                trtype: "TCP".into(),
                ..CreateTransportParams::default()
            })
            .expect("transport");
            bdevkit_null::create(&mgr, bdevkit_null::NullCreateParams::new("B", 4096, BLOCKS))
                .expect("null bdev");
            let mut p = CreateSubsystemParams::new(SUBNQN);
            p.allow_any_host = Some(true);
            t.create_subsystem(&p).expect("subsystem");
            t.add_listener(&ListenerParams {
                nqn: SUBNQN.into(),
                listen_address: ListenAddressParams {
                    trtype: "TCP".into(),
                    adrfam: Some("IPv4".into()),
                    traddr: "127.0.0.1".into(),
                    trsvcid: Some(port.to_string()),
                },
                ..ListenerParams::default()
            })
            .expect("listener");
            t.add_ns(SUBNQN, &NamespaceParams::new("B"), move |r| {
                let _ = tx.send(r.map(|_| ()).map_err(|e| e.to_string()));
            });
        })
        .expect("app thread");
    rx.recv().expect("set-up").expect("namespace");
    let (done_tx, done_rx) = mpsc::channel();
    let t = target.clone();
    let start = rt
        .app_thread()
        .run_sync(move || {
            let (admin, cntlid) = connect(&t, via, 0, CNTLID_DYNAMIC);
            let (conn, _) = connect(&t, via, 1, cntlid);
            let tx = TxConfig::default();
            let cmds = (0..qd)
                .map(|cid| {
                    let slba = u64::from(cid) * 7 % BLOCKS;
                    let range = BlockRange::new(slba, 1).expect("range");
                    let mut r = NvmRead::new(1, range).to_sqe(cid);
                    r.set_sgl1(&SglDescriptor::transport_data_block(4096));
                    let mut w = NvmWrite::new(1, range).to_sqe(cid);
                    w.set_sgl1(&SglDescriptor::offset_data_block(0, 4096));
                    (capsule(&r, &[], &tx), capsule(&w, &[0x5a; 4096], &tx))
                })
                .collect();
            let host = Rc::new(Host {
                conn,
                cmds,
                mode,
                issued: Cell::new(0),
                left: Cell::new(count.saturating_sub(u64::from(qd))),
                inflight: Cell::new(u64::from(qd)),
                out: RefCell::new(Vec::with_capacity(1 << 20)),
                input: RefCell::new(Vec::with_capacity(1 << 20)),
            });
            let mut input = Vec::with_capacity(1 << 20);
            for cid in 0..qd {
                host.submit(cid, &mut input);
            }
            host.conn.with_sock(|p| {
                p.input = input;
                p.output.reserve(1 << 20);
            });
            let start = Instant::now();
            let thread = Thread::current().expect("app thread");
            let mut done = Some(done_tx);
            let mut admin = Some(admin);
            thread.register_poller("nvmf_path_host", 0, move |p| {
                if host.round() {
                    return PollerStatus::Busy;
                }
                p.unregister();
                admin.take();
                if let Some(d) = done.take() {
                    let _ = d.send(());
                }
                PollerStatus::Idle
            });
            start
        })
        .expect("app thread");
    done_rx
        .recv_timeout(Duration::from_secs(3600))
        .expect("the loop finished");
    let el = start.elapsed();
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let ns = el.as_nanos() as f64 / count as f64;
    println!("{count} commands at QD {qd}: {ns:.1} ns per command");
    let (tx, rx) = mpsc::channel();
    rt.app_thread()
        .send_msg(move || {
            target.shutdown(move || {
                let _ = tx.send(());
            })
        })
        .expect("app thread");
    let _ = rx.recv_timeout(Duration::from_secs(10));
    drop(rt);
}
