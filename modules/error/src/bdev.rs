//! The error module, its bdev, its per-thread state and its I/O path.
//!
//! Held (`pending`) I/Os live in per-thread queues. To reach them from the
//! control path (resume, reset, removal) the bdev registers an `IoDevice`
//! of its own: each thread's bdev channel wraps that device's channel, and
//! `for_each_channel` visits them on their threads.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};

use bdevkit::bdev::module::vbdev::{self, BaseBdev, StackedBdev, VbdevConfig, VbdevModule};
use bdevkit::bdev::module::{
    Bdev, BdevChannel, BdevIo, BdevManager, BdevOps, BoxError, Done, Error, IoChannel,
    IoCompletion, IoDevice, IoStatus, IoType, ModuleIo, Result,
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
    eb.abort_pending();
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
    let bdev = BaseBdev::register_over(mgr, base, MODULE, props, |base_bdev| {
        Arc::new_cyclic(|weak: &Weak<ErrorBdev>| {
            let w = weak.clone();
            ErrorBdev {
                name: name.clone(),
                base: base_bdev,
                mgr: mgr.clone(),
                slots: Default::default(),
                device: IoDevice::register(format!("error_{name}"), move || {
                    let eb = w.upgrade().ok_or("error bdev is gone")?;
                    ErrorChannel::new(eb)
                }),
            }
        })
    })?;
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

/// One error bdev (`EE_<base>`).
pub struct ErrorBdev {
    name: String,
    /// The open, claimed base (closed in `destruct`).
    base: BaseBdev,
    /// Held to unregister itself when the base goes (a cycle through the
    /// registry that unregistering breaks).
    mgr: BdevManager,
    slots: [InjectSlot; 4],
    /// Per-thread state reachable from the control path.
    device: IoDevice<ErrorChannel>,
}

impl std::fmt::Debug for ErrorBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ErrorBdev")
            .field("name", &self.name)
            .field("base", &self.base.bdev().name())
            .finish_non_exhaustive()
    }
}

impl ErrorBdev {
    /// The base bdev.
    #[must_use]
    pub fn base(&self) -> &Bdev {
        self.base.bdev()
    }

    pub(crate) fn inject(&self, p: &ErrorInjectParams) {
        let slots: &[InjectSlot] = match p.io_type {
            InjectIoType::Clear => {
                for s in &self.slots {
                    s.remaining.store(0, Ordering::Release);
                }
                tracing::info!(bdev = %self.name, "error injection cleared");
                return;
            }
            InjectIoType::All => &self.slots,
            InjectIoType::Read => &self.slots[0..1],
            InjectIoType::Write => &self.slots[1..2],
            InjectIoType::Unmap => &self.slots[2..3],
            InjectIoType::Flush => &self.slots[3..4],
        };
        for s in slots {
            s.arm(p);
        }
        tracing::info!(bdev = %self.name, io_type = ?p.io_type, error_type = ?p.error_type,
            num = p.num.unwrap_or(1), "error injection armed");
    }

    pub(crate) fn resume_pending(&self) {
        for s in &self.slots {
            if s.kind.load(Ordering::Relaxed) == KIND_PENDING {
                s.remaining.store(0, Ordering::Release);
            }
        }
        self.device.for_each_channel(
            |ch| {
                let held = std::mem::take(&mut *ch.inner.pending.borrow_mut());
                for io in held {
                    ch.inner.bdev.dispatch(&ch.inner, io);
                }
            },
            || {},
        );
    }

    /// Aborts every held I/O, on each thread.
    pub(crate) fn abort_pending(&self) {
        self.device
            .for_each_channel(|ch| ch.inner.abort_pending(), || {});
    }

    /// Serves one I/O: inject or forward.
    fn dispatch(&self, ch: &Rc<ChannelInner>, mut io: BdevIo) {
        if self.base.is_removing() {
            return io.complete_deferred(IoStatus::Aborted);
        }
        if io.io_type() == IoType::Reset {
            return self.reset(ch, io);
        }
        let slot = slot_index(io.io_type()).map(|i| &self.slots[i]);
        let Some((slot, kind)) = slot.and_then(|s| s.take(ch.inflight.get()).map(|k| (s, k)))
        else {
            return self.forward(ch, io, false);
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
                    self.forward(ch, io, false);
                } else {
                    // Reads are corrupted on the way back (unmap and flush
                    // carry no data).
                    let on_read = io.io_type() == IoType::Read;
                    let ctx = io.driver_ctx();
                    ctx[1] = off;
                    ctx[2] = u64::from(value);
                    self.forward(ch, io, on_read);
                }
            }
            _ => self.forward(ch, io, false),
        }
    }

    /// Sends `io` down as a child; `corrupt_read` corrupts the data on the
    /// way back.
    fn forward(&self, ch: &Rc<ChannelInner>, mut io: BdevIo, corrupt_read: bool) {
        io.driver_ctx()[0] = u64::from(corrupt_read);
        let submitted = vbdev::forward(&ch.base, io, |child| {
            child.on_done(Rc::clone(ch) as Rc<dyn IoCompletion>);
        });
        // In flight until `io_done` (which never runs inside the submit).
        if submitted {
            ch.inflight.set(ch.inflight.get() + 1);
        }
    }

    /// SPDK's reset of an error bdev: abort the held I/Os of every thread,
    /// then succeed (the base is not reset).
    fn reset(&self, ch: &Rc<ChannelInner>, io: BdevIo) {
        *ch.parked_reset.borrow_mut() = Some(io);
        let device = self.device.clone();
        self.device.for_each_channel(
            |c| c.inner.abort_pending(),
            move || {
                // Back on the resetting thread: its channel holds the reset.
                if let Ok(c) = device.get_channel() {
                    let reset = c.inner.parked_reset.borrow_mut().take();
                    if let Some(reset) = reset {
                        reset.complete(IoStatus::Success);
                    }
                }
            },
        );
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

/// The per-thread channel: the bdev layer's module channel for this bdev,
/// also the error bdev's own `IoDevice` channel.
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
    parked_reset: RefCell<Option<BdevIo>>,
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
        let base = bdev.base.channel()?;
        Ok(ErrorChannel {
            inner: Rc::new(ChannelInner {
                bdev,
                base,
                inflight: Cell::new(0),
                pending: RefCell::new(VecDeque::new()),
                parked_reset: RefCell::new(None),
            }),
        })
    }
}

impl ChannelInner {
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

/// Unregistering on removal of the base and following its size.
impl StackedBdev for ErrorBdev {
    fn vbdev_name(&self) -> &str {
        &self.name
    }

    fn base(&self) -> &BaseBdev {
        &self.base
    }

    fn manager(&self) -> &BdevManager {
        &self.mgr
    }

    /// Held I/Os are aborted: they would keep the bdev's channels alive.
    fn base_going(&self) {
        self.abort_pending();
    }
}

impl BdevOps for ErrorBdev {
    type Channel = IoChannel<ErrorChannel>;

    fn create_channel(&self) -> std::result::Result<IoChannel<ErrorChannel>, BoxError> {
        Ok(self.device.get_channel()?)
    }

    #[inline]
    fn submit(&self, ch: &IoChannel<ErrorChannel>, io: BdevIo) {
        self.dispatch(&ch.inner, io);
    }

    fn io_type_supported(&self, io_type: IoType) -> bool {
        self.base.bdev().supports(io_type)
    }

    /// Closes the base, then drops the `IoDevice`, on the thread that
    /// opened the base.
    fn destruct(&self, done: Done) {
        self.base.close_with_device(self.device.clone(), done);
    }

    fn dump_info_json(&self) -> Value {
        json!({"error_disk": {"base_bdev": self.base.bdev().name()}})
    }
}
