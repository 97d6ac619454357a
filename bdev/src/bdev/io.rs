//! The request and the channel it travels on.
//!
//! [`BdevIo`] is one block I/O request: a pointer to a pooled box
//! (`IoInner`). `ChannelCore` is the bdev layer's state per (bdev, thread).
//! The two refer to each other (an I/O remembers the channel it was
//! submitted on; a channel queues I/Os), so both are defined here, with the
//! per-stage state a channel keeps. What the pipeline does with them lives
//! in the stage files above this one, each importing only downward:
//! `check.rs` → `qos.rs` → `route.rs` → `reset.rs` / `splitter.rs` →
//! `bounce.rs` → the module; the module's completion enters `complete.rs`
//! and ends in `finish.rs`. The consumer's request builders are in
//! `request.rs`, the module's side of an I/O in `module/serve.rs`.
//!
//! # The memory behind an I/O's segments
//!
//! Segments ([`IoVec`]) are raw pointers, and modules and the kernel read
//! and write through them, so the bdev layer keeps one rule: **every
//! segment of an I/O describes memory that lives at least as long as the
//! segment**. It describes one of
//!
//! * the I/O's own buffers (`bufs`, `aux_bufs`) or bounce buffer: they
//!   cannot be taken from a submitted I/O, and taking them clears the
//!   segments that described them;
//! * the memory of a `parent` the I/O carries (a virtual bdev's child,
//!   built with `take_request_of`): the parent cannot be taken back while
//!   the child is submitted, and taking it clears the child's segments;
//! * the memory of an I/O it borrows from (`lender`: fan-out children of a
//!   mirror, split children): an I/O that has lent its memory is not freed,
//!   rebuilt or handed back to its consumer while a borrower exists — it is
//!   parked instead (`Lend`) and released when the last borrower goes;
//! * the thread's zero buffer, kept by the pool for the thread's life;
//! * registered external memory ([`crate::dma::ExtMem`], guest memory)
//!   kept alive by the I/O (`Bufs::Ext`) or its parent or lender; with
//!   `ext_data` set its bytes are only copied racily, never sliced.
//!
//! All I/Os that share memory live on one thread (`BdevIo` is `!Send`), and
//! mutable access to an I/O's data is refused when another I/O shares it
//! (`IoInner::data_writable`), so the byte slices built in `segments.rs`
//! never alias a live `&mut`.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::mem::ManuallyDrop;
use std::rc::Rc;
use std::sync::Arc;

use super::histogram::{ChannelHist, HistConfig};
use super::pool::IoPool;
use super::quota::QosShared;
use super::segments::IoVec;
use super::shared::BdevShared;
use super::slot::{drop_cold, IsEmpty};
use super::split::{FitCaps, SplitCursor, SplitLimits};
use super::stats::IoStat;
use super::types::{IoStatus, IoType, NvmeCmd};
use crate::dma::{DmaBuf, ExtMem};
use crate::thread::{current_thread_id, IoChannel, IoDevice, Poller, Thread};

/// Something that consumes completed I/Os: the zero-allocation way for a
/// stateful consumer (one `Rc` per channel, cloned per I/O).
pub trait IoCompletion {
    /// Called on the submitting thread with the completed I/O.
    fn io_done(&self, io: BdevIo);
}

/// What runs when an I/O completes.
#[derive(Default)]
pub enum Completion {
    /// Nothing (the I/O is dropped back to the pool).
    #[default]
    None,
    /// A plain function; state travels in the I/O (tag, parent).
    Fn(fn(BdevIo)),
    /// A shared handler object.
    Handler(Rc<dyn IoCompletion>),
    /// A closure (allocates: convenience path, not the fast path).
    Closure(Box<dyn FnOnce(BdevIo)>),
}

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Completion::None => "None",
            Completion::Fn(_) => "Fn",
            Completion::Handler(_) => "Handler",
            Completion::Closure(_) => "Closure",
        })
    }
}

/// Owned data buffers of an I/O.
#[derive(Debug, Default)]
pub(crate) enum Bufs {
    #[default]
    None,
    One(DmaBuf),
    Many(Vec<DmaBuf>),
}

/// Where an I/O is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IoState {
    /// Being built by its owner.
    Building,
    /// Submitted: owned by the bdev layer or a module until completed.
    Submitted,
    /// Completed; handed back to the owner.
    Done,
}

/// The bdev layer's role for an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Submitted by a consumer.
    User,
    /// Submitted by a consumer while the channel keeps a latency
    /// histogram: its completion is counted there (set off the fast path,
    /// which a histogram turns off).
    UserTimed,
    /// `User` or `UserTimed` (`timed`) whose module lent its memory to
    /// other I/Os (`share_request_of`): its completion waits until they are
    /// gone.
    UserLending { timed: bool },
    /// A child of a split (or emulated) parent held in the channel.
    Child { parent_key: usize },
    /// A consumer's reset, passed to the module by the reset sequence.
    ResetToModule,
}

/// An I/O whose memory other I/Os' segments describe: the borrowers each
/// hold a clone of the `Rc`, the lender keeps one in `IoInner::lend`. While
/// a borrower exists, the lender is parked here instead of being freed or
/// completed.
#[derive(Default)]
pub(crate) struct Lend {
    parked: RefCell<Option<Parked>>,
}

/// A lender waiting for its borrowers.
enum Parked {
    /// Dropped: recycle it when the last borrower goes.
    Dropped(Box<IoInner>),
    /// Completed by its module: finish it (with this function of the
    /// completion stage) when the last borrower goes.
    Completed(BdevIo, fn(BdevIo)),
}

pub(crate) struct IoInner {
    pub(crate) io_type: IoType,
    pub(crate) offset_blocks: u64,
    pub(crate) num_blocks: u64,
    pub(crate) src_offset_blocks: u64,
    pub(crate) iovs: Vec<IoVec>,
    pub(crate) aux_iovs: Vec<IoVec>,
    pub(crate) bufs: Bufs,
    pub(crate) aux_bufs: Bufs,
    pub(crate) nvme_cmd: NvmeCmd,
    pub(crate) nvme_cdw0: u32,
    pub(crate) status: IoStatus,
    pub(crate) cb: Completion,
    pub(crate) tag: u64,
    /// The I/O this one carries (a virtual bdev's child carries the I/O it
    /// serves; its segments describe the parent's memory).
    pub(crate) parent: Option<BdevIo>,
    /// This I/O's memory as lent to others (kept with the box once made).
    pub(crate) lend: Option<Rc<Lend>>,
    /// The I/O whose memory this one's segments describe.
    pub(crate) lender: Option<Rc<Lend>>,
    /// The segments describe memory this I/O does not own alone (the
    /// zero buffer, or its `lender`'s memory, which other I/Os read too):
    /// modules may not write it. Always set while `lender` is.
    pub(crate) ro_data: bool,
    /// The segments may describe external memory: racy copies only (a
    /// stale `true` only costs racy copies).
    pub(crate) ext_data: bool,
    /// The external memory an `ext` request's segments describe, kept
    /// alive (not owned) while they do. Apart from `bufs`, so that the
    /// buffer enum keeps its three variants and cheap discriminant on the
    /// common path.
    pub(crate) ext_mem: Option<Arc<ExtMem>>,
    pub(crate) ch: Option<IoChannel<ChannelCore>>,
    pub(crate) thread_id: u64,
    pub(crate) submit_tick: u64,
    pub(crate) complete_tick: u64,
    pub(crate) role: Role,
    pub(crate) state: IoState,
    pub(crate) bounce: Option<DmaBuf>,
    pub(crate) saved_iovs: Vec<IoVec>,
    pub(crate) driver_ctx: [u64; 4],
}

impl IoInner {
    fn new_boxed() -> Box<IoInner> {
        Box::new(IoInner {
            io_type: IoType::Read,
            offset_blocks: 0,
            num_blocks: 0,
            src_offset_blocks: 0,
            iovs: Vec::with_capacity(4),
            aux_iovs: Vec::new(),
            bufs: Bufs::None,
            aux_bufs: Bufs::None,
            nvme_cmd: NvmeCmd::default(),
            nvme_cdw0: 0,
            status: IoStatus::Pending,
            cb: Completion::None,
            tag: 0,
            parent: None,
            lend: None,
            lender: None,
            ro_data: false,
            ext_data: false,
            ext_mem: None,
            ch: None,
            thread_id: 0,
            submit_tick: 0,
            complete_tick: 0,
            role: Role::User,
            state: IoState::Building,
            bounce: None,
            saved_iovs: Vec::new(),
            driver_ctx: [0; 4],
        })
    }

    /// Reused after its completion: start afresh, keeping the pool slot
    /// and the channel. (`submit` sets the role.)
    #[inline]
    pub(crate) fn reuse(&mut self) {
        self.state = IoState::Building;
        self.status = IoStatus::Pending;
        self.nvme_cdw0 = 0;
        if self.ro_data {
            self.unshare();
        }
    }

    /// Forgets what this I/O shared with others as a borrower: its
    /// segments (which described the lender's memory) and the loan.
    #[cold]
    pub(crate) fn unshare(&mut self) {
        self.iovs.clear();
        self.aux_iovs.clear();
        self.ro_data = false;
        release_lender(self);
    }

    /// Whether dropping this I/O has more to release than its channel
    /// (buffers, a parent, a loan, a completion, a bounce buffer). An I/O
    /// lent out but owning none of these owns none of the memory its
    /// borrowers describe, so it recycles like any other (its `lend` stays
    /// with the box).
    #[inline]
    fn owns_extras(&self) -> bool {
        self.parent.is_some()
            || self.bounce.is_some()
            || self.lender.is_some()
            || !matches!(self.cb, Completion::None)
            || !matches!(self.bufs, Bufs::None)
            || !matches!(self.aux_bufs, Bufs::None)
            || self.ext_mem.is_some()
    }

    /// Whether other I/Os' segments describe this I/O's memory now.
    #[inline]
    pub(crate) fn is_lent(&self) -> bool {
        self.lend.as_ref().is_some_and(|l| Rc::strong_count(l) > 1)
    }

    /// Whether a module may write this I/O's data: no other I/O describes
    /// the same memory (see the module docs).
    #[inline]
    pub(crate) fn data_writable(&self) -> bool {
        !self.ro_data && !self.is_lent()
    }

    /// The loan other I/Os take to share this I/O's memory.
    pub(crate) fn lend(&mut self) -> Rc<Lend> {
        Rc::clone(self.lend.get_or_insert_with(Rc::default))
    }
}

/// Gives back the loan of `i` (a borrower).
pub(crate) fn release_lender(i: &mut IoInner) {
    if let Some(l) = i.lender.take() {
        give_back(l);
    }
}

/// Gives back one loan: when it was the last, the lender parked meanwhile
/// is released (recycled, or finished in a later iteration of this
/// thread: never from inside the borrower's drop).
fn give_back(l: Rc<Lend>) {
    // The lender's own reference and ours: we were the last borrower.
    if Rc::strong_count(&l) > 2 {
        return;
    }
    let parked = l.parked.borrow_mut().take();
    drop(l);
    match parked {
        None => {}
        Some(Parked::Dropped(inner)) => recycle_slow(inner),
        Some(Parked::Completed(io, finish)) => match Thread::current() {
            Some(t) => t.defer(move || finish(io)),
            None => finish(io),
        },
    }
}

/// Parks a lender that completed while borrowers exist; `finish` runs when
/// the last one goes. Returns the I/O back when it has no borrowers.
pub(crate) fn park_completed(io: BdevIo, finish: fn(BdevIo)) -> Option<BdevIo> {
    if !io.inner().is_lent() {
        return Some(io);
    }
    let lend = Rc::clone(
        io.inner()
            .lend
            .as_ref()
            .expect("invariant: a lent I/O has a loan"),
    );
    *lend.parked.borrow_mut() = Some(Parked::Completed(io, finish));
    None
}

/// Per-thread management channel of a bdev manager: this thread's pool.
pub(crate) struct MgmtChannel {
    pub(crate) pool: Rc<IoPool<IoInner>>,
}

impl Drop for MgmtChannel {
    fn drop(&mut self) {
        self.pool.release();
    }
}

/// One block I/O request.
///
/// A consumer allocates one from its channel
/// ([`super::BdevChannel::alloc_io`]), fills it with a request builder
/// ([`BdevIo::read`], [`BdevIo::write`], ...), names a completion and
/// submits it. The module serving it completes it exactly once (the
/// module side is [`super::module::ModuleIo`]); the bdev layer then
/// accounts for it and calls the consumer's completion on the submitting
/// thread. Dropping it returns it to the pool. Data buffers are owned
/// ([`DmaBuf`]): moved in with the request and taken back with
/// [`BdevIo::take_buf`] after completion.
///
/// An I/O never leaves its thread (it is `!Send`), which is what lets
/// several I/Os describe the same memory safely:
///
/// ```compile_fail
/// fn send<T: Send>(_: T) {}
/// fn elsewhere(io: bdevkit::bdev::BdevIo) {
///     send(io);
/// }
/// ```
// The box is wrapped in `ManuallyDrop` so that `Drop` can move it back into
// the pool: a plain `Option<Box<_>>` would cost a check on every accessor.
pub struct BdevIo(ManuallyDrop<Box<IoInner>>);

impl fmt::Debug for BdevIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.inner();
        f.debug_struct("BdevIo")
            .field("type", &i.io_type)
            .field("offset_blocks", &i.offset_blocks)
            .field("num_blocks", &i.num_blocks)
            .field("status", &i.status)
            .field("tag", &i.tag)
            .finish()
    }
}

impl Drop for BdevIo {
    /// Returns the I/O to its thread's pool. What it still owns (buffers,
    /// parent, loan, completion) is dropped after the box is back, so that
    /// recursive drops find the pool consistent; a lender with borrowers is
    /// parked until they are gone.
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and `self.0` is not touched afterwards;
        // this is the only place that takes the box out.
        let inner = unsafe { ManuallyDrop::take(&mut self.0) };
        debug_assert!(
            inner.state != IoState::Submitted || std::thread::panicking(),
            "BdevIo dropped while submitted: a module must complete every I/O"
        );
        if inner.owns_extras() {
            recycle_slow(inner);
            return;
        }
        recycle(inner);
    }
}

#[inline]
fn recycle(mut inner: Box<IoInner>) {
    inner.iovs.clear();
    inner.aux_iovs.clear();
    inner.ext_data = false;
    inner.state = IoState::Building;
    if let Some(ch) = inner.ch.take() {
        ch.mgmt.pool.put(inner);
    }
}

#[cold]
fn recycle_slow(mut inner: Box<IoInner>) {
    if inner.is_lent() {
        let lend = inner.lend();
        *lend.parked.borrow_mut() = Some(Parked::Dropped(inner));
        return;
    }
    inner.iovs.clear();
    inner.aux_iovs.clear();
    inner.ro_data = false;
    let lender = inner.lender.take();
    let extras = (
        inner.parent.take(),
        std::mem::take(&mut inner.cb),
        std::mem::take(&mut inner.bufs),
        std::mem::take(&mut inner.aux_bufs),
        inner.bounce.take(),
        inner.ext_mem.take(),
    );
    recycle(inner);
    drop(extras);
    if let Some(l) = lender {
        give_back(l);
    }
}

impl BdevIo {
    #[inline]
    pub(crate) fn inner(&self) -> &IoInner {
        &self.0
    }

    #[inline]
    pub(crate) fn inner_mut(&mut self) -> &mut IoInner {
        &mut self.0
    }

    /// Readies this I/O for a new request (fresh, or completed: a
    /// submitted I/O cannot take one) with no segments.
    #[inline(always)]
    pub(crate) fn fresh_request(&mut self) -> &mut IoInner {
        let i = self.inner_mut();
        if i.state != IoState::Building {
            assert!(
                i.state != IoState::Submitted,
                "request set on a submitted I/O"
            );
            i.reuse();
        } else if i.ro_data {
            i.unshare();
        }
        i.iovs.clear();
        i.aux_iovs.clear();
        i.ext_data = false;
        i
    }

    /// A fresh I/O bound to `ch`, or `None` when the pool is exhausted.
    #[inline]
    pub(crate) fn alloc(ch: &IoChannel<ChannelCore>) -> Option<BdevIo> {
        let mut inner = ch.mgmt.pool.get(IoInner::new_boxed)?;
        inner.ch = Some(ch.clone());
        inner.thread_id = ch.thread_id;
        inner.tag = 0;
        inner.status = IoStatus::Pending;
        inner.role = Role::User;
        inner.nvme_cdw0 = 0;
        Some(BdevIo(ManuallyDrop::new(inner)))
    }
}

/// Makes `parent` the parent `child` carries (a previous one is dropped,
/// out of line).
#[inline]
pub(crate) fn replace_parent(child: &mut IoInner, parent: BdevIo) {
    if let Some(old) = child.parent.replace(parent) {
        drop_cold(old);
    }
}

impl IsEmpty for Bufs {
    #[inline]
    fn is_empty(&self) -> bool {
        matches!(self, Bufs::None)
    }
}

impl IsEmpty for Completion {
    #[inline]
    fn is_empty(&self) -> bool {
        matches!(self, Completion::None)
    }
}

/// A split (or emulated) parent waiting for its children, in its
/// channel's table.
pub(crate) struct SplitParent {
    pub(crate) io: Option<BdevIo>,
    pub(crate) cursor: SplitCursor,
    pub(crate) limits: SplitLimits,
    pub(crate) kind: SplitKind,
    pub(crate) outstanding: u32,
    pub(crate) status: IoStatus,
    pub(crate) waiting_for_io: bool,
    pub(crate) zero: Option<Rc<DmaBuf>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SplitKind {
    /// Read/write/compare: children carry views of the parent's data.
    Data,
    /// Unmap, write zeroes, copy: children carry ranges only.
    Range,
    /// Write zeroes emulated with writes from the zero buffer.
    ZeroWrites,
}

/// A channel's QoS queue.
pub(crate) struct QosChannel {
    pub(crate) shared: Arc<QosShared>,
    pub(crate) queue: VecDeque<BdevIo>,
    pub(crate) poller: Option<Poller>,
}

impl QosChannel {
    pub(crate) fn new(shared: Arc<QosShared>) -> Self {
        QosChannel {
            shared,
            queue: VecDeque::new(),
            poller: None,
        }
    }

    pub(crate) fn shutdown(self) {
        if let Some(p) = self.poller {
            p.unregister();
        }
    }
}

/// A bdev's io_device: its channels are `ChannelCore`s.
pub(crate) type BdevDevice = IoDevice<ChannelCore>;

/// The module's channel for one bdev on one thread, as the core calls it.
pub(crate) trait ModuleChannelDyn {
    fn submit(&self, io: BdevIo);
}

/// Per (bdev, thread) state of the bdev layer.
pub(crate) struct ChannelCore {
    pub(crate) bdev: Arc<BdevShared>,
    /// The bdev's io_device (channel walks: reset, QoS, statistics).
    pub(crate) device: BdevDevice,
    pub(crate) module: Box<dyn ModuleChannelDyn>,
    pub(crate) mgmt: IoChannel<MgmtChannel>,
    pub(crate) thread_id: u64,
    pub(crate) stat: RefCell<IoStat>,
    /// Consumer I/Os submitted and not yet completed to the consumer.
    pub(crate) outstanding: Cell<u64>,
    pub(crate) nomem: RefCell<VecDeque<BdevIo>>,
    pub(crate) nomem_poller: RefCell<Option<Poller>>,
    pub(crate) parents: RefCell<Vec<Option<SplitParent>>>,
    pub(crate) free_parents: RefCell<Vec<usize>>,
    frozen: Cell<bool>,
    pub(crate) qos: RefCell<Option<QosChannel>>,
    pub(crate) reset_queue: RefCell<VecDeque<BdevIo>>,
    pub(crate) active_reset: RefCell<Option<BdevIo>>,
    pub(crate) limits: SplitLimits,
    /// `limits` for writes: the boundary is the write unit when it is
    /// mandatory.
    pub(crate) write_limits: SplitLimits,
    /// Mandatory write unit in blocks (0 = none): writes must be
    /// multiples of it, in offset and length.
    pub(crate) write_unit: u64,
    pub(crate) split_rw: bool,
    /// Reads and writes go straight to the module: no split limits and
    /// no alignment requirement, or a module that tests them itself
    /// (`module_checks_fit`).
    pub(crate) direct_rw: bool,
    qos_on: Cell<bool>,
    /// `direct_rw` and neither frozen nor rate limited: reads and writes
    /// go from `submit` straight to the module (one test on the fast path).
    pub(crate) fast_rw: Cell<bool>,
    /// Not `direct_rw`, but a read or write that fits `fit` goes straight
    /// to the module all the same; `fast_fit` as `fast_rw` for it.
    pub(crate) fit_rw: bool,
    pub(crate) fast_fit: Cell<bool>,
    pub(crate) fit: FitCaps,
    pub(crate) align_mask: usize,
    pub(crate) block_size: u64,
    pub(crate) zeroes_native: bool,
    /// Latency histogram (`bdev_enable_histogram`), and whether there is
    /// one (one test per completion).
    pub(crate) hist: RefCell<Option<Box<ChannelHist>>>,
    pub(crate) hist_on: Cell<bool>,
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
    /// This thread's channel state for the bdev `bdev`, serving I/O with
    /// the module's channel `module`.
    pub(crate) fn new(
        bdev: Arc<BdevShared>,
        device: BdevDevice,
        module: Box<dyn ModuleChannelDyn>,
        mgmt: IoChannel<MgmtChannel>,
    ) -> ChannelCore {
        let p = &bdev.props;
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
        let block_size = u64::from(p.block_size);
        let direct_rw = p.module_checks_fit || !split_rw && align_mask == 0;
        // (Write limits differ only in a boundary, which rules this out.)
        let fit = limits
            .fit_caps(align_mask)
            .filter(|_| write_limits.boundary == 0);
        let fit_rw = !direct_rw && fit.is_some();
        let fit = fit.unwrap_or(FitCaps::NONE);
        let zeroes_native = bdev.module_supports(IoType::WriteZeroes);
        let core = ChannelCore {
            bdev,
            device,
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
            direct_rw,
            qos_on: Cell::new(false),
            fast_rw: Cell::new(direct_rw),
            fit_rw,
            fast_fit: Cell::new(fit_rw),
            fit,
            align_mask,
            block_size,
            zeroes_native,
            hist: RefCell::new(None),
            hist_on: Cell::new(false),
        };
        if let Some(cfg) = core.bdev.hist.lock().config {
            core.set_histogram(Some(&cfg));
        }
        if let Some(shared) = core.bdev.qos.shared() {
            *core.qos.borrow_mut() = Some(QosChannel::new(shared));
            core.set_qos_on(true);
        }
        core
    }

    pub(crate) fn is_frozen(&self) -> bool {
        self.frozen.get()
    }

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
    pub(crate) fn tally_histogram(&self, io_type: IoType, ticks: u64) {
        if let Ok(mut h) = self.hist.try_borrow_mut() {
            if let Some(h) = h.as_mut() {
                h.tally(io_type, ticks);
            }
        }
    }

    fn update_fast(&self) {
        let plain = !self.frozen.get() && !self.qos_on.get() && !self.hist_on.get();
        self.fast_rw.set(self.direct_rw && plain);
        self.fast_fit.set(self.fit_rw && plain);
    }

    /// This thread's pool.
    pub(crate) fn pool(&self) -> &Rc<IoPool<IoInner>> {
        &self.mgmt.pool
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
