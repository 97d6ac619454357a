//! The delay module, its bdev, its per-thread channel with the queue of
//! held I/Os, and its I/O path.

use std::cell::{Cell, RefCell};
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::rc::{Rc, Weak as RcWeak};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bdevkit::bdev::module::vbdev::{self, DeviceOps, StackedBdev, StackedWithDevice, VbdevModule};
use bdevkit::bdev::module::{
    Bdev, BdevChannel, BdevIo, BdevManager, BoxError, Error, IoCompletion, IoStatus, IoType,
    ModuleIo, Poller, PollerStatus, Result, Thread,
};
use bdevkit::clock;
use serde_json::{json, Map, Value};

use crate::rpc::{DelayCreateParams, LatencyType};
use crate::{MODULE, NAMESPACE_UUID, PRODUCT_NAME};

/// Period of each channel's completion poller (while it holds I/O): the
/// granularity of the added latency.
const POLL_PERIOD_US: u64 = 10;
/// Held I/Os a channel has room for before its queue grows.
const QUEUE_CAPACITY: usize = 256;
/// One I/O in a hundred gets the p99 latency.
const P99_ONE_IN: u64 = 100;

// One delay bdev per configuration, in SPDK's shape (`name`,
// `base_bdev_name`, `uuid`), attached by `attach` below.
vbdev::stacked_config!(DelayCreateParams, MODULE, "bdev_delay_create", attach);

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
    let props = vbdev::props_mirroring(base, &cfg.name, PRODUCT_NAME, cfg.uuid, &NAMESPACE_UUID);
    let delay = Delay { latencies };
    let bdev = DelayBdev::register(mgr, base, MODULE, props, delay, DelayChannel::new)?;
    tracing::info!(bdev = %cfg.name, base = %base.name(), "delay bdev created");
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

/// One delay bdev: a stacked bdev with channels of its own (the reset
/// reaches the I/O each thread holds back), whose base's events, channels
/// and teardown are [`StackedWithDevice`]'s; the delay part is
/// [`Delay`].
pub type DelayBdev = StackedWithDevice<Delay>;

/// What a delay bdev adds to a stacked bdev: its latencies.
#[derive(Debug)]
pub struct Delay {
    latencies: Latencies,
}

impl Delay {
    /// A latency in µs.
    #[must_use]
    pub fn latency_us(&self, t: LatencyType) -> u64 {
        self.latencies.us(t)
    }
}

/// The I/O path: reads and writes are held for their latency (the p99 one
/// for one in a hundred), a reset aborts what every thread holds and then
/// resets the base (SPDK's order), an abort finds its target among the
/// held I/Os or goes down; the rest goes down unchanged.
impl DeviceOps for Delay {
    type State = DelayChannel;

    #[inline]
    fn dispatch(bdev: &DelayBdev, ch: &DelayChannel, io: BdevIo) {
        let ch = &ch.inner;
        let held = |read: bool| {
            let t = match (read, ch.p99()) {
                (true, false) => LatencyType::AvgRead,
                (true, true) => LatencyType::P99Read,
                (false, false) => LatencyType::AvgWrite,
                (false, true) => LatencyType::P99Write,
            };
            Some(bdev.latencies.ticks(t))
        };
        match io.io_type() {
            IoType::Read => ch.forward(io, held(true)),
            IoType::Write | IoType::ZoneAppend => ch.forward(io, held(false)),
            IoType::Reset => bdev.visit_then(
                io,
                |c| c.inner.abort_held(),
                |c, reset| c.inner.forward(reset, None),
            ),
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

    fn info_json(bdev: &DelayBdev) -> Value {
        let s = bdev.stacked();
        let mut m = Map::new();
        m.insert("name".into(), json!(s.name()));
        m.insert("base_bdev_name".into(), json!(s.base_bdev().name()));
        // SPDK writes the UUID whenever it is not null: always, since
        // every delay bdev has one (configured or derived from the base's).
        if let Some(b) = s.own_bdev(bdev) {
            m.insert("uuid".into(), json!(b.uuid().to_string()));
        }
        for (k, t) in [
            ("avg_read_latency", LatencyType::AvgRead),
            ("p99_read_latency", LatencyType::P99Read),
            ("avg_write_latency", LatencyType::AvgWrite),
            ("p99_write_latency", LatencyType::P99Write),
        ] {
            m.insert(k.into(), json!(bdev.latencies.us(t)));
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

/// The per-thread state of a delay bdev (in its io_device's channel).
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
        let base = bdev.stacked().base().channel()?;
        let thread = Thread::try_current()?;
        let inner = Rc::new(ChannelInner {
            base,
            held: RefCell::new(BinaryHeap::with_capacity(QUEUE_CAPACITY)),
            seq: Cell::new(0),
            rng: Xorshift::new(clock::ticks()),
            poller: RefCell::new(None),
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
