//! The raid bdev and its I/O path.
//!
//! * raid0/concat read and write: the bdev layer splits on the strip
//!   boundary (`optimal_io_boundary`), so each I/O lies on one member: one
//!   child at the mapped offset, the parent attached to it.
//! * raid1 read: one child on the operational member with the fewest read
//!   blocks outstanding on this channel (round-robin among equals); on failure the member is marked
//!   failed (the raid degrades) and the read is retried on another one.
//! * raid1 write, every reset, raid0/concat flush and unmap: a fan-out.
//!   The parent waits in a per-channel slot table (reused, so no
//!   allocation in steady state); children carry their slot and member in
//!   their tag. A raid1 write succeeds if it succeeded on a member that is
//!   still operational when the last child is back.
//!
//! Every child is allocated before any is submitted, so running out of
//! `BdevIo`s completes the parent with NOMEM (the bdev layer retries it)
//! and never leaves a half-submitted request.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bdevkit::bdev::module::vbdev;
use bdevkit::bdev::module::{
    BdevChannel, BdevIo, BdevManager, BdevOps, BdevProps, BoxError, Done, IoCompletion, IoStatus,
    IoType, ModuleIo,
};
use bdevkit::thread::{IoChannel, IoDevice, Thread};
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::config::{RaidLevel, PRODUCT_NAME};
use crate::map::Geometry;
use crate::persist;
use crate::raid::Raid;

/// Marks a child whose parent waits in the slot table.
const SLAB_TAG: u64 = 1 << 63;

/// A registered raid bdev (online or degraded; offline once its last
/// opener closes).
pub struct RaidBdev {
    raid: Arc<Raid>,
    /// Held to unregister itself (a cycle through the registry that
    /// unregistering breaks).
    mgr: BdevManager,
    geometry: Geometry,
    /// First block of the raid's data on each member (all 0 without
    /// superblock).
    offsets: Vec<u64>,
    /// Set when the raid cannot serve I/O any more: new I/O fails.
    offline: AtomicBool,
    /// The raid's own per-thread state, to release a removed member on
    /// every thread.
    device: IoDevice<RaidChannel>,
    /// Blocks `[start, end)` a rebuild is copying: raid1 writes there wait
    /// (channels created meanwhile start with it).
    window: Mutex<Option<(u64, u64)>>,
}

impl std::fmt::Debug for RaidBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaidBdev")
            .field("raid", &self.raid.name)
            .field("geometry", &self.geometry)
            .finish_non_exhaustive()
    }
}

impl RaidBdev {
    pub(crate) fn new(
        raid: Arc<Raid>,
        mgr: BdevManager,
        geometry: Geometry,
        offsets: Vec<u64>,
    ) -> Arc<RaidBdev> {
        let name = format!("raid_{}", raid.name);
        Arc::new_cyclic(|weak: &Weak<RaidBdev>| {
            let w = weak.clone();
            RaidBdev {
                raid,
                mgr,
                geometry,
                offsets,
                offline: AtomicBool::new(false),
                window: Mutex::new(None),
                device: IoDevice::register(name, move || {
                    let b = w.upgrade().ok_or("raid bdev is gone")?;
                    Ok(RaidChannel::new(b))
                }),
            }
        })
    }

    /// The raid this bdev serves.
    #[must_use]
    pub fn raid(&self) -> &Arc<Raid> {
        &self.raid
    }

    pub(crate) fn props(&self, name: &str, block_size: u32) -> BdevProps {
        let mut p = BdevProps::new(name, PRODUCT_NAME, block_size, self.geometry.num_blocks());
        if let Some(strip) = self
            .geometry
            .strip_blocks(self.raid.strip_size_kb, block_size)
        {
            // The bdev layer hands us strip-sized pieces: each lies on one
            // member.
            p.optimal_io_boundary = u32::try_from(strip).unwrap_or(u32::MAX);
            p.split_on_optimal_io_boundary = true;
        }
        p
    }

    /// raid0's strip size in blocks.
    pub(crate) fn raid0_strip_blocks(&self) -> Option<u64> {
        match &self.geometry {
            Geometry::Raid0(m) => Some(m.strip_blocks),
            _ => None,
        }
    }

    /// Grows the registered raid bdev to `num_blocks` (the members grew).
    /// The mapping does not change: raid0 deals strips by number alone and
    /// raid1 maps block to block.
    pub(crate) fn resize(&self, num_blocks: u64) {
        vbdev::resize_own(&self.mgr, &self.raid.name, self, num_blocks);
    }

    pub(crate) fn unregister_self(&self) {
        vbdev::unregister_own(&self.mgr, &self.raid.name, self);
    }

    /// The raid lost a member it cannot do without.
    pub(crate) fn go_offline(&self) {
        self.offline.store(true, Ordering::Release);
        self.unregister_self();
    }

    /// Every channel takes a channel to member `i` (just added); then
    /// `done`.
    pub(crate) fn attach_member(&self, i: usize, done: impl FnOnce() + Send + 'static) {
        self.device
            .for_each_channel(move |c| c.inner.attach(i), done);
    }

    /// Holds raid1 writes to blocks `[start, end)` on every channel and
    /// marks those already in flight; then `done`.
    pub(crate) fn quiesce(&self, start: u64, end: u64, done: impl FnOnce() + Send + 'static) {
        *self.window.lock() = Some((start, end));
        self.device
            .for_each_channel(move |c| c.inner.quiesce(start, end), done);
    }

    /// Writes still in flight in the quiesced window, over all channels.
    pub(crate) fn in_window(&self, done: impl FnOnce(u64) + Send + 'static) {
        let sum = Arc::new(AtomicU64::new(0));
        let s2 = Arc::clone(&sum);
        self.device.for_each_channel(
            move |c| {
                s2.fetch_add(u64::from(c.inner.draining.get()), Ordering::Relaxed);
            },
            move || done(sum.load(Ordering::Relaxed)),
        );
    }

    /// Lifts the window: held writes go out; then `done`.
    pub(crate) fn unquiesce(&self, done: impl FnOnce() + Send + 'static) {
        *self.window.lock() = None;
        self.device
            .for_each_channel(move |c| c.inner.unquiesce(), done);
    }

    /// Every thread drops its channel to member `i`; then `done`.
    pub(crate) fn release_member(&self, i: usize, done: impl FnOnce() + Send + 'static) {
        self.device
            .for_each_channel(move |c| c.inner.release(i), done);
    }
}

impl BdevOps for RaidBdev {
    type Channel = IoChannel<RaidChannel>;

    fn create_channel(&self) -> Result<IoChannel<RaidChannel>, BoxError> {
        Ok(self.device.get_channel()?)
    }

    #[inline]
    fn submit(&self, ch: &IoChannel<RaidChannel>, io: BdevIo) {
        ch.inner.submit(io);
    }

    /// Read and write always; reset, and for raid0/concat flush and unmap,
    /// when every member serves them (as SPDK).
    fn io_type_supported(&self, io_type: IoType) -> bool {
        match io_type {
            IoType::Read | IoType::Write => true,
            IoType::Reset => self.raid.members_support(io_type),
            IoType::Flush | IoType::Unmap => {
                self.raid.level != RaidLevel::Raid1 && self.raid.members_support(io_type)
            }
            _ => false,
        }
    }

    fn destruct(&self, done: Done) {
        self.device.unregister(|| {});
        self.raid.bdev_destructed();
        done.done();
    }

    fn dump_info_json(&self) -> Value {
        json!({"raid": self.raid.raid_fields()})
    }

    /// The `bdev_raid_create` that recreates the raid; none for a
    /// superblock raid (examine finds it again, as SPDK does).
    fn write_config_json(&self) -> Option<Value> {
        (!self.raid.superblock).then(|| self.raid.create_entry())
    }
}

/// One parent waiting for its children.
#[derive(Debug)]
struct Slot {
    parent: Option<BdevIo>,
    remaining: usize,
    /// First failure.
    status: IoStatus,
    /// Members whose child succeeded.
    ok: [u64; 4],
    /// raid1 write: success if any still-operational member succeeded.
    mirror: bool,
    /// Counted in the channel's `draining`.
    in_window: bool,
}

/// A raid's per-thread channel (also its `IoDevice` channel).
#[derive(Debug)]
pub struct RaidChannel {
    inner: Rc<ChanInner>,
}

impl RaidChannel {
    fn new(bdev: Arc<RaidBdev>) -> RaidChannel {
        let members = bdev.raid.member_channels();
        let n = members.len();
        let window = *bdev.window.lock();
        RaidChannel {
            inner: Rc::new(ChanInner {
                window: Cell::new(window),
                held: RefCell::new(VecDeque::new()),
                draining: Cell::new(0),
                bdev,
                members: RefCell::new(members),
                read_blocks: (0..n).map(|_| Cell::new(0)).collect(),
                next_read: Cell::new(0),
                slots: RefCell::new(Vec::new()),
                free: RefCell::new(Vec::new()),
                scratch: RefCell::new(Vec::with_capacity(n)),
                acks: RefCell::new(VecDeque::new()),
                ack_wait: Cell::new(false),
            }),
        }
    }
}

struct ChanInner {
    bdev: Arc<RaidBdev>,
    /// This thread's channel to each member (`None`: missing or removed).
    members: RefCell<Vec<Option<BdevChannel>>>,
    /// raid1: read blocks outstanding per member on this channel.
    read_blocks: Vec<Cell<u64>>,
    /// raid1: where the next read starts looking (round-robin on ties).
    next_read: Cell<usize>,
    slots: RefCell<Vec<Slot>>,
    free: RefCell<Vec<usize>>,
    /// Children of a fan-out being prepared (reused).
    scratch: RefCell<Vec<(usize, BdevChannel, BdevIo)>>,
    /// A rebuild's quiesced window: raid1 writes overlapping it wait in
    /// `held`.
    window: Cell<Option<(u64, u64)>>,
    held: RefCell<VecDeque<BdevIo>>,
    /// Writes in flight in the window when it was set, not yet done.
    draining: Cell<u32>,
    /// Finished raid1 writes waiting for the superblock (generation,
    /// parent, status), oldest first.
    acks: RefCell<VecDeque<(u64, BdevIo, IoStatus)>>,
    /// A wake-up for `acks` is registered.
    ack_wait: Cell<bool>,
}

impl std::fmt::Debug for ChanInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChanInner")
            .field("slots", &self.slots.borrow().len())
            .finish_non_exhaustive()
    }
}

/// Completes `io` now, or later when we are inside `submit`.
fn finish(io: BdevIo, status: IoStatus, deferred: bool) {
    if deferred {
        io.complete_deferred(status);
    } else {
        io.complete(status);
    }
}

fn member_tag(m: usize) -> u64 {
    m as u64
}

fn tag_member(tag: u64) -> usize {
    usize::try_from(tag & 0xff).unwrap_or(usize::MAX)
}

fn tag_slot(tag: u64) -> usize {
    usize::try_from((tag & !SLAB_TAG) >> 8).unwrap_or(usize::MAX)
}

impl ChanInner {
    fn raid(&self) -> &Raid {
        &self.bdev.raid
    }

    /// First block of the raid's data on member `m`.
    #[inline]
    fn off(&self, m: usize) -> u64 {
        self.bdev.offsets.get(m).copied().unwrap_or(0)
    }

    /// Moves a child made from a raid request onto member `m`'s data area.
    #[inline]
    fn shift(&self, child: &mut BdevIo, m: usize) {
        let off = self.off(m);
        if off != 0 {
            child.set_offset_blocks(child.offset_blocks() + off);
        }
    }

    /// Member `m` failed an I/O (see `persist::fail_member`).
    fn fail(&self, m: usize) {
        persist::fail_member(&self.bdev.raid, m);
    }

    /// This thread's channel to member `i`, if it is there. A removed
    /// member's channel is dropped on first sight.
    fn member(&self, i: usize) -> Option<BdevChannel> {
        let mut members = self.members.borrow_mut();
        let slot = members.get_mut(i)?;
        if slot.is_some() && self.raid().member_removed(i) {
            *slot = None;
        }
        slot.clone()
    }

    fn attach(&self, i: usize) {
        let ch = self.raid().member_channel(i);
        if let Some(slot) = self.members.borrow_mut().get_mut(i) {
            *slot = ch;
        }
    }

    /// Sets the window and counts the raid1 writes in flight in it.
    fn quiesce(&self, start: u64, end: u64) {
        self.window.set(Some((start, end)));
        let mut n = 0;
        for s in self.slots.borrow_mut().iter_mut() {
            let Some(p) = s.parent.as_ref() else { continue };
            if s.mirror
                && !s.in_window
                && p.offset_blocks() < end
                && p.offset_blocks() + p.num_blocks() > start
            {
                s.in_window = true;
                n += 1;
            }
        }
        self.draining.set(self.draining.get() + n);
    }

    /// Clears the window and sends the writes it held.
    fn unquiesce(self: &Rc<Self>) {
        self.window.set(None);
        let held: Vec<BdevIo> = self.held.borrow_mut().drain(..).collect();
        for io in held {
            self.submit(io);
        }
    }

    fn release(&self, i: usize) {
        if let Some(slot) = self.members.borrow_mut().get_mut(i) {
            *slot = None;
        }
    }

    fn handler(self: &Rc<Self>) -> Rc<dyn IoCompletion> {
        Rc::clone(self) as Rc<dyn IoCompletion>
    }

    fn submit(self: &Rc<Self>, io: BdevIo) {
        if self.bdev.offline.load(Ordering::Relaxed) {
            return io.complete_deferred(IoStatus::Aborted);
        }
        let t = io.io_type();
        match (t, &self.bdev.geometry) {
            (IoType::Read, Geometry::Raid1 { .. }) => {
                let mut io = io;
                *io.driver_ctx() = [0; 4];
                self.raid1_read(io, IoStatus::Failed, true);
            }
            (IoType::Write, Geometry::Raid1 { .. }) => {
                if let Some((start, end)) = self.window.get() {
                    if io.offset_blocks() < end && io.offset_blocks() + io.num_blocks() > start {
                        self.held.borrow_mut().push_back(io);
                        return;
                    }
                }
                let raid = &self.bdev.raid;
                self.fan_out(io, true, |_, m| {
                    raid.member_writable(m).then_some(ChildReq::Copy)
                });
            }
            (IoType::Read | IoType::Write, Geometry::Raid0(map)) => {
                let (off, n) = (io.offset_blocks(), io.num_blocks());
                if off % map.strip_blocks + n > map.strip_blocks {
                    return io.complete_deferred(IoStatus::Errno(libc::EINVAL));
                }
                let (m, moff) = map.map(off);
                self.single(io, m, moff);
            }
            (IoType::Read | IoType::Write, Geometry::Concat(map)) => {
                let (off, n) = (io.offset_blocks(), io.num_blocks());
                let (m, moff) = map.map(off);
                if moff + n > map.lens.get(m).copied().unwrap_or(0) {
                    return io.complete_deferred(IoStatus::Errno(libc::EINVAL));
                }
                self.single(io, m, moff);
            }
            (IoType::Reset, geometry) => {
                let raid1 = matches!(geometry, Geometry::Raid1 { .. });
                let raid = &self.bdev.raid;
                self.fan_out(io, false, |_, m| {
                    (!raid1 || raid.member_writable(m)).then_some(ChildReq::Reset)
                });
            }
            (IoType::Flush | IoType::Unmap, Geometry::Raid0(map)) => {
                let map = *map;
                self.fan_out(io, false, |p, m| {
                    map.member_range(p.offset_blocks(), p.num_blocks(), m)
                        .map(|(s, l)| ChildReq::Range(s, l))
                });
            }
            (IoType::Flush | IoType::Unmap, Geometry::Concat(map)) => {
                self.fan_out(io, false, |p, m| {
                    map.member_range(p.offset_blocks(), p.num_blocks(), m)
                        .map(|(s, l)| ChildReq::Range(s, l))
                });
            }
            _ => io.complete_deferred(IoStatus::Errno(libc::ENOTSUP)),
        }
    }

    /// raid0/concat read or write on one member.
    fn single(self: &Rc<Self>, io: BdevIo, m: usize, moff: u64) {
        let Some(base) = self.member(m) else {
            return io.complete_deferred(IoStatus::Aborted);
        };
        let Some(mut child) = base.alloc_io() else {
            return io.complete_deferred(IoStatus::NoMem);
        };
        child
            .take_request_of(io)
            .set_tag(member_tag(m))
            .on_done(self.handler());
        child.set_offset_blocks(moff + self.off(m));
        if let Err(e) = base.submit(child) {
            let mut child = e.io;
            if let Some(parent) = child.take_parent() {
                parent.complete_deferred(IoStatus::Errno(e.error.errno()));
            }
        }
    }

    /// raid1 read from the least busy operational member not tried yet
    /// (tried members are a bitset in the parent's `driver_ctx`).
    fn raid1_read(self: &Rc<Self>, mut io: BdevIo, last: IoStatus, deferred: bool) {
        loop {
            let tried = *io.driver_ctx();
            let n = self.read_blocks.len();
            // Ties go round-robin: idle mirrors share the reads.
            let first = self.next_read.get() % n.max(1);
            self.next_read.set(first + 1);
            let pick = (first..n)
                .chain(0..first)
                .filter(|m| tried[m / 64] & (1 << (m % 64)) == 0)
                .filter(|m| self.raid().member_ok(*m))
                .filter_map(|m| self.member(m).map(|c| (m, c)))
                .min_by_key(|(m, _)| self.read_blocks[*m].get());
            let Some((m, base)) = pick else {
                return finish(io, last, deferred);
            };
            io.driver_ctx()[m / 64] |= 1 << (m % 64);
            let Some(mut child) = base.alloc_io() else {
                return finish(io, IoStatus::NoMem, deferred);
            };
            let blocks = io.num_blocks();
            child
                .take_request_of(io)
                .set_tag(member_tag(m))
                .on_done(self.handler());
            self.shift(&mut child, m);
            self.read_blocks[m].set(self.read_blocks[m].get() + blocks);
            match base.submit(child) {
                Ok(()) => return,
                Err(e) => {
                    self.read_blocks[m].set(self.read_blocks[m].get() - blocks);
                    let mut child = e.io;
                    let Some(parent) = child.take_parent() else {
                        return;
                    };
                    // The member refused a valid request: count it as a
                    // failure of that member and try another.
                    self.fail(m);
                    io = parent;
                }
            }
        }
    }

    /// Sends one child to each member `plan` names a request for; the
    /// parent waits in a slot.
    fn fan_out(
        self: &Rc<Self>,
        mut io: BdevIo,
        mirror: bool,
        mut plan: impl FnMut(&BdevIo, usize) -> Option<ChildReq>,
    ) {
        let n = self.read_blocks.len();
        {
            let mut scratch = self.scratch.borrow_mut();
            scratch.clear();
            for m in 0..n {
                let Some(req) = plan(&io, m) else { continue };
                let Some(base) = self.member(m) else { continue };
                let Some(mut child) = base.alloc_io() else {
                    // Out of BdevIos: give back what we took and let the
                    // bdev layer retry the whole request.
                    scratch.clear();
                    drop(scratch);
                    return io.complete_deferred(IoStatus::NoMem);
                };
                match req {
                    ChildReq::Copy => {
                        // Each member writes the parent's data: the parent
                        // lends it until every child is dropped.
                        child.share_request_of(&mut io);
                        self.shift(&mut child, m);
                    }
                    ChildReq::Reset => {
                        child.reset();
                    }
                    ChildReq::Range(start, len) if io.io_type() == IoType::Flush => {
                        child.flush(start + self.off(m), len);
                    }
                    ChildReq::Range(start, len) => {
                        child.unmap(start + self.off(m), len);
                    }
                }
                scratch.push((m, base, child));
            }
            if scratch.is_empty() {
                drop(scratch);
                // raid1 write with no operational member left.
                let status = if mirror {
                    IoStatus::Failed
                } else {
                    IoStatus::Success
                };
                return io.complete_deferred(status);
            }
        }
        let count = self.scratch.borrow().len();
        let slot = self.take_slot(io, count, mirror);
        loop {
            let next = self.scratch.borrow_mut().pop();
            let Some((m, base, mut child)) = next else {
                break;
            };
            child
                .set_tag(SLAB_TAG | ((slot as u64) << 8) | member_tag(m))
                .on_done(self.handler());
            if let Err(e) = base.submit(child) {
                let status = IoStatus::Errno(e.error.errno());
                drop(e);
                self.part_done(slot, m, status, true);
            }
        }
    }

    fn take_slot(&self, parent: BdevIo, remaining: usize, mirror: bool) -> usize {
        let slot = Slot {
            parent: Some(parent),
            remaining,
            status: IoStatus::Pending,
            ok: [0; 4],
            mirror,
            in_window: false,
        };
        let mut slots = self.slots.borrow_mut();
        match self.free.borrow_mut().pop() {
            Some(i) => {
                slots[i] = slot;
                i
            }
            None => {
                slots.push(slot);
                slots.len() - 1
            }
        }
    }

    /// One child of slot `i` (member `m`) is done.
    fn part_done(&self, i: usize, m: usize, status: IoStatus, deferred: bool) {
        let (finished, mirror) = {
            let mut slots = self.slots.borrow_mut();
            let Some(s) = slots.get_mut(i) else { return };
            if status.is_success() {
                s.ok[m / 64] |= 1 << (m % 64);
            } else if s.status == IoStatus::Pending {
                s.status = status;
            }
            s.remaining -= 1;
            (s.remaining == 0, s.mirror)
        };
        if mirror && !status.is_success() {
            self.fail(m);
        }
        if finished {
            self.finish_slot(i, deferred);
        }
    }

    fn finish_slot(&self, i: usize, deferred: bool) {
        let (parent, status, mirror) = {
            let mut slots = self.slots.borrow_mut();
            let Some(s) = slots.get_mut(i) else { return };
            let status = if s.mirror {
                let ok = (0..self.read_blocks.len())
                    .any(|m| s.ok[m / 64] & (1 << (m % 64)) != 0 && self.raid().member_ok(m));
                match (ok, s.status) {
                    (true, _) => IoStatus::Success,
                    (false, IoStatus::Pending) => IoStatus::Failed,
                    (false, e) => e,
                }
            } else if s.status == IoStatus::Pending {
                IoStatus::Success
            } else {
                s.status
            };
            if s.in_window {
                s.in_window = false;
                self.draining.set(self.draining.get() - 1);
            }
            (s.parent.take(), status, s.mirror)
        };
        self.free.borrow_mut().push(i);
        let Some(p) = parent else { return };
        if mirror {
            if let Some(gen) = self.raid().sb_behind() {
                // A member state changed and the superblock does not say
                // so yet: the write is acknowledged once it does.
                return self.hold_ack(gen, p, status);
            }
        }
        finish(p, status, deferred);
    }

    /// Keeps a finished raid1 write until the superblock records
    /// generation `gen`.
    fn hold_ack(&self, gen: u64, parent: BdevIo, status: IoStatus) {
        self.acks.borrow_mut().push_back((gen, parent, status));
        if !self.ack_wait.replace(true) {
            self.wait_durable(gen);
        }
    }

    fn wait_durable(&self, gen: u64) {
        let Some(t) = Thread::current() else {
            return self.release_acks(true);
        };
        let h = t.handle();
        let bdev = Arc::clone(&self.bdev);
        persist::when_durable(
            &self.bdev.raid,
            gen,
            Box::new(move |ok| {
                let b2 = Arc::clone(&bdev);
                let _ = h.send_msg(move || {
                    if let Ok(ch) = b2.device.get_channel() {
                        ch.inner.release_acks(ok);
                    }
                });
            }),
        );
    }

    /// Completes the held writes the superblock now covers (as failed
    /// when it could not be written: their success is not recorded).
    fn release_acks(&self, ok: bool) {
        self.ack_wait.set(false);
        let durable = self.raid().sb_durable.load(Ordering::Acquire);
        loop {
            let next = {
                let mut acks = self.acks.borrow_mut();
                match acks.front() {
                    Some((gen, _, _)) if *gen <= durable || !ok => acks.pop_front(),
                    _ => None,
                }
            };
            let Some((_, p, status)) = next else { break };
            p.complete(if ok { status } else { IoStatus::Failed });
        }
        let front = self.acks.borrow().front().map(|a| a.0);
        if let Some(gen) = front {
            self.ack_wait.set(true);
            self.wait_durable(gen);
        }
    }
}

/// What a fan-out child of one member does.
#[derive(Debug, Clone, Copy)]
enum ChildReq {
    /// The parent's request as is (raid1 write).
    Copy,
    /// A reset.
    Reset,
    /// The parent's flush or unmap, on these member blocks.
    Range(u64, u64),
}

impl IoCompletion for ChanInner {
    fn io_done(&self, mut child: BdevIo) {
        let tag = child.tag();
        if tag & SLAB_TAG != 0 {
            // A mirror's child borrows the parent's data: drop it first, so
            // that the parent completes at once when this was the last.
            let status = child.status();
            drop(child);
            return self.part_done(tag_slot(tag), tag_member(tag), status, false);
        }
        let m = tag_member(tag);
        let Some(parent) = child.take_parent() else {
            return;
        };
        if let Geometry::Raid1 { .. } = self.bdev.geometry {
            let blocks = parent.num_blocks();
            if let Some(c) = self.read_blocks.get(m) {
                c.set(c.get().saturating_sub(blocks));
            }
            if !child.status().is_success() {
                self.fail(m);
                // Need an Rc to submit again: reads are retried from here.
                return self.retry_read(parent, child.status());
            }
        }
        parent.complete_from(&child);
    }
}

impl ChanInner {
    /// A raid1 read failed on one member: try the others.
    fn retry_read(&self, parent: BdevIo, last: IoStatus) {
        // The channel is alive (the parent holds it); rebuild the Rc from
        // the device's channel of this thread.
        match self.bdev.device.get_channel() {
            Ok(ch) => ch.inner.raid1_read(parent, last, false),
            Err(_) => parent.complete(last),
        }
    }
}
