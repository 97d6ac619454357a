//! The QoS stage: a channel of a bdev with limits charges each read,
//! write, write-zeroes, unmap and compare against the bdev's shared quota
//! (`quota.rs`), and queues what is over quota, draining the queue from a
//! short timed poller while quota remains. Setting limits walks every
//! channel (`set_limits`).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::io::{BdevDevice, BdevIo, ChannelCore, QosChannel};
use super::quota::{QosShared, TIMESLICE_US};
use super::route;
use super::shared::BdevShared;
use super::types::IoType;
use crate::clock::{self, Clock};
use crate::error::Error;
use crate::thread::{IoChannel, Poller, PollerStatus, Thread};

/// How often a channel with queued I/O retries.
const CHANNEL_POLL_US: u64 = 100;

/// Whether `io_type` on this channel goes through QoS.
#[inline]
pub(crate) fn is_limited(core: &ChannelCore, io_type: IoType) -> bool {
    core.qos_on()
        && matches!(
            io_type,
            IoType::Read | IoType::Write | IoType::WriteZeroes | IoType::Unmap | IoType::Compare
        )
}

fn bytes_of(core: &ChannelCore, io: &BdevIo) -> u64 {
    io.inner().num_blocks * core.block_size
}

/// Charges `io` and routes it, or queues it until quota is back.
pub(crate) fn submit(core: &ChannelCore, io: BdevIo) {
    let mut q = core.qos.borrow_mut();
    let Some(qc) = q.as_mut() else {
        drop(q);
        route::route(core, io);
        return;
    };
    if qc.queue.is_empty()
        && qc
            .shared
            .try_charge(io.inner().io_type, bytes_of(core, &io))
    {
        drop(q);
        route::route(core, io);
        return;
    }
    let ch = io.inner().ch.clone();
    qc.queue.push_back(io);
    if qc.poller.is_none() {
        if let (Some(t), Some(ch)) = (Thread::current(), ch) {
            qc.poller = Some(
                t.register_poller("bdev_qos_channel", CHANNEL_POLL_US, move |p| {
                    drain_queue(&ch, p)
                }),
            );
        }
    }
}

fn drain_queue(ch: &IoChannel<ChannelCore>, p: &Poller) -> PollerStatus {
    let core: &ChannelCore = ch;
    let mut busy = false;
    loop {
        let next = {
            let mut q = core.qos.borrow_mut();
            let Some(qc) = q.as_mut() else {
                p.unregister();
                return PollerStatus::Idle;
            };
            match qc.queue.front() {
                Some(io) if qc.shared.try_charge(io.inner().io_type, bytes_of(core, io)) => {
                    qc.queue.pop_front()
                }
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
                route::route(core, io);
            }
            None => break,
        }
    }
    PollerStatus::from(busy)
}

/// Applies new limits (`None` keeps a limit, `Some(0)` disables it) to
/// the bdev and every channel of `device`; `done` runs on the calling
/// thread once every channel has them.
pub(crate) fn set_limits(
    bdev: &Arc<BdevShared>,
    device: &BdevDevice,
    limits: [Option<u64>; 4],
    done: Box<dyn FnOnce(Result<(), Error>) + Send>,
) {
    let Some(thread) = Thread::current() else {
        done(Err(Error::NotOnThread));
        return;
    };
    let (new, shared, time) = {
        let mut cfg = bdev.qos.inner.lock();
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
                bdev = %bdev.name,
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
        (new, shared, cfg.clock.clone())
    };
    tracing::info!(bdev = %bdev.name, limits = ?new, "QoS limits set");
    if let Some(s) = &shared {
        start_refill(&thread, Arc::clone(s), time);
    }
    let b2 = Arc::clone(bdev);
    device.for_each_channel(
        move |ch| apply(ch, shared.as_ref()),
        move || {
            b2.qos.inner.lock().changing = false;
            done(Ok(()));
        },
    );
}

/// Refills `s` every timeslice from a poller on `thread`, until the limits
/// are replaced: as many whole timeslices as `time` says have passed.
fn start_refill(thread: &Thread, s: Arc<QosShared>, time: Clock) {
    let mut last = time.now();
    let slice = clock::us_to_ticks(TIMESLICE_US).max(1);
    thread.register_poller("bdev_qos_timeslice", TIMESLICE_US, move |p| {
        if !s.enabled.load(Ordering::Acquire) {
            p.unregister();
            return PollerStatus::Idle;
        }
        let now = time.now();
        let slices = now.saturating_sub(last) / slice;
        if slices == 0 {
            return PollerStatus::Idle;
        }
        last += slices * slice;
        s.refill(slices);
        PollerStatus::Busy
    });
}

/// One channel takes the new quota (or, with none, lets its queue go).
fn apply(ch: &ChannelCore, shared: Option<&Arc<QosShared>>) {
    let old = ch.qos.borrow_mut().take();
    match (shared, old) {
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
            let queue: VecDeque<BdevIo> = queue;
            for io in queue {
                route::route(ch, io);
            }
        }
        (None, None) => {}
    }
}
