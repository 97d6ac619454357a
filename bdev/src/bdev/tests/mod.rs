//! Bdev core tests with a configurable in-memory test module.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::module::{BdevModule, BdevOps, CompletionQueue, Done, ModuleIo};
use super::*;
use crate::dma::{DmaBuf, SharedMem};
use crate::error::{BoxError, Error};
use crate::thread::{CpuSet, PollerStatus, Runtime, RuntimeOptions, Thread};

/// Knobs of the test disk.
#[derive(Default)]
struct Knobs {
    hold: AtomicBool,
    nomem_left: AtomicU64,
    submitted: AtomicU64,
    destructed: AtomicBool,
    max_children_blocks: AtomicU64,
    /// `module_checks_fit`: I/Os handed to `fit_to_limits`, and those it
    /// took (split or bounced).
    fit_asked: AtomicU64,
    fit_taken: AtomicU64,
}

struct TestDisk {
    mem: SharedMem,
    bs: u64,
    props: BdevProps,
    types: Vec<IoType>,
    knobs: Arc<Knobs>,
}

struct TestChannel {
    done: CompletionQueue,
    held: Rc<RefCell<VecDeque<BdevIo>>>,
    poller: crate::thread::Poller,
}

impl Drop for TestChannel {
    fn drop(&mut self) {
        self.poller.unregister();
    }
}

impl BdevOps for TestDisk {
    type Channel = TestChannel;

    fn create_channel(&self) -> Result<TestChannel, BoxError> {
        let held: Rc<RefCell<VecDeque<BdevIo>>> = Rc::default();
        let h2 = Rc::clone(&held);
        let knobs = Arc::clone(&self.knobs);
        let t = Thread::try_current()?;
        // Releases held I/Os once `hold` is cleared.
        let poller = t.register_poller("test_release", 0, move |_| {
            if knobs.hold.load(Ordering::SeqCst) || h2.borrow().is_empty() {
                return PollerStatus::Idle;
            }
            let all: Vec<BdevIo> = h2.borrow_mut().drain(..).collect();
            for io in all {
                io.complete(IoStatus::Success);
            }
            PollerStatus::Busy
        });
        Ok(TestChannel {
            done: CompletionQueue::new("test_io")?,
            held,
            poller,
        })
    }

    fn submit(&self, ch: &TestChannel, mut io: BdevIo) {
        self.knobs.submitted.fetch_add(1, Ordering::SeqCst);
        let p = &self.props;
        // A module that tests the fit itself: its own (stricter) test is
        // one page-aligned segment of one block; the rest goes back.
        let rw = matches!(io.io_type(), IoType::Read | IoType::Write);
        let own_fit = |io: &BdevIo| {
            io.num_blocks() == 1
                && matches!(io.iovs(), [v] if (v.base as usize).is_multiple_of(4096))
        };
        if p.module_checks_fit && rw && !own_fit(&io) {
            self.knobs.fit_asked.fetch_add(1, Ordering::SeqCst);
            let Some(back) = io.fit_to_limits() else {
                self.knobs.fit_taken.fetch_add(1, Ordering::SeqCst);
                return;
            };
            io = back;
        }
        // Every I/O that reaches a module respects the declared limits.
        let (off, n) = (io.offset_blocks(), io.num_blocks());
        let unit_writes =
            p.split_on_write_unit && p.write_unit_size > 1 && io.io_type() == IoType::Write;
        if unit_writes {
            // Whole write units, one at a time.
            let u = u64::from(p.write_unit_size);
            assert!(
                off.is_multiple_of(u) && n == u,
                "write {off}+{n} is not one unit"
            );
        } else if p.split_on_optimal_io_boundary
            && p.optimal_io_boundary != 0
            && io.io_type() != IoType::Reset
        {
            let b = u64::from(p.optimal_io_boundary);
            assert!(n == 0 || off / b == (off + n - 1) / b, "crossed boundary");
        }
        if p.max_rw_size != 0 && matches!(io.io_type(), IoType::Read | IoType::Write) {
            assert!(n <= u64::from(p.max_rw_size));
        }
        if p.max_num_segments != 0 {
            assert!(io.iovs().len() <= p.max_num_segments as usize);
        }
        if p.max_segment_size != 0 {
            assert!(io
                .iovs()
                .iter()
                .all(|v| v.len <= p.max_segment_size as usize));
        }
        if p.required_alignment != 0 {
            let mask = (1usize << p.required_alignment) - 1;
            assert!(
                io.iovs().iter().all(|v| v.base as usize & mask == 0),
                "unaligned"
            );
        }
        self.knobs
            .max_children_blocks
            .fetch_max(n, Ordering::SeqCst);
        if self
            .knobs
            .nomem_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
            .is_ok()
        {
            ch.done.push(io, IoStatus::NoMem);
            return;
        }
        if self.knobs.hold.load(Ordering::SeqCst) && io.io_type() != IoType::Reset {
            ch.held.borrow_mut().push_back(io);
            return;
        }
        let off = usize::try_from(off * self.bs).unwrap();
        let len = usize::try_from(n * self.bs).unwrap();
        let status = match io.io_type() {
            IoType::Read => {
                let mut pos = off;
                let writable = io.for_each_segment_mut(|s| {
                    assert!(self.mem.read(pos, s));
                    pos += s.len();
                });
                assert!(writable, "a read's data is writable");
                IoStatus::Success
            }
            IoType::Write => {
                let mut pos = off;
                io.for_each_segment(|s| {
                    assert!(self.mem.write(pos, s));
                    pos += s.len();
                });
                IoStatus::Success
            }
            IoType::WriteZeroes | IoType::Unmap => {
                assert!(self.mem.fill(off, len, 0));
                IoStatus::Success
            }
            _ => IoStatus::Success,
        };
        ch.done.push(io, status);
    }

    fn io_type_supported(&self, t: IoType) -> bool {
        self.types.contains(&t)
    }

    fn destruct(&self, done: Done) {
        self.knobs.destructed.store(true, Ordering::SeqCst);
        done.done();
    }
}

fn disk(mgr: &BdevManager, props: BdevProps, types: &[IoType]) -> (Bdev, Arc<Knobs>) {
    let knobs = Arc::new(Knobs::default());
    let bs = u64::from(props.block_size);
    let bytes = usize::try_from(props.num_blocks * bs).unwrap();
    let d = TestDisk {
        mem: SharedMem::new(bytes).unwrap(),
        bs,
        props: props.clone(),
        types: types.to_vec(),
        knobs: Arc::clone(&knobs),
    };
    (
        mgr.register_bdev("test", props, Arc::new(d)).unwrap(),
        knobs,
    )
}

const RW: &[IoType] = &[IoType::Read, IoType::Write, IoType::Reset, IoType::Flush];
const ALL: &[IoType] = &[
    IoType::Read,
    IoType::Write,
    IoType::Reset,
    IoType::Flush,
    IoType::WriteZeroes,
    IoType::Unmap,
];

struct Env {
    rt: Option<Runtime>,
    mgr: BdevManager,
}

impl Env {
    fn new(mask: &str, opts: BdevOptions) -> Env {
        let ro = RuntimeOptions {
            shutdown_grace: Duration::from_millis(200),
            ..RuntimeOptions::interrupt(mask.parse::<CpuSet>().unwrap())
        };
        Env {
            rt: Some(Runtime::start(ro).unwrap()),
            mgr: BdevManager::new(opts),
        }
    }

    fn run<R: Send + 'static, Fut: std::future::Future<Output = R> + 'static>(
        &self,
        f: impl FnOnce(BdevManager) -> Fut + Send + 'static,
    ) -> R {
        let mgr = self.mgr.clone();
        self.rt
            .as_ref()
            .unwrap()
            .app_thread()
            .block_on(move || f(mgr))
            .unwrap()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown();
        }
    }
}

fn pattern(len: usize, seed: u8) -> DmaBuf {
    let mut b = DmaBuf::new(len).unwrap();
    for (i, x) in b.iter_mut().enumerate() {
        *x = u8::try_from(i % 251)
            .unwrap()
            .wrapping_mul(31)
            .wrapping_add(seed);
    }
    b
}

/// Sleeps on the reactor without blocking it.
async fn sleep_ms(ms: u64) {
    struct Sleep {
        until: Instant,
        armed: bool,
    }
    impl std::future::Future for Sleep {
        type Output = ();
        fn poll(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<()> {
            if Instant::now() >= self.until {
                return std::task::Poll::Ready(());
            }
            if !self.armed {
                self.armed = true;
                let w = cx.waker().clone();
                let until = self.until;
                Thread::current()
                    .unwrap()
                    .register_poller("sleep", 1_000, move |p| {
                        if Instant::now() >= until {
                            p.unregister();
                            w.wake_by_ref();
                        }
                        PollerStatus::Idle
                    });
            }
            std::task::Poll::Pending
        }
    }
    Sleep {
        until: Instant::now() + Duration::from_millis(ms),
        armed: false,
    }
    .await;
}

#[test]
fn write_read_roundtrip_and_stats() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let (b, _) = disk(&mgr, BdevProps::new("d0", "Test", 512, 1024), ALL);
        assert_eq!(mgr.get(&b.uuid().to_string()).unwrap(), b);
        let desc = mgr.open("d0", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        ch.write(8, 8, pattern(4096, 1)).await.unwrap();
        let got = ch.read(8, 8, DmaBuf::new(4096).unwrap()).await.unwrap();
        assert_eq!(&got[..], &pattern(4096, 1)[..]);
        ch.write_zeroes(8, 4).await.unwrap();
        let got = ch.read(8, 8, DmaBuf::new(4096).unwrap()).await.unwrap();
        assert!(got[..2048].iter().all(|x| *x == 0));
        assert_eq!(&got[2048..], &pattern(4096, 1)[2048..]);
        let s = ch.stat();
        assert_eq!(s.num_read_ops, 2);
        assert_eq!(s.num_write_ops, 2);
        assert_eq!(s.bytes_read, 8192);
        drop(ch);
        // Stats of a destroyed channel are folded into the bdev.
        let (tx, rx) = std::sync::mpsc::channel();
        b.get_iostat(move |s| tx.send(s).unwrap());
        loop {
            if let Ok(s) = rx.try_recv() {
                assert_eq!(s.num_read_ops, 2);
                break;
            }
            sleep_ms(1).await;
        }
        let info = b.info_json();
        assert_eq!(info["name"], "d0");
        assert_eq!(info["supported_io_types"]["write_zeroes"], true);
        assert_eq!(info["supported_io_types"]["compare"], false);
        assert_eq!(info["claimed"], false);
    });
}

#[test]
fn bad_io_fails_without_reaching_the_module() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let (_b, knobs) = disk(&mgr, BdevProps::new("d1", "Test", 512, 100), RW);
        let desc = mgr.open("d1", false, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        let mut io = ch.alloc_io().unwrap();
        io.read(99, 2, DmaBuf::new(1024).unwrap());
        let e = ch.submit(io).unwrap_err();
        assert!(matches!(e.error, Error::OutOfRange { .. }), "{e}");
        let mut io = e.io;
        assert!(io.take_buf().is_some(), "buffer comes back");
        io.read(u64::MAX, 2, DmaBuf::new(1024).unwrap());
        assert!(matches!(
            ch.submit(io).unwrap_err().error,
            Error::OutOfRange { .. }
        ));
        let mut io = ch.alloc_io().unwrap();
        io.read(0, 4, DmaBuf::new(1024).unwrap());
        assert!(matches!(
            ch.submit(io).unwrap_err().error,
            Error::BufferTooSmall { .. }
        ));
        let mut io = ch.alloc_io().unwrap();
        io.write(0, 1, DmaBuf::new(512).unwrap());
        assert!(matches!(
            ch.submit(io).unwrap_err().error,
            Error::ReadOnly(_)
        ));
        let mut io = ch.alloc_io().unwrap();
        io.unmap(0, 1);
        assert!(matches!(
            ch.submit(io).unwrap_err().error,
            Error::NotSupported(IoType::Unmap)
        ));
        assert_eq!(knobs.submitted.load(Ordering::SeqCst), 0);
        // A good one does reach it.
        ch.read(0, 1, DmaBuf::new(512).unwrap()).await.unwrap();
        assert_eq!(knobs.submitted.load(Ordering::SeqCst), 1);
    });
}

thread_local! {
    static SMUGGLED: RefCell<Option<BdevChannel>> = const { RefCell::new(None) };
}

#[test]
fn channel_of_another_thread_is_rejected() {
    let env = Env::new("0x1", BdevOptions::default());
    let rt = env.rt.as_ref().unwrap().handle();
    let mgr = env.mgr.clone();
    env.rt
        .as_ref()
        .unwrap()
        .app_thread()
        .run_sync(move || {
            disk(&mgr, BdevProps::new("d2", "Test", 512, 100), RW);
            let desc = mgr.open("d2", false, |_| {}).unwrap();
            SMUGGLED.with(|s| *s.borrow_mut() = Some(desc.get_io_channel().unwrap()));
            std::mem::forget(desc);
        })
        .unwrap();
    // Another lightweight thread on the same reactor (same OS thread).
    let other = rt.spawn_thread("other", Some(&CpuSet::single(0))).unwrap();
    let err = other
        .run_sync(|| {
            SMUGGLED.with(|s| {
                let ch = s.borrow_mut().take().unwrap();
                let mut io = ch.alloc_io().unwrap();
                io.read(0, 1, DmaBuf::new(512).unwrap());
                let e = ch.submit(io).unwrap_err();
                format!("{}", e.error)
            })
        })
        .unwrap();
    assert!(err.contains("another thread"), "{err}");
}

#[test]
fn claims_exclusive_and_shared() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        disk(&mgr, BdevProps::new("d3", "Test", 512, 100), RW);
        let d1 = mgr.open("d3", false, |_| {}).unwrap();
        let d2 = mgr.open("d3", false, |_| {}).unwrap();
        d1.claim(ClaimType::ExclusiveWrite, "m1").unwrap();
        assert!(d1.is_writable());
        let e = d2.claim(ClaimType::ExclusiveWrite, "m2").unwrap_err();
        assert!(matches!(e, Error::Claimed(..)));
        assert_eq!(e.errno(), libc::EPERM);
        assert!(
            mgr.open("d3", true, |_| {}).is_err(),
            "writer on a claimed bdev"
        );
        assert_eq!(
            mgr.get("d3").unwrap().info_json()["claim_type"],
            "exclusive_write"
        );
        drop(d1);
        assert!(mgr.get("d3").unwrap().claim().is_none());
        d2.claim(ClaimType::ReadManyWriteNone, "m2").unwrap();
        let d4 = mgr.open("d3", false, |_| {}).unwrap();
        d4.claim(ClaimType::ReadManyWriteNone, "m3").unwrap();
        assert!(d4.claim(ClaimType::ExclusiveWrite, "m3").is_err());
        drop((d2, d4));
        let w1 = mgr.open("d3", false, |_| {}).unwrap();
        let w2 = mgr.open("d3", false, |_| {}).unwrap();
        w1.claim(ClaimType::ReadManyWriteShared { key: 7 }, "a")
            .unwrap();
        assert!(w2
            .claim(ClaimType::ReadManyWriteShared { key: 8 }, "b")
            .is_err());
        w2.claim(ClaimType::ReadManyWriteShared { key: 7 }, "b")
            .unwrap();
        assert!(w2.is_writable());
    });
}

#[test]
fn hot_remove_delivers_event_and_destructs_after_close() {
    let env = Env::new("0x3", BdevOptions::default());
    let events = Arc::new(AtomicUsize::new(0));
    let ev2 = Arc::clone(&events);
    env.run(move |mgr| async move {
        let (b, knobs) = disk(&mgr, BdevProps::new("d4", "Test", 512, 100), RW);
        let desc = mgr
            .open("d4", true, move |e| {
                assert_eq!(e, BdevEvent::Remove);
                ev2.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        let ch = desc.get_io_channel().unwrap();
        let removed = Arc::new(AtomicBool::new(false));
        let r2 = Arc::clone(&removed);
        mgr.unregister(&b, move || r2.store(true, Ordering::SeqCst));
        while events.load(Ordering::SeqCst) == 0 {
            sleep_ms(1).await;
        }
        assert!(
            mgr.open("d4", false, |_| {}).is_err(),
            "no new opens while removing"
        );
        // I/O on the still-open channel keeps working until close.
        ch.read(0, 1, DmaBuf::new(512).unwrap()).await.unwrap();
        sleep_ms(10).await;
        assert!(!knobs.destructed.load(Ordering::SeqCst));
        assert!(!removed.load(Ordering::SeqCst));
        drop(ch);
        desc.close();
        while !removed.load(Ordering::SeqCst) {
            sleep_ms(1).await;
        }
        assert!(knobs.destructed.load(Ordering::SeqCst));
        assert!(mgr.get("d4").is_none());
        assert!(mgr.bdevs().is_empty());
    });
}

#[test]
fn io_wait_pool_of_8_with_64_submitters() {
    let opts = BdevOptions {
        bdev_io_pool_size: 8,
        bdev_io_cache_size: 2,
        ..BdevOptions::default()
    };
    let env = Env::new("0x1", opts);
    let done = env.run(|mgr| async move {
        disk(&mgr, BdevProps::new("d5", "Test", 512, 1024), RW);
        let desc = mgr.open("d5", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        let completed = Rc::new(Cell::new(0usize));
        let t = Thread::current().unwrap();
        for s in 0..64u64 {
            let ch = ch.clone();
            let completed = Rc::clone(&completed);
            t.spawn_local(async move {
                for k in 0..10u64 {
                    let off = (s * 10 + k) % 1024;
                    let buf = ch.write(off, 1, pattern(512, 3)).await.unwrap();
                    let got = ch.read(off, 1, buf).await.unwrap();
                    assert_eq!(&got[..], &pattern(512, 3)[..]);
                    completed.set(completed.get() + 1);
                }
            });
        }
        while completed.get() < 640 {
            sleep_ms(1).await;
        }
        assert!(mgr.io_pool_available() <= 8);
        completed.get()
    });
    assert_eq!(done, 640);
}

/// Every `BdevIo` is held by another thread, whose frees go back to the
/// shared pool, not to this thread: only the retry poller can wake this
/// thread's waiter.
#[test]
fn io_waiter_is_woken_by_the_retry_poller() {
    thread_local! {
        static STASH: RefCell<Vec<Box<dyn std::any::Any>>> = RefCell::new(Vec::new());
    }
    let opts = BdevOptions {
        bdev_io_pool_size: 4,
        bdev_io_cache_size: 1,
        ..BdevOptions::default()
    };
    let env = Env::new("0x1", opts);
    let other = env
        .rt
        .as_ref()
        .unwrap()
        .handle()
        .spawn_thread("holder", None)
        .unwrap();
    env.run(move |mgr| async move {
        disk(&mgr, BdevProps::new("w0", "Test", 512, 64), RW);
        let m2 = mgr.clone();
        other
            .send_msg(move || {
                let desc = m2.open("w0", false, |_| {}).unwrap();
                let ch = desc.get_io_channel().unwrap();
                STASH.with(|s| {
                    let mut s = s.borrow_mut();
                    while let Some(io) = ch.alloc_io() {
                        s.push(Box::new(io));
                    }
                    s.push(Box::new(ch));
                    s.push(Box::new(desc));
                });
            })
            .unwrap();
        while mgr.io_pool_available() > 0 {
            sleep_ms(1).await;
        }
        let desc = mgr.open("w0", false, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        assert!(ch.alloc_io().is_none(), "the other thread holds them all");
        let woken = Rc::new(Cell::new(false));
        let w2 = Rc::clone(&woken);
        ch.queue_io_wait(move || w2.set(true));
        other
            .send_msg(|| STASH.with(|s| s.borrow_mut().clear()))
            .unwrap();
        let mut waited = 0;
        while !woken.get() {
            sleep_ms(1).await;
            waited += 1;
            assert!(waited < 60_000, "waiter stranded");
        }
        assert!(ch.alloc_io().is_some());
    });
}

#[test]
fn reset_waits_for_in_flight_io_and_aborts_new_io() {
    let env = Env::new("0x3", BdevOptions::default());
    env.run(|mgr| async move {
        let (_b, knobs) = disk(&mgr, BdevProps::new("d6", "Test", 512, 1024), RW);
        let desc = mgr.open("d6", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        knobs.hold.store(true, Ordering::SeqCst);
        let order = Rc::new(RefCell::new(Vec::new()));
        for i in 0..10u64 {
            let mut io = ch.alloc_io().unwrap();
            let o = Rc::clone(&order);
            io.read(i, 1, DmaBuf::new(512).unwrap())
                .on_done_closure(move |io| {
                    assert_eq!(io.status(), IoStatus::Success);
                    o.borrow_mut().push("read");
                });
            ch.submit(io).unwrap();
        }
        let mut io = ch.alloc_io().unwrap();
        let o = Rc::clone(&order);
        io.reset().on_done_closure(move |io| {
            assert_eq!(io.status(), IoStatus::Success);
            o.borrow_mut().push("reset");
        });
        ch.submit(io).unwrap();
        sleep_ms(20).await;
        assert!(
            order.borrow().is_empty(),
            "reset finished with I/O in flight"
        );
        // New I/O during the reset is aborted.
        let mut io = ch.alloc_io().unwrap();
        let o = Rc::clone(&order);
        io.read(0, 1, DmaBuf::new(512).unwrap())
            .on_done_closure(move |io| {
                assert_eq!(io.status(), IoStatus::Aborted);
                o.borrow_mut().push("aborted");
            });
        ch.submit(io).unwrap();
        sleep_ms(5).await;
        assert_eq!(*order.borrow(), vec!["aborted"]);
        knobs.hold.store(false, Ordering::SeqCst);
        while order.borrow().len() < 12 {
            sleep_ms(1).await;
        }
        let snapshot = order.borrow().clone();
        assert_eq!(snapshot.last().unwrap(), &"reset", "{snapshot:?}");
        assert_eq!(snapshot.iter().filter(|s| **s == "read").count(), 10);
        // After the reset, I/O flows again.
        ch.read(0, 1, DmaBuf::new(512).unwrap()).await.unwrap();
    });
}

#[test]
fn splits_respect_limits_and_keep_data() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let mut p = BdevProps::new("d7", "Test", 512, 4096);
        p.optimal_io_boundary = 8;
        p.split_on_optimal_io_boundary = true;
        p.max_rw_size = 6;
        p.max_segment_size = 1024;
        p.max_num_segments = 3;
        let (_b, knobs) = disk(&mgr, p, ALL);
        let desc = mgr.open("d7", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        let mut seed = 7u64;
        for round in 0..60u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let off = (seed >> 33) % 4000;
            let n = 1 + (seed >> 20) % 64;
            let n = n.min(4096 - off);
            // Several buffers of odd (block-multiple) sizes.
            let mut bufs = Vec::new();
            let mut left = n;
            let mut k = 0u8;
            while left > 0 {
                let take = left.min(1 + u64::from(k % 5));
                bufs.push(pattern(
                    usize::try_from(take * 512).unwrap(),
                    k.wrapping_add(u8::try_from(round).unwrap()),
                ));
                left -= take;
                k += 1;
            }
            let expect: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            let mut io = ch.alloc_io_async().await;
            io.writev(off, n, bufs);
            let done = ch.submit_async(io).unwrap().await;
            assert_eq!(done.status(), IoStatus::Success);
            let got = ch
                .read(
                    off,
                    n,
                    DmaBuf::new(usize::try_from(n * 512).unwrap()).unwrap(),
                )
                .await
                .unwrap();
            assert_eq!(&got[..], &expect[..], "round {round} off {off} n {n}");
        }
        assert!(knobs.max_children_blocks.load(Ordering::SeqCst) <= 6);
        // Unmap/write-zeroes split too and zero the range.
        ch.write_zeroes(0, 100).await.unwrap();
        let got = ch.read(0, 100, DmaBuf::new(51200).unwrap()).await.unwrap();
        assert!(got.iter().all(|x| *x == 0));
    });
}

#[test]
fn writes_split_on_a_mandatory_write_unit() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let mut p = BdevProps::new("d9", "Test", 512, 1024);
        p.write_unit_size = 4;
        p.split_on_write_unit = true;
        p.optimal_io_boundary = 16;
        p.split_on_optimal_io_boundary = true;
        let (_b, knobs) = disk(&mgr, p, ALL);
        let desc = mgr.open("d9", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        // 12 blocks from block 8: three one-unit writes (the test disk
        // asserts each is one aligned unit), data intact.
        let before = knobs.submitted.load(Ordering::SeqCst);
        ch.write(8, 12, pattern(12 * 512, 5)).await.unwrap();
        assert_eq!(knobs.submitted.load(Ordering::SeqCst) - before, 3);
        let got = ch
            .read(8, 12, DmaBuf::new(12 * 512).unwrap())
            .await
            .unwrap();
        assert_eq!(&got[..], &pattern(12 * 512, 5)[..]);
        // Reads follow the optimal boundary only: 12 blocks at 8 cross 16
        // once.
        let before = knobs.submitted.load(Ordering::SeqCst);
        ch.read(8, 12, DmaBuf::new(12 * 512).unwrap())
            .await
            .unwrap();
        assert_eq!(knobs.submitted.load(Ordering::SeqCst) - before, 2);
        // Partial units are refused before the module sees them.
        let before = knobs.submitted.load(Ordering::SeqCst);
        for (off, n) in [(2, 4), (4, 6), (0, 1), (5, 3)] {
            let mut io = ch.alloc_io().unwrap();
            io.write(off, n, pattern(usize::try_from(n).unwrap() * 512, 1));
            let e = ch.submit(io).unwrap_err();
            assert!(
                matches!(&e.error, Error::InvalidArg(m) if m.contains("write units of 4")),
                "{off}+{n}: {}",
                e.error
            );
        }
        assert_eq!(knobs.submitted.load(Ordering::SeqCst), before);
        // Reads need no whole units.
        ch.read(5, 3, DmaBuf::new(3 * 512).unwrap()).await.unwrap();
        let got = ch
            .read(8, 12, DmaBuf::new(12 * 512).unwrap())
            .await
            .unwrap();
        assert_eq!(
            &got[..],
            &pattern(12 * 512, 5)[..],
            "refused writes wrote nothing"
        );
    });
}

#[test]
fn histograms_count_completions_per_type_and_survive_channels() {
    use crate::bdev::histogram::HistogramOptions;

    fn get(b: &Bdev) -> std::sync::mpsc::Receiver<Result<Histogram, Error>> {
        let (tx, rx) = std::sync::mpsc::channel();
        b.get_histogram(move |r| tx.send(r).unwrap());
        rx
    }
    fn enable(
        b: &Bdev,
        o: Option<HistogramOptions>,
    ) -> std::sync::mpsc::Receiver<Result<(), Error>> {
        let (tx, rx) = std::sync::mpsc::channel();
        b.enable_histogram(o, move |r| tx.send(r).unwrap());
        rx
    }

    let env = Env::new("0x3", BdevOptions::default());
    let b = env.run(|mgr| async move {
        let (b, _knobs) = disk(&mgr, BdevProps::new("h0", "Test", 512, 64), ALL);
        assert!(matches!(
            wait_res(get(&b)).await,
            Err(Error::HistogramDisabled(_))
        ));
        // Reads only.
        let reads = HistogramOptions {
            io_type: Some(IoType::Read),
            ..HistogramOptions::default()
        };
        wait_res(enable(&b, Some(reads))).await.unwrap();
        assert!(b.histogram_enabled());
        // Saved as SPDK saves it: name, enable, opc.
        let saved: Vec<_> = mgr
            .config_json()
            .into_iter()
            .filter(|e| e["method"] == "bdev_enable_histogram")
            .collect();
        assert_eq!(
            saved,
            [serde_json::json!({"method": "bdev_enable_histogram",
                    "params": {"name": "h0", "enable": true, "opc": "read"}})]
        );
        let desc = mgr.open("h0", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        for i in 0..10 {
            ch.read(i, 1, DmaBuf::new(512).unwrap()).await.unwrap();
        }
        ch.write(0, 1, pattern(512, 1)).await.unwrap();
        let h = wait_res(get(&b)).await.unwrap();
        assert_eq!(h.total(), 10, "reads only");
        assert_eq!(h.granularity(), 7);
        b
    });
    // A channel on the other reactor counts too, and its counts survive
    // its end.
    let other = env
        .rt
        .as_ref()
        .unwrap()
        .handle()
        .spawn_thread("other", Some(&CpuSet::single(1)))
        .unwrap();
    let mgr = env.mgr.clone();
    other
        .block_on(move || async move {
            let desc = mgr.open("h0", false, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            for i in 0..5 {
                ch.read(i, 1, DmaBuf::new(512).unwrap()).await.unwrap();
            }
        })
        .unwrap();
    let b2 = b.clone();
    env.run(move |mgr| async move {
        let b = b2;
        let h = wait_res(get(&b)).await.unwrap();
        assert_eq!(h.total(), 15, "the gone channel's reads are kept");
        // All types; enabling again starts from zero.
        wait_res(enable(&b, Some(HistogramOptions::default())))
            .await
            .unwrap();
        assert_eq!(wait_res(get(&b)).await.unwrap().total(), 0);
        let desc = mgr.open("h0", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        ch.write(0, 1, pattern(512, 1)).await.unwrap();
        ch.flush(0, 1).await.unwrap();
        let h = wait_res(get(&b)).await.unwrap();
        assert_eq!(h.total(), 2);
        // Each latency lies in a bucket: a border at the end of the last
        // non-empty bucket counts both.
        let end = h.iter().filter(|x| x.2 != 0).map(|x| x.0).max().unwrap();
        assert_eq!(h.borders_count(&[end])[0], 2);
        // Bad options are refused and leave it as it was.
        for bad in [
            HistogramOptions {
                min_nsec: 10,
                max_nsec: 10,
                ..HistogramOptions::default()
            },
            HistogramOptions {
                granularity: 13,
                ..HistogramOptions::default()
            },
        ] {
            let r = wait_res(enable(&b, Some(bad))).await;
            assert!(matches!(r, Err(Error::InvalidArg(_))), "{r:?}");
        }
        assert!(b.histogram_enabled());
        wait_res(enable(&b, None)).await.unwrap();
        assert!(!b.histogram_enabled());
        assert!(matches!(
            wait_res(get(&b)).await,
            Err(Error::HistogramDisabled(_))
        ));
    });
}

#[test]
fn queue_depth_sampling_sees_outstanding_io() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let (b, knobs) = disk(&mgr, BdevProps::new("q0", "Test", 512, 64), RW);
        assert_eq!(b.qd_stats(), None);
        b.set_qd_sampling_period(1_000).unwrap();
        let desc = mgr.open("q0", false, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        knobs.hold.store(true, Ordering::SeqCst);
        let done = Rc::new(Cell::new(0));
        for i in 0..4 {
            let mut io = ch.alloc_io().unwrap();
            let d = Rc::clone(&done);
            io.read(i, 1, DmaBuf::new(512).unwrap())
                .on_done_closure(move |_| d.set(d.get() + 1));
            ch.submit(io).unwrap();
        }
        let mut waited = 0;
        while b.qd_stats().unwrap().queue_depth != 4 {
            sleep_ms(1).await;
            waited += 1;
            assert!(waited < 60_000, "{:?}", b.qd_stats());
        }
        let s = b.qd_stats().unwrap();
        assert_eq!(s.period_us, 1_000);
        assert!(s.io_time >= 1_000 && s.weighted_io_time >= 4_000, "{s:?}");
        knobs.hold.store(false, Ordering::SeqCst);
        while done.get() < 4 || b.qd_stats().unwrap().queue_depth != 0 {
            sleep_ms(1).await;
        }
        let busy = b.qd_stats().unwrap().io_time;
        sleep_ms(20).await;
        assert_eq!(
            b.qd_stats().unwrap().io_time,
            busy,
            "idle time is not busy time"
        );
        b.set_qd_sampling_period(0).unwrap();
        assert_eq!(b.qd_stats(), None);
    });
}

/// Split parents, resets and flushes are counted once each, as the
/// consumer saw them; children are not.
#[test]
fn histograms_count_consumer_io_on_every_path() {
    use crate::bdev::histogram::HistogramOptions;

    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let mut p = BdevProps::new("h1", "Test", 512, 64);
        p.optimal_io_boundary = 8;
        p.split_on_optimal_io_boundary = true;
        let (b, knobs) = disk(&mgr, p, RW);
        let (tx, rx) = std::sync::mpsc::channel();
        b.enable_histogram(Some(HistogramOptions::default()), move |r| {
            tx.send(r).unwrap();
        });
        wait_res(rx).await.unwrap();
        let desc = mgr.open("h1", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        let before = knobs.submitted.load(Ordering::SeqCst);
        // Blocks 4..20 cross two boundaries: three children, one parent.
        ch.read(4, 16, DmaBuf::new(16 * 512).unwrap())
            .await
            .unwrap();
        assert_eq!(knobs.submitted.load(Ordering::SeqCst) - before, 3);
        ch.flush(0, 8).await.unwrap();
        ch.reset().await.unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        b.get_histogram(move |r| tx.send(r).unwrap());
        assert_eq!(wait_res(rx).await.unwrap().total(), 3);
    });
}

async fn wait_res<T>(rx: std::sync::mpsc::Receiver<T>) -> T {
    loop {
        if let Ok(r) = rx.try_recv() {
            return r;
        }
        sleep_ms(1).await;
    }
}

#[test]
fn misaligned_buffers_are_bounced() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let mut p = BdevProps::new("d8", "Test", 512, 64);
        p.required_alignment = 12;
        disk(&mgr, p, RW);
        let desc = mgr.open("d8", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        // 512-aligned, not 4096-aligned: two 512-byte buffers.
        let mut data = Vec::new();
        for s in 0..4u8 {
            let b = DmaBuf::alloc(512, 512).unwrap();
            data.push(b);
            let _ = s;
        }
        let mut bufs = Vec::new();
        for (i, mut b) in data.into_iter().enumerate() {
            let v = u8::try_from(i).unwrap() + 1;
            b.iter_mut().for_each(|x| *x = v);
            bufs.push(b);
        }
        let mut io = ch.alloc_io().unwrap();
        io.writev(4, 4, bufs);
        assert_eq!(
            ch.submit_async(io).unwrap().await.status(),
            IoStatus::Success
        );
        let mut io = ch.alloc_io().unwrap();
        let rbufs: Vec<DmaBuf> = (0..4).map(|_| DmaBuf::alloc(512, 512).unwrap()).collect();
        io.readv(4, 4, rbufs);
        let mut done = ch.submit_async(io).unwrap().await;
        assert_eq!(done.status(), IoStatus::Success);
        for (i, b) in done.take_bufs().iter().enumerate() {
            let v = u8::try_from(i).unwrap() + 1;
            assert!(b.iter().all(|x| *x == v));
        }
    });
}

#[test]
fn size_caps_without_a_boundary_pass_what_fits_straight() {
    // The nvme bdev's shape: a transfer cap and an alignment, no boundary
    // (the quick fit test on the submission path). What fits reaches the
    // module as it is; the rest is still split or bounced (the test disk
    // asserts the limits on everything it gets).
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let mut p = BdevProps::new("d11", "Test", 512, 256);
        p.max_rw_size = 8;
        p.required_alignment = 12;
        let (_b, knobs) = disk(&mgr, p, RW);
        let desc = mgr.open("d11", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        let mut b = DmaBuf::alloc(4096, 4096).unwrap();
        b.as_mut_slice().fill(5);
        ch.write(0, 8, b).await.unwrap();
        ch.write(8, 32, pattern(32 * 512, 3)).await.unwrap();
        assert!(knobs.max_children_blocks.load(Ordering::SeqCst) <= 8);
        let odd = (0..16)
            .map(|_| DmaBuf::alloc(512, 512).unwrap())
            .find(|b| !(b.as_ptr() as usize).is_multiple_of(4096))
            .expect("a 512-byte buffer off a page boundary");
        let got = ch.read(0, 1, odd).await.unwrap();
        assert!(got.iter().all(|x| *x == 5));
        let got = ch
            .read(8, 32, DmaBuf::alloc(32 * 512, 4096).unwrap())
            .await
            .unwrap();
        assert_eq!(&got[..], &pattern(32 * 512, 3)[..]);
    });
}

#[test]
fn write_zeroes_is_emulated_with_writes() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let (b, _) = disk(&mgr, BdevProps::new("d9", "Test", 4096, 1024), RW);
        assert!(b.supports(IoType::WriteZeroes));
        assert!(!b.module_supports(IoType::WriteZeroes));
        let desc = mgr.open("d9", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        let all = usize::try_from(1024 * 4096u64).unwrap();
        ch.write(0, 1024, pattern(all, 9)).await.unwrap();
        // More than the 1 MiB zero buffer: several emulated writes.
        ch.write_zeroes(10, 600).await.unwrap();
        let got = ch.read(0, 1024, DmaBuf::new(all).unwrap()).await.unwrap();
        let z = 10 * 4096..610 * 4096;
        assert!(got[z.clone()].iter().all(|x| *x == 0));
        assert_eq!(&got[..z.start], &pattern(all, 9)[..z.start]);
        assert_eq!(&got[z.end..], &pattern(all, 9)[z.end..]);
    });
}

#[test]
fn nomem_completions_are_retried() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let (_b, knobs) = disk(&mgr, BdevProps::new("d10", "Test", 512, 128), RW);
        knobs.nomem_left.store(25, Ordering::SeqCst);
        let desc = mgr.open("d10", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        let t = Thread::current().unwrap();
        let ok = Rc::new(Cell::new(0));
        for i in 0..20u64 {
            let ch = ch.clone();
            let ok = Rc::clone(&ok);
            t.spawn_local(async move {
                ch.write(i, 1, pattern(512, 1)).await.unwrap();
                ok.set(ok.get() + 1);
            });
        }
        while ok.get() < 20 {
            sleep_ms(1).await;
        }
        assert_eq!(knobs.nomem_left.load(Ordering::SeqCst), 0);
        assert_eq!(ch.stat().errors.nomem, 0, "retried, not failed");
    });
}

#[test]
/// QoS on a manual clock: 32 readers against a 5 000 IOPS limit get
/// exactly what the clock's advances allow (5 per 1 ms timeslice, whole
/// slices only, at most 10 slices banked), however loaded the machine is.
/// The quota's arithmetic alone is tested in `quota.rs`; this is the
/// stage and the refill poller on a real reactor.
fn qos_admits_exactly_what_the_clock_allows() {
    let env = Env::new("0x1", BdevOptions::default());
    let steps = env.run(|mgr| async move {
        let (b, knobs) = disk(&mgr, BdevProps::new("d11", "Test", 512, 1024), RW);
        let time = crate::clock::ManualClock::new();
        b.set_qos_clock(time.clock());
        let (tx, rx) = std::sync::mpsc::channel();
        b.set_qos_limits([Some(5_000), None, None, None], move |r| {
            tx.send(r).unwrap()
        });
        loop {
            if let Ok(r) = rx.try_recv() {
                r.unwrap();
                break;
            }
            sleep_ms(1).await;
        }
        assert_eq!(b.qos_limits(), [5_000, 0, 0, 0]);
        let quota = b.0.shared.qos.shared().unwrap();
        let desc = mgr.open("d11", false, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        let count = Rc::new(Cell::new(0u64));
        let stop = Rc::new(Cell::new(false));
        let t = Thread::current().unwrap();
        for q in 0..32u64 {
            let (ch, count, stop) = (ch.clone(), Rc::clone(&count), Rc::clone(&stop));
            t.spawn_local(async move {
                let mut buf = DmaBuf::new(512).unwrap();
                while !stop.get() {
                    buf = ch.read(q, 1, buf).await.unwrap();
                    count.set(count.get() + 1);
                }
            });
        }
        // Settled: every reader waits in the QoS queue and no quota is
        // left, so nothing moves until the clock does.
        let settled = |want: u64| {
            let (ch, count, quota) = (ch.clone(), Rc::clone(&count), Arc::clone(&quota));
            async move {
                let mut waited = 0u64;
                while !(count.get() >= want && ch.qos_queued() == 32 && quota.remaining(0) <= 0) {
                    sleep_ms(1).await;
                    waited += 1;
                    assert!(
                        waited < 60_000,
                        "stuck at {} reads, want {want}",
                        count.get()
                    );
                }
                count.get()
            }
        };
        let slice = crate::clock::us_to_ticks(1_000);
        let mut steps = Vec::new();
        // One timeslice of quota up front.
        steps.push((settled(5).await, 5));
        // Three slices pass: 15 more.
        time.advance(3 * slice);
        steps.push((settled(20).await, 20));
        // Half a slice adds nothing; the other half makes a whole one.
        time.advance(slice / 2);
        time.advance(slice - slice / 2);
        steps.push((settled(25).await, 25));
        // A second with nothing asked for banks at most 10 slices.
        time.advance(1_000 * slice);
        steps.push((settled(75).await, 75));
        assert_eq!(
            knobs.submitted.load(Ordering::SeqCst),
            75,
            "reached the disk"
        );
        stop.set(true);
        // Let the readers go: the limit off, the queue drains.
        let (tx, rx) = std::sync::mpsc::channel();
        b.set_qos_limits([Some(0), None, None, None], move |r| tx.send(r).unwrap());
        while rx.try_recv().is_err() {
            sleep_ms(1).await;
        }
        while ch.outstanding() > 0 {
            sleep_ms(1).await;
        }
        steps
    });
    for (got, want) in steps {
        assert_eq!(got, want, "reads admitted");
    }
}

#[test]
fn examine_offers_new_bdevs_and_vbdev_attaches() {
    struct Watcher {
        seen: Mutex<Vec<String>>,
        descs: Mutex<Vec<BdevDesc>>,
    }
    impl BdevModule for Watcher {
        fn name(&self) -> &'static str {
            "watcher"
        }
        fn has_examine(&self) -> bool {
            true
        }
        fn examine_config(&self, mgr: &BdevManager, bdev: &Bdev) {
            self.seen.lock().unwrap().push(bdev.name().to_string());
            if bdev.name() == "base" {
                let d = mgr.open("base", false, |_| {}).unwrap();
                d.claim(ClaimType::ExclusiveWrite, "watcher").unwrap();
                self.descs.lock().unwrap().push(d);
            }
        }
    }
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let w = Arc::new(Watcher {
            seen: Mutex::new(Vec::new()),
            descs: Mutex::new(Vec::new()),
        });
        mgr.register_module(Arc::clone(&w) as Arc<dyn BdevModule>);
        let found = mgr.module_as::<Watcher>("watcher").unwrap();
        assert!(
            Arc::ptr_eq(&found, &w),
            "module_as finds the module's state"
        );
        assert!(mgr.module_as::<Watcher>("nope").is_none());
        disk(&mgr, BdevProps::new("other", "Test", 512, 8), RW);
        let (b, _) = disk(&mgr, BdevProps::new("base", "Test", 512, 8), RW);
        assert_eq!(*w.seen.lock().unwrap(), vec!["other", "base"]);
        assert_eq!(b.claim().unwrap().1, "watcher");
        let (tx, rx) = std::sync::mpsc::channel();
        mgr.wait_for_examine(move || tx.send(()).unwrap());
        while rx.try_recv().is_err() {
            sleep_ms(1).await;
        }
        w.descs.lock().unwrap().clear();
    });
}

#[test]
fn resize_event_reaches_holders() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let (b, _) = disk(&mgr, BdevProps::new("d12", "Test", 512, 64), RW);
        let got = Arc::new(AtomicUsize::new(0));
        let g2 = Arc::clone(&got);
        let _d = mgr
            .open("d12", false, move |e| {
                if e == BdevEvent::Resize {
                    g2.fetch_add(1, Ordering::SeqCst);
                }
            })
            .unwrap();
        b.notify_resize(32);
        while got.load(Ordering::SeqCst) == 0 {
            sleep_ms(1).await;
        }
        assert_eq!(b.num_blocks(), 32);
    });
}

#[test]
fn register_rejects_duplicates_and_unregister_all_orders_stacks() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let (b, _) = disk(&mgr, BdevProps::new("x", "Test", 512, 8), RW);
        let knobs = Arc::new(Knobs::default());
        let d = TestDisk {
            mem: SharedMem::new(4096).unwrap(),
            bs: 512,
            props: BdevProps::new("x", "Test", 512, 8),
            types: RW.to_vec(),
            knobs,
        };
        let e = mgr
            .register_bdev("test", BdevProps::new("x", "Test", 512, 8), Arc::new(d))
            .unwrap_err();
        assert_eq!(e.errno(), libc::EEXIST);
        let mut p = BdevProps::new("y", "Test", 512, 8);
        p.aliases = vec![b.uuid().to_string()];
        let d = TestDisk {
            mem: SharedMem::new(4096).unwrap(),
            bs: 512,
            props: p.clone(),
            types: RW.to_vec(),
            knobs: Arc::new(Knobs::default()),
        };
        assert!(
            mgr.register_bdev("test", p, Arc::new(d)).is_err(),
            "alias clash"
        );
        assert!(mgr.get("y").is_none(), "failed create left nothing behind");
        let held = mgr.open("x", false, |_| {}).unwrap();
        held.claim(ClaimType::ExclusiveWrite, "t").unwrap();
        disk(&mgr, BdevProps::new("top", "Test", 512, 8), RW);
        let (tx, rx) = std::sync::mpsc::channel();
        drop(held);
        mgr.unregister_all(move || tx.send(()).unwrap());
        while rx.try_recv().is_err() {
            sleep_ms(1).await;
        }
        assert!(mgr.bdevs().is_empty());
    });
}

mod module_fit;
mod soundness;

/// A waiter woken by a freed `BdevIo` (not by the retry poller) allocates
/// at once, inside its wake-up: the pool must not be borrowed then (issue
/// 17, bug 1: a `RefCell already borrowed` panic on the reactor).
#[test]
fn an_io_waiter_allocates_inside_its_wake_up() {
    let opts = BdevOptions {
        bdev_io_pool_size: 4,
        bdev_io_cache_size: 4,
        ..BdevOptions::default()
    };
    let env = Env::new("0x1", opts);
    env.run(|mgr| async move {
        disk(&mgr, BdevProps::new("wz", "Test", 512, 64), RW);
        let desc = mgr.open("wz", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        let held: Vec<BdevIo> = std::iter::from_fn(|| ch.alloc_io()).collect();
        assert_eq!(held.len(), 4, "the pool is empty now");
        let got = Rc::new(Cell::new(false));
        let (g2, ch2) = (Rc::clone(&got), ch.clone());
        ch.queue_io_wait(move || {
            let io = ch2.alloc_io().expect("the freed I/O is there");
            g2.set(true);
            drop(io);
        });
        // Freeing one I/O (into this thread's cache) wakes the waiter from
        // inside the pool's `put`.
        drop(held);
        assert!(got.get(), "woken by the free, not by the 1 ms poller");
    });
}
