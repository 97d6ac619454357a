//! The per-thread side of a controller (SPDK's `nvme_ctrlr_channel`): one
//! I/O queue pair per lightweight thread, shared by the bdevs of every
//! namespace of the controller on that thread, and its poller.
//!
//! `submit` builds the command and queues it (no doorbell); the poller
//! rings the SQ doorbell once for everything queued since its last run,
//! reaps completions one by one (the queue pair's borrow ends before each
//! is completed, so that its callback can submit the next command) and
//! rings the CQ doorbell once per pass.
//! Failed commands that may be retried (no DNR, not aborted by request)
//! go again, up to `bdev_retry_count` times. While the controller resets,
//! new I/O waits in a queue and what was in flight comes back through
//! that queue once the controller disabled (so no data is in flight any
//! more), to be resubmitted after the queue reconnected.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bdevkit::bdev::module::{BdevIo, BoxError, IoStatus, IoType, ModuleIo, NvmeCmd};
use bdevkit::thread::{ChannelStep, IoDevice, Poller, PollerStatus, Thread};
use bdevkit_nvme_driver::{
    AnyQueue, AnyTransport, Completion, Controller, Data, Dir, Qpair, QueueTransport, SubmitError,
    Transport,
};
use bdevkit_nvme_spec::admin::Abort;
use bdevkit_nvme_spec::io::{Read, Write};
use bdevkit_nvme_spec::{Command, Sqe, Status};

pub(crate) use crate::nvme_io::NvmeIo;
use crate::nvme_io::{range, retryable, submit_io, CTX_NSID, CTX_RETRIES};
use crate::options::{Applied, TimeoutAction};
use crate::wake::QueueWake;

/// Gets a reset's outcome.
pub type ResetDone = Box<dyn FnOnce(Result<(), String>) + Send>;

/// What a channel needs from the controller it belongs to (implemented
/// by the controller, above this file).
pub(crate) trait ChannelOwner: Send + Sync + 'static {
    /// Controller name (logs).
    fn name(&self) -> &str;
    /// The io_device whose channels these are (to find a channel again
    /// from a message).
    fn device(&self) -> &IoDevice<CtrlrChannel>;
    /// Starts a controller reset; `done` gets its outcome.
    fn start_reset(&self, done: Option<ResetDone>);
}

/// Where a channel sends I/O it cannot serve when another path to the
/// same namespace may (implemented by the multipath channel, in
/// `multipath.rs`): `strict` asks for a path that takes I/O now, else one
/// that is not gone suffices (the I/O may wait there). Gives `io` back
/// when there is no such path.
pub(crate) trait Reroute {
    fn reroute(&self, io: BdevIo, from: &ChInner, strict: bool) -> Option<BdevIo>;
}

/// The driver's controller, as the channels see it.
pub(crate) type Driver = Arc<Controller<AnyTransport>>;

type Qp = Qpair<AnyQueue, NvmeIo>;

/// [`ChInner::gate`]: a reset holds new I/O back.
const PAUSED: u8 = 1;
/// [`ChInner::gate`]: the controller is gone or failed.
const DEAD: u8 = 2;

pub(crate) struct ChInner {
    owner: Arc<dyn ChannelOwner>,
    driver: Driver,
    opts: Applied,
    thread: Thread,
    /// The queue pair (retired, not taken, when the channel goes: no
    /// `Option` to test on the I/O path).
    qp: RefCell<Qp>,
    /// I/O waiting for the queue (reset in progress) or for a retry.
    waiting: RefCell<VecDeque<BdevIo>>,
    /// [`PAUSED`] (a reset holds new I/O back) and [`DEAD`] (the
    /// controller is gone or failed: new I/O fails at once), as bits: the
    /// submission path tests both in one comparison.
    gate: Cell<u8>,
    /// This queue's connection dropped and a reset was asked for.
    reset_asked: Cell<bool>,
    /// The controller is lost past `fast_io_fail_timeout_sec`: I/O fails
    /// instead of waiting for the reconnect.
    failing: Cell<bool>,
    /// I/O handed to the admin queue or a reset, by id.
    parked: RefCell<HashMap<u64, BdevIo>>,
    next_park: Cell<u64>,
    timed_out: RefCell<Vec<u16>>,
    /// A reset waits for this queue to finish connecting (fabrics): its
    /// walk's step, and the flag to raise if the connect fails.
    connect_wait: RefCell<Option<(ChannelStep, Arc<AtomicBool>)>>,
    /// The multipath channels of this thread's bdevs on this controller,
    /// by namespace id (for [`Reroute`]).
    hooks: RefCell<Vec<(u32, Weak<dyn Reroute>)>>,
    /// Interrupt mode, fabrics: the thread sleeps on the queue's socket.
    wake: RefCell<Option<QueueWake>>,
    /// A fabrics queue (it connects, drops and wakes the thread on its
    /// own); PCIe's poll skips all of that.
    fabrics: bool,
}

/// One thread's queue pair of a controller (the controller io_device's
/// channel value).
pub struct CtrlrChannel {
    pub(crate) inner: Rc<ChInner>,
    poller: Poller,
    ages: Option<Poller>,
}

impl fmt::Debug for CtrlrChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CtrlrChannel")
            .field("ctrlr", &self.inner.owner.name())
            .field("waiting", &self.inner.waiting.borrow().len())
            .finish()
    }
}

impl CtrlrChannel {
    /// The calling thread's queue pair of `driver`.
    pub(crate) fn create(
        owner: Arc<dyn ChannelOwner>,
        driver: Driver,
        opts: Applied,
    ) -> Result<CtrlrChannel, BoxError> {
        let thread = Thread::try_current()?;
        let qp: Qp = driver.create_io_qpair()?;
        let fabrics = driver.transport().is_fabrics();
        let wake = if fabrics {
            QueueWake::new(&thread)
        } else {
            None
        };
        let inner = Rc::new(ChInner {
            owner,
            driver,
            opts,
            thread: thread.clone(),
            qp: RefCell::new(qp),
            waiting: RefCell::new(VecDeque::with_capacity(64)),
            gate: Cell::new(0),
            reset_asked: Cell::new(false),
            failing: Cell::new(false),
            parked: RefCell::new(HashMap::new()),
            next_park: Cell::new(1),
            timed_out: RefCell::new(Vec::new()),
            connect_wait: RefCell::new(None),
            hooks: RefCell::new(Vec::new()),
            wake: RefCell::new(wake),
            fabrics,
        });
        // The poller holds the channel's state (no upgrade per poll): no
        // cycle, since dropping the channel unregisters the poller, which
        // drops this closure (after the call, if it is running).
        let c = Rc::clone(&inner);
        let poller = thread.register_poller("bdev_nvme_poll", 0, move |_| c.poll());
        let o = opts;
        let ages = (o.timeout_us > 0).then(|| {
            let w: Weak<ChInner> = Rc::downgrade(&inner);
            let period = (o.timeout_us / 4).max(1000);
            thread.register_poller("bdev_nvme_timeouts", period, move |_| {
                if let Some(c) = w.upgrade() {
                    c.age();
                }
                PollerStatus::Idle
            })
        });
        Ok(CtrlrChannel {
            inner,
            poller,
            ages,
        })
    }
}

impl Drop for CtrlrChannel {
    fn drop(&mut self) {
        self.poller.unregister();
        if let Some(p) = &self.ages {
            p.unregister();
        }
        // New I/O fails from now on (a retired queue pair only refuses).
        self.inner.gate.set(self.inner.gate.get() | DEAD);
        let mut qp = self.inner.qp.borrow_mut();
        self.inner.driver.retire_io_qpair(&mut qp);
    }
}

impl ChInner {
    /// Serves `io` for namespace `nsid` (never completes inline).
    #[inline]
    pub(crate) fn submit(self: &Rc<Self>, nsid: u32, mut io: BdevIo) {
        let ctx = io.driver_ctx();
        ctx[CTX_NSID] = u64::from(nsid);
        ctx[CTX_RETRIES] = 0;
        if self.is_read_write(&io) {
            return self.read_write(nsid, io);
        }
        self.dispatch_other(io);
    }

    /// Serves `io` (also one moved here from another path: its namespace
    /// id and retry count are set).
    pub(crate) fn dispatch(self: &Rc<Self>, mut io: BdevIo) {
        if self.is_read_write(&io) {
            let nsid = u32::try_from(io.driver_ctx()[CTX_NSID]).unwrap_or(0);
            return self.read_write(nsid, io);
        }
        self.dispatch_other(io);
    }

    /// A read or write while the queue takes I/O: the common case.
    #[inline(always)]
    fn is_read_write(&self, io: &BdevIo) -> bool {
        self.gate.get() == 0 && matches!(io.io_type(), IoType::Read | IoType::Write)
    }

    /// Reads and writes whose data the command itself points at (PRP1 and
    /// PRP2: one segment within two pages), the common case, kept small
    /// so that it inlines into `submit`. That test is the only one such an
    /// I/O meets (the bdev layer leaves it to this path:
    /// `module_checks_fit`); the rest goes to [`ChInner::read_write_long`].
    #[inline(always)]
    fn read_write(self: &Rc<Self>, nsid: u32, io: BdevIo) {
        let Some(r) = range(&io) else {
            return self.read_write_long(io);
        };
        let mut qp = self.qp.borrow_mut();
        let (sqe, dir) = if io.io_type() == IoType::Read {
            (Read::new(nsid, r).to_sqe(0), Dir::FromDevice)
        } else {
            (Write::new(nsid, r).to_sqe(0), Dir::ToDevice)
        };
        let r = qp.submit_short(sqe, Data::Main, dir, NvmeIo(io));
        drop(qp);
        match r {
            Ok(_) => {}
            Err((NvmeIo(io), SubmitError::Long)) => self.read_write_long(io),
            Err((NvmeIo(io), e)) => self.refused(io, e),
        }
    }

    /// A read or write that needs a PRP list, an SGL or a bounce buffer,
    /// or is larger than one command: the bdev layer splits it to the
    /// limits (or bounces a misaligned one) if it must, and what fits is
    /// queued. Outside the queue pair's borrow: the pieces may come back
    /// through `submit` from inside `fit_to_limits`.
    #[inline(never)]
    fn read_write_long(self: &Rc<Self>, io: BdevIo) {
        if let Some(io) = io.fit_to_limits() {
            self.to_queue(io);
        }
    }

    #[inline(never)]
    fn dispatch_other(self: &Rc<Self>, io: BdevIo) {
        if self.is_dead() {
            if let Some(io) = self.reroute(io, false) {
                io.complete_deferred(IoStatus::Errno(libc::ENXIO));
            }
            return;
        }
        if self.is_paused() {
            let Some(io) = self.reroute(io, true) else {
                return;
            };
            if self.failing.get() {
                io.complete_deferred(IoStatus::Failed);
            } else {
                self.waiting.borrow_mut().push_back(io);
            }
            return;
        }
        let t = io.io_type();
        match t {
            IoType::NvmeAdmin => self.admin_passthru(io),
            IoType::Reset => self.reset(io),
            IoType::Abort => self.abort(io),
            _ => self.to_queue(io),
        }
    }

    fn to_queue(self: &Rc<Self>, mut io: BdevIo) {
        let nsid = u32::try_from(io.driver_ctx()[CTX_NSID]).unwrap_or(0);
        let mut qp = self.qp.borrow_mut();
        let r = submit_io(&mut qp, nsid, io);
        drop(qp);
        if let Err((NvmeIo(io), e)) = r {
            self.refused(io, e);
        }
    }

    /// The queue did not take `io`.
    #[cold]
    fn refused(&self, io: BdevIo, e: SubmitError) {
        match e {
            SubmitError::Busy => io.complete_deferred(IoStatus::NoMem),
            SubmitError::Invalid | SubmitError::Long => {
                io.complete_deferred(IoStatus::Errno(libc::EINVAL));
            }
            SubmitError::Disconnected => self.waiting.borrow_mut().push_back(io),
        }
    }

    fn poll(self: &Rc<Self>) -> PollerStatus {
        if !self.is_paused() && !self.waiting.borrow().is_empty() {
            self.resubmit_waiting();
        }
        let reaping = {
            let mut qp = self.qp.borrow_mut();
            qp.flush();
            qp.reap_start()
        };
        // A reset's reconnect finished here: whether it connected (a
        // fabrics queue connects from its polls; a PCIe queue never
        // drops or connects on its own: nothing to look at).
        let settled = if self.fabrics {
            self.watch_connection()
        } else {
            None
        };
        // Everything the pass sees (bounded: see `Qpair::reap_next`), as
        // SPDK's default of no completion limit per poll.
        if reaping {
            loop {
                let next = self.qp.borrow_mut().reap_next();
                let Some(c) = next else {
                    break;
                };
                self.finish(c);
            }
        }
        let busy = {
            let mut qp = self.qp.borrow_mut();
            let done = reaping && qp.reap_end();
            // Completions: poll again. Commands outstanding: poll again,
            // unless the thread may sleep until the queue's socket has
            // data.
            let sleeps = if self.fabrics {
                match self.wake.borrow_mut().as_mut() {
                    Some(w) => !done && w.may_sleep(qp.transport()),
                    None => qp.outstanding() == 0,
                }
            } else {
                qp.outstanding() == 0
            };
            done || !sleeps
        };
        if let Some(connected) = settled {
            let wait = self.connect_wait.borrow_mut().take();
            if let Some((step, failed)) = wait {
                if connected {
                    self.set_paused(false);
                    self.resubmit_waiting();
                } else {
                    failed.store(true, Ordering::Release);
                }
                step.next();
            }
        }
        // I/O held by a reset waits for the reset's messages (they wake
        // the thread); a sleeping queue need not spin for it.
        let sleeps_paused = self.fabrics && self.is_paused() && self.wake.borrow().is_some();
        if busy || (!sleeps_paused && !self.waiting.borrow().is_empty()) {
            PollerStatus::Busy
        } else {
            PollerStatus::Idle
        }
    }

    /// [`ChInner::poll`] for a fabrics queue: whether the connect a reset
    /// waits for settled (`Some(connected)`), and a reset when the
    /// connection dropped.
    #[inline(never)]
    fn watch_connection(&self) -> Option<bool> {
        let mut qp = self.qp.borrow_mut();
        let q = qp.transport();
        let settled =
            (!q.is_connecting() && self.connect_wait.borrow().is_some()).then(|| q.is_alive());
        if settled == Some(false) {
            // The queue a reset reconnected did not connect: that reset
            // failed (its reconnect policy decides what next); I/O keeps
            // waiting here.
            self.reset_asked.set(true);
            qp.set_connected(false);
        }
        if !qp.transport().is_alive() && !self.reset_asked.get() && !self.is_dead() {
            // The connection dropped: what was in flight comes back when
            // reaped (retryable); a reset connects again.
            tracing::warn!(
                ctrlr = self.owner.name(),
                "I/O queue connection lost: resetting"
            );
            self.reset_asked.set(true);
            self.owner.start_reset(None);
        }
        settled
    }

    fn resubmit_waiting(self: &Rc<Self>) {
        let n = self.waiting.borrow().len();
        for _ in 0..n {
            let next = self.waiting.borrow_mut().pop_front();
            match next {
                Some(io) => self.dispatch(io),
                None => break,
            }
        }
    }

    #[inline(always)]
    fn finish(self: &Rc<Self>, c: Completion<NvmeIo>) {
        if !c.is_success() {
            let (st, dw0) = (c.status(), c.dw0);
            return self.finish_failed(c.ctx.0, st, dw0);
        }
        let mut io = c.ctx.0;
        // Every I/O's completion carries dword 0 (as SPDK's bdev_nvme
        // reports it): one store, no test of the type.
        io.set_nvme_cdw0(c.dw0);
        io.complete(IoStatus::Success);
    }

    /// [`ChInner::finish`] for a failed command: retry or complete.
    #[cold]
    fn finish_failed(self: &Rc<Self>, mut io: BdevIo, st: Status, dw0: u32) {
        let passthru = matches!(io.io_type(), IoType::NvmeIo | IoType::NvmeAdmin);
        let retries = io.driver_ctx()[CTX_RETRIES];
        if !passthru && retryable(st) && retries < u64::from(self.opts.bdev_retry_count) {
            io.driver_ctx()[CTX_RETRIES] = retries + 1;
            self.waiting.borrow_mut().push_back(io);
            return;
        }
        io.set_nvme_cdw0(dw0);
        io.complete(IoStatus::from_nvme(st.sct, st.sc));
    }

    fn park(&self, io: BdevIo) -> u64 {
        let id = self.next_park.get();
        self.next_park.set(id + 1);
        self.parked.borrow_mut().insert(id, io);
        id
    }

    fn unpark(&self, id: u64) -> Option<BdevIo> {
        self.parked.borrow_mut().remove(&id)
    }

    fn admin_passthru(self: &Rc<Self>, io: BdevIo) {
        let NvmeCmd { cdw } = *io.nvme_cmd();
        let sqe = Sqe::from_dwords(cdw);
        let len = io.iov_len();
        let buf = if len > 0 {
            match self.driver.transport().alloc_buffer(len) {
                Ok(m) => {
                    let mut tmp = vec![0u8; len];
                    io.copy_from_iovs(&mut tmp);
                    m.write_bytes(0, &tmp);
                    Some((m, len))
                }
                Err(_) => {
                    io.complete_deferred(IoStatus::NoMem);
                    return;
                }
            }
        } else {
            None
        };
        let id = self.park(io);
        let this = ChannelRef::new(self);
        self.driver.submit_admin(
            sqe,
            buf,
            Box::new(move |st, dw0, buf| {
                this.run(move |ch| {
                    let Some(mut io) = ch.unpark(id) else { return };
                    if let Some(m) = buf {
                        let mut tmp = vec![0u8; m.len().min(io.iov_len())];
                        m.read_bytes(0, &mut tmp);
                        io.copy_to_iovs(&tmp);
                    }
                    io.set_nvme_cdw0(dw0);
                    io.complete(IoStatus::from_nvme(st.sct, st.sc));
                });
            }),
        );
    }

    fn reset(self: &Rc<Self>, io: BdevIo) {
        let id = self.park(io);
        let this = ChannelRef::new(self);
        self.owner.start_reset(Some(Box::new(move |r| {
            this.run(move |ch| {
                if let Some(io) = ch.unpark(id) {
                    io.complete(if r.is_ok() {
                        IoStatus::Success
                    } else {
                        IoStatus::Failed
                    });
                }
            });
        })));
    }

    fn abort(self: &Rc<Self>, io: BdevIo) {
        let target = io.abort_target_tag();
        let found = {
            let qp = self.qp.borrow();
            qp.find(|r| r.0.tag() == target)
                .map(|cid| (qp.transport().qid(), cid))
        };
        let Some((sqid, cid)) = found else {
            io.complete_deferred(IoStatus::Failed);
            return;
        };
        let id = self.park(io);
        let this = ChannelRef::new(self);
        self.driver.submit_admin(
            Abort { sqid, cid }.to_sqe(0),
            None,
            Box::new(move |st, dw0, _| {
                this.run(move |ch| {
                    if let Some(io) = ch.unpark(id) {
                        let ok = st.is_success() && dw0 & 1 == 0;
                        io.complete(if ok {
                            IoStatus::Success
                        } else {
                            IoStatus::Failed
                        });
                    }
                });
            }),
        );
    }

    fn age(self: &Rc<Self>) {
        let o = self.opts;
        let mut timed_out = std::mem::take(&mut *self.timed_out.borrow_mut());
        let qid = {
            let mut qp = self.qp.borrow_mut();
            // A command held while its queue connects has not reached the
            // controller: its time starts once the queue is ready.
            if !qp.transport().is_connecting() {
                qp.age(4, &mut timed_out);
            }
            qp.transport().qid()
        };
        for cid in timed_out.drain(..) {
            tracing::warn!(ctrlr = self.owner.name(), qid, cid, action = ?o.action_on_timeout, "I/O timed out");
            match o.action_on_timeout {
                TimeoutAction::None => {}
                TimeoutAction::Abort => self.driver.submit_admin(
                    Abort { sqid: qid, cid }.to_sqe(0),
                    None,
                    Box::new(|_, _, _| {}),
                ),
                TimeoutAction::Reset => self.owner.start_reset(None),
            }
        }
        *self.timed_out.borrow_mut() = timed_out;
    }

    /// Whether I/O sent here now goes to the controller (not held back
    /// by a reset, not failing, not gone).
    #[inline]
    pub(crate) fn usable(&self) -> bool {
        self.gate.get() == 0 && !self.failing.get()
    }

    /// Whether the controller is gone for this channel.
    pub(crate) fn is_dead(&self) -> bool {
        self.gate.get() & DEAD != 0
    }

    fn is_paused(&self) -> bool {
        self.gate.get() & PAUSED != 0
    }

    fn set_paused(&self, on: bool) {
        let g = self.gate.get() & !PAUSED;
        self.gate.set(if on { g | PAUSED } else { g });
    }

    /// Commands in flight on its queue pair.
    #[inline]
    pub(crate) fn queue_depth(&self) -> u32 {
        self.qp.try_borrow().map_or(u32::MAX, |qp| qp.outstanding())
    }

    /// Registers the multipath channel of namespace `nsid` (replacing an
    /// earlier one).
    pub(crate) fn hook(&self, nsid: u32, r: Weak<dyn Reroute>) {
        let mut h = self.hooks.borrow_mut();
        h.retain(|(n, w)| *n != nsid && w.strong_count() > 0);
        h.push((nsid, r));
    }

    /// `io` to another path of its namespace, if there is one.
    fn reroute(&self, mut io: BdevIo, strict: bool) -> Option<BdevIo> {
        let nsid = u32::try_from(io.driver_ctx()[CTX_NSID]).unwrap_or(0);
        let hook = self
            .hooks
            .borrow()
            .iter()
            .find(|(n, _)| *n == nsid)
            .and_then(|(_, w)| w.upgrade());
        match hook {
            Some(h) => h.reroute(io, self, strict),
            None => Some(io),
        }
    }

    /// What waits here goes to other paths that take I/O now.
    fn reroute_waiting(&self) {
        let n = self.waiting.borrow().len();
        for _ in 0..n {
            let Some(io) = self.waiting.borrow_mut().pop_front() else {
                break;
            };
            if let Some(io) = self.reroute(io, true) {
                self.waiting.borrow_mut().push_back(io);
            }
        }
    }

    /// Reset, step 1: hold new I/O back (what waits moves to another
    /// path if there is one).
    pub(crate) fn pause(&self) {
        self.set_paused(true);
        self.reroute_waiting();
    }

    /// Reset, step 2 (the controller is disabled): what was in flight
    /// comes back for a retry, or fails when its retries are used up.
    pub(crate) fn fail_in_flight(self: &Rc<Self>) {
        let mut failed = Vec::new();
        {
            let mut qp = self.qp.borrow_mut();
            // The reset calls this once `Controller::disable` returned,
            // which leaves the controller touching no host memory whatever
            // it returns: the driver hands everything back.
            qp.fail_all(Status::ABORTED_SQ_DELETION, &mut failed);
            qp.set_connected(false);
        }
        for c in failed {
            self.finish(c);
        }
        self.reroute_waiting();
    }

    /// Reset, step 3: reconnect and resubmit, or give up. `step` moves
    /// the reset on once the queue is connected: now, or (a fabrics queue
    /// connecting from its polls) from the poller, which raises `failed`
    /// if the connect failed.
    pub(crate) fn reconnect(
        self: &Rc<Self>,
        ok: bool,
        step: ChannelStep,
        failed: &Arc<AtomicBool>,
    ) {
        let r = if ok {
            self.driver
                .reconnect_io_qpair(&mut self.qp.borrow_mut())
                .map_err(|e| e.to_string())
        } else {
            Err("reset failed".into())
        };
        self.reset_asked.set(false);
        self.failing.set(false);
        if let Err(e) = r {
            self.set_paused(false);
            tracing::warn!(ctrlr = self.owner.name(), error = %e, "I/O queue not reconnected");
            self.kill();
            return;
        }
        let connecting = self.qp.borrow().transport().is_connecting();
        if connecting {
            // I/O keeps waiting here (no retry spent on a connect that
            // may fail) until the poller sees the queue connected.
            *self.connect_wait.borrow_mut() = Some((step, Arc::clone(failed)));
            return;
        }
        self.set_paused(false);
        self.resubmit_waiting();
        step.next();
    }

    /// The controller is lost past `fast_io_fail_timeout_sec`: what waits
    /// fails, and so does new I/O until the controller is back.
    pub(crate) fn fail_fast(self: &Rc<Self>) {
        self.failing.set(true);
        let waiting: Vec<BdevIo> = self.waiting.borrow_mut().drain(..).collect();
        for io in waiting {
            if let Some(io) = self.reroute(io, true) {
                io.complete(IoStatus::Failed);
            }
        }
    }

    /// The controller is gone: everything fails, now and later.
    pub(crate) fn kill(self: &Rc<Self>) {
        self.gate.set(self.gate.get() | DEAD);
        let mut failed = Vec::new();
        {
            let mut qp = self.qp.borrow_mut();
            // The queue goes for good: deleted on a controller that still
            // works (detaching one path of several), nothing to send to a
            // gone one.
            self.driver.retire_io_qpair(&mut qp);
            // Retired: the controller works on none of its commands
            // (deleted, not enabled, or stopped from DMA).
            qp.fail_all(Status::ABORTED_SQ_DELETION, &mut failed);
            qp.set_connected(false);
        }
        // Another path of the namespace serves them if there is one (the
        // connection here is closed: nothing of theirs arrives here).
        for c in failed {
            if let Some(io) = self.reroute(c.ctx.0, false) {
                io.complete(IoStatus::Aborted);
            }
        }
        let waiting: Vec<BdevIo> = self.waiting.borrow_mut().drain(..).collect();
        for io in waiting {
            if let Some(io) = self.reroute(io, false) {
                io.complete(IoStatus::Aborted);
            }
        }
    }
}

/// A `Send` way back to a channel: its thread and the controller's
/// io_device (the channel is found again there).
struct ChannelRef {
    device: IoDevice<CtrlrChannel>,
    thread: bdevkit::thread::ThreadHandle,
}

impl ChannelRef {
    fn new(ch: &ChInner) -> ChannelRef {
        ChannelRef {
            device: ch.owner.device().clone(),
            thread: ch.thread.handle(),
        }
    }

    fn run(self, f: impl FnOnce(&Rc<ChInner>) + Send + 'static) {
        let device = self.device;
        let r = self.thread.send_msg(move || {
            if let Ok(ch) = device.get_channel() {
                f(&ch.inner);
            }
        });
        if r.is_err() {
            tracing::warn!("thread gone before an NVMe completion reached it");
        }
    }
}
