//! The error module, its bdev, its per-thread state and its I/O path.
//!
//! Held (`pending`) I/Os live in per-thread queues. To reach them from the
//! control path (resume, reset, removal) the bdev is a
//! [`StackedWithDevice`]: its channel on each thread is that of an
//! io_device of its own, which `for_each_channel` visits on their threads.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use bdevkit::bdev::module::vbdev::{
    self, DeviceOps, StackedBdev, StackedWithDevice, VbdevConfig, VbdevModule,
};
use bdevkit::bdev::module::{
    Bdev, BdevChannel, BdevIo, BdevManager, BoxError, Error, IoCompletion, IoStatus, IoType,
    ModuleIo, Result,
};
use serde_json::{json, Value};

use crate::rpc::{ErrorCreateParams, ErrorInjectParams, InjectErrorType, InjectIoType};
use crate::{MODULE, NAME_PREFIX, PRODUCT_NAME};

/// One error bdev per base, `EE_<base>`. A saved config keeps the UUID
/// as configured (SPDK's), so `uuid_mut` keeps its default.
impl VbdevConfig for ErrorCreateParams {
    const MODULE: &'static str = MODULE;
    const CREATE_METHOD: &'static str = "bdev_error_create";
    type Attached = Bdev;

    fn attach(&self, mgr: &BdevManager, base: &Bdev) -> Result<Bdev> {
        attach(mgr, self, base)
    }

    fn base_name(&self) -> &str {
        &self.base_name
    }

    fn name(&self) -> Cow<'_, str> {
        Cow::Owned(error_name(&self.base_name))
    }
}

/// The error module: its configurations in a [`VbdevModule`], whose
/// `BdevModule` examines and emits the saved config.
pub type ErrorModule = VbdevModule<ErrorCreateParams>;

pub(crate) fn create(
    module: &ErrorModule,
    mgr: &BdevManager,
    params: ErrorCreateParams,
) -> Result<()> {
    if params.base_name.is_empty() {
        return Err(Error::InvalidArg("base_name must not be empty".into()));
    }
    module.configure(mgr, params)?;
    Ok(())
}

pub(crate) fn delete(
    module: &ErrorModule,
    mgr: &BdevManager,
    name: &str,
    done: impl FnOnce(Result<()>) + Send + 'static,
) {
    let bdev = mgr
        .get(name)
        .filter(|b| b.module_name() == MODULE && !b.is_removing());
    let Some((bdev, eb)) = bdev.and_then(|b| b.ops_as::<ErrorBdev>().map(|e| (b, e))) else {
        return done(Err(Error::NotFound(name.to_string())));
    };
    module.configs().remove(name);
    // Held I/Os would keep the bdev's channels (and so the bdev) alive.
    abort_pending(&eb);
    mgr.unregister(&bdev, move || done(Ok(())));
}

fn error_name(base: &str) -> String {
    format!("{NAME_PREFIX}{base}")
}

fn attach(mgr: &BdevManager, cfg: &ErrorCreateParams, base: &Bdev) -> Result<Bdev> {
    let name = error_name(&cfg.base_name);
    let mut props = vbdev::props_over(base, &name, PRODUCT_NAME, base.num_blocks());
    // SPDK's when none is given: the part UUID of the whole base. (SPDK
    // v26.05 overwrites a given one with it too; we keep what is given.)
    props.uuid = Some(
        cfg.uuid
            .unwrap_or_else(|| vbdev::part_uuid(base.uuid(), 0, base.num_blocks())),
    );
    // The same blocks, so the same zones: zone I/O forwards unchanged.
    props.zoned = base.props().zoned;
    let injections = Injections::default();
    let bdev = ErrorBdev::register(mgr, base, MODULE, props, injections, ErrorChannel::new)?;
    tracing::info!(bdev = %name, base = %base.name(), "error bdev created");
    Ok(bdev)
}

// ---------------------------------------------------------------------------
// Injections
// ---------------------------------------------------------------------------

/// One I/O type's injection. Writers store every field, then `remaining`
/// (release); the I/O path loads `remaining` first (acquire).
#[derive(Debug, Default)]
struct InjectSlot {
    kind: AtomicU8,
    remaining: AtomicU32,
    queue_depth: AtomicU64,
    corrupt_offset: AtomicU64,
    corrupt_value: AtomicU8,
    nvme_sct: AtomicU32,
    nvme_sc: AtomicU32,
}

const KIND_FAILURE: u8 = 1;
const KIND_NVME: u8 = 2;
const KIND_PENDING: u8 = 3;
const KIND_CORRUPT: u8 = 4;
const KIND_NOMEM: u8 = 5;

fn kind_code(t: InjectErrorType) -> u8 {
    match t {
        InjectErrorType::Failure => KIND_FAILURE,
        InjectErrorType::NvmeFailure => KIND_NVME,
        InjectErrorType::Pending => KIND_PENDING,
        InjectErrorType::CorruptData => KIND_CORRUPT,
        InjectErrorType::Nomem => KIND_NOMEM,
    }
}

impl InjectSlot {
    fn arm(&self, p: &ErrorInjectParams) {
        self.kind.store(kind_code(p.error_type), Ordering::Relaxed);
        self.queue_depth
            .store(p.queue_depth.unwrap_or(0), Ordering::Relaxed);
        self.corrupt_offset
            .store(p.corrupt_offset.unwrap_or(0), Ordering::Relaxed);
        self.corrupt_value
            .store(p.corrupt_value.unwrap_or(0), Ordering::Relaxed);
        self.nvme_sct
            .store(p.nvme_sct.unwrap_or(0), Ordering::Relaxed);
        self.nvme_sc
            .store(p.nvme_sc.unwrap_or(0), Ordering::Relaxed);
        self.remaining.store(p.num.unwrap_or(1), Ordering::Release);
    }

    /// The injection for the next I/O, if one applies; counts it.
    #[inline]
    fn take(&self, inflight: u64) -> Option<u8> {
        if self.remaining.load(Ordering::Acquire) == 0 {
            return None;
        }
        if inflight < self.queue_depth.load(Ordering::Relaxed) {
            return None;
        }
        self.remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .ok()?;
        Some(self.kind.load(Ordering::Relaxed))
    }
}

/// Slot of the injectable I/O types (SPDK injects read, write, unmap and
/// flush only).
fn slot_index(t: IoType) -> Option<usize> {
    match t {
        IoType::Read => Some(0),
        IoType::Write => Some(1),
        IoType::Unmap => Some(2),
        IoType::Flush => Some(3),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// The bdev
// ---------------------------------------------------------------------------

/// One error bdev (`EE_<base>`): a stacked bdev with channels of its own
/// (resume, reset and removal reach the I/O each thread holds), whose
/// base's events, channels and teardown are [`StackedWithDevice`]'s; the
/// error part is [`Injections`].
pub type ErrorBdev = StackedWithDevice<Injections>;

/// What an error bdev adds to a stacked bdev: the armed injections, one
/// per injectable I/O type.
#[derive(Debug, Default)]
pub struct Injections {
    slots: [InjectSlot; 4],
}

impl Injections {
    /// How many more I/Os of `io_type` the armed injection takes (0 when
    /// none is armed, or for a type that is never injected): a test that
    /// holds the next write knows it is held once this drops to 0.
    #[must_use]
    pub fn remaining(&self, io_type: IoType) -> u32 {
        slot_index(io_type).map_or(0, |i| self.slots[i].remaining.load(Ordering::Acquire))
    }
}

/// Arms (or clears) injections as `p` says.
pub(crate) fn inject(bdev: &ErrorBdev, p: &ErrorInjectParams) {
    let name = bdev.stacked().name();
    let slots: &[InjectSlot] = match p.io_type {
        InjectIoType::Clear => {
            for s in &bdev.slots {
                s.remaining.store(0, Ordering::Release);
            }
            tracing::info!(bdev = %name, "error injection cleared");
            return;
        }
        InjectIoType::All => &bdev.slots,
        InjectIoType::Read => &bdev.slots[0..1],
        InjectIoType::Write => &bdev.slots[1..2],
        InjectIoType::Unmap => &bdev.slots[2..3],
        InjectIoType::Flush => &bdev.slots[3..4],
    };
    for s in slots {
        s.arm(p);
    }
    tracing::info!(bdev = %name, io_type = ?p.io_type, error_type = ?p.error_type,
        num = p.num.unwrap_or(1), "error injection armed");
}

/// Disarms `pending` injections and sends every held I/O down again, on
/// each thread.
pub(crate) fn resume_pending(bdev: &ErrorBdev) {
    for s in &bdev.slots {
        if s.kind.load(Ordering::Relaxed) == KIND_PENDING {
            s.remaining.store(0, Ordering::Release);
        }
    }
    bdev.device().for_each_channel(
        |ch| {
            let held = std::mem::take(&mut *ch.inner.pending.borrow_mut());
            for io in held {
                if ch.inner.bdev.stacked().base().is_removing() {
                    io.complete_deferred(IoStatus::Aborted);
                } else {
                    Injections::dispatch(&ch.inner.bdev, ch, io);
                }
            }
        },
        || {},
    );
}

/// Aborts every held I/O, on each thread.
pub(crate) fn abort_pending(bdev: &ErrorBdev) {
    bdev.device()
        .for_each_channel(|ch| ch.inner.abort_pending(), || {});
}

/// The I/O path: an I/O whose type has an armed injection gets it (a
/// failure, an NVMe status, NOMEM, held until resumed, corrupted data),
/// the rest goes down unchanged. A reset aborts the held I/Os of every
/// thread, then succeeds (SPDK's: the base is not reset).
impl DeviceOps for Injections {
    type State = ErrorChannel;

    #[inline]
    fn dispatch(bdev: &ErrorBdev, ch: &ErrorChannel, mut io: BdevIo) {
        let ch = &ch.inner;
        if io.io_type() == IoType::Reset {
            return bdev.visit_then(
                io,
                |c| c.inner.abort_pending(),
                |_, reset| reset.complete(IoStatus::Success),
            );
        }
        let slot = slot_index(io.io_type()).map(|i| &bdev.slots[i]);
        let Some((slot, kind)) = slot.and_then(|s| s.take(ch.inflight.get()).map(|k| (s, k)))
        else {
            return ch.forward(io, false);
        };
        match kind {
            KIND_FAILURE => io.complete_deferred(IoStatus::Failed),
            KIND_NVME => {
                let sct = low_byte(slot.nvme_sct.load(Ordering::Relaxed));
                let sc = low_byte(slot.nvme_sc.load(Ordering::Relaxed));
                io.complete_deferred(IoStatus::Nvme { sct, sc });
            }
            KIND_NOMEM => io.complete_deferred(IoStatus::NoMem),
            KIND_PENDING => ch.pending.borrow_mut().push_back(io),
            KIND_CORRUPT => {
                let off = slot.corrupt_offset.load(Ordering::Relaxed);
                let value = slot.corrupt_value.load(Ordering::Relaxed);
                if io.io_type() == IoType::Write {
                    corrupt(&mut io, off, value);
                    ch.forward(io, false);
                } else {
                    // Reads are corrupted on the way back (unmap and flush
                    // carry no data).
                    let on_read = io.io_type() == IoType::Read;
                    let ctx = io.driver_ctx();
                    ctx[1] = off;
                    ctx[2] = u64::from(value);
                    ch.forward(io, on_read);
                }
            }
            _ => ch.forward(io, false),
        }
    }

    fn info_json(bdev: &ErrorBdev) -> Value {
        json!({"error_disk": {"base_bdev": bdev.stacked().base_bdev().name()}})
    }

    /// Held I/Os are aborted: they would keep the bdev's channels alive.
    fn base_going(bdev: &ErrorBdev) {
        abort_pending(bdev);
    }
}

fn low_byte(v: u32) -> u8 {
    u8::try_from(v & 0xff).unwrap_or(u8::MAX)
}

/// XORs the byte at `offset` of the I/O's data with `value` (nothing when
/// the data is shorter), as SPDK's error bdev does.
fn corrupt(io: &mut BdevIo, offset: u64, value: u8) {
    let Ok(mut off) = usize::try_from(offset) else {
        return;
    };
    let mut done = false;
    let writable = io.for_each_segment_mut(|seg| {
        if done {
            return;
        }
        if off < seg.len() {
            seg[off] ^= value;
            done = true;
        } else {
            off -= seg.len();
        }
    });
    if !writable {
        // Memory other I/Os read too (the bdev layer's zero buffer, a
        // mirror's shared data): corrupting it would corrupt them.
        tracing::debug!("error bdev: data shared with other I/O, not corrupted");
    }
}

/// The per-thread state of an error bdev (in its io_device's channel).
#[derive(Debug)]
pub struct ErrorChannel {
    inner: Rc<ChannelInner>,
}

struct ChannelInner {
    bdev: Arc<ErrorBdev>,
    base: BdevChannel,
    /// I/Os sent to the base and not back yet (for `queue_depth`).
    inflight: Cell<u64>,
    pending: RefCell<VecDeque<BdevIo>>,
}

impl std::fmt::Debug for ChannelInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelInner")
            .field("inflight", &self.inflight.get())
            .field("pending", &self.pending.borrow().len())
            .finish_non_exhaustive()
    }
}

impl ErrorChannel {
    fn new(bdev: Arc<ErrorBdev>) -> std::result::Result<ErrorChannel, BoxError> {
        let base = bdev.stacked().base().channel()?;
        Ok(ErrorChannel {
            inner: Rc::new(ChannelInner {
                bdev,
                base,
                inflight: Cell::new(0),
                pending: RefCell::new(VecDeque::new()),
            }),
        })
    }
}

impl ChannelInner {
    /// Sends `io` down as a child; `corrupt_read` corrupts the data on the
    /// way back.
    fn forward(self: &Rc<Self>, mut io: BdevIo, corrupt_read: bool) {
        io.driver_ctx()[0] = u64::from(corrupt_read);
        let submitted = vbdev::forward(&self.base, io, |child| {
            child.on_done(Rc::clone(self) as Rc<dyn IoCompletion>);
        });
        // In flight until `io_done` (which never runs inside the submit).
        if submitted {
            self.inflight.set(self.inflight.get() + 1);
        }
    }

    fn abort_pending(&self) {
        let held = std::mem::take(&mut *self.pending.borrow_mut());
        for io in held {
            io.complete(IoStatus::Aborted);
        }
    }
}

impl IoCompletion for ChannelInner {
    /// A child came back from the base.
    fn io_done(&self, mut child: BdevIo) {
        self.inflight.set(self.inflight.get().saturating_sub(1));
        let Some(mut parent) = child.take_parent() else {
            return;
        };
        let ctx = *parent.driver_ctx();
        if ctx[0] != 0 && child.status().is_success() {
            corrupt(
                &mut parent,
                ctx[1],
                low_byte(u32::try_from(ctx[2]).unwrap_or(0)),
            );
        }
        parent.complete_from(&child);
    }
}
