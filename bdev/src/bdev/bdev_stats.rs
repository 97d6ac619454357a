//! What a [`Bdev`] gathers from its channels with channel walks:
//! statistics (`bdev_get_iostat`), latency histograms, queue-depth
//! sampling, and its QoS limits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::bdev::Bdev;
use super::histogram::{HistConfig, Histogram, HistogramOptions};
use super::qos;
use super::stats::{IoStat, QdSampling, QueueDepthStats, ResetMode};
use crate::error::Error as BdevError;
use crate::thread::{PollerStatus, Thread};

impl Bdev {
    /// Total statistics: folded stats of gone channels plus every live
    /// channel's, gathered with a channel walk; `done` gets them on the
    /// calling thread.
    pub fn get_iostat(&self, done: impl FnOnce(IoStat) + Send + 'static) {
        let acc = Arc::new(Mutex::new(*self.0.shared.folded_stat.lock()));
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
    pub fn reset_iostat(&self, mode: ResetMode, done: impl FnOnce() + Send + 'static) {
        self.0.shared.folded_stat.lock().reset(mode);
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
            let mut st = self.0.shared.hist.lock();
            if st.busy {
                drop(st);
                return done(Err(BdevError::Again));
            }
            st.busy = true;
            st.config = cfg;
            st.folded = None;
        }
        tracing::info!(bdev = %self.name(), enabled = cfg.is_some(), ?opts, "bdev histogram");
        let me = self.clone();
        self.0.device.for_each_channel(
            move |ch| ch.set_histogram(cfg.as_ref()),
            move || {
                me.0.shared.hist.lock().busy = false;
                done(Ok(()));
            },
        );
    }

    /// Whether a latency histogram is kept.
    #[must_use]
    pub fn histogram_enabled(&self) -> bool {
        self.0.shared.hist.lock().config.is_some()
    }

    /// The options of the latency histogram kept, if one is.
    #[must_use]
    pub fn histogram_options(&self) -> Option<HistogramOptions> {
        self.0.shared.hist.lock().config.map(|c| c.opts)
    }

    /// The latency histogram (ticks, [`crate::clock::tick_rate`]) summed
    /// over every channel, live or gone, since it was enabled; `done` gets
    /// it on the calling thread. `HistogramDisabled` when none is kept.
    pub fn get_histogram(&self, done: impl FnOnce(Result<Histogram, BdevError>) + Send + 'static) {
        let acc = {
            let st = self.0.shared.hist.lock();
            let Some(cfg) = st.config.as_ref() else {
                drop(st);
                return done(Err(BdevError::HistogramDisabled(self.name().to_string())));
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
        tracing::info!(bdev = %self.name(), period_us, "queue depth sampling");
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
        self.0.shared.qos.limits()
    }

    /// The clock QoS counts its 1 ms timeslices on, from the next
    /// [`Bdev::set_qos_limits`] on: the tick counter by default. A test or
    /// a simulation gives a [`crate::clock::ManualClock`]'s, so that what
    /// the limits let through is exactly what the clock's advances allow,
    /// however loaded the machine is.
    pub fn set_qos_clock(&self, clock: crate::clock::Clock) {
        self.0.shared.qos.inner.lock().clock = clock;
    }

    /// Sets QoS limits; `None` keeps a limit, `Some(0)` disables it. `done`
    /// runs on the calling thread once every channel applies them.
    pub fn set_qos_limits(
        &self,
        limits: [Option<u64>; 4],
        done: impl FnOnce(Result<(), BdevError>) + Send + 'static,
    ) {
        qos::set_limits(&self.0.shared, &self.0.device, limits, Box::new(done));
    }
}
