//! One fio job: its bdevkit lightweight thread, hosted by the job's own
//! thread, its bdevs' descriptors and channels, and its I/O path.
//!
//! Everything here runs on the fio job thread, which hosts the job's
//! [`EmbeddedThread`]: `queue` builds a [`BdevIo`] over fio's buffer and
//! submits it straight into the bdev's channel (as SPDK's engine does; the
//! engine has no `commit`: a parked batch would only cost a list and a
//! call into the engine per I/O, since a bdevkit submission rings no
//! doorbell of its own), `getevents` polls the embedded thread (the bdev modules' pollers run
//! there and complete I/O into the job's ready list) until fio has as many
//! completions as it asked for, and `event` hands them back one by one.
//! No other thread takes part, so the path has no lock, no atomic
//! read-modify-write and no wake-up; `RefCell`s suffice. Steady state
//! allocates nothing: a completed request stays with the job for the next
//! `queue` (the thread's `BdevIo` cache only fills the job up to its
//! depth), data stays in fio's memory (lent to each I/O as a borrowed
//! [`DmaBuf`]), and the lists have the job's queue depth as capacity from
//! the start.
//!
//! fio asks for one completion per `getevents` by default
//! (`iodepth_batch_complete_max` = `iodepth_batch_complete_min` = 1), and
//! one poll of a fast bdev completes everything submitted since the last
//! one. So `getevents` polls only when fewer completions are ready than
//! fio asked for, and then (with fio's default) hands fio every completion
//! that is ready, as SPDK's engine does: fio reaps the batch in one call,
//! and a poll (its pollers, its clock reads) is paid once per batch
//! instead of once per I/O. An explicit `iodepth_batch_complete_max`
//! above the min is honoured; then the completions one poll produced feed
//! the next calls. The thread polls whenever the ready list runs dry, so
//! messages and pollers wait at most one queue depth of completions.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bdevkit::bdev::{BdevChannel, BdevDesc, BdevEvent, BdevIo, IoCompletion, IoStatus, IoType};
use bdevkit::dma::DmaBuf;
use bdevkit::thread::EmbeddedThread;

use crate::args::{JobArgs, Op};
use crate::error::{Error, Result};
use crate::global::{self, Handles};

/// How long tear-down waits for I/O still in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A completion as fio gets it: the io_u (opaque to this side) and an
/// errno (0: success). `struct bk_event` of the shim, which reads the
/// events of a `getevents` in place.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Event {
    /// fio's `struct io_u *`, as an integer: never dereferenced here.
    pub io_u: u64,
    /// Positive errno, 0 on success.
    pub err: i32,
}

/// What `queue` did with an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// Submitted; `getevents` reports its completion (`FIO_Q_QUEUED`).
    Queued,
    /// Done at once with this errno, 0 for success (`FIO_Q_COMPLETED`).
    Completed(i32),
    /// No request free: fio reaps and retries (`FIO_Q_BUSY`).
    Busy,
}

/// An I/O as fio hands it over.
#[derive(Debug)]
pub struct Request {
    /// fio's io_u (returned with the completion).
    pub io_u: u64,
    /// The operation; `None` for one the engine does not do.
    pub op: Option<Op>,
    /// Index of the file in the job's list.
    pub file: usize,
    /// Byte offset; 0 with `len` 0 for a flush of the whole bdev.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// fio's data for a read or write, lent for the I/O.
    pub buf: Option<DmaBuf>,
}

/// The completions not yet taken back from fio, oldest first, contiguous
/// (the shim reads those of a `getevents` in place): `buf[start..]`. fio
/// takes them from the front, polls append them at the back; the buffer
/// starts over when fio has taken all (the common case: one poll's batch
/// is taken before the next poll), and moves what is left to the front
/// only when it is full.
struct Ready {
    buf: Vec<Event>,
    start: usize,
}

impl Ready {
    fn with_capacity(depth: usize) -> Ready {
        Ready {
            buf: Vec::with_capacity(depth),
            start: 0,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    #[inline]
    fn push(&mut self, ev: Event) {
        if self.buf.len() == self.buf.capacity() && self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.push(ev);
    }

    /// Drops the `n` oldest.
    #[inline]
    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start >= self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// The oldest, followed by the others.
    #[inline]
    fn front(&self) -> *const Event {
        self.buf[self.start..].as_ptr()
    }
}

/// Completions reach the job here, from the bdev layer, on the job's
/// thread.
struct Reaper {
    /// Completed and not yet taken back from fio. The first `handed` of
    /// them are what the last `getevents` returned (the shim's `event`
    /// reads them in place); the next `getevents` drops them. Only polls
    /// add to it, and only `getevents` (and tear-down) polls, so it holds
    /// still between two `getevents`.
    ready: RefCell<Ready>,
    /// Submitted and not completed.
    inflight: Cell<usize>,
    /// Completed requests, for `queue` to reuse (at most the job's depth):
    /// no trip through the thread's pool per I/O.
    spare: RefCell<Vec<BdevIo>>,
}

impl IoCompletion for Reaper {
    #[inline]
    fn io_done(&self, mut io: BdevIo) {
        let err = match io.status() {
            IoStatus::Success => 0,
            s => s.errno(),
        };
        // The borrowed view of fio's buffer goes before fio sees the io_u.
        drop(io.take_buf());
        self.inflight.set(self.inflight.get() - 1);
        self.ready.borrow_mut().push(Event {
            io_u: io.tag(),
            err,
        });
        let mut spare = self.spare.borrow_mut();
        if spare.len() < spare.capacity() {
            spare.push(io);
        }
    }
}

/// One bdev of the job (a fio "file").
struct Target {
    // Field order is drop order: the channel before its descriptor.
    ch: BdevChannel,
    _desc: BdevDesc,
    name: String,
    block_size: u64,
    /// log2 of `block_size` when a power of two (every bdev of ours): a
    /// mask and a shift instead of two divisions per I/O.
    block_shift: Option<u32>,
    num_blocks: u64,
    /// The bdev has a flush; without one a flush has nothing to do.
    flush: bool,
    /// Set by the hot-remove event: I/O to it fails with `ENODEV`.
    removed: Arc<AtomicBool>,
}

impl Target {
    /// `(offset_blocks, num_blocks)` of a byte range; `None` unless it is
    /// whole blocks.
    #[inline]
    fn blocks(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
        match self.block_shift {
            Some(s) => ((offset | len) & ((1u64 << s) - 1) == 0).then_some((offset >> s, len >> s)),
            None => {
                let bs = self.block_size;
                (offset.is_multiple_of(bs) && len.is_multiple_of(bs))
                    .then_some((offset / bs, len / bs))
            }
        }
    }
}

/// A fio job's engine state (fio's `td->io_ops_data`).
pub struct Job {
    // Field order is drop order, after `Drop::drop` drained the I/O: the
    // bdevs (channels, descriptors) and the requests before the thread
    // they live on, which goes last.
    targets: Vec<Target>,
    reaper: Rc<Reaper>,
    on_done: Rc<dyn IoCompletion>,
    /// How many events the last `getevents` returned (the front of the
    /// ready list).
    handed: Cell<usize>,
    /// fio's I/O memory (`iomem_alloc`), when fio took ours.
    mem: RefCell<Option<DmaBuf>>,
    name: String,
    /// Whether this job holds one of the runtime's job counts.
    counted: Cell<bool>,
    /// A rejected submission was reported (once per job).
    reported_reject: Cell<bool>,
    thread: EmbeddedThread,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("bdevs", &self.targets.len())
            .field("inflight", &self.reaper.inflight.get())
            .finish()
    }
}

/// The sizes of the job's bdevs in bytes, after the checks of setup:
/// thread mode, a config, known bdevs, I/O sizes in whole
/// blocks. Starts the runtime if this is the first job.
pub fn setup(args: &JobArgs, job: Option<&Job>) -> Result<Vec<u64>> {
    let job_name = args.job.clone();
    if !args.use_thread {
        return Err(Error::NotThreads { job: job_name });
    }
    if args.files.is_empty() {
        return Err(Error::NoFiles { job: job_name });
    }
    let h = global::ensure_started(args)?;
    let mut sizes = Vec::with_capacity(args.files.len());
    for name in &args.files {
        let bdev = global::find_bdev(&h, &args.job, name)?;
        if bdev.props().zoned.is_some() && args.writes && !args.zbd {
            return Err(Error::ZonedWithoutZbd {
                job: job_name,
                bdev: bdev.name().to_string(),
            });
        }
        let bs = bdev.block_size();
        if let Some(&(op, bytes)) = args
            .sizes
            .iter()
            .find(|(_, b)| *b != 0 && !b.is_multiple_of(u64::from(bs)))
        {
            return Err(Error::BlockSize {
                job: job_name,
                op: op.name(),
                bytes,
                bdev: bdev.name().to_string(),
                block_size: bs,
            });
        }
        sizes.push(u64::from(bs).saturating_mul(bdev.num_blocks()));
    }
    match job {
        // init ran first (create_serialize=0): count the job once.
        Some(j) => {
            if !j.counted.replace(true) {
                global::count_job();
            }
        }
        None => global::count_job(),
    }
    Ok(sizes)
}

/// Releases the runtime's count of a job that fio cleans up: `job` when
/// init made one, else whether setup counted it (it did if it ran first).
pub fn cleanup(job: Option<Job>, create_serialize: bool) {
    let counted = match job {
        Some(j) => {
            let c = j.counted.get();
            drop(j);
            c
        }
        None => create_serialize,
    };
    global::release(counted);
}

fn open_target(h: &Handles, args: &JobArgs, name: &str) -> Result<Target> {
    let bdev = global::find_bdev(h, &args.job, name)?;
    let removed = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&removed);
    let who = name.to_string();
    let job = args.job.clone();
    let fail = |reason: String| Error::Open {
        job: args.job.clone(),
        bdev: name.to_string(),
        reason,
    };
    let desc = h
        .mgr
        .open(name, args.writes, move |ev| {
            if ev == BdevEvent::Remove && !flag.swap(true, Ordering::Relaxed) {
                tracing::error!(job = %job, bdev = %who, "bdev removed: its I/O fails from now on");
            }
        })
        .map_err(|e| fail(e.to_string()))?;
    let ch = desc.get_io_channel().map_err(|e| fail(e.to_string()))?;
    Ok(Target {
        ch,
        _desc: desc,
        name: name.to_string(),
        block_size: u64::from(bdev.block_size()),
        block_shift: bdev
            .block_size()
            .is_power_of_two()
            .then(|| bdev.block_size().trailing_zeros()),
        num_blocks: bdev.num_blocks(),
        flush: bdev.supports(IoType::Flush),
        removed,
    })
}

impl Job {
    /// The job's state, on the job's thread: its lightweight thread
    /// (embedded in this OS thread) and its bdevs, opened there.
    pub fn init(args: &JobArgs) -> Result<Job> {
        let h = global::ensure_started(args)?;
        let thread = h
            .runtime
            .embed_current_thread(format!("fio_{}", args.job))
            .map_err(|e| Error::Thread {
                job: args.job.clone(),
                reason: e.to_string(),
            })?;
        let mut targets = Vec::with_capacity(args.files.len());
        for name in &args.files {
            match open_target(&h, args, name) {
                Ok(t) => targets.push(t),
                Err(e) => {
                    // The channels go before the thread does.
                    drop(targets);
                    drop(thread);
                    return Err(e);
                }
            }
        }
        let depth = args.iodepth.max(1);
        let reaper = Rc::new(Reaper {
            ready: RefCell::new(Ready::with_capacity(depth)),
            inflight: Cell::new(0),
            spare: RefCell::new(Vec::with_capacity(depth)),
        });
        let on_done: Rc<dyn IoCompletion> = Rc::clone(&reaper) as Rc<dyn IoCompletion>;
        Ok(Job {
            targets,
            reaper,
            on_done,
            handed: Cell::new(0),
            mem: RefCell::new(None),
            name: args.job.clone(),
            // With create_serialize, setup ran (and counted) before init.
            counted: Cell::new(args.create_serialize),
            reported_reject: Cell::new(false),
            thread,
        })
    }

    /// fio's I/O memory: `len` zeroed bytes, page-aligned, owned by the
    /// job (so they are registered for DMA like any bdevkit buffer).
    pub fn iomem_alloc(&self, len: usize) -> Option<*mut u8> {
        let mut buf = match DmaBuf::new(len) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(job = %self.name, error = %e, "fio I/O memory");
                return None;
            }
        };
        let p = buf.as_mut_ptr();
        *self.mem.borrow_mut() = Some(buf);
        Some(p)
    }

    /// Frees fio's I/O memory once no I/O uses it.
    pub fn iomem_free(&self) {
        let mem = self.mem.borrow_mut().take();
        if self.drain() {
            drop(mem);
        } else {
            // A device may still write there: better leaked than reused.
            std::mem::forget(mem);
        }
    }

    /// Takes an I/O: checks it, builds its request and submits it. A
    /// request the bdev layer refuses (out of range, a type the bdev
    /// lacks) completes at once with its errno.
    #[inline]
    pub fn queue(&self, req: Request) -> Queue {
        let Some(t) = self.targets.get(req.file) else {
            return Queue::Completed(libc::ENODEV);
        };
        let Some(op) = req.op else {
            return Queue::Completed(libc::EOPNOTSUPP);
        };
        if t.removed.load(Ordering::Relaxed) {
            return Queue::Completed(libc::ENODEV);
        }
        let Some((offset_blocks, num_blocks)) = t.blocks(req.offset, req.len) else {
            return Queue::Completed(libc::EINVAL);
        };
        if op == Op::Flush && !t.flush {
            // No volatile cache: nothing to flush.
            return Queue::Completed(0);
        }
        // A request of an earlier I/O, or a fresh one (`submit` binds it
        // to this target's channel: all of them are this thread's).
        let spare = self.reaper.spare.borrow_mut().pop();
        let Some(mut io) = spare.or_else(|| t.ch.alloc_io()) else {
            return Queue::Busy;
        };
        match (op, req.buf) {
            (Op::Read, Some(buf)) => {
                io.read(offset_blocks, num_blocks, buf);
            }
            (Op::Write, Some(buf)) => {
                io.write(offset_blocks, num_blocks, buf);
            }
            (Op::Trim, _) => {
                io.unmap(offset_blocks, num_blocks);
            }
            (Op::Flush, _) if num_blocks == 0 => {
                io.flush(0, t.num_blocks);
            }
            (Op::Flush, _) => {
                io.flush(offset_blocks, num_blocks);
            }
            (Op::Read | Op::Write, None) => return Queue::Completed(libc::EINVAL),
        }
        io.set_tag(req.io_u);
        io.on_done(Rc::clone(&self.on_done));
        // Submission never completes inline: nothing re-enters the job.
        match t.ch.submit(io) {
            Ok(()) => {
                let r = &self.reaper;
                r.inflight.set(r.inflight.get() + 1);
                Queue::Queued
            }
            Err(e) => Queue::Completed(self.rejected(req.file, *e)),
        }
    }

    /// The errno of a submission the bdev layer refused, logged once.
    #[cold]
    fn rejected(&self, file: usize, e: bdevkit::bdev::SubmitError) -> i32 {
        let bdevkit::bdev::SubmitError { error, mut io } = e;
        drop(io.take_buf());
        if !self.reported_reject.replace(true) {
            tracing::error!(
                job = %self.name,
                bdev = %self.targets[file].name,
                io_type = ?io.io_type(),
                offset_blocks = io.offset_blocks(),
                num_blocks = io.num_blocks(),
                error = %error,
                "I/O refused (reported once per job)"
            );
        }
        error.errno()
    }

    /// Hands fio at most `max` completions (all that are ready when `max`
    /// is not above `min`, fio's default), at least `min` unless nothing
    /// is in flight or `timeout` passed: those already ready, polling the
    /// job's thread only when they are too few (see the module docs).
    /// Returns how many, and where they are: contiguous, valid until the
    /// next `getevents` or the job's tear-down.
    #[inline]
    pub fn getevents(
        &self,
        min: usize,
        max: usize,
        timeout: Option<Duration>,
    ) -> (usize, *const Event) {
        let r = &self.reaper;
        // What the last call handed out is fio's now.
        let handed = self.handed.replace(0);
        if handed > 0 {
            r.ready.borrow_mut().consume(handed);
        }
        // Enough ready (and at least one): no poll. Otherwise poll at
        // least once (min == 0 asks for what a poll gives).
        if r.ready.borrow().len() < min.max(1) {
            let deadline = match timeout {
                Some(t) if !t.is_zero() => Some(Instant::now() + t),
                _ => None,
            };
            loop {
                self.thread.poll();
                // Nothing in flight: no more will come (never spin forever).
                if r.ready.borrow().len() >= min
                    || r.inflight.get() == 0
                    || timeout.is_some_and(|t| t.is_zero())
                    || deadline.is_some_and(|d| Instant::now() >= d)
                {
                    break;
                }
            }
        }
        let ready = r.ready.borrow();
        // fio's default (`iodepth_batch_complete_max` not above `_min`)
        // asks for as many as it needs at least: it then gets all that are
        // ready, as SPDK's engine gives it, and reaps them in one call
        // instead of one call each (fio's own work per call is several
        // hundred instructions). An explicit larger max is kept. fio takes
        // any count (`ios_completed` loops over them), and never more than
        // it has in flight: every ready event is one of its I/Os.
        let n = if max <= min {
            ready.len()
        } else {
            ready.len().min(max)
        };
        self.handed.set(n);
        (n, ready.front())
    }

    /// Runs the job's thread once (its pollers and completions).
    pub(crate) fn poll(&self) {
        self.thread.poll();
    }

    /// Polls until nothing is in flight; false after [`DRAIN_TIMEOUT`].
    fn drain(&self) -> bool {
        let start = Instant::now();
        while self.reaper.inflight.get() > 0 {
            if start.elapsed() > DRAIN_TIMEOUT {
                tracing::error!(
                    job = %self.name,
                    inflight = self.reaper.inflight.get(),
                    "I/O still in flight at tear-down"
                );
                return false;
            }
            self.thread.poll();
        }
        true
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // The I/O in flight is waited for, so none outlives fio's memory
        // or the channels.
        if !self.drain() {
            std::mem::forget(self.mem.borrow_mut().take());
        }
        self.reaper.spare.borrow_mut().clear();
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A config with `Null0` (4 KiB blocks) and `Malloc1` (512-byte blocks).
    pub(crate) fn conf() -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        write!(
            f,
            r#"{{"subsystems": [{{"subsystem": "bdev", "config": [
                {{"method": "bdev_null_create", "params": {{"name": "Null0", "num_blocks": 1024, "block_size": 4096}}}},
                {{"method": "bdev_malloc_create", "params": {{"name": "Malloc1", "num_blocks": 2048, "block_size": 512}}}}
            ]}}]}}"#
        )
        .unwrap();
        f
    }

    fn args(conf: &tempfile::NamedTempFile, files: &[&str]) -> JobArgs {
        JobArgs {
            job: "j".into(),
            conf: Some(conf.path().to_path_buf()),
            files: files.iter().map(ToString::to_string).collect(),
            iodepth: 4,
            use_thread: true,
            create_serialize: true,
            sizes: vec![(Op::Read, 4096), (Op::Write, 4096)],
            ..JobArgs::default()
        }
    }

    #[test]
    fn setup_checks_and_counts() {
        let _l = global::TEST_LOCK.lock();
        let c = conf();
        let ok = args(&c, &["Null0", "Malloc1"]);

        let e = setup(
            &JobArgs {
                use_thread: false,
                ..ok.clone()
            },
            None,
        )
        .unwrap_err();
        assert!(matches!(e, Error::NotThreads { .. }), "{e}");
        assert!(e.to_string().contains("thread=1"));
        let e = setup(
            &JobArgs {
                conf: None,
                ..ok.clone()
            },
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("bdevkit_conf=FILE"), "{e}");
        let e = setup(
            &JobArgs {
                files: vec![],
                ..ok.clone()
            },
            None,
        )
        .unwrap_err();
        assert!(matches!(e, Error::NoFiles { .. }), "{e}");
        assert!(
            !global::is_running(),
            "no runtime for a job that failed its checks"
        );

        let e = setup(&args(&c, &["Nope"]), None).unwrap_err();
        assert!(
            e.to_string().contains(r#"no bdev named "Nope""#)
                && e.to_string().contains("Malloc1, Null0"),
            "{e}"
        );
        let e = setup(
            &JobArgs {
                sizes: vec![(Op::Read, 4096), (Op::Write, 1024)],
                ..ok.clone()
            },
            None,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "job j: write size 1024 (bs/bsrange/bssplit) is not a multiple of the block size \
             4096 of bdev Null0"
        );
        let other = conf();
        let e = setup(&args(&other, &["Null0"]), None).unwrap_err();
        assert!(matches!(e, Error::OtherConfig { .. }), "{e}");

        // Two jobs set up; the runtime goes with the second cleanup.
        assert_eq!(setup(&ok, None).unwrap(), vec![4096 * 1024, 512 * 2048]);
        assert_eq!(setup(&ok, None).unwrap().len(), 2);
        cleanup(None, true);
        assert!(global::is_running());
        cleanup(None, true);
        // The failed setups above counted nothing.
        assert!(!global::is_running());
    }

    #[test]
    fn a_bad_config_or_mask_fails_the_start() {
        let _l = global::TEST_LOCK.lock();
        let mut bad = tempfile::NamedTempFile::new().unwrap();
        write!(bad, r#"{{"subsystems": [{{"subsystem": "bdev", "config": [{{"method": "bdev_nope_create", "params": {{}}}}]}}]}}"#).unwrap();
        let e = setup(&args(&bad, &["Null0"]), None).unwrap_err();
        assert!(matches!(e, Error::Start { .. }), "{e}");
        assert!(e.to_string().contains("bdev_nope_create"), "{e}");
        let c = conf();
        let e = setup(
            &JobArgs {
                reactor_mask: Some("zz".into()),
                ..args(&c, &["Null0"])
            },
            None,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Mask { .. }), "{e}");
        assert!(!global::is_running());
    }
}
