//! A queue pair as the core sees it, whatever carries it: its request
//! slots, the association its Connect made, the commands waiting for a
//! `BdevIo` or a data buffer, the fused pair state, and the service step
//! its poll group runs; and [`QpTransport`], the transport half of a
//! queue pair that the core drives (how bytes or work requests move).
//!
//! A queue pair belongs to one poll group thread and is never touched
//! elsewhere; its state is a `RefCell` borrowed for the whole service
//! step. Bdev completions arrive later through [`IoCompletion`], never
//! inside a submission, so the borrow cannot be re-entered.
//!
//! The queue pair is generic over its transport: the transport's receive
//! and send code and the core's command code are compiled together for
//! each transport, so a command crosses the seam with direct calls (no
//! dynamic dispatch, no allocation per command). Commands are handled in
//! `dispatch.rs` (fabrics and admin) and `exec_io.rs` (I/O, `fused.rs`),
//! answered in `respond.rs`, closed in `close.rs`; they are `impl`
//! blocks of [`QpInner`].

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use bdevkit::bdev::{BdevIo, IoCompletion};
use bdevkit::clock;
use bdevkit::thread::Thread;
use bdevkit_nvme_spec::{Cqe, Status};

use super::pool::{BufWaiter, GroupBufs};
use super::slot::Slot;
use super::view::{Env, SubsysView};
use crate::addr::ListenAddr;
use crate::ctrlr::Controller;
use crate::opts::{TransportOpts, ADMIN_IN_CAPSULE_DATA_SIZE};

/// How long a closing connection may take to send its last PDUs.
pub(crate) const LINGER_US: u64 = 1_000_000;
/// How long a connection may stay without a successful Connect.
const CONNECT_TIMEOUT_US: u64 = 30_000_000;

/// Where a command's data is (its transport reads the SGL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Xfer {
    /// No data.
    None,
    /// Host data in the capsule (already received).
    InCapsule,
    /// Host data to fetch ([`QpTransport::fetch_data`]).
    Fetch,
    /// Data to send to the host ([`QpTransport::send_data`]).
    Send,
}

/// What [`QpTransport::send_data`] queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    /// The data, which also tells the host that the command succeeded
    /// (TCP: C2HData with the SUCCESS flag): no response capsule follows.
    Answered,
    /// The data; the core queues the response after it.
    NeedsResponse,
    /// Nothing (cannot happen with valid headers): the command stays.
    Failed,
}

/// The transport half of a queue pair, driven by the core (the
/// per-connection part of the transport seam; a transport's control path
/// makes these: `transport/`). The core's
/// [`Qpair`] holds one in [`QpInner::tp`] and each request slot holds a
/// [`QpTransport::Req`]. Every method runs on the queue pair's poll group
/// thread, inside a service step or a completion (the queue pair's
/// state borrowed); none may block. All are required.
///
/// The core owns what a command means (its checks, its bdev I/O, its
/// status, the slot's state); the transport owns how its bytes move:
/// receiving capsules and data into the slots' buffers, and sending the
/// data and responses the core asks for.
pub(crate) trait QpTransport: Sized + 'static {
    /// What the transport keeps per request slot (TCP: the headers of its
    /// PDUs); made with the slot table, reused for every command.
    type Req: Default + std::fmt::Debug;

    /// Receives what the host sent and hands it to the core: each command
    /// (with any in-capsule data) into a free slot ([`Slot::start`], then
    /// [`QpInner::on_capsule`]), fetched data into the slot's buffer
    /// ([`Slot::data_mut`], then [`QpInner::on_data_received`]); with no
    /// free slot it sets `rx_blocked` and stops. Called once per service
    /// step while the queue is not closing; returns whether it did
    /// anything. It may close the queue ([`QpInner::begin_close`]) on a
    /// protocol error or when the host went away.
    fn receive(q: &mut QpInner<Self>, me: &Rc<Qpair<Self>>, env: &Env) -> bool;

    /// Sends what is queued, as far as the connection takes it; releases
    /// each slot whose answer has gone ([`QpInner::release_slot`]).
    /// Called at the end of each service step and when the last command
    /// in flight completes; returns whether it did anything.
    fn flush(q: &mut QpInner<Self>, me: &Rc<Qpair<Self>>) -> bool;

    /// Whether nothing waits to be sent (a closing queue ends once this
    /// holds and no bdev I/O is in flight, or at its linger deadline).
    fn tx_idle(&self) -> bool;

    /// The queue connected with `entries` slots: size what grows with the
    /// queue depth (so that nothing allocates per command after this).
    fn connected(&mut self, entries: usize);

    /// Where the data of the slot's command is: reads its SGL against
    /// what the capsule carried (`icd_len`) and `max` (the largest
    /// transfer), sets `xfer` (and `icd_off` for in-capsule data), and
    /// keeps in `s.tp` what it needs to move the data. An error status
    /// answers the command.
    fn setup_xfer(s: &mut Slot<Self::Req>, max: u32) -> Result<Xfer, Status>;

    /// Queues the response capsule `cqe` of `slot`; the slot is released
    /// once it has been sent. `false`: nothing was queued (cannot happen
    /// with valid values).
    fn respond(&mut self, s: &mut Slot<Self::Req>, slot: u16, cqe: &Cqe) -> bool;

    /// Queues the first `len` bytes of the slot's data ([`Slot::data`])
    /// for the host, a successful command's result with completion dword
    /// 0 `dw0`; says whether that also answers the command.
    fn send_data(&mut self, s: &mut Slot<Self::Req>, slot: u16, len: u32, dw0: u32) -> Sent;

    /// Asks the host for the slot's data (`xfer` bytes, into
    /// [`Slot::data_mut`] from 0); once it is all in, the transport calls
    /// [`QpInner::on_data_received`]. `false`: nothing was asked.
    fn fetch_data(&mut self, s: &mut Slot<Self::Req>, slot: u16) -> bool;

    /// The (host NQN, subsystem NQN) that the connection's secure channel
    /// authenticated (NVMe/TCP: the TLS PSK identity), `None` on a plain
    /// connection: a Connect must name exactly these.
    fn secure_identity(&self) -> Option<(String, String)> {
        None
    }
}

/// Where a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Taking commands (its transport may still be setting up).
    Open,
    /// Going away: no more input; in-flight I/O drains, queued PDUs go
    /// out until `deadline` (ticks).
    Closing { deadline: u64 },
}

/// The association a Connect made.
#[derive(Debug)]
pub(crate) struct Assoc {
    pub qid: u16,
    pub ctrlr: Arc<Controller>,
    /// I/O queues: the subsystem's namespaces on this thread.
    pub view: Option<Rc<SubsysView>>,
}

/// A connection's state.
#[derive(Debug)]
pub(crate) struct QpInner<T: QpTransport> {
    /// The transport's half.
    pub tp: T,
    pub peer: ListenAddr,
    pub via: ListenAddr,
    pub phase: Phase,
    pub slots: Vec<Slot<T::Req>>,
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
    /// A command is waiting for a free slot (set by the transport).
    pub rx_blocked: bool,
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
    /// DH-HMAC-CHAP on this queue.
    pub auth: super::auth::QueueAuth,
    /// Ticks when its authentication (transaction) began.
    pub auth_since: u64,
}

/// One connection, owned by its poll group.
#[derive(Debug)]
pub(crate) struct Qpair<T: QpTransport> {
    pub q: RefCell<QpInner<T>>,
    /// The group should service it on its next poll.
    pub kick: Cell<bool>,
    /// Finished: the group drops it.
    pub done: Cell<bool>,
    /// A wait for a free `BdevIo` is queued with the bdev layer.
    pub wait_armed: Cell<bool>,
    me: Weak<Qpair<T>>,
}

impl<T: QpTransport> Qpair<T> {
    /// A new connection over the transport's `tp`, from `peer`, accepted
    /// on `via`.
    pub fn new(
        tp: T,
        peer: ListenAddr,
        via: ListenAddr,
        opts: TransportOpts,
        bufs: Rc<GroupBufs>,
    ) -> Rc<Qpair<T>> {
        Rc::new_cyclic(|me| Qpair {
            q: RefCell::new(QpInner {
                tp,
                peer,
                via,
                phase: Phase::Open,
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
                created: clock::ticks(),
                close_reason: "",
                bufs,
                waiter: me.clone() as Weak<dyn BufWaiter>,
                fused_first: None,
                fused_first_failed: false,
                icd_bytes: 0,
                auth: super::auth::QueueAuth::Open,
                auth_since: 0,
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
            busy |= T::receive(&mut q, self, env);
        }
        if !q.io_wait.is_empty() && !self.wait_armed.get() {
            busy |= q.retry_io_wait(self);
        }
        busy |= T::flush(&mut q, self);
        if let Phase::Closing { deadline } = q.phase {
            if q.inflight == 0 && (q.tp.tx_idle() || clock::ticks() > deadline) {
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
    /// queue's controller, connections that never connected, queues that
    /// never authenticated.
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
        if q.auth_timed_out(now) {
            self.kick.set(true);
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
    pub fn weak(&self) -> Weak<Qpair<T>> {
        self.me.clone()
    }
}

impl<T: QpTransport> IoCompletion for Qpair<T> {
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
                        T::flush(&mut q, &me);
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

impl<T: QpTransport> QpInner<T> {
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

    /// Whether the queue takes no more input.
    #[inline]
    pub(crate) fn closing(&self) -> bool {
        matches!(self.phase, Phase::Closing { .. })
    }

    /// Whether the queue is an admin queue (or not yet connected: its
    /// commands get the admin queue's buffers).
    #[inline]
    pub(crate) fn is_admin(&self) -> bool {
        self.conn.as_ref().is_none_or(|a| a.qid == 0)
    }
}
