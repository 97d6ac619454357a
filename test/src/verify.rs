//! A write/read/compare workload over the public API, one lightweight
//! thread per reactor, each on its own slice of the bdev (like bdevperf's
//! `-C` verify), for module tests that need data integrity under
//! concurrency.

use std::cell::Cell;
use std::rc::Rc;

use bdevkit::bdev::BdevManager;
use bdevkit::dma::DmaBuf;
use bdevkit::thread::CpuSet;

use crate::conformance::pattern;
use crate::env::{wait_for, TestEnv};

/// Outcome of a verify run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Write+read pairs that matched.
    pub verified: u64,
    /// Pairs whose read differed from the write.
    pub mismatches: u64,
    /// I/Os that failed.
    pub errors: u64,
}

/// Runs `rounds` write/read/compare pairs of `io_blocks` blocks at queue
/// depth `qd` on every reactor of `env`, each reactor on its own slice of
/// bdev `name`.
///
/// # Panics
/// If a thread cannot be created or the bdev is missing.
#[must_use]
pub fn run(env: &TestEnv, name: &str, io_blocks: u64, qd: u64, rounds: u64) -> VerifyReport {
    let rt = env.runtime().handle();
    let cores = rt.cores();
    let n = cores.len() as u64;
    let mut joins = Vec::new();
    for (i, core) in cores.iter().enumerate() {
        let t = rt
            .spawn_thread(format!("verify{i}"), Some(&CpuSet::single(*core)))
            .expect("invariant: verify thread");
        let mgr = env.mgr().clone();
        let name = name.to_string();
        let slice = i as u64;
        joins.push(std::thread::spawn(move || {
            let r = t
                .block_on(move || worker(mgr, name, slice, n, io_blocks, qd, rounds))
                .expect("invariant: verify thread alive");
            t.send_msg(|| {
                if let Some(t) = bdevkit::thread::Thread::current() {
                    t.exit();
                }
            })
            .ok();
            r
        }));
    }
    let mut total = VerifyReport::default();
    for j in joins {
        let r = j.join().expect("invariant: verify worker");
        total.verified += r.verified;
        total.mismatches += r.mismatches;
        total.errors += r.errors;
    }
    total
}

enum Outcome {
    Verified,
    Mismatch,
    Error,
}

async fn worker(
    mgr: BdevManager,
    name: String,
    slice: u64,
    slices: u64,
    io_blocks: u64,
    qd: u64,
    rounds: u64,
) -> VerifyReport {
    let desc = mgr.open(&name, true, |_| {}).expect("open for verify");
    let ch = desc.get_io_channel().expect("channel for verify");
    let bs = u64::from(desc.bdev().block_size());
    let slots = desc.bdev().num_blocks() / io_blocks / slices;
    assert!(slots >= qd, "bdev too small for this verify");
    let base = slice * slots;
    let report = Rc::new(Cell::new(VerifyReport::default()));
    let finished = Rc::new(Cell::new(0u64));
    let t = bdevkit::thread::Thread::current().expect("on a thread");
    for q in 0..qd {
        let (ch, report, finished) = (ch.clone(), Rc::clone(&report), Rc::clone(&finished));
        t.spawn_local(async move {
            let len = usize::try_from(io_blocks * bs).expect("size");
            let mut rbuf = DmaBuf::new(len).expect("buf");
            for r in 0..rounds {
                let slot = base + (q + r * qd) % slots;
                let seed = (slot << 20) ^ (r << 4) ^ slice;
                let data = pattern(len, seed);
                let expect = data.to_vec();
                let outcome = match ch.write(slot * io_blocks, io_blocks, data).await {
                    Ok(_) => match ch.read(slot * io_blocks, io_blocks, rbuf).await {
                        Ok(got) => {
                            let same = got[..] == expect[..];
                            rbuf = got;
                            if same {
                                Outcome::Verified
                            } else {
                                Outcome::Mismatch
                            }
                        }
                        Err(e) => {
                            rbuf = e.buf.unwrap_or_else(|| DmaBuf::new(len).expect("buf"));
                            Outcome::Error
                        }
                    },
                    Err(_) => Outcome::Error,
                };
                let mut rep = report.get();
                match outcome {
                    Outcome::Verified => rep.verified += 1,
                    Outcome::Mismatch => rep.mismatches += 1,
                    Outcome::Error => rep.errors += 1,
                }
                report.set(rep);
            }
            finished.set(finished.get() + 1);
        });
    }
    assert!(
        wait_for(120, || finished.get() == qd).await,
        "verify timed out"
    );
    report.get()
}
