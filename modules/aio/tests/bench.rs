//! Per-I/O cost of the aio module, driven through the bdev API on one
//! polling reactor, to compare with `fio --ioengine=libaio` on the same
//! file (driver: `bdevkit_test::kernel::qd_bench`). Ignored by default;
//! run with
//!
//! ```text
//! BENCH_FILE=/dev/shm/bench.img BENCH_QD=32 BENCH_SECS=5 BENCH_RW=randread \
//!   cargo test --release -p bdevkit-aio --test bench -- --ignored --nocapture
//! ```
//!
//! The file must exist (e.g. `truncate -s 1G /dev/shm/bench.img`; for
//! reads of real data, fill it first). Prints one line:
//! `aio <rw> qd=<n> iops=<x> cpu=<percent>`.

mod common;

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use bdevkit::dma::DmaBuf;
    use bdevkit_aio::AioCreateParams;
    use bdevkit_test::kernel;

    use super::common::AIO;

    const IO_BYTES: usize = 4096;

    #[test]
    #[ignore = "benchmark: run with --ignored and BENCH_FILE set"]
    fn qd_bench() {
        kernel::qd_bench(&AIO);
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
