//! The per-thread bdev channel and the submission/completion path: checks,
//! splitting, write-zeroes emulation, bounce buffers, NOMEM retry, stats.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;

use super::histogram::{ChannelHist, HistConfig};
use super::io::{
    copy_from_segments, copy_to_segments, BdevIo, Completion, IoCache, IoState, IoVec, Role,
};
use super::manager::{Bdev, BdevInner, BdevManager, ZERO_BUF_LEN};
use super::module::ModuleChannelDyn;
use super::qos::{self, QosChannel};
use super::reset;
use super::split::{SplitCursor, SplitLimits};
use super::stats::IoStat;
use super::types::{IoStatus, IoType, DATA_TYPES, RANGE_TYPES};
use crate::clock;
use crate::dma::DmaBuf;
use crate::error::{Error, Result};
use crate::thread::{current_thread_id, IoChannel, Poller, PollerStatus, Thread};

/// Most children of one split parent in flight at once.
const MAX_CHILDREN_IN_FLIGHT: u32 = 32;
/// Bounce buffers kept per thread for reuse.
const BOUNCE_CACHE: usize = 8;

/// The per-thread management channel: `BdevIo` cache, io_wait queue,
/// bounce buffer cache.
pub(crate) struct MgmtChannel {
    pub(crate) cache: Rc<IoCache>,
}

impl MgmtChannel {
    pub(crate) fn new(pool: Arc<super::io::PoolShared>) -> Self {
        MgmtChannel {
            cache: IoCache::new(pool),
        }
    }
}

impl Drop for MgmtChannel {
    fn drop(&mut self) {
        self.cache.release();
    }
}

/// A split (or emulated) parent waiting for its children.
struct Parent {
    io: Option<BdevIo>,
    cursor: SplitCursor,
    limits: SplitLimits,
    kind: SplitKind,
    outstanding: u32,
    status: IoStatus,
    waiting_for_io: bool,
    zero: Option<Arc<DmaBuf>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SplitKind {
    /// Read/write/compare: children carry views of the parent's data.
    Data,
    /// Unmap, write zeroes, copy: children carry ranges only.
    Range,
    /// Write zeroes emulated with writes from the zero buffer.
    ZeroWrites,
}

/// Per (bdev, thread) state of the bdev layer.
pub(crate) struct ChannelCore {
    pub(crate) bdev: Arc<BdevInner>,
    module: Box<dyn ModuleChannelDyn>,
    mgmt: IoChannel<MgmtChannel>,
    pub(crate) thread_id: u64,
    pub(crate) stat: RefCell<IoStat>,
    /// Consumer I/Os submitted and not yet completed to the consumer.
    pub(crate) outstanding: Cell<u64>,
    nomem: RefCell<VecDeque<BdevIo>>,
    nomem_poller: RefCell<Option<Poller>>,
    parents: RefCell<Vec<Option<Parent>>>,
    free_parents: RefCell<Vec<usize>>,
    frozen: Cell<bool>,
    pub(crate) qos: RefCell<Option<QosChannel>>,
    pub(crate) reset_queue: RefCell<VecDeque<BdevIo>>,
    pub(crate) active_reset: RefCell<Option<BdevIo>>,
    limits: SplitLimits,
    /// `limits` for writes: the boundary is the write unit when it is
    /// mandatory.
    write_limits: SplitLimits,
    /// Mandatory write unit in blocks (0 = none): writes must be
    /// multiples of it, in offset and length.
    write_unit: u64,
    split_rw: bool,
    /// Reads and writes go straight to the module: no split limits, no
    /// alignment requirement.
    direct_rw: bool,
    qos_on: Cell<bool>,
    /// `direct_rw` and neither frozen nor rate limited: reads and writes
    /// go from `submit` straight to the module (one test on the fast path).
    fast_rw: Cell<bool>,
    align_mask: usize,
    block_size: u64,
    zeroes_native: bool,
    /// Latency histogram (`bdev_enable_histogram`), and whether there is
    /// one (one test per completion).
    pub(crate) hist: RefCell<Option<Box<ChannelHist>>>,
    hist_on: Cell<bool>,
}

impl fmt::Debug for ChannelCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelCore")
            .field("bdev", &self.bdev.name)
            .field("thread_id", &self.thread_id)
            .field("outstanding", &self.outstanding.get())
            .finish_non_exhaustive()
    }
}

impl ChannelCore {
    pub(crate) fn set_frozen(&self, on: bool) {
        self.frozen.set(on);
        self.update_fast();
    }

    pub(crate) fn qos_on(&self) -> bool {
        self.qos_on.get()
    }

    pub(crate) fn set_qos_on(&self, on: bool) {
        self.qos_on.set(on);
        self.update_fast();
    }

    /// Starts a fresh histogram for `cfg`, or drops it (`None`).
    pub(crate) fn set_histogram(&self, cfg: Option<&HistConfig>) {
        *self.hist.borrow_mut() = cfg.map(ChannelHist::new);
        self.hist_on.set(cfg.is_some());
        self.update_fast();
    }

    /// The role of a consumer I/O submitted now.
    pub(crate) fn user_role(&self) -> Role {
        if self.hist_on.get() {
            Role::UserTimed
        } else {
            Role::User
        }
    }

    /// Counts a completion in the histogram.
    fn tally_histogram(&self, io_type: IoType, ticks: u64) {
        if let Ok(mut h) = self.hist.try_borrow_mut() {
            if let Some(h) = h.as_mut() {
                h.tally(io_type, ticks);
            }
        }
    }

    fn update_fast(&self) {
        self.fast_rw
            .set(self.direct_rw && !self.frozen.get() && !self.qos_on.get() && !self.hist_on.get());
    }

    pub(crate) fn cache(&self) -> &Rc<IoCache> {
        &self.mgmt.cache
    }

    pub(crate) fn bdev(&self) -> Bdev {
        Bdev(Arc::clone(&self.bdev))
    }
}

impl Drop for ChannelCore {
    fn drop(&mut self) {
        self.bdev.folded_stat.lock().merge(&self.stat.borrow());
        if let Some(h) = self.hist.get_mut().take() {
            let mut st = self.bdev.hist.lock();
            if let Some(cfg) = st.config {
                let folded = st.folded.get_or_insert_with(|| cfg.histogram());
                folded.merge(&h.data);
            }
        }
        if let Some(p) = self.nomem_poller.get_mut().take() {
            p.unregister();
        }
        if let Some(q) = self.qos.get_mut().take() {
            q.shutdown();
        }
    }
}

pub(crate) fn create_core(b: &Arc<BdevInner>) -> Result<ChannelCore> {
    let mgr = b
        .mgr
        .upgrade()
        .map(BdevManager)
        .ok_or(Error::RuntimeStopped)?;
    let mgmt = mgr.0.mgmt.get_channel()?;
    let module = b
        .ops
        .create_channel()
        .map_err(|source| Error::CreateChannel {
            name: b.name.clone(),
            source,
        })?;
    let p = &b.props;
    let boundary = if p.split_on_optimal_io_boundary {
        u64::from(p.optimal_io_boundary)
    } else {
        0
    };
    let limits = SplitLimits {
        block_size: p.block_size,
        boundary,
        max_blocks: u64::from(p.max_rw_size),
        max_segment_size: p.max_segment_size as usize,
        max_segments: p.max_num_segments as usize,
    };
    let write_unit = if p.split_on_write_unit && p.write_unit_size > 1 {
        u64::from(p.write_unit_size)
    } else {
        0
    };
    let write_limits = if write_unit != 0 {
        SplitLimits {
            boundary: write_unit,
            ..limits
        }
    } else {
        limits
    };
    let split_rw = limits.boundary != 0
        || write_limits.boundary != 0
        || limits.max_blocks != 0
        || limits.max_segment_size != 0
        || limits.max_segments != 0;
    let align_mask = if p.required_alignment == 0 {
        0
    } else {
        (1usize << p.required_alignment.min(20)) - 1
    };
    let core = ChannelCore {
        bdev: Arc::clone(b),
        module,
        mgmt,
        thread_id: current_thread_id(),
        stat: RefCell::new(IoStat::default()),
        outstanding: Cell::new(0),
        nomem: RefCell::new(VecDeque::new()),
        nomem_poller: RefCell::new(None),
        parents: RefCell::new(Vec::new()),
        free_parents: RefCell::new(Vec::new()),
        frozen: Cell::new(false),
        qos: RefCell::new(None),
        reset_queue: RefCell::new(VecDeque::new()),
        active_reset: RefCell::new(None),
        limits,
        write_limits,
        write_unit,
        split_rw,
        direct_rw: !split_rw && align_mask == 0,
        qos_on: Cell::new(false),
        fast_rw: Cell::new(!split_rw && align_mask == 0),
        align_mask,
        block_size: u64::from(p.block_size),
        zeroes_native: b.ops.io_type_supported(IoType::WriteZeroes),
        hist: RefCell::new(None),
        hist_on: Cell::new(false),
    };
    if let Some(cfg) = b.hist.lock().config {
        core.set_histogram(Some(&cfg));
    }
    if let Some(shared) = b.qos.shared() {
        *core.qos.borrow_mut() = Some(QosChannel::new(shared));
        core.set_qos_on(true);
    }
    Ok(core)
}

/// A consumer's handle to a bdev on the current thread (from
/// [`super::BdevDesc::get_io_channel`]). `!Send`: it can only be used on the
/// thread that created it.
#[derive(Clone)]
pub struct BdevChannel {
    core: IoChannel<ChannelCore>,
    writable: bool,
    /// I/O types this channel may submit (supported, emulated, and allowed
    /// by the descriptor's mode): one bit test on the fast path.
    allowed: u32,
}

impl fmt::Debug for BdevChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BdevChannel")
            .field("bdev", &self.core.bdev.name)
            .field("thread_id", &self.core.thread_id)
            .field("writable", &self.writable)
            .finish()
    }
}

/// A submission rejected before reaching the module; the I/O (with its
/// buffers) comes back.
pub struct SubmitError {
    /// Why.
    pub error: Error,
    /// The rejected I/O.
    pub io: BdevIo,
}

impl fmt::Debug for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubmitError")
            .field("error", &self.error)
            .field("io", &self.io)
            .finish()
    }
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for SubmitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl BdevChannel {
    pub(crate) fn new(core: IoChannel<ChannelCore>, writable: bool) -> Self {
        let mut allowed = 0u32;
        for t in IoType::ALL {
            // Writes that must cover whole write units are checked apart
            // (`check_slow`).
            let unit_write = t == IoType::Write && core.write_unit != 0;
            if core.bdev.supports(t) && (writable || !t.is_write()) && !unit_write {
                allowed |= t.bit();
            }
        }
        BdevChannel {
            core,
            writable,
            allowed,
        }
    }

    /// The bdev.
    #[must_use]
    pub fn bdev(&self) -> Bdev {
        self.core.bdev()
    }

    /// Id of the thread the channel belongs to.
    #[must_use]
    pub fn thread_id(&self) -> u64 {
        self.core.thread_id
    }

    /// Whether writes are allowed through this channel's descriptor.
    #[must_use]
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// A `BdevIo` from this thread's pool; `None` when the pool is empty
    /// (then [`BdevChannel::queue_io_wait`]).
    #[inline]
    #[must_use]
    pub fn alloc_io(&self) -> Option<BdevIo> {
        self.core.cache().get(&self.core, self.core.thread_id)
    }

    /// Calls `f` on this thread once a `BdevIo` has been freed (SPDK's
    /// `spdk_bdev_queue_io_wait`).
    pub fn queue_io_wait(&self, f: impl FnOnce() + 'static) {
        self.core.cache().wait(Box::new(f));
    }

    /// Statistics of this channel.
    #[must_use]
    pub fn stat(&self) -> IoStat {
        *self.core.stat.borrow()
    }

    /// Consumer I/Os in flight on this channel.
    #[must_use]
    pub fn outstanding(&self) -> u64 {
        self.core.outstanding.get()
    }

    /// Submits `io`. Checks happen here, before the module sees it: thread,
    /// supported type, write permission, range, buffer size. A rejected I/O
    /// comes back in the error. The completion always runs later, never
    /// inside this call.
    #[inline]
    pub fn submit(&self, mut io: BdevIo) -> std::result::Result<(), SubmitError> {
        if let Err(error) = self.check(&mut io) {
            return Err(SubmitError { error, io });
        }
        let core: &ChannelCore = &self.core;
        let i = io.inner_mut();
        i.state = IoState::Submitted;
        i.role = Role::User;
        i.status = IoStatus::Pending;
        i.submit_tick = clock::poll_ticks();
        if !matches!(&i.ch, Some(c) if IoChannel::ptr_eq(c, &self.core)) {
            i.ch = Some(self.core.clone());
        }
        core.outstanding.set(core.outstanding.get() + 1);
        let io_type = i.io_type;
        if core.fast_rw.get() && matches!(io_type, IoType::Read | IoType::Write) {
            core.module.submit(io);
            return Ok(());
        }
        if core.hist_on.get() {
            io.inner_mut().role = Role::UserTimed;
        }
        if core.frozen.get() && io_type != IoType::Reset {
            io.inner_mut().status = IoStatus::Aborted;
            defer_complete(io);
            return Ok(());
        }
        if qos::is_limited(core, io_type) {
            qos::submit(core, io);
            return Ok(());
        }
        dispatch(core, io);
        Ok(())
    }

    #[inline]
    fn check(&self, io: &mut BdevIo) -> Result<()> {
        let core: &ChannelCore = &self.core;
        if core.thread_id != current_thread_id() {
            return Err(Error::WrongThread);
        }
        let i = io.inner_mut();
        let bit = i.io_type.bit();
        if self.allowed & bit == 0 || i.state != IoState::Building {
            // Its own copy of the rest, so that the common case never
            // comes back here from a call.
            return self.check_slow(i);
        }
        self.check_rest(i)
    }

    /// Range and buffer checks.
    #[inline(always)]
    fn check_rest(&self, i: &mut super::io::IoInner) -> Result<()> {
        let core: &ChannelCore = &self.core;
        let t = i.io_type;
        let bit = t.bit();
        if RANGE_TYPES & bit != 0 {
            let num_blocks = core.bdev.num_blocks();
            let in_range = |off: u64, n: u64| off.checked_add(n).is_some_and(|e| e <= num_blocks);
            if !in_range(i.offset_blocks, i.num_blocks)
                || (t == IoType::Copy && !in_range(i.src_offset_blocks, i.num_blocks))
            {
                return Err(Error::OutOfRange {
                    offset_blocks: i.offset_blocks,
                    num_blocks: i.num_blocks,
                    bdev_blocks: num_blocks,
                });
            }
            if i.num_blocks == 0 && t != IoType::Flush {
                return Err(Error::InvalidArg("zero-length I/O".into()));
            }
        }
        if DATA_TYPES & bit != 0 {
            let need = i
                .num_blocks
                .checked_mul(core.block_size)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| Error::InvalidArg("I/O too large".into()))?;
            trim_iovs(&mut i.iovs, need)?;
            if t == IoType::CompareAndWrite {
                trim_iovs(&mut i.aux_iovs, need)?;
            }
        }
        Ok(())
    }

    /// What the bit test in `check` does not pass: rejections, and writes
    /// on a bdev with a mandatory write unit (their bit stays clear in
    /// `allowed`, so that other I/O pays nothing for this check).
    #[cold]
    fn check_slow(&self, i: &mut super::io::IoInner) -> Result<()> {
        let (t, state) = (i.io_type, i.state);
        let unit = self.core.write_unit;
        if t == IoType::Write
            && unit != 0
            && state == IoState::Building
            && self.writable
            && self.core.bdev.supports(t)
        {
            let (off, n) = (i.offset_blocks, i.num_blocks);
            if off.is_multiple_of(unit) && n.is_multiple_of(unit) {
                return self.check_rest(i);
            }
            return Err(partial_write_unit(unit, off, n));
        }
        Err(self.rejection(t, state))
    }

    #[cold]
    fn rejection(&self, t: IoType, state: IoState) -> Error {
        if state != IoState::Building {
            Error::InvalidArg("I/O has no new request (submitted or completed already)".into())
        } else if !self.core.bdev.supports(t) {
            Error::NotSupported(t)
        } else {
            Error::ReadOnly(self.core.bdev.name.clone())
        }
    }
}

/// A write on a bdev with a mandatory write unit must cover whole units.
#[cold]
fn partial_write_unit(unit: u64, offset_blocks: u64, num_blocks: u64) -> Error {
    Error::InvalidArg(format!(
        "write of {num_blocks} blocks at block {offset_blocks} does not cover whole \
         write units of {unit} blocks"
    ))
}

/// Cuts `iovs` to exactly `need` bytes; errors if they hold fewer.
#[inline]
fn trim_iovs(iovs: &mut Vec<IoVec>, need: usize) -> Result<()> {
    if iovs.len() == 1 && iovs[0].len == need {
        return Ok(());
    }
    let mut have = 0usize;
    for (n, v) in iovs.iter_mut().enumerate() {
        if have + v.len >= need {
            v.len = need - have;
            iovs.truncate(n + 1);
            if let Some(last) = iovs.last() {
                if last.len == 0 {
                    iovs.pop();
                }
            }
            return Ok(());
        }
        have += v.len;
    }
    Err(Error::BufferTooSmall { need, have })
}

fn defer_complete(io: BdevIo) {
    match Thread::current() {
        Some(t) => t.defer(move || complete(io)),
        None => complete(io),
    }
}

/// Routes a checked consumer I/O: reset sequence, emulation, split or the
/// module.
#[inline]
pub(crate) fn dispatch(core: &ChannelCore, io: BdevIo) {
    let i = io.inner();
    if core.direct_rw && matches!(i.io_type, IoType::Read | IoType::Write) {
        core.module.submit(io);
        return;
    }
    dispatch_slow(core, io);
}

fn dispatch_slow(core: &ChannelCore, io: BdevIo) {
    let i = io.inner();
    match i.io_type {
        IoType::Reset => reset::start(core, io),
        IoType::WriteZeroes if !core.zeroes_native => {
            let bs = core.block_size.max(1);
            let mut limits = core.write_limits;
            let mut zero_blocks = (ZERO_BUF_LEN as u64 / bs).max(1);
            if core.write_unit != 0 && zero_blocks >= core.write_unit {
                zero_blocks -= zero_blocks % core.write_unit;
            }
            limits.max_blocks = if limits.max_blocks == 0 {
                zero_blocks
            } else {
                limits.max_blocks.min(zero_blocks)
            };
            start_split(core, io, SplitKind::ZeroWrites, limits);
        }
        IoType::Read | IoType::Write | IoType::Compare if core.split_rw => {
            let limits = if i.io_type == IoType::Write {
                core.write_limits
            } else {
                core.limits
            };
            if limits.needs_split(i.offset_blocks, i.num_blocks, &i.iovs) {
                start_split(core, io, SplitKind::Data, limits);
            } else {
                to_module(core, io);
            }
        }
        IoType::Unmap | IoType::WriteZeroes | IoType::Copy => {
            let p = &core.bdev.props;
            let max = u64::from(match i.io_type {
                IoType::Unmap => p.max_unmap,
                IoType::WriteZeroes => p.max_write_zeroes,
                _ => p.max_copy,
            });
            let mut limits = core.limits;
            limits.max_blocks = max;
            if max != 0 && i.num_blocks > max
                || limits.boundary != 0 && limits.needs_split(i.offset_blocks, i.num_blocks, &[])
            {
                start_split(core, io, SplitKind::Range, limits);
            } else {
                to_module(core, io);
            }
        }
        _ => to_module(core, io),
    }
}

/// Last step before the module: bounce misaligned buffers.
#[inline]
pub(crate) fn to_module(core: &ChannelCore, mut io: BdevIo) {
    if core.align_mask != 0 {
        let mask = core.align_mask;
        let misaligned = io
            .inner()
            .iovs
            .iter()
            .any(|v| (v.base as usize | v.len) & mask != 0);
        if misaligned && !bounce(core, &mut io) {
            io.inner_mut().status = IoStatus::NoMem;
            defer_complete(io);
            return;
        }
    }
    core.module.submit(io);
}

fn bounce(core: &ChannelCore, io: &mut BdevIo) -> bool {
    let align = core.align_mask + 1;
    let i = io.inner_mut();
    let len: usize = i.iovs.iter().map(|v| v.len).sum();
    let cached = {
        let mut bc = core.cache().bounce_cache.borrow_mut();
        bc.iter()
            .position(|b| b.len() >= len && b.align() >= align)
            .map(|pos| bc.swap_remove(pos))
    };
    let buf = match cached {
        Some(b) => b,
        None => {
            let rounded = len.div_ceil(align) * align;
            match DmaBuf::alloc(rounded.max(align), align.max(512)) {
                Ok(b) => b,
                Err(_) => return false,
            }
        }
    };
    let mut buf = buf;
    if matches!(
        i.io_type,
        IoType::Write | IoType::Compare | IoType::CompareAndWrite | IoType::NvmeIo
    ) {
        copy_from_segments(&i.iovs, &mut buf.as_mut_slice()[..len]);
    }
    i.saved_iovs.clear();
    i.saved_iovs.extend_from_slice(&i.iovs);
    i.iovs.clear();
    i.iovs.push(IoVec {
        base: buf.as_mut_ptr(),
        len,
    });
    i.bounce = Some(buf);
    true
}

fn unbounce(core: &ChannelCore, io: &mut BdevIo) {
    let i = io.inner_mut();
    let Some(buf) = i.bounce.take() else { return };
    let len: usize = i.iovs.iter().map(|v| v.len).sum();
    if matches!(i.io_type, IoType::Read | IoType::NvmeIo | IoType::NvmeAdmin)
        && i.status == IoStatus::Success
    {
        copy_to_segments(&i.saved_iovs, &buf.as_slice()[..len]);
    }
    i.iovs.clear();
    i.iovs.extend_from_slice(&i.saved_iovs);
    i.saved_iovs.clear();
    let mut bc = core.cache().bounce_cache.borrow_mut();
    if bc.len() < BOUNCE_CACHE {
        bc.push(buf);
    }
}

/// Called by [`BdevIo::complete`]: the module finished an I/O.
pub(crate) fn complete(mut io: BdevIo) {
    let ch = io
        .inner()
        .ch
        .clone()
        .expect("invariant: a submitted I/O knows its channel");
    let core: &ChannelCore = &ch;
    if io.inner().bounce.is_some() {
        unbounce(core, &mut io);
    }
    let (status, role) = {
        let i = io.inner();
        (i.status, i.role)
    };
    if status == IoStatus::NoMem && role != Role::ResetToModule {
        requeue_nomem(core, &ch, io);
        return;
    }
    match role {
        Role::User => finish(core, io),
        Role::UserTimed => finish_timed(core, io),
        Role::Child { parent_key } => child_done(core, parent_key, io),
        Role::ResetToModule => reset::module_done(core, io),
    }
    if !core.nomem.borrow().is_empty() {
        let next = core.nomem.borrow_mut().pop_front();
        if let Some(next) = next {
            to_module(core, next);
        }
    }
}

/// Completes a consumer I/O of either role.
pub(crate) fn finish_user(core: &ChannelCore, io: BdevIo) {
    if io.inner().role == Role::UserTimed {
        finish_timed(core, io);
    } else {
        finish(core, io);
    }
}

/// [`finish`], counting the latency in the channel's histogram first.
#[cold]
fn finish_timed(core: &ChannelCore, io: BdevIo) {
    let i = io.inner();
    core.tally_histogram(i.io_type, clock::poll_ticks().wrapping_sub(i.submit_tick));
    finish(core, io);
}

/// Completes a consumer I/O: statistics, then the consumer's callback.
pub(crate) fn finish(core: &ChannelCore, mut io: BdevIo) {
    let now = clock::poll_ticks();
    let i = io.inner_mut();
    if i.status == IoStatus::Pending {
        i.status = IoStatus::Success;
    }
    let bytes = i.num_blocks * core.block_size;
    let ticks = now.wrapping_sub(i.submit_tick);
    core.stat
        .borrow_mut()
        .record(i.io_type, bytes, i.status, ticks);
    core.outstanding.set(core.outstanding.get() - 1);
    i.state = IoState::Done;
    i.complete_tick = now;
    let cb = std::mem::take(&mut i.cb);
    match cb {
        Completion::None => drop(io),
        Completion::Fn(f) => f(io),
        Completion::Handler(h) => h.io_done(io),
        Completion::Closure(c) => c(io),
    }
}

fn requeue_nomem(core: &ChannelCore, ch: &IoChannel<ChannelCore>, mut io: BdevIo) {
    io.inner_mut().status = IoStatus::Pending;
    core.nomem.borrow_mut().push_back(io);
    if core.nomem_poller.borrow().is_none() {
        if let Some(t) = Thread::current() {
            let ch = ch.clone();
            let p = t.register_poller("bdev_nomem_retry", 1_000, move |p| {
                let core: &ChannelCore = &ch;
                let next = core.nomem.borrow_mut().pop_front();
                match next {
                    Some(io) => {
                        to_module(core, io);
                        PollerStatus::Busy
                    }
                    None => {
                        p.unregister();
                        *core.nomem_poller.borrow_mut() = None;
                        PollerStatus::Idle
                    }
                }
            });
            *core.nomem_poller.borrow_mut() = Some(p);
        }
    }
}

/// Aborts every I/O queued for NOMEM retry (reset).
pub(crate) fn abort_queued(core: &ChannelCore) {
    loop {
        let next = core.nomem.borrow_mut().pop_front();
        let Some(mut io) = next else { break };
        io.inner_mut().status = IoStatus::Aborted;
        let role = io.inner().role;
        match role {
            Role::User => finish(core, io),
            Role::UserTimed => finish_timed(core, io),
            Role::Child { parent_key } => child_done(core, parent_key, io),
            Role::ResetToModule => reset::module_done(core, io),
        }
    }
}

fn start_split(core: &ChannelCore, io: BdevIo, kind: SplitKind, limits: SplitLimits) {
    let i = io.inner();
    let cursor = SplitCursor {
        offset_blocks: i.offset_blocks,
        remaining_blocks: i.num_blocks,
        iov_idx: 0,
        iov_off: 0,
    };
    let zero = if kind == SplitKind::ZeroWrites {
        core.bdev
            .mgr
            .upgrade()
            .and_then(|m| BdevManager(m).zero_buf())
    } else {
        None
    };
    let parent = Parent {
        io: Some(io),
        cursor,
        limits,
        kind,
        outstanding: 0,
        status: IoStatus::Pending,
        waiting_for_io: false,
        zero,
    };
    let key = {
        let mut parents = core.parents.borrow_mut();
        match core.free_parents.borrow_mut().pop() {
            Some(k) => {
                parents[k] = Some(parent);
                k
            }
            None => {
                parents.push(Some(parent));
                parents.len() - 1
            }
        }
    };
    continue_split(core, key, true);
}

/// Submits more children of parent `key`; finishes it when all are done.
fn continue_split(core: &ChannelCore, key: usize, from_submit: bool) {
    loop {
        let mut parents = core.parents.borrow_mut();
        let Some(p) = parents.get_mut(key).and_then(Option::as_mut) else {
            return;
        };
        let failed = !matches!(p.status, IoStatus::Pending | IoStatus::Success);
        if failed || p.cursor.remaining_blocks == 0 || p.outstanding >= MAX_CHILDREN_IN_FLIGHT {
            break;
        }
        let ch =
            p.io.as_ref()
                .and_then(|io| io.inner().ch.clone())
                .expect("invariant: split parent has a channel");
        let Some(mut child) = core.cache().get(&ch, core.thread_id) else {
            if p.outstanding == 0 && !p.waiting_for_io {
                p.waiting_for_io = true;
                drop(parents);
                let ch2 = ch.clone();
                core.cache().wait(Box::new(move || {
                    let core: &ChannelCore = &ch2;
                    if let Some(Some(p)) = core.parents.borrow_mut().get_mut(key) {
                        p.waiting_for_io = false;
                    }
                    continue_split(core, key, false);
                }));
            }
            return;
        };
        let parent_io = p.io.as_ref().expect("invariant: parent present");
        let pi = parent_io.inner();
        let ci = child.inner_mut();
        let range = match p.kind {
            SplitKind::Data => match p.limits.next_child(&mut p.cursor, &pi.iovs, &mut ci.iovs) {
                Ok(r) => r,
                Err(_) => {
                    p.status = IoStatus::Errno(libc::EINVAL);
                    drop(child);
                    break;
                }
            },
            SplitKind::Range | SplitKind::ZeroWrites => p.limits.next_range(&mut p.cursor),
        };
        let Some((off, n)) = range else {
            drop(child);
            break;
        };
        ci.offset_blocks = off;
        ci.num_blocks = n;
        ci.io_type = pi.io_type;
        match p.kind {
            SplitKind::Data => {}
            SplitKind::Range => {
                ci.src_offset_blocks = pi.src_offset_blocks + (off - pi.offset_blocks);
            }
            SplitKind::ZeroWrites => {
                ci.io_type = IoType::Write;
                let zero = p
                    .zero
                    .as_ref()
                    .expect("invariant: zero buffer for emulation");
                let len = usize::try_from(n * core.block_size).unwrap_or(usize::MAX);
                ci.iovs.push(IoVec {
                    base: zero.as_ptr().cast_mut(),
                    len: len.min(zero.len()),
                });
            }
        }
        ci.role = Role::Child { parent_key: key };
        ci.state = IoState::Submitted;
        ci.status = IoStatus::Pending;
        ci.submit_tick = pi.submit_tick;
        p.outstanding += 1;
        drop(parents);
        to_module(core, child);
    }
    let done = {
        let parents = core.parents.borrow();
        match parents.get(key).and_then(Option::as_ref) {
            Some(p) => {
                let failed = !matches!(p.status, IoStatus::Pending | IoStatus::Success);
                p.outstanding == 0 && (failed || p.cursor.remaining_blocks == 0)
            }
            None => false,
        }
    };
    if done {
        let (mut io, status) = {
            let mut parents = core.parents.borrow_mut();
            let p = parents[key].take().expect("invariant: parent present");
            core.free_parents.borrow_mut().push(key);
            (p.io.expect("invariant: parent io"), p.status)
        };
        io.inner_mut().status = if status == IoStatus::Pending {
            IoStatus::Success
        } else {
            status
        };
        if from_submit {
            let ch = io.inner().ch.clone();
            match (Thread::current(), ch) {
                (Some(t), Some(ch)) => t.defer(move || finish_user(&ch, io)),
                _ => finish_user(core, io),
            }
        } else {
            finish_user(core, io);
        }
    }
}

fn child_done(core: &ChannelCore, key: usize, child: BdevIo) {
    let status = child.status();
    {
        let mut parents = core.parents.borrow_mut();
        if let Some(Some(p)) = parents.get_mut(key) {
            p.outstanding -= 1;
            if status != IoStatus::Success
                && matches!(p.status, IoStatus::Pending | IoStatus::Success)
            {
                p.status = status;
            }
        }
    }
    let mut child = child;
    child.inner_mut().state = IoState::Done;
    drop(child);
    continue_split(core, key, false);
}
