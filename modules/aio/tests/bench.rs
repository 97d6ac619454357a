//! Per-I/O cost of the aio module, driven through the bdev API on one
//! polling reactor, to compare with `fio --ioengine=libaio` on the same
//! file. Ignored by default; run with
//!
//! ```text
//! BENCH_FILE=/dev/shm/bench.img BENCH_QD=32 BENCH_SECS=5 BENCH_RW=randread \
//!   cargo test --release -p bdevkit-aio --test bench -- --ignored --nocapture
//! ```
//!
//! The file must exist (e.g. `truncate -s 1G /dev/shm/bench.img`; for
//! reads of real data, fill it first). Prints one line:
//! `aio <rw> qd=<n> iops=<x> cpu=<percent>`.

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::{Rc, Weak};
    use std::time::{Duration, Instant};

    use bdevkit::bdev::{BdevChannel, BdevIo, BdevManager, BdevOptions, IoCompletion, IoStatus};
    use bdevkit::dma::DmaBuf;
    use bdevkit::thread::{CpuSet, Runtime, RuntimeOptions};
    use bdevkit_aio::AioCreateParams;

    const IO_BYTES: usize = 4096;

    struct Driver {
        me: Weak<Driver>,
        ch: BdevChannel,
        write: bool,
        slots: u64,
        rng: Cell<u64>,
        done: Cell<u64>,
        errors: Cell<u64>,
        inflight: Cell<u64>,
        stop: Cell<bool>,
    }

    impl Driver {
        fn next_slot(&self) -> u64 {
            let mut x = self.rng.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.rng.set(x);
            x % self.slots
        }

        fn issue(&self, buf: DmaBuf) {
            let Some(mut io) = self.ch.alloc_io() else {
                self.inflight.set(self.inflight.get() - 1);
                return;
            };
            let blocks = (IO_BYTES / 512) as u64;
            let off = self.next_slot() * blocks;
            if self.write {
                io.write(off, blocks, buf);
            } else {
                io.read(off, blocks, buf);
            }
            io.on_done(self.me.upgrade().expect("driver alive"));
            if self.ch.submit(io).is_err() {
                self.inflight.set(self.inflight.get() - 1);
            }
        }
    }

    impl IoCompletion for Driver {
        fn io_done(&self, mut io: BdevIo) {
            if io.status() == IoStatus::Success {
                self.done.set(self.done.get() + 1);
            } else {
                self.errors.set(self.errors.get() + 1);
            }
            let buf = io.take_buf();
            drop(io);
            match buf {
                Some(buf) if !self.stop.get() => self.issue(buf),
                _ => self.inflight.set(self.inflight.get() - 1),
            }
        }
    }

    fn cpu_secs() -> f64 {
        let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let f: Vec<&str> = s
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let ticks: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0.0)
            + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0.0);
        ticks / 100.0
    }

    #[test]
    #[ignore = "benchmark: run with --ignored and BENCH_FILE set"]
    fn qd_bench() {
        let Ok(file) = std::env::var("BENCH_FILE") else {
            println!("skipped: set BENCH_FILE");
            return;
        };
        let var = |k: &str, d: u64| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let qd = var("BENCH_QD", 32);
        let secs = var("BENCH_SECS", 5);
        let core = u32::try_from(var("BENCH_CORE", 0)).unwrap_or(0);
        let rw = std::env::var("BENCH_RW").unwrap_or_else(|_| "randread".into());
        let write = rw == "randwrite";
        let rt = Runtime::start(RuntimeOptions {
            cpumask: CpuSet::single(core),
            ..RuntimeOptions::default()
        })
        .unwrap();
        let mgr = BdevManager::new(BdevOptions::default());
        bdevkit_aio::register(&mgr);
        let rw2 = rw.clone();
        let (iops, errors, cpu) = rt
            .app_thread()
            .block_on(move || async move {
                bdevkit_aio::create(&mgr, AioCreateParams::new("bench", file)).unwrap();
                let desc = mgr.open("bench", true, |_| {}).unwrap();
                let ch = desc.get_io_channel().unwrap();
                let slots = ch.bdev().num_blocks() / (IO_BYTES / 512) as u64;
                let d = Rc::new_cyclic(|me| Driver {
                    me: me.clone(),
                    ch,
                    write,
                    slots,
                    rng: Cell::new(0x9e37_79b9_7f4a_7c15),
                    done: Cell::new(0),
                    errors: Cell::new(0),
                    inflight: Cell::new(0),
                    stop: Cell::new(false),
                });
                let cpu0 = cpu_secs();
                let t0 = Instant::now();
                for _ in 0..qd {
                    d.inflight.set(d.inflight.get() + 1);
                    d.issue(DmaBuf::new(IO_BYTES).unwrap());
                }
                bdevkit_test::env::wait_for(secs + 5, || t0.elapsed() >= Duration::from_secs(secs))
                    .await;
                let n = d.done.get();
                let el = t0.elapsed().as_secs_f64();
                let cpu = (cpu_secs() - cpu0) / el * 100.0;
                d.stop.set(true);
                bdevkit_test::env::wait_for(10, || d.inflight.get() == 0).await;
                let _ = rw2;
                (n as f64 / el, d.errors.get(), cpu)
            })
            .unwrap();
        println!("aio {rw} qd={qd} iops={iops:.0} cpu={cpu:.0} errors={errors}");
        rt.shutdown();
    }

    #[derive(Default)]
    struct Oneshot {
        done: Option<bool>,
        waker: Option<std::task::Waker>,
    }

    struct OneshotFut(std::sync::Arc<std::sync::Mutex<Oneshot>>);

    impl std::future::Future for OneshotFut {
        type Output = bool;
        fn poll(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<bool> {
            let mut g = self.0.lock().unwrap();
            match g.done {
                Some(v) => std::task::Poll::Ready(v),
                None => {
                    g.waker = Some(cx.waker().clone());
                    std::task::Poll::Pending
                }
            }
        }
    }

    /// Flush through `IOCB_CMD_FDSYNC` (the module's path) against the
    /// fallback's mechanism (`fdatasync` on another thread, result sent
    /// back), each after a 4 KiB write, on `BENCH_FILE`:
    /// `BENCH_FILE=/var/tmp/f cargo test --release -p bdevkit-aio --test bench -- --ignored --nocapture flush_latency`
    #[test]
    #[ignore = "benchmark: run with --ignored and BENCH_FILE set"]
    fn flush_latency() {
        let Ok(file) = std::env::var("BENCH_FILE") else {
            println!("skipped: set BENCH_FILE");
            return;
        };
        const N: u32 = 200;
        let env = bdevkit_test::TestEnv::with_modules("0x1", &[bdevkit_aio::register]);
        let f2 = file.clone();
        let (fdsync, helper) = env.run(move |mgr| async move {
            bdevkit_aio::create(&mgr, AioCreateParams::new("fl", f2.clone())).unwrap();
            let desc = mgr.open("fl", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let mut buf = DmaBuf::new(IO_BYTES).unwrap();
            let t0 = Instant::now();
            for i in 0..N {
                buf = ch.write(u64::from(i) * 8, 8, buf).await.unwrap();
                ch.flush(0, 8).await.unwrap();
            }
            let fdsync = t0.elapsed() / N;
            let plain = std::fs::OpenOptions::new().write(true).open(&f2).unwrap();
            let plain = std::sync::Arc::new(plain);
            // A long-lived helper thread, as the module's fallback has.
            let (helper, jobs) = std::sync::mpsc::channel::<Box<dyn FnOnce() + Send>>();
            std::thread::spawn(move || {
                while let Ok(job) = jobs.recv() {
                    job();
                }
            });
            let t0 = Instant::now();
            for i in 0..N {
                buf = ch.write(u64::from(i) * 8, 8, buf).await.unwrap();
                let slot = std::sync::Arc::new(std::sync::Mutex::new(Oneshot::default()));
                let (p, s2) = (std::sync::Arc::clone(&plain), std::sync::Arc::clone(&slot));
                helper
                    .send(Box::new(move || {
                        let ok = p.sync_data().is_ok();
                        let w = {
                            let mut g = s2.lock().unwrap();
                            g.done = Some(ok);
                            g.waker.take()
                        };
                        if let Some(w) = w {
                            w.wake();
                        }
                    }))
                    .unwrap();
                assert!(OneshotFut(slot).await);
            }
            (fdsync, t0.elapsed() / N)
        });
        println!("aio flush after 4 KiB write: IOCB_CMD_FDSYNC {fdsync:?}, helper-thread fdatasync {helper:?}");
    }
}
