//! A queue pair: the transport's queue plus the slot table that keeps
//! each command's request until its completion (the command identifier
//! *is* the slot index, never a pointer), timeout ageing and fused pairs.
//! Owned by one thread, polled; no locks, no allocation per command.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bdevkit_nvme_spec::cmd::Fuse;
use bdevkit_nvme_spec::{Sqe, Status};

use crate::transport::{Data, Dir, QueueTransport, Release, Request, SubmitError};

/// Completions taken from the transport per batch.
pub const BATCH: usize = 64;
const NONE: u16 = u16::MAX;

/// What a slot holds, as the completion path sees it: the common case is
/// one comparison.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Held {
    /// Nothing: the slot is on the free list.
    Free,
    /// A lone command with its request and no transport resources to
    /// release: its completion takes the short path.
    Plain,
    /// Any other command in flight: one with resources to release, half
    /// of a fused pair, or an orphan (no request).
    Special,
}

// The fields a submission sets side by side (C layout), so that their
// stores merge.
#[repr(C)]
struct Slot<C> {
    ctx: Option<C>,
    /// Timeout scans this command has lived through.
    age: u32,
    /// What the slot holds (the completion's one test).
    held: Held,
    /// The other command of a fused pair (`NONE` if not fused).
    peer: u16,
    timed_out: bool,
    /// The transport must release the slot's resources at completion.
    release: bool,
    opcode: u8,
    /// The first command of a fused pair: its status, once completed.
    first: Option<Status>,
    /// The second command completed before the first: its completion.
    early: Option<(Status, u32)>,
}

impl<C> Default for Slot<C> {
    fn default() -> Self {
        Slot {
            ctx: None,
            age: 0,
            held: Held::Free,
            timed_out: false,
            opcode: 0,
            peer: NONE,
            release: false,
            first: None,
            early: None,
        }
    }
}

/// A finished command.
#[derive(Debug)]
pub struct Completion<C> {
    /// The request it was submitted with.
    pub ctx: C,
    /// Its status field, as the completion entry carries it (decoded by
    /// [`Completion::status`]; zero is success).
    field: u16,
    /// Completion dword 0.
    pub dw0: u32,
    /// Completion dword 1 (the upper half of an 8-byte Property Get).
    pub dw1: u32,
}

impl<C> Completion<C> {
    fn new(ctx: C, status: Status, dw0: u32, dw1: u32) -> Self {
        Completion {
            ctx,
            field: status.to_field(),
            dw0,
            dw1,
        }
    }

    /// Its status.
    #[inline]
    #[must_use]
    pub fn status(&self) -> Status {
        Status::from_field(self.field)
    }

    /// Whether it succeeded (one comparison).
    #[inline]
    #[must_use]
    pub fn is_success(&self) -> bool {
        self.field == 0
    }
}

/// One queue pair.
pub struct Qpair<Q: QueueTransport, C: Request> {
    q: Q,
    slots: Box<[Slot<C>]>,
    free: Vec<u16>,
    connected: bool,
    /// [`QueueTransport::short_release`], asked once.
    short_release: bool,
    /// Deleted on the controller ([`crate::ctrlr::Controller::retire_io_qpair`]).
    retired: bool,
    /// The controller no longer touches this queue's requests (deleted on
    /// it, or disabled): dropping them frees their memory.
    quiesced: bool,
    /// The controller's count of stops (disable, bus mastering off), and
    /// its value when this queue connected: a stop since then means the
    /// controller works on none of the queue's commands.
    stops: Option<Arc<AtomicU64>>,
    epoch: u64,
}

impl<Q: QueueTransport, C: Request> fmt::Debug for Qpair<Q, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Qpair")
            .field("q", &self.q)
            .field("outstanding", &self.outstanding())
            .field("connected", &self.connected)
            .finish()
    }
}

impl<Q: QueueTransport, C: Request> Qpair<Q, C> {
    /// A queue pair on a connected transport queue.
    pub fn new(q: Q) -> Self {
        let depth = q.depth();
        let short_release = q.short_release() == Release::Needed;
        let slots = (0..depth).map(|_| Slot::default()).collect();
        Qpair {
            q,
            slots,
            free: (0..depth).rev().collect(),
            connected: true,
            short_release,
            retired: false,
            quiesced: false,
            stops: None,
            epoch: 0,
        }
    }

    /// The transport queue.
    pub fn transport(&self) -> &Q {
        &self.q
    }

    /// The transport queue, to reconnect it.
    pub fn transport_mut(&mut self) -> &mut Q {
        &mut self.q
    }

    /// Commands in flight.
    #[inline]
    #[must_use]
    pub fn outstanding(&self) -> u32 {
        // Every slot not on the free list holds a command.
        u32::try_from(self.slots.len() - self.free.len()).expect("invariant: slots fit u16")
    }

    /// Slots.
    #[must_use]
    pub fn depth(&self) -> usize {
        self.slots.len()
    }

    /// Whether submissions reach the controller.
    #[must_use]
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// Marks the queue (dis)connected (a retired one stays disconnected).
    pub fn set_connected(&mut self, c: bool) {
        self.connected = c && !self.retired;
    }

    /// Whether the queue was deleted on the controller: disconnected for
    /// good.
    #[must_use]
    pub fn is_retired(&self) -> bool {
        self.retired
    }

    pub(crate) fn retire(&mut self) {
        self.retired = true;
        self.connected = false;
    }

    /// The controller no longer works on this queue's commands (it was
    /// deleted on the controller, or the controller is disabled).
    pub(crate) fn set_quiesced(&mut self) {
        self.quiesced = true;
    }

    /// Whether the controller stopped (disable, bus mastering off) since
    /// this queue connected.
    pub(crate) fn stopped_since_connect(&self) -> bool {
        self.stops
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Acquire) != self.epoch)
    }

    /// Watches the controller's count of stops from now on (the queue
    /// just connected).
    pub(crate) fn watch_stops(&mut self, stops: &Arc<AtomicU64>) {
        self.epoch = stops.load(Ordering::Acquire);
        self.stops = Some(Arc::clone(stops));
    }

    /// Queues `sqe` (its CID is set here) with `data` of `ctx` moving in
    /// `dir`; the doorbell waits for [`Qpair::flush`]. Returns the CID.
    #[inline(always)]
    pub fn submit(
        &mut self,
        sqe: Sqe,
        data: Data,
        dir: Dir,
        ctx: C,
    ) -> Result<u16, (C, SubmitError)> {
        self.enqueue::<false>(sqe, data, dir, ctx)
    }

    /// [`Qpair::submit`] through [`QueueTransport::submit_short`]: data
    /// that needs more than the command's own pointers comes back with
    /// [`SubmitError::Long`], nothing queued.
    #[inline(always)]
    pub fn submit_short(
        &mut self,
        sqe: Sqe,
        data: Data,
        dir: Dir,
        ctx: C,
    ) -> Result<u16, (C, SubmitError)> {
        self.enqueue::<true>(sqe, data, dir, ctx)
    }

    #[inline(always)]
    fn enqueue<const SHORT: bool>(
        &mut self,
        mut sqe: Sqe,
        data: Data,
        dir: Dir,
        ctx: C,
    ) -> Result<u16, (C, SubmitError)> {
        // The slot is taken off the free list only once the transport
        // took the command: a refusal leaves nothing to undo.
        let Some(top) = self.free.len().checked_sub(1) else {
            return Err((ctx, self.refusal()));
        };
        if !self.connected {
            return Err((ctx, SubmitError::Disconnected));
        }
        let slot = self.free[top];
        sqe.cid.set(slot);
        let opcode = sqe.opcode;
        let r = if SHORT {
            self.q
                .submit_short(slot, sqe, &ctx, data, dir)
                .map(|()| self.short_release)
        } else {
            self.q
                .submit(slot, sqe, &ctx, data, dir)
                .map(|r| r == Release::Needed)
        };
        match r {
            Ok(release) => {
                self.free.truncate(top);
                self.occupy(slot, opcode, ctx, NONE, release);
                Ok(slot)
            }
            Err(e) => Err((ctx, e)),
        }
    }

    /// Why a submission finds no slot: disconnected, or all busy.
    #[cold]
    fn refusal(&self) -> SubmitError {
        if self.connected {
            SubmitError::Busy
        } else {
            SubmitError::Disconnected
        }
    }

    /// Queues `sqe` with a data buffer of `len` bytes (up to a page) that
    /// `fill` writes (Dataset Management ranges).
    pub fn submit_with_page(
        &mut self,
        mut sqe: Sqe,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
        ctx: C,
    ) -> Result<u16, (C, SubmitError)> {
        if !self.connected {
            return Err((ctx, SubmitError::Disconnected));
        }
        let Some(slot) = self.free.pop() else {
            return Err((ctx, SubmitError::Busy));
        };
        sqe.cid.set(slot);
        if let Err(e) = self.q.submit_with_page(slot, &mut sqe, len, fill) {
            self.free.push(slot);
            return Err((ctx, e));
        }
        self.occupy(slot, sqe.opcode, ctx, NONE, true);
        Ok(slot)
    }

    /// Queues a fused pair (Compare with the main data, then Write with
    /// the aux data); one completion reports the pair: the compare's
    /// status if it failed, else the write's.
    pub fn submit_fused(
        &mut self,
        mut first: Sqe,
        mut second: Sqe,
        ctx: C,
    ) -> Result<(), (C, SubmitError)> {
        if !self.connected {
            return Err((ctx, SubmitError::Disconnected));
        }
        if self.free.len() < 2 {
            return Err((ctx, SubmitError::Busy));
        }
        let (a, b) = (
            self.free.pop().expect("invariant: two free"),
            self.free.pop().expect("invariant: two free"),
        );
        first.cid.set(a);
        first.set_fuse(Fuse::First);
        second.cid.set(b);
        second.set_fuse(Fuse::Second);
        let (op1, op2) = (first.opcode, second.opcode);
        if let Err(e) = self.q.submit(a, first, &ctx, Data::Main, Dir::ToDevice) {
            self.free.push(b);
            self.free.push(a);
            return Err((ctx, e));
        }
        if let Err(e) = self.q.submit(b, second, &ctx, Data::Aux, Dir::ToDevice) {
            // The first is in the SQ already: it goes with a second that
            // the controller aborts as a missing fused command. Tell the
            // caller to retry; the lone first completes as an orphan.
            self.free.push(b);
            self.occupy_orphan(a, op1);
            return Err((ctx, e));
        }
        self.occupy_orphan(a, op1);
        self.slots[usize::from(a)].peer = b;
        self.occupy(b, op2, ctx, a, true);
        let s = &mut self.slots[usize::from(b)];
        s.first = None;
        s.early = None;
        Ok(())
    }

    /// Marks `slot` in flight. The fused-pair fields (`first`, `early`)
    /// are set only by [`Qpair::submit_fused`]: a lone command's
    /// completion never reads them.
    #[inline(always)]
    fn occupy(&mut self, slot: u16, opcode: u8, ctx: C, peer: u16, release: bool) {
        let s = &mut self.slots[usize::from(slot)];
        // A free slot holds no request (every path that frees one takes
        // it): nothing to drop, so no test for it.
        debug_assert!(s.ctx.is_none(), "slot {slot} is free but holds a request");
        std::mem::forget(s.ctx.replace(ctx));
        s.age = 0;
        s.held = if release || peer != NONE {
            Held::Special
        } else {
            Held::Plain
        };
        s.timed_out = false;
        s.opcode = opcode;
        s.peer = peer;
        s.release = release;
    }

    fn occupy_orphan(&mut self, slot: u16, opcode: u8) {
        let s = &mut self.slots[usize::from(slot)];
        s.ctx = None;
        s.age = 0;
        s.held = Held::Special;
        s.timed_out = false;
        s.opcode = opcode;
        s.peer = NONE;
        s.release = true;
        s.first = None;
        s.early = None;
    }

    /// Rings the doorbell for everything queued since the last flush.
    #[inline]
    pub fn flush(&mut self) {
        self.q.flush();
    }

    /// Reaps up to [`BATCH`] completions into `out` (reuse one vector with
    /// capacity [`BATCH`]: no allocation); returns how many commands
    /// finished. The same as [`Qpair::reap_start`], [`Qpair::reap_next`]
    /// until none, [`Qpair::reap_end`].
    pub fn process(&mut self, out: &mut Vec<Completion<C>>) -> usize {
        if !self.reap_start() {
            return 0;
        }
        let mut n = 0;
        while n < BATCH {
            let Some(c) = self.reap_next() else {
                break;
            };
            out.push(c);
            n += 1;
        }
        self.reap_end();
        n
    }

    /// Starts a pass over new completions: false (and nothing done) when
    /// no command is in flight. Then [`Qpair::reap_next`] (until it finds
    /// none, or enough) and [`Qpair::reap_end`].
    /// Between those calls the queue takes submissions as usual (a
    /// completion's callback may submit the next command).
    #[inline]
    pub fn reap_start(&mut self) -> bool {
        if self.free.len() == self.slots.len() {
            return false;
        }
        self.q.reap_start();
        true
    }

    /// Ends a pass: the reaped completion queue slots go back to the
    /// controller (one doorbell write). Returns whether the pass took any
    /// completion ([`QueueTransport::reap_end`]).
    #[inline]
    pub fn reap_end(&mut self) -> bool {
        self.q.reap_end()
    }

    /// The next finished command, if any. Completions that finish no
    /// request (the first half of a fused pair, a stray) are taken on the
    /// way; that loop is bounded by what one pass can see: a PCIe device
    /// cannot post past the CQ head that [`Qpair::reap_end`] writes, and
    /// a fabrics queue holds what [`Qpair::reap_start`] received. The
    /// common case (a lone command in flight) here, fused pairs and
    /// strays out of line.
    #[inline]
    pub fn reap_next(&mut self) -> Option<Completion<C>> {
        loop {
            let c = self.q.next_cqe()?;
            let slot = c.cid.get();
            let field = c.status.get() >> 1;
            let dw = (c.dw0.get(), c.dw1.get());
            if let Some(s) = self.slots.get_mut(usize::from(slot)) {
                if s.held == Held::Plain {
                    if let Some(ctx) = s.ctx.take() {
                        s.held = Held::Free;
                        self.free.push(slot);
                        return Some(Completion {
                            ctx,
                            field,
                            dw0: dw.0,
                            dw1: dw.1,
                        });
                    }
                }
            }
            if let Some(c) = self.finish_rare(slot, Status::from_field(field), dw) {
                return Some(c);
            }
        }
    }

    #[cold]
    fn finish_rare(&mut self, slot: u16, status: Status, dw: (u32, u32)) -> Option<Completion<C>> {
        let (dw0, dw1) = dw;
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            tracing::warn!(cid = slot, "completion for an unknown command identifier");
            return None;
        };
        if s.held == Held::Free {
            tracing::warn!(cid = slot, "completion for a free slot");
            return None;
        }
        let mut ctx = s.ctx.take();
        let peer = s.peer;
        s.peer = NONE;
        s.held = Held::Free;
        self.q
            .release(slot, ctx.as_mut().map(|c| c as &mut dyn Request));
        self.free.push(slot);
        match (ctx, peer) {
            (Some(ctx), NONE) => Some(Completion::new(ctx, status, dw0, dw1)),
            (None, NONE) => None,
            (None, second) => {
                // The first of a fused pair.
                let p = &mut self.slots[usize::from(second)];
                match p.early.take() {
                    Some((st2, dw)) => {
                        let ctx = p
                            .ctx
                            .take()
                            .expect("invariant: second waits with its request");
                        p.held = Held::Free;
                        self.free.push(second);
                        let st = if status.is_success() { st2 } else { status };
                        Some(Completion::new(ctx, st, dw, 0))
                    }
                    None => {
                        p.first = Some(status);
                        None
                    }
                }
            }
            (Some(ctx), first_slot) => {
                // The second of a fused pair.
                let f = &mut self.slots[usize::from(first_slot)];
                if f.peer == slot {
                    // The first has not completed: wait for it.
                    f.peer = slot;
                    let p = &mut self.slots[usize::from(slot)];
                    p.ctx = Some(ctx);
                    p.early = Some((status, dw0));
                    p.age = 0;
                    p.held = Held::Special;
                    self.free.pop();
                    return None;
                }
                let first = self.slots[usize::from(slot)].first.take();
                let st = match first {
                    Some(f) if !f.is_success() => f,
                    _ => status,
                };
                Some(Completion::new(ctx, st, dw0, dw1))
            }
        }
    }

    /// One timeout scan: ages every command in flight and appends to
    /// `timed_out` the CIDs that reached `max_age` scans (once each).
    pub fn age(&mut self, max_age: u32, timed_out: &mut Vec<u16>) {
        for (i, s) in self.slots.iter_mut().enumerate() {
            if s.held == Held::Free || s.timed_out {
                continue;
            }
            s.age += 1;
            if s.age >= max_age {
                s.timed_out = true;
                timed_out.push(u16::try_from(i).expect("invariant: slots fit u16"));
            }
        }
    }

    /// The opcode of the command in `cid` (for logs), if in flight.
    #[must_use]
    pub fn opcode_of(&self, cid: u16) -> Option<u8> {
        self.slots
            .get(usize::from(cid))
            .filter(|s| s.held != Held::Free)
            .map(|s| s.opcode)
    }

    /// The CID of the first command in flight whose request matches `f`.
    pub fn find(&self, mut f: impl FnMut(&C) -> bool) -> Option<u16> {
        self.slots
            .iter()
            .position(|s| s.ctx.as_ref().is_some_and(&mut f))
            .and_then(|i| u16::try_from(i).ok())
    }

    /// The controller dropped every command (disabled, gone): completes
    /// them all with `status` into `out` and empties the transport queue.
    ///
    /// The requests come back to the caller, which may free their memory,
    /// so this happens only when the controller can no longer touch it:
    /// the queue was deleted on the controller
    /// ([`crate::Controller::retire_io_qpair`]), the controller stopped
    /// since the queue connected ([`crate::Controller::disable`], which
    /// leaves it disabled or without bus mastering), or the transport
    /// moves the data itself (fabrics). Otherwise nothing is handed back
    /// and it returns `false`.
    pub fn fail_all(&mut self, status: Status, out: &mut Vec<Completion<C>>) -> bool {
        if self.q.dma() && !self.quiesced && !self.stopped_since_connect() {
            tracing::warn!(
                qid = self.q.qid(),
                "commands not failed: the controller may still work on them"
            );
            return false;
        }
        self.fail_all_now(status, out);
        true
    }

    /// [`Qpair::fail_all`] for the driver, which knows the controller
    /// stopped (the admin queue after a disable).
    pub(crate) fn fail_all_now(&mut self, status: Status, out: &mut Vec<Completion<C>>) {
        self.q.clear();
        for i in 0..self.slots.len() {
            let slot = u16::try_from(i).expect("invariant: slots fit u16");
            let s = &mut self.slots[i];
            if s.held == Held::Free {
                continue;
            }
            let ctx = s.ctx.take();
            *s = Slot::default();
            self.free.push(slot);
            if let Some(ctx) = ctx {
                out.push(Completion::new(ctx, status, 0, 0));
            }
        }
        self.q.clear();
    }
}

impl<Q: QueueTransport, C: Request> Drop for Qpair<Q, C> {
    /// Requests still in flight on a queue the controller may still work
    /// on (not deleted with [`crate::Controller::retire_io_qpair`], not
    /// failed with [`Qpair::fail_all`]) are leaked, not freed: the
    /// controller could still write into their memory. A queue pair that
    /// was retired, or is empty, frees everything.
    fn drop(&mut self) {
        if self.quiesced {
            return;
        }
        let mut leaked = 0;
        for s in self.slots.iter_mut() {
            if let Some(ctx) = s.ctx.take() {
                std::mem::forget(ctx);
                leaked += 1;
            }
        }
        if leaked > 0 {
            tracing::warn!(
                qid = self.q.qid(),
                leaked,
                "queue pair dropped with commands in flight: their memory is leaked, not freed"
            );
        }
    }
}
