//! Zero-allocation checks of the I/O path: a counting global allocator
//! ([`CountingAlloc`]) and a steady-state I/O driver ([`measure`]) that
//! counts the heap allocations of [`MEASURED`] reads and writes at queue
//! depth [`QD`] after [`WARMUP`] I/Os.
//!
//! Each test binary installs the allocator itself (a library must not
//! choose the allocator of every binary that links it):
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: bdevkit_test::steady::CountingAlloc = bdevkit_test::steady::CountingAlloc;
//! ```
//!
//! The count is process-wide: measure one bdev at a time.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;

use bdevkit::bdev::{BdevChannel, BdevDesc, BdevIo, BdevManager, IoCompletion, IoStatus};
use bdevkit::dma::DmaBuf;

use crate::TestEnv;

/// I/Os before counting starts (pools, queues and caches fill up).
pub const WARMUP: u64 = 20_000;
/// I/Os counted.
pub const MEASURED: u64 = 100_000;
/// I/Os in flight.
pub const QD: u64 = 32;

/// A global allocator that forwards to the system allocator and counts
/// allocations and reallocations while [`measure`] asks it to.
#[derive(Debug)]
pub struct CountingAlloc;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Set by every allocation: proves [`CountingAlloc`] is installed without
/// switching the counter on (a thread starting meanwhile, say a reactor,
/// would otherwise leave a stray count in the measurement).
static SEEN: AtomicBool = AtomicBool::new(false);

/// The unsafe part: the `GlobalAlloc` impl.
mod sys {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::Ordering;

    use super::{CountingAlloc, ALLOCS, COUNTING, SEEN};

    // SAFETY: forwards to the system allocator; only counts calls.
    unsafe impl GlobalAlloc for CountingAlloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            SEEN.store(true, Ordering::Relaxed);
            if COUNTING.load(Ordering::Relaxed) {
                ALLOCS.fetch_add(1, Ordering::Relaxed);
            }
            // SAFETY: same contract as ours.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: same contract as ours.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
            if COUNTING.load(Ordering::Relaxed) {
                ALLOCS.fetch_add(1, Ordering::Relaxed);
            }
            // SAFETY: same contract as ours.
            unsafe { System.realloc(ptr, layout, new) }
        }
    }
}

/// What [`measure`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SteadyState {
    /// I/Os that did not succeed.
    pub failures: u64,
    /// Heap allocations during the [`MEASURED`] I/Os.
    pub allocs: u64,
}

/// Keeps [`QD`] one-block I/Os (reads and writes alternating, blocks
/// spread over the first 1024) in flight, reusing each completed I/O's
/// buffer for the next.
struct Driver {
    ch: BdevChannel,
    desc: RefCell<Option<BdevDesc>>,
    me: RefCell<Option<Rc<dyn IoCompletion>>>,
    done_ios: Cell<u64>,
    submitted: Cell<u64>,
    failures: Cell<u64>,
    finished: RefCell<Option<mpsc::Sender<u64>>>,
}

impl Driver {
    fn issue(&self, buf: DmaBuf) {
        let n = self.submitted.get();
        self.submitted.set(n + 1);
        let mut io = self.ch.alloc_io().expect("pool");
        let off = (n * 7919) % 1024;
        if n.is_multiple_of(2) {
            io.read(off, 1, buf);
        } else {
            io.write(off, 1, buf);
        }
        if let Some(h) = self.me.borrow().as_ref() {
            io.on_done(Rc::clone(h));
        }
        assert!(self.ch.submit(io).is_ok());
    }
}

impl IoCompletion for Driver {
    fn io_done(&self, mut io: BdevIo) {
        if io.status() != IoStatus::Success {
            self.failures.set(self.failures.get() + 1);
        }
        let buf = io.take_buf().expect("buffer");
        drop(io);
        let done = self.done_ios.get() + 1;
        self.done_ios.set(done);
        if done == WARMUP {
            COUNTING.store(true, Ordering::SeqCst);
        }
        if done == WARMUP + MEASURED {
            COUNTING.store(false, Ordering::SeqCst);
        }
        if self.submitted.get() < WARMUP + MEASURED + QD {
            self.issue(buf);
        } else if done == self.submitted.get() {
            self.me.borrow_mut().take();
            self.desc.borrow_mut().take();
            if let Some(tx) = self.finished.borrow_mut().take() {
                let _ = tx.send(self.failures.get());
            }
        }
    }
}

/// On `env`'s app thread, runs `create` (which makes bdev `name`, at
/// least 1024 blocks of 4096 bytes or fewer), then the workload on `name`
/// until [`WARMUP`] + [`MEASURED`] I/Os completed; returns the failed
/// I/Os and the allocations counted.
///
/// # Panics
/// When [`CountingAlloc`] is not the binary's global allocator (nothing
/// would be counted), or the bdev cannot be opened.
pub fn measure(
    env: &TestEnv,
    name: &'static str,
    create: impl FnOnce(&BdevManager) + Send + 'static,
) -> SteadyState {
    measure_with(env, name, move |mgr| async move { create(&mgr) })
}

/// [`measure`] for a bdev that appears asynchronously: the future `setup`
/// returns makes bdev `name` (an attach that finishes on a helper thread,
/// say) before the workload starts.
///
/// # Panics
/// As [`measure`].
pub fn measure_with<Fut>(
    env: &TestEnv,
    name: &'static str,
    setup: impl FnOnce(BdevManager) -> Fut + Send + 'static,
) -> SteadyState
where
    Fut: Future<Output = ()> + 'static,
{
    assert_installed();
    ALLOCS.store(0, Ordering::SeqCst);
    let (tx, rx) = mpsc::channel();
    env.run(move |mgr| async move {
        setup(mgr.clone()).await;
        let desc = mgr.open(name, true, |_| {}).expect("open");
        let d = Rc::new(Driver {
            ch: desc.get_io_channel().expect("channel"),
            desc: RefCell::new(Some(desc)),
            me: RefCell::new(None),
            done_ios: Cell::new(0),
            submitted: Cell::new(0),
            failures: Cell::new(0),
            finished: RefCell::new(Some(tx)),
        });
        *d.me.borrow_mut() = Some(Rc::clone(&d) as Rc<dyn IoCompletion>);
        for _ in 0..QD {
            d.issue(DmaBuf::new(4096).expect("buf"));
        }
    });
    let failures = rx.recv().expect("the workload finishes");
    SteadyState {
        failures,
        allocs: ALLOCS.load(Ordering::SeqCst),
    }
}

/// Starts counting heap allocations (process-wide) from zero; see
/// [`stop_counting`]. For drivers other than [`measure`]'s (the NVMe/TCP
/// target's, driven over a socket).
///
/// # Panics
/// When [`CountingAlloc`] is not the binary's global allocator.
pub fn start_counting() {
    assert_installed();
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
}

/// Panics unless [`CountingAlloc`] is the global allocator (it marks
/// [`SEEN`] on every allocation; the counter stays off).
fn assert_installed() {
    SEEN.store(false, Ordering::SeqCst);
    drop(std::hint::black_box(Box::new(0u64)));
    assert!(
        SEEN.load(Ordering::SeqCst),
        "install bdevkit_test::steady::CountingAlloc as the #[global_allocator]"
    );
}

/// Stops counting; returns the allocations since [`start_counting`].
pub fn stop_counting() -> u64 {
    COUNTING.store(false, Ordering::SeqCst);
    ALLOCS.swap(0, Ordering::SeqCst)
}
