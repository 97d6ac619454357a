//! The bdev registry: registration, names and aliases, descriptors, claims,
//! examine, hot-remove and resize events.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};
use serde_json::{json, Value};
use uuid::Uuid;

use super::channel::{self, BdevChannel, ChannelCore, MgmtChannel};
use super::histogram::{HistConfig, HistState, Histogram, HistogramOptions};
use super::io::PoolShared;
use super::module::{BdevModule, BdevOps, BdevOpsDyn, Done, OpsBox};
use super::qos::QosState;
use super::stats::IoStat;
use super::types::{BdevEvent, BdevProps, ClaimType, IoType};
use crate::dma::DmaBuf;
use crate::error::Error as BdevError;
use crate::thread::{IoDevice, PollerStatus, Thread, ThreadHandle};

/// Size of the shared zero buffer used to emulate write zeroes.
pub(crate) const ZERO_BUF_LEN: usize = 1 << 20;

/// Options of the bdev layer (`bdev_set_options`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BdevOptions {
    /// Most `BdevIo`s in use at once, all threads together.
    pub bdev_io_pool_size: u32,
    /// Free `BdevIo`s each thread keeps cached.
    pub bdev_io_cache_size: u32,
    /// Offer every new bdev to every module's examine.
    pub bdev_auto_examine: bool,
    /// Kept for `save_config` compatibility (no iobuf pools here).
    pub iobuf_small_cache_size: u32,
    /// Kept for `save_config` compatibility.
    pub iobuf_large_cache_size: u32,
}

impl Default for BdevOptions {
    fn default() -> Self {
        BdevOptions {
            bdev_io_pool_size: 65535,
            bdev_io_cache_size: 256,
            bdev_auto_examine: true,
            iobuf_small_cache_size: 128,
            iobuf_large_cache_size: 16,
        }
    }
}

/// A closure and the thread to run it on (inline when `None`).
type Callback = (Option<ThreadHandle>, Box<dyn FnOnce() + Send>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Registered,
    Removing,
}

struct DescEntry {
    id: u64,
    write: bool,
    thread: Option<ThreadHandle>,
    inner: Weak<DescInner>,
}

#[derive(Debug, Clone)]
struct Claim {
    ty: ClaimType,
    module: String,
    descs: Vec<u64>,
}

struct BdevState {
    status: Status,
    descs: Vec<DescEntry>,
    claim: Option<Claim>,
    unregister_done: Vec<Callback>,
}

pub(crate) struct BdevInner {
    pub(crate) name: String,
    aliases: RwLock<Vec<String>>,
    uuid: Uuid,
    module: String,
    pub(crate) props: BdevProps,
    num_blocks: AtomicU64,
    supported: u32,
    pub(crate) ops: Box<dyn BdevOpsDyn>,
    pub(crate) device: IoDevice<ChannelCore>,
    state: Mutex<BdevState>,
    pub(crate) folded_stat: Mutex<IoStat>,
    pub(crate) hist: Mutex<HistState>,
    qd: Mutex<QdSampling>,
    pub(crate) qos: QosState,
    pub(crate) reset_in_progress: AtomicBool,
    pub(crate) mgr: Weak<MgrShared>,
}

impl BdevInner {
    #[inline]
    pub(crate) fn supports(&self, io_type: IoType) -> bool {
        self.supported & io_type.bit() != 0
            || (io_type == IoType::WriteZeroes && self.supported & IoType::Write.bit() != 0)
    }

    #[inline]
    pub(crate) fn num_blocks(&self) -> u64 {
        self.num_blocks.load(Ordering::Acquire)
    }
}

/// Queue-depth sampling (`bdev_set_qd_sampling_period`): what the last
/// sample saw and the time the bdev was busy.
#[derive(Debug, Default)]
struct QdSampling {
    /// µs between samples; 0 = off.
    period_us: u64,
    /// Bumped on every change: a sampling poller of an older generation
    /// stops itself.
    generation: u64,
    /// A channel walk is counting.
    in_progress: bool,
    queue_depth: u64,
    io_time: u64,
    weighted_io_time: u64,
}

/// Queue-depth figures of `bdev_get_iostat`, while sampling is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepthStats {
    /// µs between samples.
    pub period_us: u64,
    /// I/Os outstanding at the last sample (summed over the channels).
    pub queue_depth: u64,
    /// µs during which a sample saw I/O outstanding.
    pub io_time: u64,
    /// Sum of queue depth × sampling period (µs).
    pub weighted_io_time: u64,
}

/// A registered bdev (cheap to clone, `Send + Sync`).
#[derive(Clone)]
pub struct Bdev(pub(crate) Arc<BdevInner>);

impl fmt::Debug for Bdev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bdev")
            .field("name", &self.0.name)
            .field("block_size", &self.0.props.block_size)
            .field("num_blocks", &self.num_blocks())
            .finish()
    }
}

impl PartialEq for Bdev {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.0, &o.0)
    }
}

impl Bdev {
    /// Name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Aliases (the UUID string is one unless it is the name).
    #[must_use]
    pub fn aliases(&self) -> Vec<String> {
        self.0.aliases.read().clone()
    }

    /// Whether `name` is this bdev's name or one of its aliases (how a
    /// virtual bdev recognises the base it was configured with).
    #[must_use]
    pub fn has_name(&self, name: &str) -> bool {
        self.0.name == name || self.0.aliases.read().iter().any(|a| a == name)
    }

    /// UUID.
    #[must_use]
    pub fn uuid(&self) -> Uuid {
        self.0.uuid
    }

    /// Name of the module that registered it.
    #[must_use]
    pub fn module_name(&self) -> &str {
        &self.0.module
    }

    /// Product name.
    #[must_use]
    pub fn product_name(&self) -> &str {
        &self.0.props.product_name
    }

    /// Block size in bytes.
    #[must_use]
    pub fn block_size(&self) -> u32 {
        self.0.props.block_size
    }

    /// Number of blocks (changes on resize).
    #[must_use]
    pub fn num_blocks(&self) -> u64 {
        self.0.num_blocks()
    }

    /// Properties as registered (`num_blocks` there is the initial size).
    #[must_use]
    pub fn props(&self) -> &BdevProps {
        &self.0.props
    }

    /// Whether the bdev serves `io_type` (write zeroes is always emulated
    /// where writes are supported).
    #[must_use]
    pub fn supports(&self, io_type: IoType) -> bool {
        self.0.supports(io_type)
    }

    /// Whether the module itself serves `io_type` (no emulation).
    #[must_use]
    pub fn module_supports(&self, io_type: IoType) -> bool {
        self.0.supported & io_type.bit() != 0
    }

    /// The current claim: type and module name.
    #[must_use]
    pub fn claim(&self) -> Option<(ClaimType, String)> {
        self.0
            .state
            .lock()
            .claim
            .as_ref()
            .map(|c| (c.ty, c.module.clone()))
    }

    /// Whether the bdev is being unregistered.
    #[must_use]
    pub fn is_removing(&self) -> bool {
        self.0.state.lock().status == Status::Removing
    }

    /// Number of open descriptors.
    #[must_use]
    pub fn open_descriptors(&self) -> usize {
        self.0.state.lock().descs.len()
    }

    /// The module's bdev object, if it is a `T` (how a module finds its own
    /// bdevs, e.g. for `bdev_null_resize`).
    #[must_use]
    pub fn ops_as<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        let any: Arc<dyn Any + Send + Sync> = self.0.ops.as_any();
        any.downcast::<T>().ok()
    }

    /// `driver_specific` JSON.
    #[must_use]
    pub fn dump_info_json(&self) -> Value {
        self.0.ops.dump_info_json()
    }

    /// The module's per-bdev config entry, if it emits one.
    #[must_use]
    pub fn write_config_json(&self) -> Option<Value> {
        self.0.ops.write_config_json()
    }

    /// Changes the block count and tells every descriptor holder (modules
    /// call this on resize).
    pub fn notify_resize(&self, num_blocks: u64) {
        let old = self.0.num_blocks.swap(num_blocks, Ordering::AcqRel);
        if old != num_blocks {
            tracing::info!(bdev = %self.0.name, old, new = num_blocks, "bdev resized");
            self.0.ops.resized(num_blocks);
            self.send_event(BdevEvent::Resize);
        }
    }

    /// Sends `ev` to every open descriptor (on its opener's thread).
    pub fn send_event(&self, ev: BdevEvent) {
        let targets: Vec<(Option<ThreadHandle>, Weak<DescInner>)> = self
            .0
            .state
            .lock()
            .descs
            .iter()
            .map(|d| (d.thread.clone(), d.inner.clone()))
            .collect();
        for (thread, weak) in targets {
            let deliver = move || {
                if let Some(d) = weak.upgrade() {
                    if !d.closed.load(Ordering::Acquire) {
                        (d.event_cb)(ev);
                    }
                }
            };
            match thread {
                Some(t) => {
                    if t.send_msg(deliver).is_err() {
                        tracing::warn!("bdev event: descriptor thread exited");
                    }
                }
                None => deliver(),
            }
        }
    }

    /// The `bdev_get_bdevs` object, keys in SPDK's order.
    #[must_use]
    pub fn info_json(&self) -> Value {
        let p = &self.0.props;
        let mut m = serde_json::Map::new();
        m.insert("name".into(), json!(self.0.name));
        m.insert("aliases".into(), json!(self.aliases()));
        m.insert("product_name".into(), json!(p.product_name));
        m.insert("block_size".into(), json!(p.block_size));
        m.insert("num_blocks".into(), json!(self.num_blocks()));
        m.insert(
            "preferred_write_alignment".into(),
            json!(p.preferred_write_alignment),
        );
        m.insert(
            "preferred_write_granularity".into(),
            json!(p.preferred_write_granularity),
        );
        m.insert("optimal_write_size".into(), json!(p.optimal_write_size));
        m.insert(
            "preferred_unmap_alignment".into(),
            json!(p.preferred_unmap_alignment),
        );
        m.insert(
            "preferred_unmap_granularity".into(),
            json!(p.preferred_unmap_granularity),
        );
        m.insert("uuid".into(), json!(self.0.uuid.to_string()));
        if let Some(n) = p.numa_id {
            m.insert("numa_id".into(), json!(n));
        }
        if p.md_size != 0 {
            m.insert("md_size".into(), json!(p.md_size));
            m.insert("md_interleave".into(), json!(p.md_interleave));
            m.insert("dif_type".into(), json!(p.dif_type));
            if p.dif_type != 0 {
                m.insert("dif_is_head_of_md".into(), json!(p.dif_is_head_of_md));
                m.insert(
                    "enabled_dif_check_types".into(),
                    json!({"reftag": false, "apptag": false, "guard": false}),
                );
                m.insert("dif_pi_format".into(), json!(p.dif_pi_format));
            }
        }
        let limits = self.0.qos.limits();
        m.insert(
            "assigned_rate_limits".into(),
            json!({
                "rw_ios_per_sec": limits[0],
                "rw_mbytes_per_sec": limits[1],
                "r_mbytes_per_sec": limits[2],
                "w_mbytes_per_sec": limits[3],
            }),
        );
        let claim = self.claim();
        m.insert("claimed".into(), json!(claim.is_some()));
        if let Some((ty, _)) = claim {
            m.insert("claim_type".into(), json!(ty.name()));
        }
        m.insert("zoned".into(), json!(false));
        let mut io = serde_json::Map::new();
        for t in IoType::ALL {
            io.insert(t.name().into(), json!(self.supports(t)));
        }
        m.insert("supported_io_types".into(), Value::Object(io));
        m.insert("driver_specific".into(), self.dump_info_json());
        Value::Object(m)
    }

    /// Total statistics: folded stats of gone channels plus every live
    /// channel's, gathered with a channel walk; `done` gets them on the
    /// calling thread.
    pub fn get_iostat(&self, done: impl FnOnce(IoStat) + Send + 'static) {
        let acc = Arc::new(Mutex::new(*self.0.folded_stat.lock()));
        let acc2 = Arc::clone(&acc);
        self.0.device.for_each_channel(
            move |ch| acc2.lock().merge(&ch.stat.borrow()),
            move || {
                let s = *acc.lock();
                done(s);
            },
        );
    }

    /// Per-channel statistics: `(thread id, stat)` for each channel.
    pub fn get_channel_iostats(&self, done: impl FnOnce(Vec<(u64, IoStat)>) + Send + 'static) {
        let acc = Arc::new(Mutex::new(Vec::new()));
        let acc2 = Arc::clone(&acc);
        self.0.device.for_each_channel(
            move |ch| acc2.lock().push((ch.thread_id, *ch.stat.borrow())),
            move || {
                let v = std::mem::take(&mut *acc.lock());
                done(v);
            },
        );
    }

    /// Resets statistics on every channel and the folded totals.
    pub fn reset_iostat(
        &self,
        mode: super::stats::ResetMode,
        done: impl FnOnce() + Send + 'static,
    ) {
        self.0.folded_stat.lock().reset(mode);
        self.0
            .device
            .for_each_channel(move |ch| ch.stat.borrow_mut().reset(mode), done);
    }

    /// Starts (`Some`) or stops (`None`) a latency histogram on every
    /// channel of the bdev (`bdev_enable_histogram`); enabling again
    /// starts from zero with the new options. `done` gets the outcome on
    /// the calling thread: `InvalidArg` for bad options, `Again` while
    /// another change walks the channels.
    pub fn enable_histogram(
        &self,
        opts: Option<HistogramOptions>,
        done: impl FnOnce(Result<(), BdevError>) + Send + 'static,
    ) {
        let cfg = match opts.as_ref().map(HistConfig::new).transpose() {
            Ok(c) => c,
            Err(e) => return done(Err(e)),
        };
        {
            let mut st = self.0.hist.lock();
            if st.busy {
                drop(st);
                return done(Err(BdevError::Again));
            }
            st.busy = true;
            st.config = cfg;
            st.folded = None;
        }
        tracing::info!(bdev = %self.0.name, enabled = cfg.is_some(), ?opts, "bdev histogram");
        let me = self.clone();
        self.0.device.for_each_channel(
            move |ch| ch.set_histogram(cfg.as_ref()),
            move || {
                me.0.hist.lock().busy = false;
                done(Ok(()));
            },
        );
    }

    /// Whether a latency histogram is kept.
    #[must_use]
    pub fn histogram_enabled(&self) -> bool {
        self.0.hist.lock().config.is_some()
    }

    /// The latency histogram (ticks, [`crate::clock::tick_rate`]) summed
    /// over every channel, live or gone, since it was enabled; `done` gets
    /// it on the calling thread. `HistogramDisabled` when none is kept.
    pub fn get_histogram(&self, done: impl FnOnce(Result<Histogram, BdevError>) + Send + 'static) {
        let acc = {
            let st = self.0.hist.lock();
            let Some(cfg) = st.config.as_ref() else {
                drop(st);
                return done(Err(BdevError::HistogramDisabled(self.0.name.clone())));
            };
            let mut h = cfg.histogram();
            if let Some(f) = &st.folded {
                h.merge(f);
            }
            Arc::new(Mutex::new(Some(h)))
        };
        let acc2 = Arc::clone(&acc);
        self.0.device.for_each_channel(
            move |ch| {
                if let (Some(c), Some(a)) = (ch.hist.borrow().as_ref(), acc2.lock().as_mut()) {
                    a.merge(&c.data);
                }
            },
            move || {
                let h = acc.lock().take().expect("invariant: the walk ends once");
                done(Ok(h));
            },
        );
    }

    /// Samples the queue depth (I/Os outstanding over all channels) every
    /// `period_us` µs from the calling thread, for `bdev_get_iostat`; 0
    /// stops sampling. Setting a period starts the figures from zero.
    /// Call on a bdevkit thread (`NotOnThread` otherwise).
    pub fn set_qd_sampling_period(&self, period_us: u64) -> Result<(), BdevError> {
        let thread = Thread::current().ok_or(BdevError::NotOnThread)?;
        let generation = {
            let mut qd = self.0.qd.lock();
            qd.generation += 1;
            *qd = QdSampling {
                period_us,
                generation: qd.generation,
                ..QdSampling::default()
            };
            qd.generation
        };
        if period_us == 0 {
            return Ok(());
        }
        let weak = Arc::downgrade(&self.0);
        thread.register_poller("bdev_qd_sampling", period_us, move |p| {
            let Some(b) = weak.upgrade() else {
                p.unregister();
                return PollerStatus::Idle;
            };
            {
                let mut qd = b.qd.lock();
                if qd.generation != generation {
                    drop(qd);
                    p.unregister();
                    return PollerStatus::Idle;
                }
                if qd.in_progress {
                    return PollerStatus::Busy;
                }
                qd.in_progress = true;
            }
            let sum = Arc::new(AtomicU64::new(0));
            let sum2 = Arc::clone(&sum);
            let b2 = Arc::clone(&b);
            b.device.for_each_channel(
                move |ch| {
                    sum2.fetch_add(ch.outstanding.get(), Ordering::Relaxed);
                },
                move || {
                    let mut qd = b2.qd.lock();
                    qd.in_progress = false;
                    if qd.generation != generation {
                        return;
                    }
                    let depth = sum.load(Ordering::Relaxed);
                    qd.queue_depth = depth;
                    if depth > 0 {
                        qd.io_time += qd.period_us;
                        qd.weighted_io_time += qd.period_us.saturating_mul(depth);
                    }
                },
            );
            PollerStatus::Busy
        });
        tracing::info!(bdev = %self.0.name, period_us, "queue depth sampling");
        Ok(())
    }

    /// The queue-depth figures, while sampling is on.
    #[must_use]
    pub fn qd_stats(&self) -> Option<QueueDepthStats> {
        let qd = self.0.qd.lock();
        (qd.period_us != 0).then_some(QueueDepthStats {
            period_us: qd.period_us,
            queue_depth: qd.queue_depth,
            io_time: qd.io_time,
            weighted_io_time: qd.weighted_io_time,
        })
    }

    /// Current QoS limits: `[rw_ios_per_sec, rw_mbytes_per_sec,
    /// r_mbytes_per_sec, w_mbytes_per_sec]` (0 = unlimited).
    #[must_use]
    pub fn qos_limits(&self) -> [u64; 4] {
        self.0.qos.limits()
    }

    /// Sets QoS limits (see [`super::qos`]); `None` keeps a limit, `Some(0)`
    /// disables it. `done` runs on the calling thread once every channel
    /// applies them.
    pub fn set_qos_limits(
        &self,
        limits: [Option<u64>; 4],
        done: impl FnOnce(Result<(), BdevError>) + Send + 'static,
    ) {
        super::qos::set_limits(self, limits, Box::new(done));
    }

    /// Number of I/O channels open on this bdev right now.
    #[must_use]
    pub fn channel_count(&self) -> usize {
        self.0.device.channel_count()
    }
}

pub(crate) struct DescInner {
    id: u64,
    bdev: Bdev,
    write: AtomicBool,
    closed: AtomicBool,
    event_cb: Box<dyn Fn(BdevEvent) + Send + Sync>,
}

/// An open descriptor. Closing (or dropping) it releases its claim; the
/// last close of a bdev being removed lets the removal finish.
pub struct BdevDesc {
    inner: Arc<DescInner>,
}

impl fmt::Debug for BdevDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BdevDesc")
            .field("bdev", &self.inner.bdev.name())
            .field("write", &self.inner.write.load(Ordering::Relaxed))
            .finish()
    }
}

static NEXT_DESC_ID: AtomicU64 = AtomicU64::new(1);

impl BdevDesc {
    /// The bdev.
    #[must_use]
    pub fn bdev(&self) -> &Bdev {
        &self.inner.bdev
    }

    /// Whether writes are allowed through this descriptor.
    #[must_use]
    pub fn is_writable(&self) -> bool {
        self.inner.write.load(Ordering::Acquire)
    }

    /// This thread's I/O channel for the bdev.
    pub fn get_io_channel(&self) -> Result<BdevChannel, BdevError> {
        let core = self.inner.bdev.0.device.get_channel()?;
        Ok(BdevChannel::new(core, self.is_writable()))
    }

    /// Takes a claim on the bdev for `module` (SPDK's claims). Exclusive
    /// write fails if any claim exists; the v2 types follow SPDK's sharing
    /// rules. The claim is released when this descriptor closes.
    pub fn claim(&self, ty: ClaimType, module: &str) -> Result<(), BdevError> {
        let b = &self.inner.bdev;
        let mut st = b.0.state.lock();
        let others_write = st.descs.iter().any(|d| d.id != self.inner.id && d.write);
        match (&mut st.claim, ty) {
            (None, ClaimType::ExclusiveWrite) => {
                self.inner.write.store(true, Ordering::Release);
                set_desc_write(&mut st, self.inner.id);
            }
            (None, ClaimType::ReadManyWriteOne) => {
                if others_write {
                    return Err(BdevError::Claimed(b.name().to_string(), "a writer".into()));
                }
                self.inner.write.store(true, Ordering::Release);
                set_desc_write(&mut st, self.inner.id);
            }
            (None, ClaimType::ReadManyWriteNone) => {
                if others_write || self.is_writable() {
                    return Err(BdevError::Claimed(b.name().to_string(), "a writer".into()));
                }
            }
            (None, ClaimType::ReadManyWriteShared { key }) => {
                if key == 0 {
                    return Err(BdevError::InvalidArg(
                        "shared claim key must be non-zero".into(),
                    ));
                }
                if others_write {
                    return Err(BdevError::Claimed(b.name().to_string(), "a writer".into()));
                }
                self.inner.write.store(true, Ordering::Release);
                set_desc_write(&mut st, self.inner.id);
            }
            (Some(c), ClaimType::ReadManyWriteNone) if c.ty == ClaimType::ReadManyWriteNone => {
                if self.is_writable() {
                    return Err(BdevError::Claimed(b.name().to_string(), c.module.clone()));
                }
                c.descs.push(self.inner.id);
                return Ok(());
            }
            (Some(c), ClaimType::ReadManyWriteShared { key })
                if c.ty == (ClaimType::ReadManyWriteShared { key }) =>
            {
                c.descs.push(self.inner.id);
                self.inner.write.store(true, Ordering::Release);
                set_desc_write(&mut st, self.inner.id);
                return Ok(());
            }
            (Some(c), _) => {
                return Err(BdevError::Claimed(b.name().to_string(), c.module.clone()));
            }
        }
        st.claim = Some(Claim {
            ty,
            module: module.to_string(),
            descs: vec![self.inner.id],
        });
        drop(st);
        tracing::debug!(bdev = %b.name(), module, claim = ty.name(), "bdev claimed");
        Ok(())
    }

    /// Closes the descriptor (same as dropping it).
    pub fn close(self) {}
}

fn set_desc_write(st: &mut BdevState, id: u64) {
    if let Some(d) = st.descs.iter_mut().find(|d| d.id == id) {
        d.write = true;
    }
}

impl Drop for BdevDesc {
    fn drop(&mut self) {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let b = self.inner.bdev.clone();
        let finish = {
            let mut st = b.0.state.lock();
            st.descs.retain(|d| d.id != self.inner.id);
            let mut release = false;
            if let Some(c) = &mut st.claim {
                c.descs.retain(|d| *d != self.inner.id);
                release = c.descs.is_empty();
            }
            if release {
                st.claim = None;
            }
            st.status == Status::Removing && st.descs.is_empty()
        };
        if finish {
            finish_unregister(&b);
        }
    }
}

/// Module order entry.
struct ModuleEntry {
    module: Arc<dyn BdevModule>,
}

struct Registry {
    bdevs: Vec<Bdev>,
    names: HashMap<String, Bdev>,
}

struct ExamineState {
    pending: usize,
    waiters: Vec<Callback>,
    allow: Vec<String>,
}

pub(crate) struct MgrShared {
    reg: Mutex<Registry>,
    modules: RwLock<Vec<ModuleEntry>>,
    opts: Mutex<BdevOptions>,
    pub(crate) pool: Arc<PoolShared>,
    pub(crate) mgmt: IoDevice<MgmtChannel>,
    examine: Mutex<ExamineState>,
    zero_buf: Mutex<Option<Arc<DmaBuf>>>,
}

/// The bdev layer of one application: module list, registry, options and
/// the `BdevIo` pool. Cheap to clone.
#[derive(Clone)]
pub struct BdevManager(pub(crate) Arc<MgrShared>);

impl fmt::Debug for BdevManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BdevManager")
            .field("bdevs", &self.0.reg.lock().bdevs.len())
            .finish()
    }
}

impl Default for BdevManager {
    fn default() -> Self {
        Self::new(BdevOptions::default())
    }
}

impl BdevManager {
    /// A manager with no modules.
    #[must_use]
    pub fn new(opts: BdevOptions) -> Self {
        let pool = PoolShared::new(
            opts.bdev_io_pool_size as usize,
            opts.bdev_io_cache_size as usize,
        );
        let pool2 = Arc::clone(&pool);
        let mgmt = IoDevice::register("bdev_mgmt", move || {
            Ok(MgmtChannel::new(Arc::clone(&pool2)))
        });
        BdevManager(Arc::new(MgrShared {
            reg: Mutex::new(Registry {
                bdevs: Vec::new(),
                names: HashMap::new(),
            }),
            modules: RwLock::new(Vec::new()),
            opts: Mutex::new(opts),
            pool,
            mgmt,
            examine: Mutex::new(ExamineState {
                pending: 0,
                waiters: Vec::new(),
                allow: Vec::new(),
            }),
            zero_buf: Mutex::new(None),
        }))
    }

    /// Adds a module. Modules that examine go before those that do not.
    pub fn register_module(&self, module: Arc<dyn BdevModule>) {
        let mut mods = self.0.modules.write();
        if mods.iter().any(|m| m.module.name() == module.name()) {
            tracing::warn!(module = module.name(), "module registered twice; ignored");
            return;
        }
        let entry = ModuleEntry { module };
        if entry.module.has_examine() {
            let pos = mods
                .iter()
                .position(|m| !m.module.has_examine())
                .unwrap_or(mods.len());
            mods.insert(pos, entry);
        } else {
            mods.push(entry);
        }
    }

    /// Registered modules, in module order.
    #[must_use]
    pub fn modules(&self) -> Vec<Arc<dyn BdevModule>> {
        self.0
            .modules
            .read()
            .iter()
            .map(|m| Arc::clone(&m.module))
            .collect()
    }

    /// The module called `name`.
    #[must_use]
    pub fn module(&self, name: &str) -> Option<Arc<dyn BdevModule>> {
        self.0
            .modules
            .read()
            .iter()
            .find(|m| m.module.name() == name)
            .map(|m| Arc::clone(&m.module))
    }

    /// The module called `name`, if it is a `T` (how a module's RPC
    /// handlers find the module's own state, e.g. the configurations a
    /// virtual bdev module keeps for bases that do not exist yet).
    #[must_use]
    pub fn module_as<T: BdevModule>(&self, name: &str) -> Option<Arc<T>> {
        let m = self.module(name)?;
        let any: Arc<dyn Any + Send + Sync> = m;
        any.downcast::<T>().ok()
    }

    /// Runs every module's `init`.
    pub fn init_modules(&self) -> Result<(), BdevError> {
        for m in self.modules() {
            m.init(self).map_err(|source| BdevError::ModuleInit {
                module: m.name().to_string(),
                source,
            })?;
        }
        Ok(())
    }

    /// Current options.
    #[must_use]
    pub fn options(&self) -> BdevOptions {
        self.0.opts.lock().clone()
    }

    /// Changes options (`bdev_set_options`). The pool must hold at least
    /// `cache × (threads + 1)` I/Os, as SPDK checks.
    pub fn set_options(&self, opts: BdevOptions, thread_count: usize) -> Result<(), BdevError> {
        let min = u64::from(opts.bdev_io_cache_size) * (thread_count as u64 + 1);
        if u64::from(opts.bdev_io_pool_size) < min {
            return Err(BdevError::PoolTooSmall {
                pool: opts.bdev_io_pool_size,
                cache: opts.bdev_io_cache_size,
            });
        }
        self.0.pool.resize(
            opts.bdev_io_pool_size as usize,
            opts.bdev_io_cache_size as usize,
        );
        *self.0.opts.lock() = opts;
        Ok(())
    }

    /// `BdevIo`s not in use or cached anywhere (for leak checks: equals the
    /// pool size minus what threads cache once all I/O completed).
    #[must_use]
    pub fn io_pool_available(&self) -> usize {
        self.0.pool.available.load(Ordering::Acquire)
    }

    /// Free `BdevIo`s cached on the calling thread.
    #[must_use]
    pub fn io_cached_on_this_thread(&self) -> usize {
        self.0
            .mgmt
            .get_channel()
            .map(|m| m.cache.cached())
            .unwrap_or(0)
    }

    pub(crate) fn zero_buf(&self) -> Option<Arc<DmaBuf>> {
        let mut z = self.0.zero_buf.lock();
        if z.is_none() {
            *z = DmaBuf::new(ZERO_BUF_LEN).ok().map(Arc::new);
        }
        z.clone()
    }

    /// Registers a bdev implemented by `ops` for `module`, then runs examine
    /// (on the calling thread, which should be a bdevkit thread when
    /// virtual-bdev modules are loaded).
    pub fn register_bdev<B: BdevOps>(
        &self,
        module: &str,
        props: BdevProps,
        ops: Arc<B>,
    ) -> Result<Bdev, BdevError> {
        if props.name.is_empty() {
            return Err(BdevError::InvalidArg("bdev name must not be empty".into()));
        }
        if props.block_size == 0 {
            return Err(BdevError::InvalidArg("block size must not be zero".into()));
        }
        let uuid = props.uuid.unwrap_or_else(Uuid::new_v4);
        let ops: Box<dyn BdevOpsDyn> = Box::new(OpsBox(ops));
        let mut supported = 0u32;
        for t in IoType::ALL {
            if ops.io_type_supported(t) {
                supported |= t.bit();
            }
        }
        let mut aliases = props.aliases.clone();
        let uuid_str = uuid.to_string();
        if uuid_str != props.name && !aliases.contains(&uuid_str) {
            aliases.push(uuid_str);
        }
        let bdev = {
            let mut reg = self.0.reg.lock();
            if let Some(clash) = std::iter::once(&props.name)
                .chain(aliases.iter())
                .find(|n| reg.names.contains_key(n.as_str()))
            {
                return Err(BdevError::Exists(clash.clone()));
            }
            let mgr = Arc::downgrade(&self.0);
            let name = props.name.clone();
            let inner = Arc::new_cyclic(|weak: &Weak<BdevInner>| {
                let w = weak.clone();
                let device = IoDevice::register(format!("bdev_{name}"), move || {
                    let b = w.upgrade().ok_or("bdev is gone")?;
                    channel::create_core(&b).map_err(Into::into)
                });
                BdevInner {
                    name: name.clone(),
                    aliases: RwLock::new(aliases.clone()),
                    uuid,
                    module: module.to_string(),
                    num_blocks: AtomicU64::new(props.num_blocks),
                    props,
                    supported,
                    ops,
                    device,
                    state: Mutex::new(BdevState {
                        status: Status::Registered,
                        descs: Vec::new(),
                        claim: None,
                        unregister_done: Vec::new(),
                    }),
                    folded_stat: Mutex::new(IoStat::default()),
                    hist: Mutex::new(HistState::default()),
                    qd: Mutex::new(QdSampling::default()),
                    qos: QosState::default(),
                    reset_in_progress: AtomicBool::new(false),
                    mgr,
                }
            });
            let bdev = Bdev(inner);
            reg.names.insert(bdev.0.name.clone(), bdev.clone());
            for a in &aliases {
                reg.names.insert(a.clone(), bdev.clone());
            }
            reg.bdevs.push(bdev.clone());
            bdev
        };
        tracing::info!(bdev = %bdev.name(), module, "bdev registered");
        let examine = {
            let opts = self.0.opts.lock();
            opts.bdev_auto_examine || {
                let ex = self.0.examine.lock();
                ex.allow
                    .iter()
                    .any(|n| n == bdev.name() || bdev.aliases().contains(n))
            }
        };
        if examine {
            self.examine_bdev(&bdev);
        }
        Ok(bdev)
    }

    fn examine_bdev(&self, bdev: &Bdev) {
        let modules = self.modules();
        for m in &modules {
            if bdev.is_removing() {
                return;
            }
            m.examine_config(self, bdev);
        }
        let claimer = bdev
            .claim()
            .and_then(|(ty, module)| (ty == ClaimType::ExclusiveWrite).then_some(module));
        for m in modules {
            if let Some(c) = &claimer {
                if m.name() != c {
                    continue;
                }
            }
            self.0.examine.lock().pending += 1;
            let me = Arc::downgrade(&self.0);
            let done = Done::new(move || {
                if let Some(me) = me.upgrade() {
                    BdevManager(me).examine_done();
                }
            });
            m.examine_disk(self, bdev, done);
        }
    }

    fn examine_done(&self) {
        let waiters = {
            let mut ex = self.0.examine.lock();
            ex.pending -= 1;
            if ex.pending == 0 {
                std::mem::take(&mut ex.waiters)
            } else {
                Vec::new()
            }
        };
        for (t, f) in waiters {
            run_on(t.as_ref(), f);
        }
    }

    /// Runs `done` (on the calling thread) once no examine is pending.
    pub fn wait_for_examine(&self, done: impl FnOnce() + Send + 'static) {
        let origin = Thread::current().map(|t| t.handle());
        let mut ex = self.0.examine.lock();
        if ex.pending == 0 {
            drop(ex);
            run_on(origin.as_ref(), Box::new(done));
        } else {
            ex.waiters.push((origin, Box::new(done)));
        }
    }

    /// `bdev_examine`: allow-lists `name` for examine (only when
    /// auto-examine is off) and examines it now if it exists.
    pub fn examine(&self, name: &str) -> Result<(), BdevError> {
        if self.0.opts.lock().bdev_auto_examine {
            return Err(BdevError::InvalidArg(
                "bdev_examine requires bdev_auto_examine=false".into(),
            ));
        }
        {
            let mut ex = self.0.examine.lock();
            if ex.allow.iter().any(|n| n == name) {
                return Err(BdevError::Exists(name.to_string()));
            }
            ex.allow.push(name.to_string());
        }
        if let Some(b) = self.get(name) {
            self.examine_bdev(&b);
        }
        Ok(())
    }

    /// Names allow-listed with [`BdevManager::examine`].
    #[must_use]
    pub fn examine_allow_list(&self) -> Vec<String> {
        self.0.examine.lock().allow.clone()
    }

    /// Looks a bdev up by name, alias or UUID string (bdevs being removed
    /// included).
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Bdev> {
        self.0.reg.lock().names.get(name).cloned()
    }

    /// Every registered bdev, in registration order.
    #[must_use]
    pub fn bdevs(&self) -> Vec<Bdev> {
        self.0.reg.lock().bdevs.clone()
    }

    /// Opens a bdev. `event_cb` runs on the calling thread (inline when
    /// called outside any thread) for remove and resize events.
    pub fn open(
        &self,
        name: &str,
        write: bool,
        event_cb: impl Fn(BdevEvent) + Send + Sync + 'static,
    ) -> Result<BdevDesc, BdevError> {
        let bdev = self
            .get(name)
            .ok_or_else(|| BdevError::NotFound(name.to_string()))?;
        let id = NEXT_DESC_ID.fetch_add(1, Ordering::Relaxed);
        let inner = Arc::new(DescInner {
            id,
            bdev: bdev.clone(),
            write: AtomicBool::new(write),
            closed: AtomicBool::new(false),
            event_cb: Box::new(event_cb),
        });
        let mut st = bdev.0.state.lock();
        if st.status == Status::Removing {
            return Err(BdevError::NotFound(name.to_string()));
        }
        if write {
            if let Some(c) = &st.claim {
                // Writers of a shared claim open read-only and then claim.
                return Err(BdevError::Claimed(
                    bdev.name().to_string(),
                    c.module.clone(),
                ));
            }
        }
        st.descs.push(DescEntry {
            id,
            write,
            thread: Thread::current().map(|t| t.handle()),
            inner: Arc::downgrade(&inner),
        });
        drop(st);
        Ok(BdevDesc { inner })
    }

    /// Unregisters `bdev`: open descriptors get a remove event; once the
    /// last closes and every channel is gone, the module destructs it and
    /// `done` runs on the calling thread.
    pub fn unregister(&self, bdev: &Bdev, done: impl FnOnce() + Send + 'static) {
        let origin = Thread::current().map(|t| t.handle());
        let (first, finish_now) = {
            let mut st = bdev.0.state.lock();
            st.unregister_done.push((origin, Box::new(done)));
            let first = st.status == Status::Registered;
            st.status = Status::Removing;
            (first, first && st.descs.is_empty())
        };
        if !first {
            return;
        }
        tracing::info!(bdev = %bdev.name(), "unregistering bdev");
        if finish_now {
            finish_unregister(bdev);
        } else {
            bdev.send_event(BdevEvent::Remove);
        }
    }

    /// Unregisters the bdev `name` if `module` created it (what every
    /// `bdev_<module>_delete` does). `done` gets `NotFound` at once when
    /// there is no such bdev of that module, or `Ok` once it is gone (on
    /// the calling thread).
    pub fn unregister_by_name(
        &self,
        name: &str,
        module: &str,
        done: impl FnOnce(Result<(), BdevError>) + Send + 'static,
    ) {
        match self
            .get(name)
            .filter(|b| b.module_name() == module && !b.is_removing())
        {
            Some(b) => self.unregister(&b, move || done(Ok(()))),
            None => done(Err(BdevError::NotFound(name.to_string()))),
        }
    }

    /// Unregisters every bdev, top of each stack first (unclaimed bdevs, in
    /// reverse registration order), then runs `done`.
    pub fn unregister_all(&self, done: impl FnOnce() + Send + 'static) {
        let next = {
            let reg = self.0.reg.lock();
            reg.bdevs
                .iter()
                .rev()
                .find(|b| b.claim().is_none() && !b.is_removing())
                .or_else(|| reg.bdevs.iter().rev().find(|b| !b.is_removing()))
                .cloned()
        };
        match next {
            Some(b) => {
                let me = self.clone();
                self.unregister(&b, move || me.unregister_all(done));
            }
            None => {
                let pending = !self.0.reg.lock().bdevs.is_empty();
                if pending {
                    // Removals still finishing: poll again shortly.
                    let me = self.clone();
                    match Thread::current() {
                        Some(t) => {
                            let cell = std::cell::Cell::new(Some(done));
                            t.register_poller("bdev_unregister_all", 1_000, move |p| {
                                if me.0.reg.lock().bdevs.is_empty() {
                                    p.unregister();
                                    if let Some(d) = cell.take() {
                                        d();
                                    }
                                    crate::thread::PollerStatus::Busy
                                } else {
                                    crate::thread::PollerStatus::Idle
                                }
                            });
                        }
                        None => done(),
                    }
                } else {
                    done();
                }
            }
        }
    }

    /// The `bdev` subsystem config (SPDK's order): `bdev_set_options`,
    /// `bdev_examine` entries, module entries, per-bdev entries and QoS,
    /// then `bdev_wait_for_examine`.
    #[must_use]
    pub fn config_json(&self) -> Vec<Value> {
        let o = self.options();
        let mut out = vec![json!({
            "method": "bdev_set_options",
            "params": {
                "bdev_io_pool_size": o.bdev_io_pool_size,
                "bdev_io_cache_size": o.bdev_io_cache_size,
                "bdev_auto_examine": o.bdev_auto_examine,
                "iobuf_small_cache_size": o.iobuf_small_cache_size,
                "iobuf_large_cache_size": o.iobuf_large_cache_size,
            }
        })];
        for n in self.examine_allow_list() {
            out.push(json!({"method": "bdev_examine", "params": {"name": n}}));
        }
        for m in self.modules() {
            out.extend(m.config_json(self));
        }
        for b in self.bdevs() {
            if b.is_removing() {
                continue;
            }
            if let Some(c) = b.write_config_json() {
                out.push(c);
            }
            let l = b.qos_limits();
            if l.iter().any(|x| *x != 0) {
                let mut p = serde_json::Map::new();
                p.insert("name".into(), json!(b.name()));
                for (k, v) in [
                    "rw_ios_per_sec",
                    "rw_mbytes_per_sec",
                    "r_mbytes_per_sec",
                    "w_mbytes_per_sec",
                ]
                .iter()
                .zip(l)
                {
                    if v != 0 {
                        p.insert((*k).into(), json!(v));
                    }
                }
                out.push(json!({"method": "bdev_set_qos_limit", "params": p}));
            }
        }
        out.push(json!({"method": "bdev_wait_for_examine"}));
        out
    }
}

fn run_on(t: Option<&ThreadHandle>, f: Box<dyn FnOnce() + Send>) {
    match t {
        Some(t) => {
            if let Err(e) = t.send_boxed(f) {
                tracing::warn!(error = %e, "completion thread exited");
            }
        }
        None => f(),
    }
}

fn finish_unregister(bdev: &Bdev) {
    let b = bdev.clone();
    bdev.0.device.unregister(move || {
        let b2 = b.clone();
        b.0.ops.destruct(Done::new(move || {
            if let Some(mgr) = b2.0.mgr.upgrade() {
                let mut reg = mgr.reg.lock();
                reg.bdevs.retain(|x| !Arc::ptr_eq(&x.0, &b2.0));
                reg.names.retain(|_, x| !Arc::ptr_eq(&x.0, &b2.0));
            }
            tracing::info!(bdev = %b2.name(), "bdev removed");
            let waiters = std::mem::take(&mut b2.0.state.lock().unregister_done);
            for (t, f) in waiters {
                run_on(t.as_ref(), f);
            }
        }));
    });
}
