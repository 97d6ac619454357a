//! [`Bdev`]: a registered bdev as consumers and modules see it — identity,
//! properties, claims and descriptors, events, `bdev_get_bdevs` JSON — and
//! the end of its unregistration. Statistics, histograms, queue-depth
//! sampling and QoS limits are in `bdev_stats.rs`.

use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};
use serde_json::{json, Value};
use uuid::Uuid;

use super::io::BdevDevice;
use super::module::ops::{BdevOpsDyn, Done};
use super::shared::BdevShared;
use super::stats::QdSampling;
use super::types::{BdevEvent, BdevProps, ClaimType, IoType};
use crate::thread::ThreadHandle;

/// A closure and the thread to run it on (inline when `None`).
pub(crate) type Callback = (Option<ThreadHandle>, Box<dyn FnOnce() + Send>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Registered,
    Removing,
}

/// One open descriptor, as the bdev keeps it.
pub(crate) struct DescEntry {
    pub(crate) id: u64,
    pub(crate) write: bool,
    pub(crate) thread: Option<ThreadHandle>,
    pub(crate) inner: Weak<DescInner>,
}

/// What an open descriptor is: the handle `BdevDesc` wraps it.
pub(crate) struct DescInner {
    pub(crate) id: u64,
    pub(crate) bdev: Bdev,
    pub(crate) write: AtomicBool,
    pub(crate) closed: AtomicBool,
    pub(crate) event_cb: Box<dyn Fn(BdevEvent) + Send + Sync>,
}

#[derive(Debug, Clone)]
pub(crate) struct Claim {
    pub(crate) ty: ClaimType,
    pub(crate) module: String,
    pub(crate) descs: Vec<u64>,
}

pub(crate) struct BdevState {
    pub(crate) status: Status,
    pub(crate) descs: Vec<DescEntry>,
    pub(crate) claim: Option<Claim>,
    pub(crate) unregister_done: Vec<Callback>,
}

/// Called with the bdev once it is gone (destructed): takes it out of the
/// registry that registered it.
pub(crate) type OnGone = Box<dyn Fn(&Bdev) + Send + Sync>;

pub(crate) struct BdevInner {
    pub(crate) shared: Arc<BdevShared>,
    pub(crate) aliases: RwLock<Vec<String>>,
    pub(crate) uuid: Uuid,
    pub(crate) module: String,
    pub(crate) ops: Box<dyn BdevOpsDyn>,
    pub(crate) device: BdevDevice,
    pub(crate) state: Mutex<BdevState>,
    pub(crate) qd: Mutex<QdSampling>,
    pub(crate) on_gone: OnGone,
}

/// A registered bdev (cheap to clone, `Send + Sync`).
#[derive(Clone)]
pub struct Bdev(pub(crate) Arc<BdevInner>);

impl fmt::Debug for Bdev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bdev")
            .field("name", &self.name())
            .field("block_size", &self.block_size())
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
        &self.0.shared.name
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
        self.name() == name || self.0.aliases.read().iter().any(|a| a == name)
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
        &self.0.shared.props.product_name
    }

    /// Block size in bytes.
    #[must_use]
    pub fn block_size(&self) -> u32 {
        self.0.shared.props.block_size
    }

    /// Number of blocks (changes on resize).
    #[must_use]
    pub fn num_blocks(&self) -> u64 {
        self.0.shared.num_blocks()
    }

    /// Properties as registered (`num_blocks` there is the initial size).
    #[must_use]
    pub fn props(&self) -> &BdevProps {
        &self.0.shared.props
    }

    /// Whether the bdev serves `io_type` (write zeroes is always emulated
    /// where writes are supported).
    #[must_use]
    pub fn supports(&self, io_type: IoType) -> bool {
        self.0.shared.supports(io_type)
    }

    /// Whether the module itself serves `io_type` (no emulation).
    #[must_use]
    pub fn module_supports(&self, io_type: IoType) -> bool {
        self.0.shared.module_supports(io_type)
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
        let old = self.0.shared.num_blocks.swap(num_blocks, Ordering::AcqRel);
        if old != num_blocks {
            tracing::info!(bdev = %self.name(), old, new = num_blocks, "bdev resized");
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
        let p = self.props();
        let mut m = serde_json::Map::new();
        m.insert("name".into(), json!(self.name()));
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
        let limits = self.qos_limits();
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
        m.insert("zoned".into(), json!(p.zoned.is_some()));
        if let Some(z) = &p.zoned {
            m.insert("zone_size".into(), json!(z.zone_size));
            m.insert("max_open_zones".into(), json!(z.max_open_zones));
            m.insert("optimal_open_zones".into(), json!(z.optimal_open_zones));
        }
        let mut io = serde_json::Map::new();
        for t in IoType::ALL {
            io.insert(t.name().into(), json!(self.supports(t)));
        }
        m.insert("supported_io_types".into(), Value::Object(io));
        m.insert("driver_specific".into(), self.dump_info_json());
        Value::Object(m)
    }

    /// Number of I/O channels open on this bdev right now.
    #[must_use]
    pub fn channel_count(&self) -> usize {
        self.0.device.channel_count()
    }
}

/// Runs `f` on `t` (inline when `None`).
pub(crate) fn run_on(t: Option<&ThreadHandle>, f: Box<dyn FnOnce() + Send>) {
    match t {
        Some(t) => {
            if let Err(e) = t.send_boxed(f) {
                tracing::warn!(error = %e, "completion thread exited");
            }
        }
        None => f(),
    }
}

/// The last descriptor of a bdev being removed has closed: once every
/// channel is gone, the module destructs it, the registry forgets it, and
/// the unregister callbacks run.
pub(crate) fn finish_unregister(bdev: &Bdev) {
    let b = bdev.clone();
    bdev.0.device.unregister(move || {
        let b2 = b.clone();
        b.0.ops.destruct(Done::new(move || {
            (b2.0.on_gone)(&b2);
            tracing::info!(bdev = %b2.name(), "bdev removed");
            let waiters = std::mem::take(&mut b2.0.state.lock().unregister_done);
            for (t, f) in waiters {
                run_on(t.as_ref(), f);
            }
        }));
    });
}
