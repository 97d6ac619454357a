//! The per-I/O bench driver of the kernel-file modules ([`qd_bench`]).

use std::cell::Cell;
use std::fs;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use bdevkit::bdev::{BdevChannel, BdevIo, BdevManager, BdevOptions, IoCompletion, IoStatus};
use bdevkit::dma::DmaBuf;
use bdevkit::thread::{CpuSet, Runtime, RuntimeOptions};

use crate::env::wait_for;

use super::Backend;

/// A `u64` from the environment variable `key`, else `default`.
#[must_use]
pub fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Bytes per bench I/O.
const IO_BYTES: usize = 4096;

/// Keeps `qd` random 4 KiB reads or writes in flight on one bdev.
struct BenchDriver {
    me: Weak<BenchDriver>,
    ch: BdevChannel,
    write: bool,
    slots: u64,
    rng: Cell<u64>,
    done: Cell<u64>,
    errors: Cell<u64>,
    inflight: Cell<u64>,
    stop: Cell<bool>,
}

impl BenchDriver {
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

impl IoCompletion for BenchDriver {
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

/// User + system CPU seconds of this process so far.
fn cpu_secs() -> f64 {
    let s = fs::read_to_string("/proc/self/stat").unwrap_or_default();
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

/// Per-I/O cost of a module through the bdev API on one polling reactor,
/// to compare with fio on the same file: `BENCH_QD` (32) random 4 KiB
/// `BENCH_RW` (`randread`, or `randwrite`) I/Os in flight for
/// `BENCH_SECS` (5) on core `BENCH_CORE` (0), over the existing file
/// `BENCH_FILE` (skips without it). Prints one line:
/// `<module> <rw> qd=<n> iops=<x> cpu=<percent> errors=<n>`.
///
/// # Panics
/// When the runtime cannot start or the bdev cannot be created.
pub fn qd_bench(b: &Backend) {
    let Ok(file) = std::env::var("BENCH_FILE") else {
        println!("skipped: set BENCH_FILE");
        return;
    };
    if b.skip() {
        return;
    }
    let qd = env_u64("BENCH_QD", 32);
    let secs = env_u64("BENCH_SECS", 5);
    let core = u32::try_from(env_u64("BENCH_CORE", 0)).unwrap_or(0);
    let rw = std::env::var("BENCH_RW").unwrap_or_else(|_| "randread".into());
    let write = rw == "randwrite";
    let rt = Runtime::start(RuntimeOptions {
        cpumask: CpuSet::single(core),
        ..RuntimeOptions::default()
    })
    .expect("runtime");
    let mgr = BdevManager::new(BdevOptions::default());
    (b.register)(&mgr);
    let create = b.create;
    let (iops, errors, cpu) = rt
        .app_thread()
        .block_on(move || async move {
            create(&mgr, "bench", &file, None);
            let desc = mgr.open("bench", true, |_| {}).expect("open");
            let ch = desc.get_io_channel().expect("channel");
            let slots = ch.bdev().num_blocks() / (IO_BYTES / 512) as u64;
            let d = Rc::new_cyclic(|me| BenchDriver {
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
                d.issue(DmaBuf::new(IO_BYTES).expect("buf"));
            }
            wait_for(secs + 5, || t0.elapsed() >= Duration::from_secs(secs)).await;
            let n = d.done.get();
            let el = t0.elapsed().as_secs_f64();
            let cpu = (cpu_secs() - cpu0) / el * 100.0;
            d.stop.set(true);
            wait_for(60, || d.inflight.get() == 0).await;
            (n as f64 / el, d.errors.get(), cpu)
        })
        .expect("app thread");
    println!(
        "{} {rw} qd={qd} iops={iops:.0} cpu={cpu:.0} errors={errors}",
        b.name
    );
    rt.shutdown();
}
