//! One job: a queue depth of I/Os kept in flight on one bdev from one
//! lightweight thread. The completion path resubmits at once; nothing on
//! it allocates. A task gets its data buffer when it first gets a
//! `BdevIo`, so a queue deeper than the bdev_io pool costs no buffers for
//! the tasks that wait. The verify cycle is in [`verify`].

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use bdevkit::bdev::{
    BdevChannel, BdevDesc, BdevEvent, BdevIo, BdevManager, IoCompletion, IoStatus, IoType,
};
use bdevkit::clock;
use bdevkit::dma::DmaBuf;

use crate::hist::Histogram;
use crate::offsets::next_rand;
use crate::offsets::{BusySlots, SlotMap, Zipf};
use crate::pattern::stamp_unique;
use crate::repeats::{Repeats, Verdict};
use crate::workload::Workload;

mod registry;
mod slots;
mod verify;
mod zoned;

pub use registry::{register, unregister, with_job};
use slots::{below, slots_of};

/// What one job does.
#[derive(Debug, Clone)]
pub struct JobConfig {
    /// Job id (unique in the run).
    pub id: u64,
    /// Target bdev.
    pub bdev: String,
    /// Core the job runs on.
    pub core: u32,
    /// Workload.
    pub workload: Workload,
    /// Read percentage for mixed workloads.
    pub rw_percentage: u8,
    /// Queue depth.
    pub queue_depth: u32,
    /// I/O size in bytes.
    pub io_size: u64,
    /// This job's slice of the bdev: `(index, count)` (`-C`).
    pub slice: (u64, u64),
    /// A job file's `(offset, length)` in blocks; length 0 = to the end.
    /// Replaces `slice` when set.
    pub range_blocks: Option<(u64, u64)>,
    /// Zipf exponent of random offsets (`-F`); `None` = uniform.
    pub zipf_theta: Option<f64>,
    /// Random offsets do not repeat until every slot was used (`-D`).
    pub random_map: bool,
    /// Every write carries data no other write carries (`-U`).
    pub unique_writes: bool,
    /// Seed of offsets and patterns.
    pub seed: u64,
    /// I/Os slower than this count as timed out (`u64::MAX` = off).
    pub timeout_ticks: u64,
    /// Keep going after failures (`-f`).
    pub continue_on_failure: bool,
    /// Zoned bdevs: write with zone appends (`--zone-append`).
    pub zone_append: bool,
}

/// Counters a job keeps.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Successful I/Os.
    pub ios: u64,
    /// Failed I/Os (and verify mismatches).
    pub failed: u64,
    /// I/Os slower than the timeout.
    pub timeouts: u64,
    /// Sum of latencies (all completions).
    pub total_ticks: u64,
    /// Smallest latency.
    pub min_ticks: u64,
    /// Largest latency.
    pub max_ticks: u64,
    /// Completions counted in `total_ticks`.
    pub completions: u64,
    /// Latency distribution.
    pub hist: Histogram,
}

/// A finished job, sent to the main thread.
#[derive(Debug, Clone)]
pub struct JobSummary {
    /// The config it ran.
    pub cfg: JobConfig,
    /// Seconds it ran.
    pub runtime_sec: f64,
    /// Counters.
    pub stats: Stats,
    /// Verify LBA range in I/O-size units.
    pub verify_range: Option<(u64, u64)>,
    /// Stopped early because of a failure.
    pub ended_with_error: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Write,
    Read,
}

struct Task {
    /// `None` until the task first gets a `BdevIo` (and for workloads
    /// without data), and while its I/O is in flight.
    buf: Option<DmaBuf>,
    /// Verify: the slot the task owns (from its write until the read-back).
    slot: u64,
    gen: u64,
    phase: Phase,
}

type DoneFn = Box<dyn FnOnce(JobSummary)>;

/// A running job (lives on its thread).
pub struct Job {
    cfg: JobConfig,
    ch: BdevChannel,
    desc: RefCell<Option<BdevDesc>>,
    me: RefCell<Option<Rc<dyn IoCompletion>>>,
    weak: RefCell<std::rc::Weak<Job>>,
    io_blocks: u64,
    block_size: u64,
    first_slot: u64,
    num_slots: u64,
    check_data: bool,
    /// Bytes of a task's buffer; 0 for workloads without data.
    buf_len: usize,
    /// Hot-path copies of `cfg` facts.
    random: bool,
    verify: bool,
    /// No verify and no feature below: completions take the fast path.
    plain: bool,
    /// `-F`: offsets from this sampler instead of uniform.
    zipf: Option<Zipf>,
    /// `-D`: used slots.
    map: Option<RefCell<SlotMap>>,
    /// Verify: the slots tasks own.
    busy: Option<RefCell<BusySlots>>,
    /// A writing job on a zoned bdev.
    zoned: Option<zoned::Zoned>,
    /// `-U`: stamp each write.
    unique: bool,
    /// Writes issued (`-U` stamps and verify generations).
    writes: Cell<u64>,
    rng: Cell<u64>,
    seq: Cell<u64>,
    running: Cell<bool>,
    outstanding: Cell<u32>,
    failed: Cell<bool>,
    stats: RefCell<Stats>,
    tasks: RefCell<Vec<Task>>,
    start_tick: Cell<u64>,
    stop_tick: Cell<u64>,
    on_done: RefCell<Option<DoneFn>>,
    resets: RefCell<Option<bdevkit::thread::Poller>>,
    /// The bdev was hot-removed.
    gone: Cell<bool>,
    /// Submit errors, each logged once.
    submit_errors: RefCell<Repeats>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Job {
    /// Opens the bdev and prepares the tasks; call on the job's thread.
    /// On hot remove the job stops, reports what failed, and releases the
    /// bdev as soon as its I/O has drained.
    pub fn new(mut cfg: JobConfig, mgr: &BdevManager) -> anyhow::Result<Rc<Job>> {
        let id = cfg.id;
        let desc = mgr
            .open(&cfg.bdev, true, move |e| {
                if e == BdevEvent::Remove {
                    // Delivered on the job's thread (where it opened).
                    with_job(id, |j| j.removed());
                }
            })
            .map_err(|e| anyhow::anyhow!("open bdev {}: {e}", cfg.bdev))?;
        let bdev = desc.bdev().clone();
        let block_size = u64::from(bdev.block_size());
        if !cfg.io_size.is_multiple_of(block_size) {
            anyhow::bail!(
                "I/O size {} is not a multiple of the block size {block_size} of bdev {}",
                cfg.io_size,
                cfg.bdev
            );
        }
        let io_blocks = cfg.io_size / block_size;
        let (first_slot, per) = slots_of(&cfg, bdev.num_blocks(), io_blocks)?;
        let ch = desc
            .get_io_channel()
            .map_err(|e| anyhow::anyhow!("I/O channel for {}: {e}", cfg.bdev))?;
        let needs = |t: IoType| {
            if !bdev.supports(t) {
                Err(anyhow::anyhow!("bdev {} does not support {t}", cfg.bdev))
            } else {
                Ok(())
            }
        };
        let geometry = bdev.props().zoned;
        cfg.workload
            .check_zoned(&cfg.bdev, geometry.is_some(), cfg.zone_append)?;
        match cfg.workload {
            Workload::Unmap => needs(IoType::Unmap)?,
            Workload::Flush => needs(IoType::Flush)?,
            Workload::WriteZeroes => needs(IoType::WriteZeroes)?,
            Workload::Reset => needs(IoType::Reset)?,
            _ => {}
        }
        let data = !matches!(
            cfg.workload,
            Workload::Unmap | Workload::Flush | Workload::WriteZeroes
        );
        let buf_len = if data {
            usize::try_from(cfg.io_size)?
        } else {
            0
        };
        let verify = cfg.workload.verifies();
        let zoned = match &geometry {
            Some(g) if cfg.workload.writes_data() => {
                let blocks = (first_slot * io_blocks, per * io_blocks);
                Some(zoned::Zoned::new(&mut cfg, g, blocks, io_blocks)?)
            }
            _ => None,
        };
        let busy = if verify && zoned.is_none() {
            if u64::from(cfg.queue_depth) > per {
                // Each I/O owns its slot until it is read back.
                eprintln!(
                    "warning: verify on {}: queue depth (-q) {} is above the {per} I/Os of {} bytes that fit in the job's range; using {per}",
                    cfg.bdev, cfg.queue_depth, cfg.io_size,
                );
                cfg.queue_depth = u32::try_from(per).expect("invariant: per < queue_depth, a u32");
            }
            Some(RefCell::new(BusySlots::new(per)?))
        } else {
            None
        };
        let tasks = (0..cfg.queue_depth)
            .map(|_| Task {
                buf: None,
                slot: 0,
                gen: 0,
                phase: Phase::Write,
            })
            .collect();
        // A bdev that stores nothing cannot give data back: verify checks
        // completions only there.
        let check_data = cfg.workload.verifies() && bdev.product_name() != "Null disk";
        let random = cfg.workload.is_random();
        let zipf = cfg
            .zipf_theta
            .filter(|_| random)
            .map(|theta| Zipf::new(per, theta));
        // SPDK ignores the random map when offsets follow a zipf law.
        let map = if cfg.random_map && random && zipf.is_none() {
            let slots = usize::try_from(per)
                .map_err(|_| anyhow::anyhow!("bdev {} has too many slots for -D", cfg.bdev))?;
            Some(RefCell::new(SlotMap::new(slots)))
        } else {
            None
        };
        let unique = cfg.unique_writes && cfg.workload.writes_data();
        let job = Rc::new(Job {
            rng: Cell::new(cfg.seed | 1),
            first_slot,
            num_slots: per,
            io_blocks,
            block_size,
            check_data,
            buf_len,
            random,
            verify,
            plain: !verify && zipf.is_none() && map.is_none() && !unique && zoned.is_none(),
            zipf,
            map,
            busy,
            zoned,
            unique,
            writes: Cell::new(0),
            ch,
            desc: RefCell::new(Some(desc)),
            me: RefCell::new(None),
            weak: RefCell::new(std::rc::Weak::new()),
            seq: Cell::new(0),
            running: Cell::new(false),
            outstanding: Cell::new(0),
            failed: Cell::new(false),
            stats: RefCell::new(Stats {
                min_ticks: u64::MAX,
                ..Stats::default()
            }),
            tasks: RefCell::new(tasks),
            start_tick: Cell::new(0),
            stop_tick: Cell::new(0),
            on_done: RefCell::new(None),
            resets: RefCell::new(None),
            gone: Cell::new(false),
            submit_errors: RefCell::new(Repeats::default()),
            cfg,
        });
        *job.me.borrow_mut() = Some(Rc::clone(&job) as Rc<dyn IoCompletion>);
        *job.weak.borrow_mut() = Rc::downgrade(&job);
        Ok(job)
    }

    /// The verify range in I/O-size slots.
    pub fn verify_range(&self) -> Option<(u64, u64)> {
        self.cfg
            .workload
            .verifies()
            .then_some((self.first_slot, self.num_slots))
    }

    /// Starts the I/O; `done` gets the summary once stopped and drained.
    pub fn start(self: &Rc<Self>, done: DoneFn) {
        *self.on_done.borrow_mut() = Some(done);
        self.running.set(true);
        self.start_tick.set(clock::ticks());
        if self.cfg.workload == Workload::Reset {
            let me = Rc::downgrade(self);
            let t = bdevkit::thread::Thread::current().expect("invariant: job runs on a thread");
            let p = t.register_poller("bdevperf_reset", 10_000_000, move |_| {
                if let Some(job) = me.upgrade() {
                    job.submit_reset();
                }
                bdevkit::thread::PollerStatus::Busy
            });
            *self.resets.borrow_mut() = Some(p);
        }
        // Every task counts until it retires, so that one failing at once
        // does not leave the job with nothing outstanding while the
        // others have yet to start.
        let depth = self.cfg.queue_depth;
        self.outstanding.set(self.outstanding.get() + depth);
        for tag in 0..depth {
            if !self.running.get() {
                // A failed submit stopped the job: the tasks not started
                // retire unstarted.
                self.outstanding.set(self.outstanding.get() - (depth - tag));
                if self.outstanding.get() == 0 {
                    self.finish();
                }
                return;
            }
            let buf = self.tasks.borrow_mut()[tag as usize].buf.take();
            self.issue(tag as usize, buf);
        }
    }

    /// Stops submitting; the summary follows once in-flight I/O drains.
    pub fn stop(&self) {
        if self.running.replace(false) {
            self.stop_tick.set(clock::ticks());
        }
        if let Some(p) = self.resets.borrow_mut().take() {
            p.unregister();
        }
        if self.outstanding.get() == 0 {
            self.finish();
        }
    }

    /// A snapshot of the counters.
    pub fn snapshot(&self) -> JobSummary {
        self.summary(clock::ticks())
    }

    fn summary(&self, now: u64) -> JobSummary {
        let end = if self.running.get() {
            now
        } else {
            self.stop_tick.get()
        };
        let runtime = clock::ticks_to_ns(end.saturating_sub(self.start_tick.get()));
        #[expect(clippy::cast_precision_loss, reason = "seconds for display")]
        let runtime_sec = runtime as f64 / 1e9;
        JobSummary {
            cfg: self.cfg.clone(),
            runtime_sec,
            stats: self.stats.borrow().clone(),
            verify_range: self.verify_range(),
            ended_with_error: self.failed.get() && !self.cfg.continue_on_failure,
        }
    }

    fn finish(&self) {
        let Some(done) = self.on_done.borrow_mut().take() else {
            return;
        };
        let repeats = self.submit_errors.borrow_mut().take_repeats();
        if repeats > 0 {
            tracing::error!(bdev = %self.cfg.bdev, repeats, "the last submit error repeated");
        }
        let summary = self.summary(clock::ticks());
        // Break the handler cycle; the job is dropped by its owner.
        self.me.borrow_mut().take();
        done(summary);
        if self.gone.get() {
            self.release();
        }
    }

    /// The bdev is being removed: stop, and let it go once drained.
    fn removed(&self) {
        if self.gone.replace(true) {
            return;
        }
        eprintln!(
            "bdevperf: {}: bdev removed while the test ran",
            self.cfg.bdev
        );
        if self.running.get() {
            self.failed.set(true);
            self.stop();
        } else if self.on_done.borrow().is_none() {
            self.release();
        }
    }

    /// Closes the descriptor and drops the job (and its channel) from the
    /// thread's registry, outside the current call stack.
    fn release(&self) {
        self.desc.borrow_mut().take();
        let id = self.cfg.id;
        if let Some(t) = bdevkit::thread::Thread::current() {
            t.defer(move || {
                unregister(id);
            });
        }
    }

    /// Releases the channel and descriptor (call on the job's thread).
    pub fn close(&self) {
        self.desc.borrow_mut().take();
        self.me.borrow_mut().take();
    }

    fn fail_job(&self, what: &str) {
        if !self.failed.replace(true) {
            tracing::error!(bdev = %self.cfg.bdev, "{what}");
        }
        if !self.cfg.continue_on_failure && self.running.get() {
            self.stop();
        }
    }

    #[inline]
    fn next_slot(&self) -> u64 {
        let rel = if self.random {
            below(next_rand(&self.rng), self.num_slots)
        } else {
            let s = self.seq.get();
            self.seq
                .set(if s + 1 == self.num_slots { 0 } else { s + 1 });
            s
        };
        self.first_slot + rel
    }

    /// The next slot when `-F` or `-D` is on (never on the default path).
    fn next_slot_featured(&self) -> u64 {
        if let Some(z) = &self.zipf {
            // Rank 1, the most frequent, is the job's first slot.
            return self.first_slot + z.sample(&self.rng) - 1;
        }
        let Some(map) = &self.map else {
            return self.next_slot();
        };
        let want = below(next_rand(&self.rng), self.num_slots);
        let slot = map
            .borrow_mut()
            .take(usize::try_from(want).unwrap_or(usize::MAX));
        self.first_slot + slot as u64
    }

    /// Submits the next I/O of task `tag` (its buffer in hand), reusing
    /// the task's just-completed I/O when there is one.
    #[inline]
    fn issue(&self, tag: usize, buf: Option<DmaBuf>) {
        self.issue_with(tag, buf, None);
    }

    #[inline]
    fn issue_with(&self, tag: usize, buf: Option<DmaBuf>, reuse: Option<BdevIo>) {
        let Some(mut io) = reuse.or_else(|| self.ch.alloc_io()) else {
            self.wait_for_io(tag, buf);
            return;
        };
        let buf = match buf {
            None if self.buf_len > 0 => match self.first_buf() {
                Some(b) => Some(b),
                None => return,
            },
            buf => buf,
        };
        if self.plain {
            self.fill(&mut io, buf);
        } else {
            self.fill_featured(&mut io, tag, buf);
        }
        self.send(io, tag);
    }

    /// Sets the next request of a plain workload on `io`.
    #[inline]
    fn fill(&self, io: &mut BdevIo, buf: Option<DmaBuf>) {
        let off = self.next_slot() * self.io_blocks;
        self.fill_at::<false>(io, off, buf);
    }

    /// Sets the next request of a job that verifies or uses `-F`, `-D` or
    /// `-U`: everything the fast path leaves out.
    #[inline(never)]
    fn fill_featured(&self, io: &mut BdevIo, tag: usize, buf: Option<DmaBuf>) {
        if self.zoned.is_some() {
            self.fill_zoned(io, tag, buf);
            return;
        }
        if self.verify {
            self.fill_verify(io, tag, buf);
            return;
        }
        let off = self.next_slot_featured() * self.io_blocks;
        if self.unique {
            self.fill_at::<true>(io, off, buf);
        } else {
            self.fill_at::<false>(io, off, buf);
        }
    }

    /// Stamps a `-U` write.
    #[inline(never)]
    fn stamp(&self, buf: &mut DmaBuf, off: u64) {
        let write = self.writes.get() + 1;
        self.writes.set(write);
        let bs = usize::try_from(self.block_size).unwrap_or(usize::MAX);
        stamp_unique(buf, bs, off, write, self.cfg.id);
    }

    /// Sets a plain request at `off` on `io`; `UNIQUE` stamps writes.
    #[inline(always)]
    fn fill_at<const UNIQUE: bool>(&self, io: &mut BdevIo, off: u64, buf: Option<DmaBuf>) {
        let n = self.io_blocks;
        match (self.cfg.workload, buf) {
            (Workload::Read | Workload::RandRead, Some(buf)) => {
                io.read(off, n, buf);
            }
            (Workload::Write | Workload::RandWrite, Some(mut buf)) => {
                if UNIQUE {
                    self.stamp(&mut buf, off);
                }
                io.write(off, n, buf);
            }
            (Workload::Rw | Workload::RandRw, Some(mut buf)) => {
                if below(next_rand(&self.rng), 100) < u64::from(self.cfg.rw_percentage) {
                    io.read(off, n, buf);
                } else {
                    if UNIQUE {
                        self.stamp(&mut buf, off);
                    }
                    io.write(off, n, buf);
                }
            }
            (Workload::Unmap, _) => {
                io.unmap(off, n);
            }
            (Workload::Flush, _) => {
                io.flush(off, n);
            }
            (Workload::WriteZeroes, _) => {
                io.write_zeroes(off, n);
            }
            (_, buf) => unreachable_workload(buf),
        }
    }

    /// Tags and submits `io` with the job as its completion.
    #[inline]
    fn send(&self, mut io: BdevIo, tag: usize) {
        io.set_tag(tag as u64);
        if let Some(h) = self.me.borrow().as_ref() {
            io.on_done(Rc::clone(h));
        }
        if let Err(e) = self.ch.submit(io) {
            self.submit_failed(tag, *e);
        }
    }

    /// A task's first buffer; `None` (the job failed and stopped) when it
    /// cannot be allocated.
    #[cold]
    fn first_buf(&self) -> Option<DmaBuf> {
        match DmaBuf::new(self.buf_len) {
            Ok(b) => Some(b),
            Err(e) => {
                self.stats.borrow_mut().failed += 1;
                self.fail_job(&format!("allocate an I/O buffer: {e}"));
                self.retire();
                None
            }
        }
    }

    #[cold]
    fn wait_for_io(&self, tag: usize, buf: Option<DmaBuf>) {
        self.tasks.borrow_mut()[tag].buf = buf;
        let me = self.weak.borrow().clone();
        self.ch.queue_io_wait(move || {
            if let Some(job) = me.upgrade() {
                let buf = job.tasks.borrow_mut()[tag].buf.take();
                job.issue(tag, buf);
            }
        });
    }

    #[cold]
    fn submit_failed(&self, tag: usize, mut e: bdevkit::bdev::SubmitError) {
        let slot = {
            let mut tasks = self.tasks.borrow_mut();
            let t = &mut tasks[tag];
            t.buf = e.io.take_buf();
            t.phase = Phase::Write;
            t.slot
        };
        // The task stops: a verify task gives its slot back, a zoned one
        // its zone.
        self.release_verify_slot(slot);
        self.release_zone(tag);
        self.stats.borrow_mut().failed += 1;
        self.outstanding.set(self.outstanding.get() - 1);
        self.failed.set(true);
        let error = e.error.to_string();
        let verdict = self.submit_errors.borrow_mut().check(&error);
        if let Verdict::Log { previous_repeats } = verdict {
            if previous_repeats > 0 {
                tracing::error!(bdev = %self.cfg.bdev, repeats = previous_repeats, "the last submit error repeated");
            }
            tracing::error!(bdev = %self.cfg.bdev, %error, "submit failed");
        }
        // A task that cannot submit stops; the others carry on with -f.
        if !self.cfg.continue_on_failure || self.outstanding.get() == 0 {
            self.stop();
        }
    }

    fn submit_reset(self: &Rc<Self>) {
        if !self.running.get() {
            return;
        }
        let Some(mut io) = self.ch.alloc_io() else {
            return;
        };
        io.reset();
        let me = Rc::clone(self);
        self.outstanding.set(self.outstanding.get() + 1);
        io.on_done_closure(move |io| {
            if !io.status().is_success() {
                me.stats.borrow_mut().failed += 1;
                me.fail_job("reset failed");
            }
            drop(io);
            me.retire();
        });
        if self.ch.submit(io).is_err() {
            self.outstanding.set(self.outstanding.get() - 1);
        }
    }

    fn retire(&self) {
        let left = self.outstanding.get() - 1;
        self.outstanding.set(left);
        if left == 0 && !self.running.get() {
            self.finish();
        }
    }

    #[inline]
    fn record(&self, ok: bool, latency: u64) {
        let mut s = self.stats.borrow_mut();
        s.ios += u64::from(ok);
        s.failed += u64::from(!ok);
        s.completions += 1;
        s.total_ticks += latency;
        s.min_ticks = s.min_ticks.min(latency);
        s.max_ticks = s.max_ticks.max(latency);
        // `timeout_ticks` is u64::MAX when -k is off: one comparison.
        s.timeouts += u64::from(latency > self.cfg.timeout_ticks);
        s.hist.record(latency);
    }
}

impl Job {
    /// Everything but a successful plain completion while running.
    #[cold]
    #[inline(never)]
    fn io_done_slow(
        &self,
        io: BdevIo,
        tag: usize,
        status: IoStatus,
        latency: u64,
        buf: Option<DmaBuf>,
    ) {
        let ok = status == IoStatus::Success;
        let buf = if self.zoned.is_some() {
            let (data, buf) = self.zoned_done(&io, tag, ok, buf);
            if data {
                self.record(ok, latency);
            }
            buf
        } else {
            self.record(ok, latency);
            if self.verify {
                self.verify_done(tag, ok, buf)
            } else {
                buf
            }
        };
        if !ok {
            self.fail_job(&format!("I/O failed: {status:?}"));
        }
        if self.running.get() {
            self.issue_with(tag, buf, Some(io));
        } else {
            drop(io);
            if buf.is_some() {
                self.tasks.borrow_mut()[tag].buf = buf;
            }
            self.retire();
        }
    }
}

/// A verify workload's request reached the plain path (a bug).
#[cold]
fn unreachable_workload(buf: Option<DmaBuf>) {
    drop(buf);
    debug_assert!(false, "verify workloads are filled by fill_verify");
}

impl IoCompletion for Job {
    #[inline]
    fn io_done(&self, mut io: BdevIo) {
        let status = io.status();
        let latency = io.complete_tick().wrapping_sub(io.submit_tick());
        let tag = usize::try_from(io.tag()).unwrap_or(0);
        let buf = io.take_buf();
        let ok = status == IoStatus::Success;
        if ok && self.plain && self.running.get() {
            // The fast path: reuse the completed I/O for the next request.
            self.record(ok, latency);
            self.fill(&mut io, buf);
            self.send(io, tag);
        } else {
            self.io_done_slow(io, tag, status, latency, buf);
        }
    }
}

#[cfg(test)]
mod tests;
