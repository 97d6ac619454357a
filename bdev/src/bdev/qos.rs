//! QoS rate limits (`bdev_set_qos_limit`), after SPDK 26.x: each channel
//! queues its own over-limit I/O; quotas are shared atomics per limit,
//! refilled every 1 ms timeslice by a poller on the thread that set the
//! limits (a negative balance from overdraw carries over; unlike SPDK, an
//! unused positive balance carries over up to 10 slices, so that a refill
//! poller delayed by the scheduler does not lose quota). Channels drain
//! their queues from a short timed poller while quota remains.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::channel::{self, ChannelCore};
use super::io::BdevIo;
use super::manager::Bdev;
use super::types::{IoStatus, IoType};
use crate::clock;
use crate::error::Error;
use crate::thread::{IoChannel, Poller, PollerStatus, Thread};

/// Timeslice length.
const TIMESLICE_US: u64 = 1_000;
/// Unused quota carries over up to this many timeslices (a token bucket
/// 10 ms deep): a refill poller delayed by scheduling loses nothing, so the
/// long-run rate stays on target, while bursts stay bounded.
const BURST_SLICES: i64 = 10;
/// How often a channel with queued I/O retries.
const CHANNEL_POLL_US: u64 = 100;
const MIB: u64 = 1024 * 1024;

/// Shared quota state of one bdev's active limits.
#[derive(Debug)]
pub(crate) struct QosShared {
    /// Limits per second: IOPS, then bytes/s for rw, r, w.
    per_sec: [u64; 4],
    per_slice: [i64; 4],
    remaining: [AtomicI64; 4],
    enabled: AtomicBool,
}

impl QosShared {
    fn new(limits: [u64; 4]) -> Arc<Self> {
        let per_sec = [limits[0], limits[1] * MIB, limits[2] * MIB, limits[3] * MIB];
        let mut per_slice = [0i64; 4];
        for k in 0..4 {
            if per_sec[k] != 0 {
                let min = if k == 0 { 1 } else { 512 };
                let v = (per_sec[k] * TIMESLICE_US / 1_000_000).max(min);
                per_slice[k] = i64::try_from(v).unwrap_or(i64::MAX);
            }
        }
        Arc::new(QosShared {
            per_sec,
            per_slice,
            remaining: std::array::from_fn(|k| AtomicI64::new(per_slice[k])),
            enabled: AtomicBool::new(true),
        })
    }

    fn amounts(io: &BdevIo, block_size: u64) -> [i64; 4] {
        let t = io.io_type();
        let bytes = i64::try_from(io.num_blocks() * block_size).unwrap_or(i64::MAX);
        let is_read = t == IoType::Read;
        let is_write = matches!(t, IoType::Write | IoType::WriteZeroes);
        [
            1,
            if is_read || is_write { bytes } else { 0 },
            if is_read { bytes } else { 0 },
            if is_write { bytes } else { 0 },
        ]
    }

    /// Charges `io` against every applicable quota if all have some left.
    fn try_charge(&self, io: &BdevIo, block_size: u64) -> bool {
        let amounts = Self::amounts(io, block_size);
        let applies = |k: usize| self.per_sec[k] != 0 && amounts[k] != 0;
        if (0..4).any(|k| applies(k) && self.remaining[k].load(Ordering::Acquire) <= 0) {
            return false;
        }
        for (k, amount) in amounts.iter().enumerate() {
            if applies(k) {
                self.remaining[k].fetch_sub(*amount, Ordering::AcqRel);
            }
        }
        true
    }

    fn refill(&self, slices: u64) {
        let slices = i64::try_from(slices).unwrap_or(i64::MAX);
        for k in 0..4 {
            if self.per_sec[k] == 0 {
                continue;
            }
            let add = self.per_slice[k].saturating_mul(slices);
            let cap = self.per_slice[k].saturating_mul(BURST_SLICES);
            let _ = self.remaining[k].fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                Some(r.saturating_add(add).min(cap))
            });
        }
    }
}

/// Per-bdev QoS configuration.
#[derive(Debug, Default)]
pub(crate) struct QosState {
    inner: Mutex<QosConfig>,
}

#[derive(Debug, Default)]
struct QosConfig {
    limits: [u64; 4],
    shared: Option<Arc<QosShared>>,
    changing: bool,
}

impl QosState {
    pub(crate) fn limits(&self) -> [u64; 4] {
        self.inner.lock().limits
    }

    pub(crate) fn shared(&self) -> Option<Arc<QosShared>> {
        self.inner.lock().shared.clone()
    }
}

/// A channel's QoS queue.
pub(crate) struct QosChannel {
    shared: Arc<QosShared>,
    queue: VecDeque<BdevIo>,
    poller: Option<Poller>,
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

/// Whether `io_type` on this channel goes through QoS.
#[inline]
pub(crate) fn is_limited(core: &ChannelCore, io_type: IoType) -> bool {
    core.qos_on()
        && matches!(
            io_type,
            IoType::Read | IoType::Write | IoType::WriteZeroes | IoType::Unmap | IoType::Compare
        )
}

pub(crate) fn submit(core: &ChannelCore, io: BdevIo) {
    let bs = u64::from(core.bdev.props.block_size);
    let mut q = core.qos.borrow_mut();
    let Some(qc) = q.as_mut() else {
        drop(q);
        channel::dispatch(core, io);
        return;
    };
    if qc.queue.is_empty() && qc.shared.try_charge(&io, bs) {
        drop(q);
        channel::dispatch(core, io);
        return;
    }
    qc.queue.push_back(io);
    if qc.poller.is_none() {
        let ch = io_channel_of(qc);
        if let (Some(t), Some(ch)) = (Thread::current(), ch) {
            qc.poller = Some(
                t.register_poller("bdev_qos_channel", CHANNEL_POLL_US, move |p| {
                    drain_queue(&ch, p)
                }),
            );
        }
    }
}

fn io_channel_of(qc: &QosChannel) -> Option<IoChannel<ChannelCore>> {
    qc.queue.front().and_then(|io| io.inner().ch.clone())
}

fn drain_queue(ch: &IoChannel<ChannelCore>, p: &Poller) -> PollerStatus {
    let core: &ChannelCore = ch;
    let bs = u64::from(core.bdev.props.block_size);
    let mut busy = false;
    loop {
        let next = {
            let mut q = core.qos.borrow_mut();
            let Some(qc) = q.as_mut() else {
                p.unregister();
                return PollerStatus::Idle;
            };
            match qc.queue.front() {
                Some(io) if qc.shared.try_charge(io, bs) => qc.queue.pop_front(),
                Some(_) => None,
                None => {
                    qc.poller = None;
                    p.unregister();
                    None
                }
            }
        };
        match next {
            Some(io) => {
                busy = true;
                channel::dispatch(core, io);
            }
            None => break,
        }
    }
    PollerStatus::from(busy)
}

/// Aborts every I/O queued by QoS on this channel (reset).
pub(crate) fn abort_queued(core: &ChannelCore) {
    loop {
        let next = core
            .qos
            .borrow_mut()
            .as_mut()
            .and_then(|q| q.queue.pop_front());
        let Some(mut io) = next else { break };
        io.inner_mut().status = IoStatus::Aborted;
        channel::finish_user(core, io);
    }
}

/// Applies new limits; see [`Bdev::set_qos_limits`].
pub(crate) fn set_limits(
    bdev: &Bdev,
    limits: [Option<u64>; 4],
    done: Box<dyn FnOnce(Result<(), Error>) + Send>,
) {
    let Some(thread) = Thread::current() else {
        done(Err(Error::NotOnThread));
        return;
    };
    let (new, shared) = {
        let mut cfg = bdev.0.qos.inner.lock();
        if cfg.changing {
            drop(cfg);
            done(Err(Error::Again));
            return;
        }
        let mut new = cfg.limits;
        for (k, l) in limits.iter().enumerate() {
            if let Some(v) = l {
                new[k] = *v;
            }
        }
        if !new[0].is_multiple_of(1000) {
            let rounded = new[0].div_ceil(1000) * 1000;
            tracing::warn!(
                bdev = %bdev.name(),
                requested = new[0],
                rounded,
                "IOPS limit rounded up to a multiple of 1000"
            );
            new[0] = rounded;
        }
        if let Some(old) = cfg.shared.take() {
            old.enabled.store(false, Ordering::Release);
        }
        cfg.limits = new;
        cfg.changing = true;
        let shared = new.iter().any(|v| *v != 0).then(|| QosShared::new(new));
        cfg.shared.clone_from(&shared);
        (new, shared)
    };
    tracing::info!(bdev = %bdev.name(), limits = ?new, "QoS limits set");
    if let Some(s) = &shared {
        let s = Arc::clone(s);
        let mut last = clock::ticks();
        let slice = clock::us_to_ticks(TIMESLICE_US).max(1);
        thread.register_poller("bdev_qos_timeslice", TIMESLICE_US, move |p| {
            if !s.enabled.load(Ordering::Acquire) {
                p.unregister();
                return PollerStatus::Idle;
            }
            let now = clock::ticks();
            let slices = now.saturating_sub(last) / slice;
            if slices == 0 {
                return PollerStatus::Idle;
            }
            last += slices * slice;
            s.refill(slices);
            PollerStatus::Busy
        });
    }
    let b2 = bdev.clone();
    bdev.0.device.for_each_channel(
        move |ch| {
            let old = ch.qos.borrow_mut().take();
            match (&shared, old) {
                (Some(s), Some(mut qc)) => {
                    qc.shared = Arc::clone(s);
                    *ch.qos.borrow_mut() = Some(qc);
                    ch.set_qos_on(true);
                }
                (Some(s), None) => {
                    *ch.qos.borrow_mut() = Some(QosChannel::new(Arc::clone(s)));
                    ch.set_qos_on(true);
                }
                (None, Some(qc)) => {
                    ch.set_qos_on(false);
                    let QosChannel { queue, poller, .. } = qc;
                    if let Some(p) = poller {
                        p.unregister();
                    }
                    for io in queue {
                        channel::dispatch(ch, io);
                    }
                }
                (None, None) => {}
            }
        },
        move || {
            b2.0.qos.inner.lock().changing = false;
            done(Ok(()));
        },
    );
}
