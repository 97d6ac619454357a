//! One NVMe/TCP connection (a queue pair): the receive state machine
//! over the spec crate's validating parser and the service step its poll
//! group runs; its end (drain, then close) is in `close.rs`.
//!
//! A queue pair belongs to one poll group thread and is never touched
//! elsewhere; its state is a `RefCell` borrowed for the whole service
//! step. Bdev completions arrive later through [`IoCompletion`], never
//! inside a submission, so the borrow cannot be re-entered.
//!
//! Commands are handled in `dispatch.rs` (fabrics and admin) and
//! `exec_io.rs` (I/O), responses built and the send queue flushed in
//! `respond.rs`; they are `impl` blocks of [`QpInner`].

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use bdevkit::bdev::{BdevIo, IoCompletion};
use bdevkit::clock;
use bdevkit::thread::Thread;
use bdevkit_nvme_spec::tcp::{
    self, digest_bits, parse_common_header, parse_header, Digests, Fes, Pdu, PduError, RecvConfig,
    Role, TxConfig,
};
use bdevkit_nvme_spec::Status;

use super::conn::{ReadOutcome, RxBuf, Sock, TxItem, TxKind, TxQueue, RBUF_PRE_CONNECT};
use super::pool::{BufWaiter, GroupBufs};
use super::slot::{Slot, SlotState};
use super::view::{Env, SubsysView};
use crate::addr::ListenAddr;
use crate::ctrlr::Controller;
use crate::opts::{TransportOpts, ADMIN_IN_CAPSULE_DATA_SIZE};

/// PDUs handled per service step before other connections get a turn.
const RX_BUDGET: u32 = 256;
/// Data bytes worth a direct `readv` into the request buffer.
const DIRECT_MIN: usize = 4096;
/// How long a closing connection may take to send its last PDUs.
pub(crate) const LINGER_US: u64 = 1_000_000;
/// How long a connection may stay without a successful Connect.
const CONNECT_TIMEOUT_US: u64 = 30_000_000;
/// Control PDU buffer (ICResp 128, TermReq up to 152).
const CTL_MAX: usize = 160;
/// `TxItem::slot` of a control item: the ICResp buffer.
pub(crate) const CTL_ICRESP: u16 = 0;
/// `TxItem::slot` of a control item: the TermReq buffer.
pub(crate) const CTL_TERM: u16 = 1;

/// Where a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for ICReq.
    IcReq,
    /// Exchanging capsules.
    Ready,
    /// Going away: no more input; in-flight I/O drains, queued PDUs go
    /// out until `deadline` (ticks).
    Closing { deadline: u64 },
}

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

/// The association a Connect made.
#[derive(Debug)]
pub(crate) struct Assoc {
    pub qid: u16,
    pub ctrlr: Arc<Controller>,
    /// I/O queues: the subsystem's namespaces on this thread.
    pub view: Option<Rc<SubsysView>>,
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

/// A connection's state.
#[derive(Debug)]
pub(crate) struct QpInner<S: Sock> {
    pub sock: S,
    pub peer: ListenAddr,
    pub via: ListenAddr,
    pub phase: Phase,
    pub rcfg: RecvConfig,
    pub txcfg: TxConfig,
    pub rx: RxBuf,
    pub rxs: RxState,
    pub tx: TxQueue,
    pub retired: Vec<TxItem>,
    /// ICResp ([`CTL_ICRESP`]) and C2HTermReq ([`CTL_TERM`]) bytes.
    pub ctl: [[u8; CTL_MAX]; 2],
    pub ctl_len: [usize; 2],
    pub slots: Vec<Slot>,
    pub free: Vec<u16>,
    /// Bdev I/Os in flight.
    pub inflight: u32,
    pub conn: Option<Assoc>,
    pub opts: TransportOpts,
    /// In-capsule data accepted per command.
    pub icd_limit: u32,
    /// SQ head pointer reported in responses.
    pub sqhd: u16,
    /// SQ entries (SQSIZE + 1).
    pub sq_entries: u16,
    /// Outstanding Asynchronous Event Requests (slots).
    pub aers: Vec<u16>,
    /// Slots waiting for a `BdevIo`.
    pub io_wait: VecDeque<u16>,
    /// A capsule is waiting for a free slot.
    pub rx_blocked: bool,
    /// The socket may have more bytes (readable edge seen, no WouldBlock yet).
    pub can_read: bool,
    /// A send found the socket full.
    pub tx_blocked: bool,
    /// Ticks when the connection was accepted.
    pub created: u64,
    /// Why it closes, for the log.
    pub close_reason: &'static str,
    /// The poll group's side of the transport's buffer pool.
    pub bufs: Rc<GroupBufs>,
    /// This queue pair as the pool's waiting list knows it.
    pub waiter: Weak<dyn BufWaiter>,
    /// The last command was the first half of a fused pair (this slot):
    /// the next one must be its second half.
    pub fused_first: Option<u16>,
    /// The last command was a first half that failed: a second half next
    /// is aborted with it.
    pub fused_first_failed: bool,
    /// Bytes of in-capsule buffers of the slots (accounted in the pool).
    pub icd_bytes: u64,
}

/// One connection, owned by its poll group.
#[derive(Debug)]
pub(crate) struct Qpair<S: Sock> {
    pub q: RefCell<QpInner<S>>,
    /// The group should service it on its next poll.
    pub kick: Cell<bool>,
    /// Finished: the group drops it.
    pub done: Cell<bool>,
    /// A wait for a free `BdevIo` is queued with the bdev layer.
    pub wait_armed: Cell<bool>,
    me: Weak<Qpair<S>>,
}

impl<S: Sock + 'static> Qpair<S> {
    /// A new connection on `sock` from `peer`, accepted on `via`.
    pub fn new(
        sock: S,
        peer: ListenAddr,
        via: ListenAddr,
        opts: TransportOpts,
        bufs: Rc<GroupBufs>,
    ) -> Rc<Qpair<S>> {
        let rcfg = RecvConfig {
            max_data_len: ADMIN_IN_CAPSULE_DATA_SIZE.max(opts.max_io_size),
            ..RecvConfig::new(Role::Controller)
        };
        Rc::new_cyclic(|me| Qpair {
            q: RefCell::new(QpInner {
                sock,
                peer,
                via,
                phase: Phase::IcReq,
                rcfg,
                txcfg: TxConfig::default(),
                rx: RxBuf::new(RBUF_PRE_CONNECT),
                rxs: RxState::Header,
                tx: TxQueue::with_capacity(8),
                retired: Vec::with_capacity(8),
                ctl: [[0; CTL_MAX]; 2],
                ctl_len: [0; 2],
                // One slot until Connect says how deep the queue is.
                slots: vec![Slot::new(None)],
                free: vec![0],
                inflight: 0,
                conn: None,
                icd_limit: ADMIN_IN_CAPSULE_DATA_SIZE,
                opts,
                sqhd: 0,
                sq_entries: 1,
                aers: Vec::new(),
                io_wait: VecDeque::new(),
                rx_blocked: false,
                can_read: true,
                tx_blocked: false,
                created: clock::ticks(),
                close_reason: "",
                bufs,
                waiter: me.clone() as Weak<dyn BufWaiter>,
                fused_first: None,
                fused_first_failed: false,
                icd_bytes: 0,
            }),
            kick: Cell::new(true),
            done: Cell::new(false),
            wait_armed: Cell::new(false),
            me: me.clone(),
        })
    }

    /// Whether the next poll must service it even without socket events.
    #[inline]
    pub fn wants_service(&self) -> bool {
        if self.kick.get() {
            return true;
        }
        match self.q.try_borrow() {
            Ok(q) => {
                q.conn.as_ref().is_some_and(|a| a.ctrlr.needs_attention())
                    || matches!(q.phase, Phase::Closing { .. })
            }
            Err(_) => true,
        }
    }

    /// Socket events from the group's poll.
    pub fn on_event(&self, readable: bool, writable: bool) {
        if let Ok(mut q) = self.q.try_borrow_mut() {
            if readable {
                q.can_read = true;
            }
            if writable {
                q.tx_blocked = false;
            }
        }
        self.kick.set(true);
    }

    /// One service step: controller events, input, I/O waiting for a
    /// `BdevIo`, output; then the end of a closing connection. Returns
    /// whether it did anything.
    pub fn service(self: &Rc<Self>, env: &Env) -> bool {
        let Ok(mut q) = self.q.try_borrow_mut() else {
            return false;
        };
        self.kick.set(false);
        let mut busy = false;
        if q.conn.as_ref().is_some_and(|a| a.ctrlr.needs_attention()) {
            q.attention();
            busy = true;
        }
        if !matches!(q.phase, Phase::Closing { .. }) {
            busy |= q.receive(self, env);
        }
        if !q.io_wait.is_empty() && !self.wait_armed.get() {
            busy |= q.retry_io_wait(self);
        }
        busy |= q.flush_tx(self);
        if let Phase::Closing { deadline } = q.phase {
            if q.inflight == 0 && (q.tx.is_empty() || clock::ticks() > deadline) {
                q.finish(env);
                self.done.set(true);
                return true;
            }
        }
        if q.rx_blocked && !q.free.is_empty() {
            q.rx_blocked = false;
            self.kick.set(true);
        }
        busy
    }

    /// Periodic checks (the group's timer): keep alive expiry of an admin
    /// queue's controller, connections that never connected.
    pub fn housekeeping(&self, now: u64) {
        let Ok(mut q) = self.q.try_borrow_mut() else {
            return;
        };
        match &q.conn {
            Some(a) if a.qid == 0 && a.ctrlr.keep_alive_expired(now) => {
                a.ctrlr.kill(crate::ctrlr::DeathCause::KeepAlive);
                self.kick.set(true);
            }
            None if now.saturating_sub(q.created) > clock::us_to_ticks(CONNECT_TIMEOUT_US) => {
                q.begin_close("no connect in time", false);
                self.kick.set(true);
            }
            _ => {}
        }
    }

    /// Closes the connection (target shutdown, subsystem or host removed).
    pub fn disconnect(&self, why: &'static str) {
        if let Ok(mut q) = self.q.try_borrow_mut() {
            q.begin_close(why, false);
        }
        self.kick.set(true);
    }

    /// Ends the connection at once (its owner goes): the association ends
    /// without waiting for I/O in flight.
    pub fn abandon(&self, env: &Env) {
        if let Ok(mut q) = self.q.try_borrow_mut() {
            q.begin_close("abandoned", false);
            q.finish(env);
        }
        self.done.set(true);
    }

    /// A handle for bdev completions (an `Rc` clone, no allocation).
    pub fn handler(self: &Rc<Self>) -> Rc<dyn IoCompletion> {
        Rc::clone(self) as Rc<dyn IoCompletion>
    }

    /// Arms a wake-up for when a `BdevIo` is free again.
    pub fn weak(&self) -> Weak<Qpair<S>> {
        self.me.clone()
    }
}

impl<S: Sock + 'static> IoCompletion for Qpair<S> {
    fn io_done(&self, mut io: BdevIo) {
        let tag = io.tag();
        let status = io.status();
        let buf = io.take_buf();
        // Compare-and-write: the write data (the fused pair's second half).
        let aux = io.take_aux_buf();
        drop(io);
        match self.q.try_borrow_mut() {
            Ok(mut q) => {
                q.io_completed(tag, status, buf, aux);
                // The last command in flight has nothing to share a send
                // with: its response goes now, not at the group's next
                // poll (one epoll_wait and a reactor round later).
                if q.inflight == 0 && !matches!(q.phase, Phase::Closing { .. }) {
                    if let Some(me) = self.me.upgrade() {
                        q.flush_tx(&me);
                    }
                }
            }
            Err(_) => {
                // Cannot happen (completions never run inside a service
                // step); finish it from a message rather than lose it.
                if let (Some(me), Some(t)) = (self.me.upgrade(), Thread::current()) {
                    t.defer(move || {
                        if let Ok(mut q) = me.q.try_borrow_mut() {
                            q.io_completed(tag, status, buf, aux);
                        }
                        me.kick.set(true);
                    });
                }
            }
        }
        self.kick.set(true);
    }
}

impl<S: Sock + 'static> QpInner<S> {
    /// Reads and handles PDUs until the socket is empty, a capsule waits
    /// for a slot, or the budget is spent.
    fn receive(&mut self, me: &Rc<Qpair<S>>, env: &Env) -> bool {
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
            if !self.can_read {
                return busy;
            }
            match self.read_more() {
                Ok(ReadOutcome::Got(_)) => busy = true,
                // Edge-triggered events: bytes arriving after this read
                // raise a new readable event, so waiting for it is safe.
                Ok(ReadOutcome::Drained(_)) => {
                    busy = true;
                    self.can_read = false;
                }
                Ok(ReadOutcome::WouldBlock) => {
                    self.can_read = false;
                    return busy;
                }
                Ok(ReadOutcome::Eof) => {
                    self.begin_close("host closed the connection", false);
                    return true;
                }
                Err(e) => {
                    tracing::debug!(peer = %self.peer, error = %e, "recv failed");
                    self.begin_close("recv error", false);
                    return true;
                }
            }
        }
    }

    /// One `read` into the receive buffer, or a `readv` straight into a
    /// request buffer when a large data body is expected.
    fn read_more(&mut self) -> std::io::Result<ReadOutcome> {
        if let RxState::Body(b) = &mut self.rxs {
            let left = b.len - b.got;
            if b.pad == 0 && left >= DIRECT_MIN && self.rx.len() == 0 {
                let slot = match b.target {
                    BodyFor::Capsule(s) | BodyFor::H2C(s) => usize::from(s),
                };
                if let Some(s) = self.slots.get_mut(slot) {
                    let off = b.start + b.got;
                    if let Some(dest) = s.data_mut().get_mut(off..off + left) {
                        let (o, n) = self.rx.read_into(&mut self.sock, dest)?;
                        b.got += n;
                        return Ok(o);
                    }
                }
            }
        }
        self.rx.read_from(&mut self.sock)
    }

    fn step(&mut self, me: &Rc<Qpair<S>>, env: &Env) -> Step {
        if matches!(self.phase, Phase::Closing { .. }) {
            return Step::Stop;
        }
        match self.rxs {
            RxState::Header => self.step_header(me, env),
            RxState::Body(b) => self.step_body(b, me, env),
        }
    }

    fn step_header(&mut self, me: &Rc<Qpair<S>>, env: &Env) -> Step {
        let avail = self.rx.avail();
        if avail.len() < 8 {
            return Step::NeedMore;
        }
        let layout = match parse_common_header(avail, &self.rcfg) {
            Ok(l) => l,
            Err(e) => return self.fatal_pdu(e),
        };
        let hl = layout.header_len();
        if avail.len() < hl {
            return Step::NeedMore;
        }
        let (pdu, layout) = match parse_header(&avail[..hl], &self.rcfg) {
            Ok(p) => p,
            Err(e) => return self.fatal_pdu(e),
        };
        let pad = layout.padding();
        let data_len = layout.data_len as usize;
        match pdu {
            Pdu::IcReq(r) => {
                let (hpda, dgst) = (r.hpda, r.dgst);
                self.rx.consume(hl);
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
                self.rx.consume(self.rx.len());
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
                self.rx.consume(hl);
                let admin = self.conn.as_ref().is_none_or(|a| a.qid == 0);
                let s = &mut self.slots[usize::from(slot)];
                s.start(sqe, layout.data_len);
                if data_len == 0 {
                    self.on_capsule(me, env, slot);
                    return Step::Progress;
                }
                if !s.ensure(data_len, admin) {
                    // Cannot happen: I/O buffers hold max_io_size >= the limit.
                    return self.fatal(Fes::DataLimitExceeded, 0);
                }
                self.rxs = RxState::Body(Body {
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
                if datao != s.h2c_done || datao.checked_add(datal).is_none_or(|e| e > s.xfer) {
                    return self.fatal(Fes::DataOutOfRange, 0);
                }
                self.rx.consume(hl);
                self.rxs = RxState::Body(Body {
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

    fn step_body(&mut self, mut b: Body, me: &Rc<Qpair<S>>, env: &Env) -> Step {
        let mut progressed = false;
        if b.pad > 0 {
            let n = b.pad.min(self.rx.len());
            self.rx.consume(n);
            b.pad -= n;
            progressed |= n > 0;
        }
        if b.pad == 0 && b.got < b.len {
            let n = (b.len - b.got).min(self.rx.len());
            if n > 0 {
                let slot = match b.target {
                    BodyFor::Capsule(s) | BodyFor::H2C(s) => usize::from(s),
                };
                let off = b.start + b.got;
                let src = &self.rx.avail()[..n];
                if let Some(dst) = self.slots[slot].data_mut().get_mut(off..off + n) {
                    dst.copy_from_slice(src);
                }
                self.rx.consume(n);
                b.got += n;
                progressed = true;
            }
        }
        if b.pad == 0 && b.got == b.len && b.ddgst && b.dg_have < 4 {
            let n = (4 - b.dg_have).min(self.rx.len());
            b.dg[b.dg_have..b.dg_have + n].copy_from_slice(&self.rx.avail()[..n]);
            self.rx.consume(n);
            b.dg_have += n;
            progressed |= n > 0;
        }
        let complete = b.pad == 0 && b.got == b.len && (!b.ddgst || b.dg_have == 4);
        if !complete {
            self.rxs = RxState::Body(b);
            return if progressed {
                Step::Progress
            } else {
                Step::NeedMore
            };
        }
        self.rxs = RxState::Header;
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
                s.h2c_done += u32::try_from(b.len).unwrap_or(u32::MAX);
                if s.h2c_done >= s.xfer {
                    s.state = SlotState::Exec;
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
        let n = tcp::build_ic_resp(&mut self.ctl[0], 0, digests, self.opts.max_io_size);
        let Ok(n) = n else {
            self.begin_close("icresp", false);
            return;
        };
        self.ctl_len[0] = n;
        self.tx.push(TxItem {
            kind: TxKind::Control,
            slot: CTL_ICRESP,
        });
        self.rcfg = self.rcfg.connected(digests, 0);
        self.txcfg = TxConfig { digests, pda: hpda };
        self.phase = Phase::Ready;
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
        let avail = self.rx.avail();
        let n = avail.len().min(128);
        hdr[..n].copy_from_slice(&avail[..n]);
        let ch_len = if n >= 8 {
            usize::from(avail[2]).min(n)
        } else {
            n
        };
        if let Ok(len) =
            tcp::build_term_req(&mut self.ctl[1], Role::Controller, fes, fei, &hdr[..ch_len])
        {
            self.ctl_len[1] = len;
            self.tx.push(TxItem {
                kind: TxKind::Control,
                slot: CTL_TERM,
            });
        }
        self.rx.consume(self.rx.len());
        tracing::warn!(peer = %self.peer, ?fes, fei, "fatal transport error: C2HTermReq");
        self.begin_close("fatal transport error", true);
        Step::Stop
    }

    /// The controller needs this queue: it died, or events wait for AERs.
    fn attention(&mut self) {
        let Some(a) = &self.conn else { return };
        if a.ctrlr.is_dead() {
            self.begin_close("controller torn down", true);
            return;
        }
        if a.qid == 0 {
            self.deliver_events();
        }
    }

    /// Completes outstanding AERs with queued events.
    pub(crate) fn deliver_events(&mut self) {
        let Some(a) = &self.conn else { return };
        let ctrlr = Arc::clone(&a.ctrlr);
        ctrlr.clear_attention();
        while !self.aers.is_empty() {
            let Some(ev) = ctrlr.take_event() else { break };
            let slot = self.aers.remove(0);
            self.respond(slot, Status::SUCCESS, ev, 0);
        }
    }
}
