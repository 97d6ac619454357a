//! The delay module, its bdev, its per-thread channel with the queue of
//! held I/Os, and its I/O path.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::rc::{Rc, Weak as RcWeak};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bdevkit::bdev::module::vbdev::{self, BaseBdev, StackedBdev, VbdevConfig, VbdevModule};
use bdevkit::bdev::module::{
    Bdev, BdevChannel, BdevIo, BdevManager, BdevOps, BoxError, Done, Error, IoChannel,
    IoCompletion, IoDevice, IoStatus, IoType, ModuleIo, Poller, PollerStatus, Result, Thread,
};
use bdevkit::clock;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::rpc::{DelayCreateParams, LatencyType};
use crate::{MODULE, NAMESPACE_UUID, PRODUCT_NAME};

/// Period of each channel's completion poller (while it holds I/O): the
/// granularity of the added latency.
const POLL_PERIOD_US: u64 = 10;
/// Held I/Os a channel has room for before its queue grows.
const QUEUE_CAPACITY: usize = 256;
/// One I/O in a hundred gets the p99 latency.
const P99_ONE_IN: u64 = 100;

impl VbdevConfig for DelayCreateParams {
    const MODULE: &'static str = MODULE;
    const CREATE_METHOD: &'static str = "bdev_delay_create";
    type Attached = Bdev;

    fn attach(&self, mgr: &BdevManager, base: &Bdev) -> Result<Bdev> {
        attach(mgr, self, base)
    }

    fn base_name(&self) -> &str {
        &self.base_bdev_name
    }

    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.name)
    }

    /// Saved with the UUID the bdev got.
    fn uuid_mut(&mut self) -> Option<&mut Option<Uuid>> {
        Some(&mut self.uuid)
    }
}

/// The delay module: its configurations in a [`VbdevModule`], whose
/// `BdevModule` examines and emits the saved config.
pub type DelayModule = VbdevModule<DelayCreateParams>;

pub(crate) fn create(
    module: &DelayModule,
    mgr: &BdevManager,
    params: DelayCreateParams,
) -> Result<String> {
    if params.name.is_empty() || params.base_bdev_name.is_empty() {
        return Err(Error::InvalidArg("names must not be empty".into()));
    }
    if params.p99_read_latency < params.avg_read_latency
        || params.p99_write_latency < params.avg_write_latency
    {
        return Err(Error::InvalidArg(
            "a p99 latency is less than its average latency".into(),
        ));
    }
    let name = params.name.clone();
    module.configure(mgr, params)?;
    Ok(name)
}

pub(crate) fn delete(
    module: &DelayModule,
    mgr: &BdevManager,
    name: &str,
    done: impl FnOnce(Result<()>) + Send + 'static,
) {
    module.configs().delete(mgr, name, done);
}

pub(crate) fn update_latency(
    module: &DelayModule,
    mgr: &BdevManager,
    name: &str,
    latency_type: LatencyType,
    latency_us: u64,
) -> Result<()> {
    let bdev = mgr
        .get(name)
        .filter(|b| !b.is_removing())
        .and_then(|b| b.ops_as::<DelayBdev>())
        .ok_or_else(|| Error::NotFound(name.to_string()))?;
    bdev.latencies.set(latency_type, latency_us);
    // The configuration follows, so a re-attach or a saved config
    // keeps the new value.
    module
        .configs()
        .update(name, |c| *c.latency_mut(latency_type) = latency_us);
    tracing::info!(bdev = %name, ?latency_type, latency_us, "delay latency updated");
    Ok(())
}

fn attach(mgr: &BdevManager, cfg: &DelayCreateParams, base: &Bdev) -> Result<Bdev> {
    let latencies = Latencies::default();
    latencies.set(LatencyType::AvgRead, cfg.avg_read_latency);
    latencies.set(LatencyType::P99Read, cfg.p99_read_latency);
    latencies.set(LatencyType::AvgWrite, cfg.avg_write_latency);
    latencies.set(LatencyType::P99Write, cfg.p99_write_latency);
    let name = cfg.name.clone();
    let mut props = vbdev::props_over(base, &name, PRODUCT_NAME, base.num_blocks());
    props.uuid = Some(
        cfg.uuid
            .unwrap_or_else(|| Uuid::new_v5(&NAMESPACE_UUID, base.uuid().as_bytes())),
    );
    props.optimal_io_boundary = base.props().optimal_io_boundary;
    let bdev = BaseBdev::register_over(mgr, base, MODULE, props, |base_bdev| {
        Arc::new_cyclic(|weak: &Weak<DelayBdev>| {
            let w = weak.clone();
            DelayBdev {
                name: name.clone(),
                base: base_bdev,
                mgr: mgr.clone(),
                latencies,
                device: IoDevice::register(format!("delay_{name}"), move || {
                    let d = w.upgrade().ok_or("delay bdev is gone")?;
                    DelayChannel::new(d)
                }),
            }
        })
    })?;
    tracing::info!(bdev = %name, base = %base.name(), "delay bdev created");
    Ok(bdev)
}

/// The four latencies, in µs (what the user set) and in ticks (what the
/// I/O path adds).
#[derive(Debug, Default)]
struct Latencies {
    us: [AtomicU64; 4],
    ticks: [AtomicU64; 4],
}

fn latency_index(t: LatencyType) -> usize {
    match t {
        LatencyType::AvgRead => 0,
        LatencyType::P99Read => 1,
        LatencyType::AvgWrite => 2,
        LatencyType::P99Write => 3,
    }
}

impl Latencies {
    fn set(&self, t: LatencyType, us: u64) {
        let i = latency_index(t);
        self.us[i].store(us, Ordering::Relaxed);
        self.ticks[i].store(clock::us_to_ticks(us), Ordering::Relaxed);
    }

    fn us(&self, t: LatencyType) -> u64 {
        self.us[latency_index(t)].load(Ordering::Relaxed)
    }

    #[inline]
    fn ticks(&self, t: LatencyType) -> u64 {
        self.ticks[latency_index(t)].load(Ordering::Relaxed)
    }
}

/// One delay bdev.
pub struct DelayBdev {
    name: String,
    /// The open, claimed base (closed in `destruct`).
    base: BaseBdev,
    /// Held to unregister itself when the base goes (a cycle through the
    /// registry that unregistering breaks).
    mgr: BdevManager,
    latencies: Latencies,
    /// Per-thread state reachable from the control path (reset).
    device: IoDevice<DelayChannel>,
}

impl std::fmt::Debug for DelayBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayBdev")
            .field("name", &self.name)
            .field("base", &self.base.bdev().name())
            .finish_non_exhaustive()
    }
}

impl DelayBdev {
    /// The base bdev.
    #[must_use]
    pub fn base(&self) -> &Bdev {
        self.base.bdev()
    }

    /// A latency in µs.
    #[must_use]
    pub fn latency_us(&self, t: LatencyType) -> u64 {
        self.latencies.us(t)
    }

    fn own_bdev(&self) -> Option<Bdev> {
        vbdev::own_bdev(&self.mgr, &self.name, self)
    }

    /// Serves one I/O on `ch`.
    fn dispatch(&self, ch: &Rc<ChannelInner>, io: BdevIo) {
        if self.base.is_removing() {
            return io.complete_deferred(IoStatus::Aborted);
        }
        match io.io_type() {
            IoType::Read => {
                let t = if ch.p99() {
                    LatencyType::P99Read
                } else {
                    LatencyType::AvgRead
                };
                ch.forward(io, Some(self.latencies.ticks(t)));
            }
            IoType::Write => {
                let t = if ch.p99() {
                    LatencyType::P99Write
                } else {
                    LatencyType::AvgWrite
                };
                ch.forward(io, Some(self.latencies.ticks(t)));
            }
            IoType::Reset => self.reset(ch, io),
            IoType::Abort => match ch.take_held(io.abort_target_tag()) {
                Some(target) => {
                    target.complete_deferred(IoStatus::Aborted);
                    io.complete_deferred(IoStatus::Success);
                }
                None => ch.forward(io, None),
            },
            _ => ch.forward(io, None),
        }
    }

    /// Aborts what every thread holds, then resets the base (SPDK's
    /// order). The reset waits in this thread's channel meanwhile.
    fn reset(&self, ch: &Rc<ChannelInner>, io: BdevIo) {
        *ch.parked_reset.borrow_mut() = Some(io);
        let device = self.device.clone();
        self.device.for_each_channel(
            |c| c.inner.abort_held(),
            move || {
                if let Ok(c) = device.get_channel() {
                    let reset = c.inner.parked_reset.borrow_mut().take();
                    if let Some(reset) = reset {
                        c.inner.forward(reset, None);
                    }
                }
            },
        );
    }
}

/// Unregistering on removal of the base and following its size.
impl StackedBdev for DelayBdev {
    fn vbdev_name(&self) -> &str {
        &self.name
    }

    fn base(&self) -> &BaseBdev {
        &self.base
    }

    fn manager(&self) -> &BdevManager {
        &self.mgr
    }
}

impl BdevOps for DelayBdev {
    type Channel = IoChannel<DelayChannel>;

    fn create_channel(&self) -> std::result::Result<IoChannel<DelayChannel>, BoxError> {
        Ok(self.device.get_channel()?)
    }

    #[inline]
    fn submit(&self, ch: &IoChannel<DelayChannel>, io: BdevIo) {
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
        let mut m = Map::new();
        m.insert("name".into(), json!(self.name));
        m.insert("base_bdev_name".into(), json!(self.base.bdev().name()));
        // SPDK writes the UUID whenever it is not null: always, since
        // every delay bdev has one (configured or derived from the base's).
        if let Some(b) = self.own_bdev() {
            m.insert("uuid".into(), json!(b.uuid().to_string()));
        }
        for (k, t) in [
            ("avg_read_latency", LatencyType::AvgRead),
            ("p99_read_latency", LatencyType::P99Read),
            ("avg_write_latency", LatencyType::AvgWrite),
            ("p99_write_latency", LatencyType::P99Write),
        ] {
            m.insert(k.into(), json!(self.latencies.us(t)));
        }
        json!({ "delay": m })
    }
}

// ---------------------------------------------------------------------------
// Per-thread state
// ---------------------------------------------------------------------------

/// A parent I/O whose base I/O is done, waiting for its due tick.
struct Held {
    due: u64,
    seq: u64,
    io: BdevIo,
    status: IoStatus,
    cdw0: u32,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest due tick must
    /// come out first (ties in completion order).
    fn cmp(&self, o: &Self) -> CmpOrdering {
        (o.due, o.seq).cmp(&(self.due, self.seq))
    }
}

/// The per-thread channel of a delay bdev (also its `IoDevice` channel).
#[derive(Debug)]
pub struct DelayChannel {
    inner: Rc<ChannelInner>,
}

impl Drop for DelayChannel {
    fn drop(&mut self) {
        if let Some(p) = self.inner.poller.borrow_mut().take() {
            p.unregister();
        }
    }
}

struct ChannelInner {
    base: BdevChannel,
    held: RefCell<BinaryHeap<Held>>,
    seq: Cell<u64>,
    rng: Xorshift,
    poller: RefCell<Option<Poller>>,
    parked_reset: RefCell<Option<BdevIo>>,
}

impl std::fmt::Debug for ChannelInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelInner")
            .field("held", &self.held.borrow().len())
            .finish_non_exhaustive()
    }
}

impl DelayChannel {
    fn new(bdev: Arc<DelayBdev>) -> std::result::Result<DelayChannel, BoxError> {
        let base = bdev.base.channel()?;
        let thread = Thread::try_current()?;
        let inner = Rc::new(ChannelInner {
            base,
            held: RefCell::new(BinaryHeap::with_capacity(QUEUE_CAPACITY)),
            seq: Cell::new(0),
            rng: Xorshift::new(clock::ticks()),
            poller: RefCell::new(None),
            parked_reset: RefCell::new(None),
        });
        let weak: RcWeak<ChannelInner> = Rc::downgrade(&inner);
        let poller = thread.register_poller("delay_complete", POLL_PERIOD_US, move |p| match weak
            .upgrade()
        {
            Some(ch) => ch.complete_due(p),
            None => PollerStatus::Idle,
        });
        poller.pause();
        *inner.poller.borrow_mut() = Some(poller);
        Ok(DelayChannel { inner })
    }
}

impl ChannelInner {
    /// Whether this I/O gets the p99 latency (probability 1/100).
    #[inline]
    fn p99(&self) -> bool {
        self.rng.one_in(P99_ONE_IN)
    }

    /// Sends `io` to the base; `delay` (ticks after its submission) holds
    /// its completion, `None` completes it as soon as the base does.
    /// The due tick travels in the parent's driver context, for `io_done`.
    /// It counts from a fresh tick reading, not the I/O's submit stamp
    /// (the tick of the poll that submitted it, possibly a little older),
    /// so that an I/O is never held for less than its latency.
    fn forward(self: &Rc<Self>, mut io: BdevIo, delay: Option<u64>) {
        let ctx = io.driver_ctx();
        ctx[0] = u64::from(delay.is_some());
        ctx[1] = delay.map_or(0, |d| clock::ticks().saturating_add(d));
        vbdev::forward(&self.base, io, |child| {
            child.on_done(Rc::clone(self) as Rc<dyn IoCompletion>);
        });
    }

    /// Completes every held I/O that is due; pauses when none is left.
    fn complete_due(&self, p: &Poller) -> PollerStatus {
        let now = clock::ticks();
        let mut busy = false;
        loop {
            let next = {
                let mut held = self.held.borrow_mut();
                match held.peek() {
                    Some(h) if h.due <= now => held.pop(),
                    _ => None,
                }
            };
            let Some(mut h) = next else { break };
            busy = true;
            h.io.set_nvme_cdw0(h.cdw0);
            h.io.complete(h.status);
        }
        if self.held.borrow().is_empty() {
            p.pause();
        }
        PollerStatus::from(busy)
    }

    /// Removes the held I/O with `tag` (an abort's target).
    fn take_held(&self, tag: u64) -> Option<BdevIo> {
        let mut held = self.held.borrow_mut();
        if !held.iter().any(|h| h.io.tag() == tag) {
            return None;
        }
        let mut all = std::mem::take(&mut *held).into_vec();
        let pos = all.iter().position(|h| h.io.tag() == tag)?;
        let found = all.swap_remove(pos);
        *held = BinaryHeap::from(all);
        Some(found.io)
    }

    /// Aborts every held I/O (reset).
    fn abort_held(&self) {
        loop {
            let next = self.held.borrow_mut().pop();
            let Some(h) = next else { break };
            h.io.complete(IoStatus::Aborted);
        }
    }
}

/// A tiny per-channel PRNG (xorshift64): no allocation, no lock, no
/// shared state.
#[derive(Debug)]
struct Xorshift(Cell<u64>);

impl Xorshift {
    fn new(seed: u64) -> Self {
        Xorshift(Cell::new(seed | 1))
    }

    /// True with probability about `1/n`.
    #[inline]
    fn one_in(&self, n: u64) -> bool {
        let mut x = self.0.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0.set(x);
        x.is_multiple_of(n)
    }
}

impl IoCompletion for ChannelInner {
    /// The base finished a child: complete the parent now, or hold it
    /// until its due tick.
    fn io_done(&self, mut child: BdevIo) {
        let Some(mut parent) = child.take_parent() else {
            return;
        };
        let ctx = *parent.driver_ctx();
        if ctx[0] == 0 {
            return parent.complete_from(&child);
        }
        let seq = self.seq.get();
        self.seq.set(seq.wrapping_add(1));
        let due = ctx[1];
        self.held.borrow_mut().push(Held {
            due,
            seq,
            io: parent,
            status: child.status(),
            cdw0: child.nvme_cdw0(),
        });
        if let Some(p) = self.poller.borrow().as_ref() {
            if p.is_paused() {
                p.resume();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p99_is_picked_about_once_in_a_hundred() {
        for seed in [1, 42, 0xdead_beef, u64::MAX] {
            let rng = Xorshift::new(seed);
            let hits = (0..100_000).filter(|_| rng.one_in(P99_ONE_IN)).count();
            // Mean 1000, standard deviation about 31.
            assert!((800..1200).contains(&hits), "seed {seed}: {hits}");
        }
    }
}
