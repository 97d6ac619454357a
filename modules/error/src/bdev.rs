//! The error module, its bdev, its per-thread state and its I/O path.
//!
//! Held (`pending`) I/Os live in per-thread queues. To reach them from the
//! control path (resume, reset, removal) the bdev registers an `IoDevice`
//! of its own: each thread's bdev channel wraps that device's channel, and
//! `for_each_channel` visits them on their threads.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use bdevkit::bdev::{
    Bdev, BdevChannel, BdevDesc, BdevEvent, BdevIo, BdevManager, BdevModule, BdevOps, BdevProps,
    ClaimType, Done, IoCompletion, IoStatus, IoType,
};
use bdevkit::error::BoxError;
use bdevkit::thread::{IoChannel, IoDevice, Thread, ThreadHandle};
use bdevkit::{Error, Result};
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::rpc::{ErrorCreateParams, ErrorInjectParams, InjectErrorType, InjectIoType};
use crate::{MODULE, NAME_PREFIX, PRODUCT_NAME};

/// The error module: one configuration per base bdev.
#[derive(Debug, Default)]
pub struct ErrorModule {
    configs: Mutex<Vec<ErrorCreateParams>>,
}

impl BdevModule for ErrorModule {
    fn name(&self) -> &'static str {
        MODULE
    }

    fn has_examine(&self) -> bool {
        true
    }

    fn examine_config(&self, mgr: &BdevManager, bdev: &Bdev) {
        let matches: Vec<ErrorCreateParams> = self
            .configs
            .lock()
            .iter()
            .filter(|c| {
                names_bdev(bdev, &c.base_name) && mgr.get(&error_name(&c.base_name)).is_none()
            })
            .cloned()
            .collect();
        for cfg in matches {
            if let Err(e) = attach(mgr, &cfg, bdev) {
                tracing::error!(base = %bdev.name(), error = %e, "cannot create error bdev");
            }
        }
    }

    fn config_json(&self, _mgr: &BdevManager) -> Vec<Value> {
        self.configs
            .lock()
            .iter()
            .map(|c| json!({"method": "bdev_error_create", "params": c}))
            .collect()
    }
}

impl ErrorModule {
    pub(crate) fn create(&self, mgr: &BdevManager, params: ErrorCreateParams) -> Result<()> {
        if params.base_name.is_empty() {
            return Err(Error::InvalidArg("base_name must not be empty".into()));
        }
        {
            let mut configs = self.configs.lock();
            if configs.iter().any(|c| c.base_name == params.base_name) {
                return Err(Error::Exists(error_name(&params.base_name)));
            }
            configs.push(params.clone());
        }
        let Some(base) = mgr.get(&params.base_name) else {
            tracing::info!(base = %params.base_name, "error bdev deferred until the base bdev appears");
            return Ok(());
        };
        match attach(mgr, &params, &base) {
            Ok(_) | Err(Error::NotFound(_)) => Ok(()),
            Err(e) => {
                self.configs
                    .lock()
                    .retain(|c| c.base_name != params.base_name);
                Err(e)
            }
        }
    }

    pub(crate) fn delete(
        &self,
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
        self.configs
            .lock()
            .retain(|c| error_name(&c.base_name) != name);
        // Held I/Os would keep the bdev's channels (and so the bdev) alive.
        eb.abort_pending();
        mgr.unregister(&bdev, move || done(Ok(())));
    }
}

fn error_name(base: &str) -> String {
    format!("{NAME_PREFIX}{base}")
}

fn names_bdev(bdev: &Bdev, name: &str) -> bool {
    bdev.name() == name || bdev.aliases().iter().any(|a| a == name)
}

fn attach(mgr: &BdevManager, cfg: &ErrorCreateParams, base: &Bdev) -> Result<Bdev> {
    let name = error_name(&cfg.base_name);
    let me: Arc<OnceLock<Weak<ErrorBdev>>> = Arc::new(OnceLock::new());
    let me2 = Arc::clone(&me);
    let desc = mgr.open(base.name(), false, move |event| {
        if let Some(e) = me2.get().and_then(Weak::upgrade) {
            e.base_event(event);
        }
    })?;
    desc.claim(ClaimType::ExclusiveWrite, MODULE)?;
    let eb = Arc::new_cyclic(|weak: &Weak<ErrorBdev>| {
        let w = weak.clone();
        ErrorBdev {
            name: name.clone(),
            base: base.clone(),
            desc: Mutex::new(Some(desc)),
            opener: Thread::current().map(|t| t.handle()),
            mgr: mgr.clone(),
            removing: AtomicBool::new(false),
            slots: Default::default(),
            device: IoDevice::register(format!("error_{name}"), move || {
                let eb = w.upgrade().ok_or("error bdev is gone")?;
                ErrorChannel::new(eb)
            }),
        }
    });
    let _ = me.set(Arc::downgrade(&eb));
    let b = base.props();
    let mut props = BdevProps::new(&name, PRODUCT_NAME, base.block_size(), base.num_blocks());
    props.uuid = cfg.uuid;
    props.phys_block_size = b.phys_block_size;
    props.required_alignment = b.required_alignment;
    props.write_cache = b.write_cache;
    props.md_size = b.md_size;
    props.md_interleave = b.md_interleave;
    props.dif_type = b.dif_type;
    props.dif_is_head_of_md = b.dif_is_head_of_md;
    props.dif_pi_format = b.dif_pi_format;
    let bdev = mgr.register_bdev(MODULE, props, Arc::clone(&eb))?;
    tracing::info!(bdev = %name, base = %base.name(), "error bdev created");
    if base.is_removing() {
        eb.base_event(BdevEvent::Remove);
    }
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
    base: Bdev,
    desc: Mutex<Option<BdevDesc>>,
    opener: Option<ThreadHandle>,
    /// Held to unregister itself when the base goes (a cycle through the
    /// registry that unregistering breaks).
    mgr: BdevManager,
    removing: AtomicBool,
    slots: [InjectSlot; 4],
    /// Per-thread state reachable from the control path.
    device: IoDevice<ErrorChannel>,
}

impl std::fmt::Debug for ErrorBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ErrorBdev")
            .field("name", &self.name)
            .field("base", &self.base.name())
            .finish_non_exhaustive()
    }
}

impl ErrorBdev {
    /// The base bdev.
    #[must_use]
    pub fn base(&self) -> &Bdev {
        &self.base
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

    fn own_bdev(&self) -> Option<Bdev> {
        self.mgr.get(&self.name).filter(|b| {
            b.ops_as::<ErrorBdev>()
                .is_some_and(|o| std::ptr::eq(Arc::as_ptr(&o), self))
        })
    }

    fn base_event(&self, event: BdevEvent) {
        match event {
            BdevEvent::Remove => {
                if self.removing.swap(true, Ordering::AcqRel) {
                    return;
                }
                tracing::info!(bdev = %self.name, "base bdev removed; unregistering error bdev");
                self.abort_pending();
                if let Some(me) = self.own_bdev() {
                    self.mgr.unregister(&me, || {});
                }
            }
            BdevEvent::Resize => {
                if let Some(me) = self.own_bdev() {
                    me.notify_resize(self.base.num_blocks());
                }
            }
            BdevEvent::MediaManagement => {}
        }
    }

    /// Serves one I/O: inject or forward.
    fn dispatch(&self, ch: &Rc<ChannelInner>, mut io: BdevIo) {
        if self.removing.load(Ordering::Relaxed) {
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
        let Some(mut child) = ch.base.alloc_io() else {
            return io.complete_deferred(IoStatus::NoMem);
        };
        io.driver_ctx()[0] = u64::from(corrupt_read);
        child
            .copy_request_from(&io)
            .set_tag(io.tag())
            .on_done(Rc::clone(ch) as Rc<dyn IoCompletion>);
        child.set_parent(io);
        ch.inflight.set(ch.inflight.get() + 1);
        if let Err(e) = ch.base.submit(child) {
            ch.inflight.set(ch.inflight.get() - 1);
            let mut child = e.io;
            if let Some(parent) = child.take_parent() {
                parent.complete_deferred(IoStatus::Errno(e.error.errno()));
            }
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
    io.for_each_segment_mut(|seg| {
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
        let base = {
            let desc = bdev.desc.lock();
            desc.as_ref()
                .ok_or("error base bdev is closed")?
                .get_io_channel()?
        };
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
        self.base.supports(io_type)
    }

    fn destruct(&self, done: Done) {
        let desc = self.desc.lock().take();
        let device = self.device.clone();
        let close = move || {
            drop(desc);
            device.unregister(|| {});
            done.done();
        };
        match &self.opener {
            Some(t) => {
                let _ = t.send_msg(close);
            }
            None => close(),
        }
    }

    fn dump_info_json(&self) -> Value {
        json!({"error_disk": {"base_bdev": self.base.name()}})
    }
}
