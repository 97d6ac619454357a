//! One NVMe/TCP connection's transport half ([`TcpQpair`], the core
//! queue pair's [`QpTransport`]): the receive state machine over the spec
//! crate's validating parser (ICReq, command capsules, H2CData, digests,
//! TermReq), the SGL rules of NVMe/TCP, and the socket events. What it
//! sends (responses, C2HData, R2T) and the send queue flush are in
//! `respond.rs`; what the commands mean is the core's.

use std::rc::Rc;

use bdevkit_nvme_spec::opcode::DataTransfer;
use bdevkit_nvme_spec::sgl::{SglType, SGL_SUBTYPE_TRANSPORT};
use bdevkit_nvme_spec::tcp::{
    self, digest_bits, parse_common_header, parse_header, Digests, Fes, Pdu, PduError, RecvConfig,
    Role, TxConfig,
};
use bdevkit_nvme_spec::{Cqe, Status};

use super::conn::{ReadOutcome, RxBuf, Sock, TxItem, TxKind, TxQueue, RBUF_PRE_CONNECT, RBUF_SIZE};
use crate::core::dispatch::{common_xfer, direction};
use crate::core::qpair::{QpInner, QpTransport, Qpair, Sent, Xfer};
use crate::core::slot::{Slot, SlotState};
use crate::core::view::Env;
use crate::opts::{TransportOpts, ADMIN_IN_CAPSULE_DATA_SIZE};

/// PDUs handled per service step before other connections get a turn.
const RX_BUDGET: u32 = 256;
/// Data bytes worth a direct `readv` into the request buffer.
const DIRECT_MIN: usize = 4096;
/// Control PDU buffer (ICResp 128, TermReq up to 152).
const CTL_MAX: usize = 160;
/// `TxItem::slot` of a control item: the ICResp buffer.
pub(crate) const CTL_ICRESP: u16 = 0;
/// `TxItem::slot` of a control item: the TermReq buffer.
pub(crate) const CTL_TERM: u16 = 1;
/// Bytes of a data PDU header (24), its header digest (4) and padding up
/// to the host's data alignment (HPDA at most 31: 128 bytes).
pub(crate) const DATA_HDR_MAX: usize = 128;
/// A response capsule (24) and its header digest.
pub(crate) const RESP_MAX: usize = 28;

/// A TCP queue pair.
pub(crate) type Qp<S> = Qpair<TcpQpair<S>>;

/// What a PDU's body goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFor {
    /// A command capsule's in-capsule data (slot).
    Capsule(u16),
    /// H2C data (slot), last PDU of the transfer or not.
    H2C(u16),
}

/// The receive side after a header: padding, data, data digest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Body {
    pub target: BodyFor,
    pub pad: usize,
    /// Offset in the slot's buffer where the data begins.
    pub start: usize,
    pub len: usize,
    /// Data bytes received.
    pub got: usize,
    pub ddgst: bool,
    pub dg_have: usize,
    pub dg: [u8; 4],
}

/// Receive state.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RxState {
    Header,
    Body(Body),
}

/// Result of one receive step.
enum Step {
    /// A PDU (or part of one) was consumed.
    Progress,
    /// More bytes are needed.
    NeedMore,
    /// A capsule waits for a free slot.
    Blocked,
    /// The connection is closing.
    Stop,
}

/// What happens when the last queued PDU of a slot is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterTx {
    /// The command is done: free the slot.
    Free,
    /// An R2T went out: keep waiting for data.
    Keep,
}

/// The TCP part of a request slot: the PDUs it sends.
#[derive(Debug)]
pub(crate) struct TcpReq {
    /// H2C data bytes received so far.
    pub h2c_done: u32,
    /// C2H data bytes to send (0: none).
    pub c2h_len: u32,
    /// Queued PDUs not yet sent.
    pub tx_parts: u8,
    pub after_tx: AfterTx,
    /// C2HData or R2T header, its digest and padding.
    pub hdr: [u8; DATA_HDR_MAX],
    pub hdr_len: u8,
    /// CapsuleResp and its digest.
    pub resp: [u8; RESP_MAX],
    pub resp_len: u8,
    /// Data digest of the C2H data, little-endian.
    pub ddgst: [u8; 4],
}

impl Default for TcpReq {
    fn default() -> Self {
        TcpReq {
            h2c_done: 0,
            c2h_len: 0,
            tx_parts: 0,
            after_tx: AfterTx::Free,
            hdr: [0; DATA_HDR_MAX],
            hdr_len: 0,
            resp: [0; RESP_MAX],
            resp_len: 0,
            ddgst: [0; 4],
        }
    }
}

impl TcpReq {
    /// Readies it for a new command.
    #[inline]
    pub fn start(&mut self) {
        self.h2c_done = 0;
        self.c2h_len = 0;
        self.tx_parts = 0;
        self.after_tx = AfterTx::Free;
    }
}

/// The TCP half of a queue pair: the byte stream and what moves on it.
#[derive(Debug)]
pub(crate) struct TcpQpair<S: Sock> {
    pub sock: S,
    pub rcfg: RecvConfig,
    pub txcfg: TxConfig,
    pub rx: RxBuf,
    pub rxs: RxState,
    pub tx: TxQueue,
    pub retired: Vec<TxItem>,
    /// ICResp ([`CTL_ICRESP`]) and C2HTermReq ([`CTL_TERM`]) bytes.
    pub ctl: [[u8; CTL_MAX]; 2],
    pub ctl_len: [usize; 2],
    /// C2HData may carry the SUCCESS flag (`c2h_success`).
    pub c2h_success: bool,
    /// The socket may have more bytes (readable edge seen, no WouldBlock yet).
    pub can_read: bool,
    /// A send found the socket full.
    pub tx_blocked: bool,
    /// What the stream's secure channel authenticated (TLS identity).
    pub identity: fn(&S) -> Option<(String, String)>,
}

impl<S: Sock> TcpQpair<S> {
    /// A new connection's transport half over `sock`.
    pub fn new(sock: S, opts: &TransportOpts) -> TcpQpair<S> {
        TcpQpair {
            sock,
            rcfg: RecvConfig {
                max_data_len: ADMIN_IN_CAPSULE_DATA_SIZE.max(opts.max_io_size),
                ..RecvConfig::new(Role::Controller)
            },
            txcfg: TxConfig::default(),
            rx: RxBuf::new(RBUF_PRE_CONNECT),
            rxs: RxState::Header,
            tx: TxQueue::with_capacity(8),
            retired: Vec::with_capacity(8),
            ctl: [[0; CTL_MAX]; 2],
            ctl_len: [0; 2],
            c2h_success: opts.c2h_success,
            can_read: true,
            tx_blocked: false,
            identity: |_| None,
        }
    }
}

impl<S: Sock + 'static> QpTransport for TcpQpair<S> {
    type Req = TcpReq;

    fn secure_identity(&self) -> Option<(String, String)> {
        (self.identity)(&self.sock)
    }

    #[inline]
    fn receive(q: &mut QpInner<Self>, me: &Rc<Qpair<Self>>, env: &Env) -> bool {
        q.receive(me, env)
    }

    #[inline]
    fn flush(q: &mut QpInner<Self>, me: &Rc<Qpair<Self>>) -> bool {
        q.flush_tx(me)
    }

    #[inline]
    fn tx_idle(&self) -> bool {
        self.tx.is_empty()
    }

    fn connected(&mut self, entries: usize) {
        self.rx.grow(RBUF_SIZE);
        self.tx.reserve(2 * entries + 4);
        self.retired.reserve(2 * entries + 4);
    }

    #[inline]
    fn setup_xfer(s: &mut Slot<TcpReq>, max: u32) -> Result<Xfer, Status> {
        setup_xfer(s, max)
    }

    #[inline]
    fn respond(&mut self, s: &mut Slot<TcpReq>, slot: u16, cqe: &Cqe) -> bool {
        self.queue_resp(s, slot, cqe)
    }

    #[inline]
    fn send_data(&mut self, s: &mut Slot<TcpReq>, slot: u16, len: u32, dw0: u32) -> Sent {
        self.queue_c2h(s, slot, len, dw0)
    }

    #[inline]
    fn fetch_data(&mut self, s: &mut Slot<TcpReq>, slot: u16) -> bool {
        self.queue_r2t(s, slot)
    }
}

/// Checks the SGL of the slot's command against its capsule and `max`
/// (the largest transfer); sets `xfer` and `icd_off`. NVMe/TCP: data in
/// the capsule (an offset data block) or moved by the transport (a
/// transport data block: R2T and H2CData to the controller, C2HData to
/// the host).
pub(crate) fn setup_xfer<R>(s: &mut Slot<R>, max: u32) -> Result<Xfer, Status> {
    let sqe = s.sqe;
    if !sqe.psdt().is_sgl() {
        return Err(Status::INVALID_FIELD.with_dnr());
    }
    let sgl = sqe.sgl1();
    if (sgl.kind(), sgl.subtype()) != (SglType::TransportDataBlock, SGL_SUBTYPE_TRANSPORT) {
        return common_xfer(s, &sgl);
    }
    let len = sgl.length();
    if s.icd_len != 0 {
        // Data came in the capsule but the SGL does not describe it.
        return Err(Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    }
    if len > max {
        return Err(Status::DATA_SGL_LENGTH_INVALID.with_dnr());
    }
    s.xfer = len;
    Ok(match (len, direction(&sqe)) {
        (0, _) | (_, DataTransfer::None) => Xfer::None,
        (_, DataTransfer::HostToController) => Xfer::Fetch,
        (_, DataTransfer::ControllerToHost) => Xfer::Send,
        (_, DataTransfer::Bidirectional) => {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
    })
}

impl<S: Sock + 'static> Qp<S> {
    /// Socket events from the group's poll.
    pub fn on_event(&self, readable: bool, writable: bool) {
        if let Ok(mut q) = self.q.try_borrow_mut() {
            if readable {
                q.tp.can_read = true;
            }
            if writable {
                q.tp.tx_blocked = false;
            }
        }
        self.kick.set(true);
    }
}

impl<S: Sock + 'static> QpInner<TcpQpair<S>> {
    /// Reads and handles PDUs until the socket is empty, a capsule waits
    /// for a slot, or the budget is spent.
    fn receive(&mut self, me: &Rc<Qp<S>>, env: &Env) -> bool {
        let mut busy = false;
        let mut budget = RX_BUDGET;
        loop {
            match self.step(me, env) {
                Step::Progress => {
                    busy = true;
                    budget -= 1;
                    if budget == 0 {
                        me.kick.set(true);
                        return true;
                    }
                    continue;
                }
                Step::Blocked => {
                    self.rx_blocked = true;
                    return busy;
                }
                Step::Stop => return true,
                Step::NeedMore => {}
            }
            if !self.tp.can_read {
                return busy;
            }
            match self.read_more() {
                Ok(ReadOutcome::Got(_)) => busy = true,
                // Edge-triggered events: bytes arriving after this read
                // raise a new readable event, so waiting for it is safe.
                Ok(ReadOutcome::Drained(_)) => {
                    busy = true;
                    self.tp.can_read = false;
                }
                Ok(ReadOutcome::WouldBlock) => {
                    self.tp.can_read = false;
                    return busy;
                }
                Ok(ReadOutcome::Eof) => {
                    self.begin_close("host closed the connection", false);
                    return true;
                }
                Err(e) => {
                    if e.get_ref()
                        .is_some_and(|i| i.is::<bdevkit_nvme_tls::Error>())
                    {
                        tracing::warn!(peer = %self.peer, error = %e, "TLS refused");
                    } else {
                        tracing::debug!(peer = %self.peer, error = %e, "recv failed");
                    }
                    self.begin_close("recv error", false);
                    return true;
                }
            }
        }
    }

    /// One `read` into the receive buffer, or a `readv` straight into a
    /// request buffer when a large data body is expected.
    fn read_more(&mut self) -> std::io::Result<ReadOutcome> {
        if let RxState::Body(b) = &mut self.tp.rxs {
            let left = b.len - b.got;
            if b.pad == 0 && left >= DIRECT_MIN && self.tp.rx.len() == 0 {
                let slot = match b.target {
                    BodyFor::Capsule(s) | BodyFor::H2C(s) => usize::from(s),
                };
                if let Some(s) = self.slots.get_mut(slot) {
                    let off = b.start + b.got;
                    if let Some(dest) = s.data_mut().get_mut(off..off + left) {
                        let (o, n) = self.tp.rx.read_into(&mut self.tp.sock, dest)?;
                        b.got += n;
                        return Ok(o);
                    }
                }
            }
        }
        self.tp.rx.read_from(&mut self.tp.sock)
    }

    fn step(&mut self, me: &Rc<Qp<S>>, env: &Env) -> Step {
        if self.closing() {
            return Step::Stop;
        }
        match self.tp.rxs {
            RxState::Header => self.step_header(me, env),
            RxState::Body(b) => self.step_body(b, me, env),
        }
    }

    fn step_header(&mut self, me: &Rc<Qp<S>>, env: &Env) -> Step {
        let avail = self.tp.rx.avail();
        if avail.len() < 8 {
            return Step::NeedMore;
        }
        let layout = match parse_common_header(avail, &self.tp.rcfg) {
            Ok(l) => l,
            Err(e) => return self.fatal_pdu(e),
        };
        let hl = layout.header_len();
        if avail.len() < hl {
            return Step::NeedMore;
        }
        let (pdu, layout) = match parse_header(&avail[..hl], &self.tp.rcfg) {
            Ok(p) => p,
            Err(e) => return self.fatal_pdu(e),
        };
        let pad = layout.padding();
        let data_len = layout.data_len as usize;
        match pdu {
            Pdu::IcReq(r) => {
                let (hpda, dgst) = (r.hpda, r.dgst);
                self.tp.rx.consume(hl);
                self.on_icreq(hpda, dgst);
                Step::Progress
            }
            Pdu::H2CTermReq(t) => {
                tracing::info!(
                    peer = %self.peer,
                    fes = t.fes.get(),
                    fei = t.fei.get(),
                    "host terminated the connection"
                );
                self.tp.rx.consume(self.tp.rx.len());
                self.begin_close("H2CTermReq", false);
                Step::Stop
            }
            Pdu::CapsuleCmd(c) => {
                if layout.data_len > self.icd_limit {
                    return self.fatal(Fes::DataLimitExceeded, 0);
                }
                let Some(slot) = self.free.pop() else {
                    return Step::Blocked;
                };
                let sqe = c.sqe;
                self.tp.rx.consume(hl);
                let admin = self.is_admin();
                let s = &mut self.slots[usize::from(slot)];
                s.start(sqe, layout.data_len);
                s.tp.start();
                if data_len == 0 {
                    self.on_capsule(me, env, slot);
                    return Step::Progress;
                }
                if !s.ensure(data_len, admin) {
                    // Cannot happen: I/O buffers hold max_io_size >= the limit.
                    return self.fatal(Fes::DataLimitExceeded, 0);
                }
                self.tp.rxs = RxState::Body(Body {
                    target: BodyFor::Capsule(slot),
                    pad,
                    start: 0,
                    len: data_len,
                    got: 0,
                    ddgst: layout.ddgst,
                    dg_have: 0,
                    dg: [0; 4],
                });
                Step::Progress
            }
            Pdu::H2CData(h) => {
                let (cccid, ttag) = (h.cccid.get(), h.ttag.get());
                let (datao, datal) = (h.datao.get(), h.datal.get());
                let Some(s) = self.slots.get(usize::from(ttag)) else {
                    return self.fatal(Fes::InvalidHeaderField, 10);
                };
                if s.state != SlotState::AwaitData {
                    return self.fatal(Fes::InvalidHeaderField, 10);
                }
                if s.cid() != cccid {
                    return self.fatal(Fes::InvalidHeaderField, 8);
                }
                if datao != s.tp.h2c_done || datao.checked_add(datal).is_none_or(|e| e > s.xfer) {
                    return self.fatal(Fes::DataOutOfRange, 0);
                }
                self.tp.rx.consume(hl);
                self.tp.rxs = RxState::Body(Body {
                    target: BodyFor::H2C(ttag),
                    pad,
                    start: datao as usize,
                    len: data_len,
                    got: 0,
                    ddgst: layout.ddgst,
                    dg_have: 0,
                    dg: [0; 4],
                });
                Step::Progress
            }
            // The controller-side parser passes no other type.
            _ => self.fatal(Fes::PduSequenceError, 0),
        }
    }

    fn step_body(&mut self, mut b: Body, me: &Rc<Qp<S>>, env: &Env) -> Step {
        let mut progressed = false;
        if b.pad > 0 {
            let n = b.pad.min(self.tp.rx.len());
            self.tp.rx.consume(n);
            b.pad -= n;
            progressed |= n > 0;
        }
        if b.pad == 0 && b.got < b.len {
            let n = (b.len - b.got).min(self.tp.rx.len());
            if n > 0 {
                let slot = match b.target {
                    BodyFor::Capsule(s) | BodyFor::H2C(s) => usize::from(s),
                };
                let off = b.start + b.got;
                let src = &self.tp.rx.avail()[..n];
                if let Some(dst) = self.slots[slot].data_mut().get_mut(off..off + n) {
                    dst.copy_from_slice(src);
                }
                self.tp.rx.consume(n);
                b.got += n;
                progressed = true;
            }
        }
        if b.pad == 0 && b.got == b.len && b.ddgst && b.dg_have < 4 {
            let n = (4 - b.dg_have).min(self.tp.rx.len());
            b.dg[b.dg_have..b.dg_have + n].copy_from_slice(&self.tp.rx.avail()[..n]);
            self.tp.rx.consume(n);
            b.dg_have += n;
            progressed |= n > 0;
        }
        let complete = b.pad == 0 && b.got == b.len && (!b.ddgst || b.dg_have == 4);
        if !complete {
            self.tp.rxs = RxState::Body(b);
            return if progressed {
                Step::Progress
            } else {
                Step::NeedMore
            };
        }
        self.tp.rxs = RxState::Header;
        let slot = match b.target {
            BodyFor::Capsule(s) | BodyFor::H2C(s) => s,
        };
        let s = &mut self.slots[usize::from(slot)];
        if b.ddgst {
            let data = s.data().get(b.start..b.start + b.len).unwrap_or(&[]);
            if tcp::verify_data_digest(data, b.dg).is_err() {
                tracing::warn!(peer = %self.peer, cid = s.cid(), "data digest mismatch");
                s.digest_error = true;
            }
        }
        match b.target {
            BodyFor::Capsule(_) => self.on_capsule(me, env, slot),
            BodyFor::H2C(_) => {
                let s = &mut self.slots[usize::from(slot)];
                s.tp.h2c_done += u32::try_from(b.len).unwrap_or(u32::MAX);
                if s.tp.h2c_done >= s.xfer {
                    self.on_data_received(me, env, slot);
                }
            }
        }
        Step::Progress
    }

    fn on_icreq(&mut self, hpda: u8, dgst: u8) {
        let digests = Digests {
            header: dgst & digest_bits::HEADER != 0,
            data: dgst & digest_bits::DATA != 0,
        };
        let n = tcp::build_ic_resp(&mut self.tp.ctl[0], 0, digests, self.opts.max_io_size);
        let Ok(n) = n else {
            self.begin_close("icresp", false);
            return;
        };
        self.tp.ctl_len[0] = n;
        self.tp.tx.push(TxItem {
            kind: TxKind::Control,
            slot: CTL_ICRESP,
        });
        self.tp.rcfg = self.tp.rcfg.connected(digests, 0);
        self.tp.txcfg = TxConfig { digests, pda: hpda };
        tracing::info!(peer = %self.peer, ?digests, hpda, "icreq");
    }

    /// A malformed PDU: C2HTermReq with the parser's FES/FEI, then close.
    fn fatal_pdu(&mut self, e: PduError) -> Step {
        match e.fes() {
            Some(fes) => {
                tracing::warn!(peer = %self.peer, error = %e, "bad pdu");
                self.fatal(fes, e.fei())
            }
            // Incomplete is not an error (the caller checked lengths).
            None => Step::NeedMore,
        }
    }

    /// Sends a C2HTermReq (the offending header as its data) and closes.
    fn fatal(&mut self, fes: Fes, fei: u32) -> Step {
        let mut hdr = [0u8; 128];
        let avail = self.tp.rx.avail();
        let n = avail.len().min(128);
        hdr[..n].copy_from_slice(&avail[..n]);
        let ch_len = if n >= 8 {
            usize::from(avail[2]).min(n)
        } else {
            n
        };
        if let Ok(len) = tcp::build_term_req(
            &mut self.tp.ctl[1],
            Role::Controller,
            fes,
            fei,
            &hdr[..ch_len],
        ) {
            self.tp.ctl_len[1] = len;
            self.tp.tx.push(TxItem {
                kind: TxKind::Control,
                slot: CTL_TERM,
            });
        }
        self.tp.rx.consume(self.tp.rx.len());
        tracing::warn!(peer = %self.peer, ?fes, fei, "fatal transport error: C2HTermReq");
        self.begin_close("fatal transport error", true);
        Step::Stop
    }
}
