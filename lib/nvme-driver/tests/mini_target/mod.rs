//! A small NVMe/TCP controller for the TCP transport's tests, built from
//! the spec crate: one RAM namespace, blocking threads per connection,
//! and faults to inject (responses sent a few bytes at a time, a corrupt
//! data digest, a connection closed with commands outstanding). It is a
//! test peer, not a target: the real ones are the kernel's nvmet (VM
//! tests) and bdevkit-nvmf.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bdevkit_nvme_spec::fabrics::{ConnectData, FabricsCommand};
use bdevkit_nvme_spec::identify::{IdentifyController, IdentifyNamespace, NamespaceList};
use bdevkit_nvme_spec::regs::{offset, Cc, Csts};
use bdevkit_nvme_spec::tcp::{self, DataHeader, Digests, Pdu, RecvConfig, Role, TxConfig};
use bdevkit_nvme_spec::zerocopy::{FromBytes, FromZeros, IntoBytes};
use bdevkit_nvme_spec::{Cqe, Sqe, Status};

pub const NQN: &str = "nqn.2016-06.io.bdevkit:mini";
pub const BLOCK: usize = 512;
pub const BLOCKS: usize = 4096;
/// In-capsule data the I/O queues take.
pub const IN_CAPSULE: u32 = 4096;
/// MAXH2CDATA announced: small, so that R2Ts take several H2CData PDUs.
pub const MAXH2C: u32 = 8192;

/// Faults to inject.
#[derive(Debug, Default)]
pub struct Faults {
    /// Send every PDU in pieces of this many bytes (0: whole).
    pub chunk: AtomicUsize,
    /// Corrupt the data digest of the next C2HData.
    pub bad_digest: AtomicBool,
    /// Stop answering I/O commands (they stay outstanding).
    pub hold_io: AtomicBool,
    /// Close the next I/O connection that looks (one that holds
    /// commands, or the next to receive one); taking it also ends
    /// `hold_io`, so that a reconnected queue is served.
    pub close_io: AtomicBool,
    /// Close new connections at once (the target is down).
    pub down: AtomicBool,
    /// Corrupt the header digest of the next response capsule.
    pub bad_header_digest: AtomicBool,
    /// Answer the next I/O command with a response for an unknown CID.
    pub bogus_cid: AtomicBool,
    /// Send only the first half of the next read's data, then success.
    pub short_read: AtomicBool,
    /// Answer no ICReq while set (a slow controller: the connection
    /// waits; clearing it lets every waiting one go on).
    pub hold_icresp: AtomicBool,
    /// Reject the next I/O queue's Fabrics Connect.
    pub reject_io_connect: AtomicBool,
    /// Ask for the data of the next in-capsule write again, by R2T.
    pub r2t_in_capsule: AtomicBool,
    /// Serve no I/O command while set: each received waits (counted in
    /// `io_cmds`), and is served once cleared.
    pub pause_io: AtomicBool,
}

/// The controller's state.
#[derive(Debug)]
pub struct State {
    pub faults: Faults,
    cc: Mutex<u32>,
    pub ram: Mutex<Vec<u8>>,
    /// I/O commands received.
    pub io_cmds: AtomicUsize,
    /// Connections accepted.
    pub connections: AtomicUsize,
    /// Connections closed at once because the target was down.
    pub refused: AtomicUsize,
    /// H2CTermReqs received (the host found a protocol error).
    pub term_reqs: AtomicUsize,
    /// Keep Alive commands received.
    pub keep_alives: AtomicUsize,
    /// ICReqs received.
    pub ic_reqs: AtomicUsize,
}

/// A running target.
#[derive(Debug)]
pub struct MiniTarget {
    pub addr: SocketAddr,
    pub state: Arc<State>,
}

impl MiniTarget {
    pub fn start() -> MiniTarget {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let state = Arc::new(State {
            faults: Faults::default(),
            cc: Mutex::new(0),
            ram: Mutex::new(vec![0u8; BLOCK * BLOCKS]),
            io_cmds: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            term_reqs: AtomicUsize::new(0),
            keep_alives: AtomicUsize::new(0),
            ic_reqs: AtomicUsize::new(0),
        });
        let st = Arc::clone(&state);
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { return };
                if st.faults.down.load(Ordering::Acquire) {
                    st.refused.fetch_add(1, Ordering::AcqRel);
                    let _ = s.shutdown(std::net::Shutdown::Both);
                    continue;
                }
                st.connections.fetch_add(1, Ordering::Relaxed);
                let st = Arc::clone(&st);
                std::thread::spawn(move || {
                    let _ = Conn::new(s, st).serve();
                });
            }
        });
        MiniTarget { addr, state }
    }

    pub fn port(&self) -> String {
        self.addr.port().to_string()
    }
}

struct Conn {
    s: TcpStream,
    st: Arc<State>,
    rx: RecvConfig,
    tx: TxConfig,
    qid: u16,
    /// Commands that arrived while an R2T's data was awaited.
    pending: std::collections::VecDeque<(Sqe, Vec<u8>)>,
    /// A broken PDU went out: answer nothing more, only listen for the
    /// host's H2CTermReq.
    broken: bool,
}

type Res<T> = Result<T, String>;

impl Conn {
    fn new(s: TcpStream, st: Arc<State>) -> Conn {
        s.set_nodelay(true).unwrap();
        Conn {
            s,
            st,
            rx: RecvConfig {
                max_data_len: 1 << 22,
                ..RecvConfig::new(Role::Controller)
            },
            tx: TxConfig::default(),
            qid: 0,
            pending: std::collections::VecDeque::new(),
            broken: false,
        }
    }

    fn read_exact(&mut self, n: usize) -> Res<Vec<u8>> {
        let mut v = vec![0u8; n];
        self.s.read_exact(&mut v).map_err(|e| e.to_string())?;
        Ok(v)
    }

    fn send(&mut self, b: &[u8]) -> Res<()> {
        let chunk = self.st.faults.chunk.load(Ordering::Relaxed);
        if chunk == 0 {
            return self.s.write_all(b).map_err(|e| e.to_string());
        }
        for piece in b.chunks(chunk) {
            self.s.write_all(piece).map_err(|e| e.to_string())?;
            self.s.flush().map_err(|e| e.to_string())?;
            std::thread::yield_now();
        }
        Ok(())
    }

    /// One PDU: header bytes, layout, data (digest checked).
    fn recv(&mut self) -> Res<(Vec<u8>, tcp::PduLayout, Vec<u8>)> {
        let mut hdr = self.read_exact(8)?;
        let l = tcp::parse_common_header(&hdr, &self.rx).map_err(|e| e.to_string())?;
        hdr.extend(self.read_exact(l.header_len() - 8)?);
        tcp::parse_header(&hdr, &self.rx).map_err(|e| e.to_string())?;
        self.read_exact(l.padding())?;
        let data = self.read_exact(l.data_len as usize)?;
        if l.ddgst {
            let d = self.read_exact(4)?;
            tcp::verify_data_digest(&data, [d[0], d[1], d[2], d[3]]).map_err(|e| e.to_string())?;
        }
        Ok((hdr, l, data))
    }

    fn respond(&mut self, cid: u16, status: Status, dw0: u32, dw1: u32) -> Res<()> {
        let f = &self.st.faults;
        if self.broken {
            return Ok(());
        }
        let cid = if self.qid != 0 && f.bogus_cid.swap(false, Ordering::AcqRel) {
            self.broken = true;
            cid ^ 0x4000
        } else {
            cid
        };
        let mut cqe = Cqe::new(cid, status, dw0);
        cqe.set_status(status);
        cqe.dw1.set(dw1);
        let mut b = [0u8; 64];
        let n = tcp::build_capsule_resp(&mut b, &cqe, &self.tx).map_err(|e| e.to_string())?;
        if self.qid != 0
            && self.tx.digests.header
            && f.bad_header_digest.swap(false, Ordering::AcqRel)
        {
            // The digest follows the 24-byte header.
            b[24] ^= 0x01;
            self.broken = true;
        }
        self.send(&b[..n])
    }

    fn serve(mut self) -> Res<()> {
        let (hdr, _, _) = self.recv()?;
        let (pdu, _) = tcp::parse_header(&hdr, &self.rx).map_err(|e| e.to_string())?;
        let Pdu::IcReq(r) = pdu else {
            return Err("expected ICReq".into());
        };
        self.st.ic_reqs.fetch_add(1, Ordering::AcqRel);
        while self.st.faults.hold_icresp.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let d = Digests {
            header: r.dgst & tcp::digest_bits::HEADER != 0,
            data: r.dgst & tcp::digest_bits::DATA != 0,
        };
        let mut b = [0u8; 128];
        let n = tcp::build_ic_resp(&mut b, 0, d, MAXH2C).map_err(|e| e.to_string())?;
        self.send(&b[..n])?;
        self.rx = self.rx.connected(d, 0);
        self.tx = TxConfig { digests: d, pda: 0 };
        loop {
            if self.qid != 0 && self.take_close() {
                return Ok(());
            }
            let (sqe, data) = match self.pending.pop_front() {
                Some(p) => p,
                None => {
                    let (hdr, _, data) = self.recv()?;
                    let (pdu, _) = tcp::parse_header(&hdr, &self.rx).map_err(|e| e.to_string())?;
                    match pdu {
                        Pdu::CapsuleCmd(c) => (c.sqe, data),
                        Pdu::H2CTermReq(_) => {
                            self.st.term_reqs.fetch_add(1, Ordering::AcqRel);
                            return Ok(());
                        }
                        other => return Err(format!("unexpected {other:?}")),
                    }
                }
            };
            if self.qid != 0 {
                self.st.io_cmds.fetch_add(1, Ordering::Relaxed);
            }
            while self.qid != 0 && self.st.faults.pause_io.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            if self.qid != 0 && self.st.faults.hold_io.load(Ordering::Relaxed) {
                while !self.take_close() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                return Ok(());
            }
            if sqe.opcode == 0x7f {
                self.fabrics(&sqe, &data)?;
            } else if self.qid == 0 {
                self.admin(&sqe)?;
            } else {
                self.io(&sqe, data)?;
            }
        }
    }

    /// Takes a pending `close_io` and closes this connection.
    fn take_close(&mut self) -> bool {
        let f = &self.st.faults;
        if !f.close_io.swap(false, Ordering::AcqRel) {
            return false;
        }
        f.hold_io.store(false, Ordering::Release);
        let _ = self.s.shutdown(std::net::Shutdown::Both);
        true
    }

    fn fabrics(&mut self, sqe: &Sqe, data: &[u8]) -> Res<()> {
        let cid = sqe.cid.get();
        match FabricsCommand::decode(sqe) {
            Some(FabricsCommand::Connect(c)) => {
                let cd = ConnectData::read_from_bytes(data).map_err(|_| "connect data")?;
                let _ = cd;
                if c.qid != 0
                    && self
                        .st
                        .faults
                        .reject_io_connect
                        .swap(false, Ordering::AcqRel)
                {
                    return self.respond(cid, Status::INVALID_FIELD, 0, 0);
                }
                self.qid = c.qid;
                self.respond(cid, Status::SUCCESS, 1, 0)
            }
            Some(FabricsCommand::PropertyGet(p)) => {
                let cc = *self.st.cc.lock().unwrap();
                let v: u64 = match p.offset {
                    // MQES 127, CQR, TO 1 s, CSS NVM.
                    offset::CAP => 127 | (1 << 16) | (2 << 24) | (1 << 37),
                    offset::VS => 0x0001_0300,
                    offset::CC => u64::from(cc),
                    offset::CSTS => {
                        let c = Cc(cc);
                        let mut s = u64::from(c.en());
                        if c.shn() != 0 {
                            s |= u64::from(Csts::SHST_COMPLETE) << 2;
                        }
                        s
                    }
                    _ => return self.respond(cid, Status::INVALID_FIELD, 0, 0),
                };
                self.respond(cid, Status::SUCCESS, v as u32, (v >> 32) as u32)
            }
            Some(FabricsCommand::PropertySet(p)) => {
                if p.offset == offset::CC {
                    *self.st.cc.lock().unwrap() = p.value as u32;
                }
                self.respond(cid, Status::SUCCESS, 0, 0)
            }
            _ => self.respond(cid, Status::INVALID_OPCODE, 0, 0),
        }
    }

    fn c2h(&mut self, cid: u16, data: &[u8]) -> Res<()> {
        if self.broken {
            return Ok(());
        }
        let mut at = 0;
        while at < data.len() {
            let k = (data.len() - at).min(16 * 1024);
            let last = at + k == data.len();
            let h = DataHeader {
                cccid: cid,
                ttag: 0,
                datao: at as u32,
                datal: k as u32,
                last,
                success: false,
            };
            let mut b = [0u8; 128];
            let n = tcp::build_c2h_data(&mut b, &h, &self.tx).map_err(|e| e.to_string())?;
            let mut out = b[..n].to_vec();
            let piece = &data[at..at + k];
            out.extend_from_slice(piece);
            if self.tx.digests.data {
                let mut d = tcp::data_digest(piece);
                if self.st.faults.bad_digest.swap(false, Ordering::Relaxed) {
                    d ^= 1;
                }
                out.extend_from_slice(&d.to_le_bytes());
            }
            self.send(&out)?;
            at += k;
        }
        Ok(())
    }

    fn admin(&mut self, sqe: &Sqe) -> Res<()> {
        let cid = sqe.cid.get();
        match sqe.opcode {
            0x06 => {
                let cns = sqe.cdw10.get() & 0xff;
                let page: Vec<u8> = match cns {
                    1 => {
                        let mut c = IdentifyController::new_zeroed();
                        c.set_serial("MINI0001").unwrap();
                        c.set_model("bdevkit mini target").unwrap();
                        c.set_firmware("1.0").unwrap();
                        c.set_subnqn(NQN).unwrap();
                        c.cntlid.set(1);
                        c.nn.set(1);
                        c.mdts = 0;
                        c.ioccsz.set((IN_CAPSULE + 64) / 16);
                        c.as_bytes().to_vec()
                    }
                    0 => {
                        let mut n = IdentifyNamespace::new_zeroed();
                        n.nsze.set(BLOCKS as u64);
                        n.ncap.set(BLOCKS as u64);
                        n.nuse.set(BLOCKS as u64);
                        n.set_single_format(9, 0);
                        n.as_bytes().to_vec()
                    }
                    2 => NamespaceList::from_ids([1]).as_bytes().to_vec(),
                    _ => vec![0u8; 4096],
                };
                self.c2h(cid, &page)?;
                self.respond(cid, Status::SUCCESS, 0, 0)
            }
            // Set Features: Number of Queues gets 4 + 4; the rest succeed.
            0x09 if sqe.cdw10.get() & 0xff == 0x07 => {
                self.respond(cid, Status::SUCCESS, 3 | (3 << 16), 0)
            }
            0x18 => {
                self.st.keep_alives.fetch_add(1, Ordering::AcqRel);
                self.respond(cid, Status::SUCCESS, 0, 0)
            }
            0x09 => self.respond(cid, Status::SUCCESS, 0, 0),
            // Asynchronous Event Request: held for good.
            0x0c => Ok(()),
            0x02 => {
                let len = (((sqe.cdw10.get() >> 16) + 1) * 4) as usize;
                self.c2h(cid, &vec![0u8; len])?;
                self.respond(cid, Status::SUCCESS, 0, 0)
            }
            _ => self.respond(cid, Status::INVALID_OPCODE, 0, 0),
        }
    }

    fn io(&mut self, sqe: &Sqe, in_capsule: Vec<u8>) -> Res<()> {
        let cid = sqe.cid.get();
        let slba = u64::from(sqe.cdw10.get()) | (u64::from(sqe.cdw11.get()) << 32);
        let nlb = (sqe.cdw12.get() & 0xffff) as usize + 1;
        let off = slba as usize * BLOCK;
        let len = nlb * BLOCK;
        if sqe.opcode != 0x00 && off + len > BLOCK * BLOCKS {
            return self.respond(cid, Status::LBA_OUT_OF_RANGE, 0, 0);
        }
        match sqe.opcode {
            0x00 => self.respond(cid, Status::SUCCESS, 0, 0),
            0x01 => {
                let again = !in_capsule.is_empty()
                    && self.st.faults.r2t_in_capsule.swap(false, Ordering::AcqRel);
                let data = if in_capsule.is_empty() || again {
                    self.pull(cid, len)?
                } else {
                    in_capsule
                };
                if data.len() != len {
                    return self.respond(cid, Status::DATA_SGL_LENGTH_INVALID, 0, 0);
                }
                self.st.ram.lock().unwrap()[off..off + len].copy_from_slice(&data);
                self.respond(cid, Status::SUCCESS, 0, 0)
            }
            0x02 => {
                let data = self.st.ram.lock().unwrap()[off..off + len].to_vec();
                let half = self.st.faults.short_read.swap(false, Ordering::AcqRel);
                self.c2h(cid, if half { &data[..len / 2] } else { &data })?;
                self.respond(cid, Status::SUCCESS, 0, 0)
            }
            _ => self.respond(cid, Status::INVALID_OPCODE, 0, 0),
        }
    }

    /// Asks for `len` bytes with one R2T and collects the H2CData PDUs.
    fn pull(&mut self, cid: u16, len: usize) -> Res<Vec<u8>> {
        let mut b = [0u8; 64];
        let n =
            tcp::build_r2t(&mut b, cid, 7, 0, len as u32, &self.tx).map_err(|e| e.to_string())?;
        self.send(&b[..n])?;
        let mut data = vec![0u8; len];
        let mut got = 0;
        while got < len {
            let (hdr, _, piece) = self.recv()?;
            let (pdu, _) = tcp::parse_header(&hdr, &self.rx).map_err(|e| e.to_string())?;
            let h = match pdu {
                Pdu::H2CData(h) => h,
                Pdu::CapsuleCmd(c) => {
                    self.pending.push_back((c.sqe, piece));
                    continue;
                }
                Pdu::H2CTermReq(_) => {
                    self.st.term_reqs.fetch_add(1, Ordering::AcqRel);
                    return Err("the host terminated the connection".into());
                }
                other => return Err(format!("expected H2CData, got {other:?}")),
            };
            if h.cccid.get() != cid || h.ttag.get() != 7 || piece.len() > MAXH2C as usize {
                return Err("bad H2CData".into());
            }
            let o = h.datao.get() as usize;
            data[o..o + piece.len()].copy_from_slice(&piece);
            got += piece.len();
        }
        Ok(data)
    }
}
