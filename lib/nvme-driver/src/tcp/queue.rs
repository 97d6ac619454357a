//! One NVMe/TCP queue: a nonblocking connection polled by the thread
//! that owns the queue pair. Commands go out as CapsuleCmd PDUs (write
//! data in the capsule up to the controller's limit, else pulled by R2T
//! and sent in H2CData PDUs); read data comes back in C2HData PDUs and
//! completions in CapsuleResp PDUs (or a C2HData with SUCCESS).
//!
//! Per slot the queue keeps a data buffer that grows to the largest
//! transfer the slot has carried and is reused after that: write data is
//! copied into it at submission (R2T may ask for it any time later), read
//! data lands in it and is copied into the request on release. The send
//! buffer and the receive buffer are allocated once. So the steady state
//! allocates nothing.
//!
//! A protocol error (bad header digest, a PDU out of place, data out of
//! range) sends an H2CTermReq and closes the connection; a closed or
//! failed connection completes every command in flight with Transient
//! Transport Error (retryable), and the queue reports itself dead
//! ([`QueueTransport::is_alive`]) so that the owner resets. A bad data
//! digest on read data is not fatal: that command completes with
//! Transient Transport Error.
//!
//! A new queue is still connecting (ICReq/ICResp, Fabrics Connect: see
//! `connect.rs`); its polls ([`QueueTransport::flush`],
//! [`QueueTransport::reap_start`]) move it on, and what is submitted meanwhile
//! waits in the queue (write data copied into the slot's buffer) until it
//! is ready.

use std::collections::VecDeque;
use std::io::{self, Read as _, Write as _};
use std::net::TcpStream;

use bdevkit_nvme_tls::Stream;
use std::os::fd::{AsRawFd, RawFd};

use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::tcp::{
    self, DataDigest, DataHeader, Digests, Fes, Pdu, PduError, RecvConfig, Role,
};
use bdevkit_nvme_spec::tcp::{TxConfig, DIGEST_LEN};
use bdevkit_nvme_spec::{Cqe, Sqe, Status};

use super::connect::{Connecting, Failure, Phase};
use crate::error::{Error, Result};
use crate::transport::{Data, Dir, QueueTransport, Release, Request, SubmitError};

mod auth;
mod connecting;
mod submit;

/// The reason of a deliberate close (disconnect, reset): not a warning.
const CLEARED: &str = "queue cleared";
/// Receive buffer size (one read syscall fills at most this).
const RBUF: usize = 64 * 1024;
/// Largest PDU header with its digest (ICResp: 128 + 4).
const HDR_MAX: usize = 136;
/// Reads per reap, so that one busy connection does not starve the
/// thread's other pollers.
const READS_PER_REAP: usize = 8;

/// Each slot's data buffer starts this large (capped at the queue's most
/// data per command): the common I/O size never allocates, even in a slot
/// that a workload reaches only now and then; a larger command grows its
/// slot's buffer once, and the slot keeps it.
const SLOT_BUF: usize = 4096;

#[derive(Debug, Default)]
struct Slot {
    busy: bool,
    /// Its completion is queued for `reap` (or was reaped).
    completed: bool,
    /// Bytes of data the command moves.
    len: usize,
    /// Data comes from the controller into `buf`.
    from_dev: bool,
    /// Its write data went in the capsule (an R2T for it is a protocol
    /// error).
    in_capsule: bool,
    /// Read data arrived with a bad data digest.
    bad_digest: bool,
    /// Read data bytes received.
    got: usize,
    buf: Vec<u8>,
}

/// Where the receiver is inside the current PDU.
#[derive(Debug, Clone, Copy)]
enum Rx {
    /// Collecting the header (`need` bytes in all, once known).
    Header { have: usize, need: usize },
    /// Inside a C2HData PDU: padding, data into the slot's buffer, digest.
    Payload(Payload),
}

/// The receiver's place in a C2HData PDU.
#[derive(Debug, Clone, Copy)]
struct Payload {
    slot: u16,
    /// Padding bytes still to skip.
    pad: usize,
    /// Where the next data byte goes in the slot's buffer.
    at: usize,
    /// Data bytes still to come.
    left: usize,
    /// Digest bytes still to come (0 without a data digest).
    dg: usize,
    dg_bytes: [u8; 4],
    digest: DataDigest,
    /// The SUCCESS flag: no response capsule follows.
    success: bool,
}

/// One queue's connection.
#[derive(Debug)]
pub struct TcpQueue {
    qid: u16,
    depth: u16,
    sock: Option<Stream<TcpStream>>,
    tx: TxConfig,
    rx: RecvConfig,
    maxh2cdata: u32,
    icd_max: usize,
    max_data: usize,
    slots: Box<[Slot]>,
    out: Vec<u8>,
    out_pos: usize,
    rbuf: Box<[u8]>,
    hdr: [u8; HDR_MAX],
    st: Rx,
    ready: VecDeque<Cqe>,
    /// A completion was taken from `ready` in this reap pass.
    reaped: bool,
    dead_reason: Option<String>,
    /// The connection attempt, while not ready.
    conn: Option<Box<Connecting>>,
    /// Why the connection attempt failed, when it did.
    failure: Option<Failure>,
    /// Dword 0 of the Fabrics Connect's response.
    connect_dw0: u32,
    /// Identifies this queue's socket (see [`QueueTransport::wake_fd`]).
    sock_id: u64,
    /// The last receive stopped at its bound with bytes maybe left.
    more: bool,
}

/// Ids of sockets, so that a new socket is told from an old one with the
/// same descriptor number.
static SOCK_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn io_err(op: &'static str) -> impl FnOnce(io::Error) -> Error {
    Error::sys(op)
}

impl TcpQueue {
    /// A queue of `depth` slots on `sock` (connected, nothing exchanged
    /// yet), carrying up to `max_data` bytes per command, that connects
    /// as `conn` says from its polls (the ICReq is queued here).
    pub(crate) fn new(
        qid: u16,
        depth: u16,
        sock: Stream<TcpStream>,
        max_data: usize,
        conn: Connecting,
    ) -> Result<Self> {
        sock.get_ref()
            .set_nodelay(true)
            .map_err(io_err("TCP_NODELAY"))?;
        sock.get_ref()
            .set_nonblocking(true)
            .map_err(io_err("nonblocking socket"))?;
        let mut q = TcpQueue {
            qid,
            depth,
            sock: Some(sock),
            tx: TxConfig::default(),
            rx: RecvConfig {
                max_data_len: u32::try_from(max_data).unwrap_or(u32::MAX),
                ..RecvConfig::new(Role::Host)
            },
            maxh2cdata: tcp::MIN_MAXH2CDATA,
            icd_max: 0,
            max_data,
            // One slot more than the queue pair uses: the Fabrics Connect's.
            slots: (0..=depth)
                .map(|_| Slot {
                    buf: vec![0; SLOT_BUF.min(max_data)],
                    ..Slot::default()
                })
                .collect(),
            out: Vec::with_capacity(64 * 1024),
            out_pos: 0,
            rbuf: vec![0u8; RBUF].into_boxed_slice(),
            hdr: [0; HDR_MAX],
            st: Rx::Header { have: 0, need: 8 },
            ready: VecDeque::with_capacity(usize::from(depth) + 1),
            reaped: false,
            dead_reason: None,
            conn: None,
            failure: None,
            connect_dw0: 0,
            sock_id: SOCK_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            more: false,
        };
        q.rx.connected = false;
        let mut b = [0u8; 128];
        let n = tcp::build_ic_req(&mut b, 0, conn.digests, 0)
            .map_err(|e| Error::InvalidArg(e.to_string()))?;
        q.out.extend_from_slice(&b[..n]);
        let mut conn = Box::new(conn);
        conn.held.reserve(usize::from(depth));
        q.conn = Some(conn);
        Ok(q)
    }

    /// Sets the most write data sent in a command capsule.
    pub(crate) fn set_in_capsule_limit(&mut self, bytes: usize) {
        self.icd_max = bytes;
    }

    /// The negotiated digests (none until the ICResp arrived).
    #[must_use]
    pub fn digests(&self) -> Digests {
        self.tx.digests
    }

    /// Why the connection died, if it did.
    #[must_use]
    pub fn dead_reason(&self) -> Option<&str> {
        self.dead_reason.as_deref()
    }

    /// Appends the capsule of `sqe` (its data pointer set here) carrying
    /// `len` bytes, in the capsule or by R2T.
    fn push_capsule(&mut self, sqe: &mut Sqe, len: u32, in_capsule: bool) -> bool {
        let sgl = if in_capsule {
            SglDescriptor::offset_data_block(0, len)
        } else {
            SglDescriptor::transport_data_block(len)
        };
        sqe.set_sgl1(&sgl);
        let tx = self.tx;
        let icd = if in_capsule { len } else { 0 };
        let sqe_copy = *sqe;
        self.push_header(|b| tcp::build_capsule_cmd(b, &sqe_copy, icd, &tx))
    }

    /// Closes the connection: every command in flight completes with
    /// Transient Transport Error.
    fn close(&mut self, why: &str) {
        if let Some(mut s) = self.sock.take() {
            if why == CLEARED {
                tracing::debug!(qid = self.qid, "NVMe/TCP connection closed");
            } else {
                tracing::warn!(qid = self.qid, reason = why, "NVMe/TCP connection closed");
            }
            // TLS: close_notify, if the socket takes it now.
            let _ = s.close_notify();
            let _ = s.get_ref().shutdown(std::net::Shutdown::Both);
            self.dead_reason = Some(why.to_string());
        }
        self.conn = None;
        let connect_slot = usize::from(self.depth);
        self.slots[connect_slot].busy = false;
        for (i, s) in self.slots.iter_mut().enumerate() {
            if s.busy && !s.completed {
                s.completed = true;
                let cid = u16::try_from(i).expect("invariant: slots fit u16");
                self.ready
                    .push_back(Cqe::new(cid, Status::TRANSIENT_TRANSPORT_ERROR, 0));
            }
        }
        self.out.clear();
        self.out_pos = 0;
        self.st = Rx::Header { have: 0, need: 8 };
    }

    /// A protocol error: tell the controller (H2CTermReq), then close.
    fn fatal(&mut self, e: PduError, hdr_len: usize) {
        if let Some(fes) = e.fes() {
            let mut b = [0u8; 24 + 128];
            let off = self.hdr[..hdr_len.min(HDR_MAX)].to_owned();
            if let Ok(n) = tcp::build_term_req(&mut b, Role::Host, fes, e.fei(), &off) {
                self.out.clear();
                self.out_pos = 0;
                self.out.extend_from_slice(&b[..n]);
                self.send_pending();
            }
        }
        self.close(&format!("protocol error: {e}"));
    }

    fn fatal_at(&mut self, fes: Fes, what: &str) {
        let e = match fes {
            Fes::DataOutOfRange => PduError::DataOutOfRange,
            _ => PduError::InvalidHeaderField {
                offset: 8,
                field: "cccid",
            },
        };
        tracing::warn!(qid = self.qid, what, "NVMe/TCP protocol error");
        self.fatal(e, HDR_MAX);
    }

    /// Writes what is pending; false when the connection failed.
    fn send_pending(&mut self) -> bool {
        while self.out_pos < self.out.len() {
            let Some(sock) = self.sock.as_mut() else {
                return false;
            };
            match sock.write(&self.out[self.out_pos..]) {
                Ok(0) => {
                    self.close("connection closed while sending");
                    return false;
                }
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.close(&format!("send failed: {e}"));
                    return false;
                }
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        } else if self.out_pos >= 64 * 1024 {
            self.out.drain(..self.out_pos);
            self.out_pos = 0;
        }
        true
    }

    /// Appends a PDU header built by `f` to the send buffer.
    fn push_header(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> bdevkit_nvme_spec::Result<usize>,
    ) -> bool {
        let mut b = [0u8; 160];
        match f(&mut b) {
            Ok(n) => {
                self.out.extend_from_slice(&b[..n]);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot build an NVMe/TCP PDU");
                false
            }
        }
    }

    /// Reads and parses what the socket has.
    fn receive(&mut self) {
        self.more = false;
        for _ in 0..READS_PER_REAP {
            let Some(sock) = self.sock.as_mut() else {
                return;
            };
            let n = match sock.read(&mut self.rbuf) {
                Ok(0) => {
                    self.close("connection closed by the controller");
                    return;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.close(&format!("receive failed: {e}"));
                    return;
                }
            };
            let mut at = 0;
            while at < n && self.sock.is_some() {
                at += self.consume(at, n);
            }
            if n < self.rbuf.len() {
                return;
            }
        }
        self.more = self.sock.is_some();
    }

    /// Feeds `rbuf[from..to]` to the PDU state machine; returns the bytes
    /// used.
    fn consume(&mut self, from: usize, to: usize) -> usize {
        let avail = to - from;
        match self.st {
            Rx::Header { have, need } => {
                let take = (need - have).min(avail);
                self.hdr[have..have + take].copy_from_slice(&self.rbuf[from..from + take]);
                let have = have + take;
                if have < need {
                    self.st = Rx::Header { have, need };
                } else if need == 8 {
                    match tcp::parse_common_header(&self.hdr[..8], &self.rx) {
                        Ok(l) => {
                            self.st = Rx::Header {
                                have,
                                need: l.header_len(),
                            }
                        }
                        Err(e) => self.fatal(e, 8),
                    }
                    if let Rx::Header { have, need } = self.st {
                        if have == need {
                            self.header_done(need);
                        }
                    }
                } else {
                    self.header_done(need);
                }
                take
            }
            Rx::Payload(mut p) => {
                if p.pad > 0 {
                    let k = p.pad.min(avail);
                    p.pad -= k;
                    self.st = Rx::Payload(p);
                    return k;
                }
                if p.left > 0 {
                    let k = p.left.min(avail);
                    let src = &self.rbuf[from..from + k];
                    let s = &mut self.slots[usize::from(p.slot)];
                    s.buf[p.at..p.at + k].copy_from_slice(src);
                    s.got += k;
                    if p.dg > 0 {
                        p.digest.update(src);
                    }
                    p.at += k;
                    p.left -= k;
                    self.st = Rx::Payload(p);
                    if p.left == 0 && p.dg == 0 {
                        self.payload_done(p.slot, p.success, true);
                    }
                    return k;
                }
                let k = p.dg.min(avail);
                let filled = DIGEST_LEN - p.dg;
                p.dg_bytes[filled..filled + k].copy_from_slice(&self.rbuf[from..from + k]);
                p.dg -= k;
                self.st = Rx::Payload(p);
                if p.dg == 0 {
                    let ok = u32::from_le_bytes(p.dg_bytes) == p.digest.finish();
                    if !ok {
                        tracing::warn!(
                            qid = self.qid,
                            cid = p.slot,
                            "NVMe/TCP data digest mismatch"
                        );
                    }
                    self.payload_done(p.slot, p.success, ok);
                }
                k
            }
        }
    }

    fn payload_done(&mut self, slot: u16, success: bool, digest_ok: bool) {
        self.st = Rx::Header { have: 0, need: 8 };
        let s = &mut self.slots[usize::from(slot)];
        if !digest_ok {
            s.bad_digest = true;
        }
        if success {
            let status = if s.bad_digest {
                Status::TRANSIENT_TRANSPORT_ERROR
            } else {
                Status::SUCCESS
            };
            self.complete(Cqe::new(slot, status, 0));
        }
    }

    fn complete(&mut self, mut cqe: Cqe) {
        let cid = cqe.cid.get();
        if cid == self.depth {
            if self.conn.as_ref().is_some_and(|c| c.phase == Phase::Auth) {
                return self.auth_step(&cqe);
            }
            return self.connect_done(&cqe);
        }
        let Some(s) = self.slots.get_mut(usize::from(cid)) else {
            return;
        };
        if s.bad_digest {
            cqe.set_status(Status::TRANSIENT_TRANSPORT_ERROR);
        } else if s.from_dev && s.got < s.len && cqe.status().is_success() {
            // Success without all the data: what is missing would be stale.
            cqe.set_status(Status::DATA_TRANSFER_ERROR);
        }
        s.completed = true;
        self.ready.push_back(cqe);
    }

    /// A busy slot `cid` that has not completed, or `None`.
    fn live_slot(&self, cid: u16) -> Option<&Slot> {
        self.slots
            .get(usize::from(cid))
            .filter(|s| s.busy && !s.completed)
    }

    fn header_done(&mut self, len: usize) {
        self.st = Rx::Header { have: 0, need: 8 };
        let hdr = self.hdr;
        let (pdu, layout) = match tcp::parse_header(&hdr[..len], &self.rx) {
            Ok(p) => p,
            Err(e) => return self.fatal(e, len),
        };
        match pdu {
            Pdu::CapsuleResp(r) => {
                let cqe = r.cqe;
                if self.live_slot(cqe.cid.get()).is_none() {
                    return self.fatal_at(Fes::InvalidHeaderField, "response for no command");
                }
                self.complete(cqe);
            }
            Pdu::C2HData(d) => {
                let cid = d.cccid.get();
                let (off, dlen) = (d.datao.get() as usize, layout.data_len as usize);
                let Some(s) = self.live_slot(cid) else {
                    return self.fatal_at(Fes::InvalidHeaderField, "data for no command");
                };
                if !s.from_dev || off.saturating_add(dlen) > s.len {
                    return self.fatal_at(Fes::DataOutOfRange, "read data out of range");
                }
                self.st = Rx::Payload(Payload {
                    slot: cid,
                    pad: layout.padding(),
                    at: off,
                    left: dlen,
                    dg: if layout.ddgst { DIGEST_LEN } else { 0 },
                    dg_bytes: [0; 4],
                    digest: DataDigest::new(),
                    success: d.ch.flags & tcp::flags::SUCCESS != 0,
                });
            }
            Pdu::R2T(r) => {
                let cid = r.cccid.get();
                let (off, len) = (r.r2to.get() as usize, r.r2tl.get() as usize);
                let Some(s) = self.live_slot(cid) else {
                    return self.fatal_at(Fes::InvalidHeaderField, "R2T for no command");
                };
                if s.from_dev || s.in_capsule || off.saturating_add(len) > s.len {
                    return self.fatal_at(Fes::DataOutOfRange, "R2T out of range");
                }
                self.send_h2c(cid, r.ttag.get(), off, len);
            }
            Pdu::IcResp(r) if self.conn.as_ref().is_some_and(|c| c.phase == Phase::IcResp) => {
                let (dgst, cpda, maxh2cdata) = (r.dgst, r.cpda, r.maxh2cdata.get());
                self.ic_resp_done(dgst, cpda, maxh2cdata);
            }
            Pdu::C2HTermReq(t) => {
                let (fes, fei) = (t.fes.get(), t.fei.get());
                self.close(&format!(
                    "controller terminated the connection (fes {fes:#x}, fei {fei})"
                ));
            }
            _ => {
                let e = PduError::SequenceError { pdu_type: hdr[0] };
                self.fatal(e, len);
            }
        }
    }

    /// Queues the H2CData PDUs answering an R2T for `len` bytes at `off`.
    fn send_h2c(&mut self, cid: u16, ttag: u16, off: usize, len: usize) {
        let chunk_max = self.maxh2cdata as usize;
        let mut at = off;
        let end = off + len;
        let tx = self.tx;
        while at < end {
            let chunk = (end - at).min(chunk_max);
            let h = DataHeader {
                cccid: cid,
                ttag,
                datao: u32::try_from(at).expect("invariant: within a command's data"),
                datal: u32::try_from(chunk).expect("invariant: within a command's data"),
                last: at + chunk == end,
                success: false,
            };
            if !self.push_header(|b| tcp::build_h2c_data(b, &h, &tx)) {
                return self.close("cannot build H2CData");
            }
            let s = &self.slots[usize::from(cid)];
            let piece = &s.buf[at..at + chunk];
            self.out.extend_from_slice(piece);
            if tx.digests.data {
                let d = tcp::data_digest(piece);
                self.out.extend_from_slice(&d.to_le_bytes());
            }
            at += chunk;
        }
    }
}

/// Plain bytes as a request (a driver-filled page).
struct Bytes<'a>(&'a [u8]);

// SAFETY: used only inside `submit_with_page`, where the TCP queue's
// `submit` copies a write's data into its send buffer before it returns
// (in-capsule or staged): nothing reads the borrowed page after the call,
// and no device has its address (the data goes over a socket).
unsafe impl Request for Bytes<'_> {
    fn segment_count(&self, _d: Data) -> usize {
        1
    }
    fn segment(&self, _d: Data, _i: usize) -> (usize, usize) {
        (self.0.as_ptr() as usize, self.0.len())
    }
    fn for_each_segment(&self, _d: Data, f: &mut dyn FnMut(&[u8])) {
        f(self.0);
    }
    fn for_each_segment_mut(&mut self, _d: Data, _f: &mut dyn FnMut(&mut [u8])) -> bool {
        false
    }
}

impl QueueTransport for TcpQueue {
    fn qid(&self) -> u16 {
        self.qid
    }

    fn depth(&self) -> u16 {
        self.depth
    }

    // `submit` and `submit_short` hand `submit_cmd` a fresh copy of the
    // command: inlined into the caller's `match` over transports
    // (`AnyQueue`), the copy is made in this arm only, so the caller's
    // command never has its address taken and stays in registers on the
    // PCIe arm.
    #[inline(always)]
    fn submit(
        &mut self,
        slot: u16,
        sqe: Sqe,
        req: &dyn Request,
        data: Data,
        dir: Dir,
    ) -> std::result::Result<Release, SubmitError> {
        self.submit_cmd(slot, Sqe::from_dwords(sqe.to_dwords()), req, data, dir)
    }

    #[inline(always)]
    fn submit_short(
        &mut self,
        slot: u16,
        sqe: Sqe,
        req: &dyn Request,
        data: Data,
        dir: Dir,
    ) -> std::result::Result<(), SubmitError> {
        self.submit_cmd(slot, Sqe::from_dwords(sqe.to_dwords()), req, data, dir)
            .map(drop)
    }

    fn submit_with_page(
        &mut self,
        slot: u16,
        sqe: &mut Sqe,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> std::result::Result<(), SubmitError> {
        let mut page = [0u8; 4096];
        let page = page.get_mut(..len).ok_or(SubmitError::Invalid)?;
        fill(page);
        let req = Bytes(page);
        self.submit(slot, *sqe, &req, Data::Main, Dir::ToDevice)
            .map(|_| ())
    }

    fn flush(&mut self) {
        if self.conn.is_some() {
            self.advance();
        } else {
            self.send_pending();
        }
    }

    fn reap_start(&mut self) {
        self.advance();
    }

    fn next_cqe(&mut self) -> Option<Cqe> {
        let c = self.ready.pop_front();
        self.reaped |= c.is_some();
        c
    }

    fn reap_end(&mut self) -> bool {
        std::mem::take(&mut self.reaped)
    }

    fn release(&mut self, slot: u16, req: Option<&mut dyn Request>) {
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            return;
        };
        if s.from_dev && s.len > 0 {
            if let Some(req) = req {
                let mut at = 0;
                let (buf, len) = (&s.buf, s.len);
                req.for_each_segment_mut(Data::Main, &mut |seg| {
                    let k = seg.len().min(len - at);
                    seg[..k].copy_from_slice(&buf[at..at + k]);
                    at += k;
                });
            }
        }
        s.busy = false;
        s.completed = false;
        s.from_dev = false;
    }

    fn dma(&self) -> bool {
        false
    }

    fn clear(&mut self) {
        if self.sock.is_some() {
            self.close(CLEARED);
        }
        self.conn = None;
        self.ready.clear();
        for s in self.slots.iter_mut() {
            s.busy = false;
            s.completed = false;
        }
    }

    fn is_alive(&self) -> bool {
        self.sock.is_some()
    }

    fn is_connecting(&self) -> bool {
        self.conn.is_some()
    }

    fn wake_fd(&self) -> Option<(RawFd, u64)> {
        self.sock.as_ref().map(|s| (s.as_raw_fd(), self.sock_id))
    }

    fn needs_poll(&self) -> bool {
        self.sock.is_some() && (self.out_pos < self.out.len() || self.more)
    }
}
