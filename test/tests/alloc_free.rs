//! After warm-up, 100 000 null-bdev reads and writes on one thread cause
//! zero heap allocations: the I/O path (pool, channel, module, completion)
//! allocates nothing per I/O in steady state. The same holds through each
//! virtual bdev stacked on null (passthru, a split part, error, delay),
//! which forward with the shared `bdevkit::bdev::vbdev::forward`.

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::mpsc;

    use bdevkit::bdev::{BdevChannel, BdevDesc, BdevIo, BdevManager, IoCompletion, IoStatus};
    use bdevkit::dma::DmaBuf;
    use bdevkit_delay::DelayCreateParams;
    use bdevkit_error::ErrorCreateParams;
    use bdevkit_null::NullCreateParams;
    use bdevkit_passthru::PassthruCreateParams;
    use bdevkit_split::SplitCreateParams;
    use bdevkit_test::TestEnv;

    struct Counting;
    static COUNTING: AtomicBool = AtomicBool::new(false);
    static ALLOCS: AtomicU64 = AtomicU64::new(0);

    // SAFETY: forwards to the system allocator; only counts calls.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
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

    #[global_allocator]
    static GLOBAL: Counting = Counting;

    const WARMUP: u64 = 20_000;
    const MEASURED: u64 = 100_000;
    const QD: u64 = 32;

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

    /// What is measured: null itself, then each virtual bdev on it.
    const TARGETS: [&str; 5] = ["Null0", "PT0", "Null0p1", "EE_Null0", "D0"];

    /// `Null0`, and the virtual bdev `target` on it.
    fn create(mgr: &BdevManager, target: &str) {
        bdevkit_null::create(mgr, NullCreateParams::new("Null0", 4096, 4096)).unwrap();
        match target {
            "PT0" => {
                bdevkit_passthru::create(mgr, PassthruCreateParams::new("Null0", "PT0")).unwrap();
            }
            "Null0p1" => {
                bdevkit_split::create(mgr, SplitCreateParams::new("Null0", 2)).unwrap();
            }
            "EE_Null0" => bdevkit_error::create(mgr, ErrorCreateParams::new("Null0")).unwrap(),
            "D0" => {
                bdevkit_delay::create(mgr, DelayCreateParams::new("D0", "Null0", 0)).unwrap();
            }
            _ => {}
        }
    }

    #[test]
    fn steady_state_io_allocates_nothing() {
        // One after the other: the counter is process-wide.
        for target in TARGETS {
            let (failures, allocs) = measure(target);
            assert_eq!(failures, 0, "{target}");
            assert_eq!(
                allocs, 0,
                "{target}: {allocs} heap allocations during {MEASURED} steady-state I/Os"
            );
        }
    }

    /// Runs the workload on `target`; returns the failed I/Os and the heap
    /// allocations counted.
    fn measure(target: &'static str) -> (u64, u64) {
        ALLOCS.store(0, Ordering::SeqCst);
        let env = TestEnv::with_modules(
            "0x1",
            &[
                bdevkit_null::register,
                bdevkit_passthru::register,
                bdevkit_split::register,
                bdevkit_error::register,
                bdevkit_delay::register,
            ],
        );
        let (tx, rx) = mpsc::channel();
        env.run(move |mgr| async move {
            create(&mgr, target);
            let desc = mgr.open(target, true, |_| {}).unwrap();
            let d = Rc::new(Driver {
                ch: desc.get_io_channel().unwrap(),
                desc: RefCell::new(Some(desc)),
                me: RefCell::new(None),
                done_ios: Cell::new(0),
                submitted: Cell::new(0),
                failures: Cell::new(0),
                finished: RefCell::new(Some(tx)),
            });
            *d.me.borrow_mut() = Some(Rc::clone(&d) as Rc<dyn IoCompletion>);
            for _ in 0..QD {
                d.issue(DmaBuf::new(4096).unwrap());
            }
        });
        let failures = rx.recv().unwrap();
        (failures, ALLOCS.load(Ordering::SeqCst))
    }
}
