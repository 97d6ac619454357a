//! Per-I/O cost of the uring module, driven through the bdev API on one
//! polling reactor, to compare with `fio --ioengine=io_uring` on the same
//! file (driver: `bdevkit_test::kernel::qd_bench`; `BENCH_IDLE_YIELD` (1)
//! and `BENCH_SQPOLL` (0) set the module's options). Ignored by default;
//! run with
//!
//! ```text
//! BENCH_FILE=/dev/shm/bench.img BENCH_QD=32 BENCH_SECS=5 BENCH_RW=randread \
//!   cargo test --release -p bdevkit-uring --test bench -- --ignored --nocapture
//! ```
//!
//! The file must exist (e.g. `truncate -s 1G /dev/shm/bench.img`; for
//! reads of real data, fill it first). Prints one line:
//! `uring <rw> qd=<n> iops=<x> cpu=<percent>`.

mod common;

#[cfg(test)]
mod tests {
    use bdevkit::bdev::module::BdevManager;
    use bdevkit_test::kernel::{self, env_u64, Backend};

    use super::common::URING;

    /// Registers the module with the options the environment asks for.
    fn register(mgr: &BdevManager) {
        bdevkit_uring::register(mgr);
        let mut o = bdevkit_uring::options(mgr).unwrap();
        o.idle_yield = env_u64("BENCH_IDLE_YIELD", 1) != 0;
        o.sqpoll = env_u64("BENCH_SQPOLL", 0) != 0;
        bdevkit_uring::set_options(mgr, o).unwrap();
    }

    #[test]
    #[ignore = "benchmark: run with --ignored and BENCH_FILE set"]
    fn qd_bench() {
        kernel::qd_bench(&Backend { register, ..URING });
    }
}
