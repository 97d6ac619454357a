//! After warm-up, 100 000 reads and writes through the nvme bdev module
//! and the user-space driver, against the in-process emulated controller
//! (a RAM namespace: the data really moves through PRPs), cause zero heap
//! allocations: channel, queue pair, PCIe transport, completion batch and
//! the admin poller that runs meanwhile allocate nothing per I/O, nor
//! does the emulated controller. Its own binary: it installs the counting
//! global allocator, which counts every thread of the process.
//!
//! The controller is polled on the reactor thread (no thread of its
//! own): on a loaded machine a hand-off between two threads per batch
//! made the run take over a minute, and then the test harness's
//! "running for over 60 seconds" notice allocates.

#[cfg(test)]
mod tests {
    use bdevkit::bdev::BdevManager;
    use bdevkit_nvme::AttachArgs;
    use bdevkit_nvme_driver::emu::{EmuKind, EmuNamespace, EmuOptions};
    use bdevkit_test::steady::{self, CountingAlloc, SteadyState, MEASURED};
    use bdevkit_test::TestEnv;

    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;

    async fn attach(mgr: BdevManager) {
        bdevkit_nvme::emu_start_inline(
            &mgr,
            "emu",
            EmuOptions {
                namespaces: vec![EmuNamespace {
                    nsid: 1,
                    kind: EmuKind::Ram,
                    block_size: 4096,
                    num_blocks: 2048,
                }],
                ..EmuOptions::default()
            },
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        bdevkit_nvme::attach(
            &mgr,
            AttachArgs::pcie("Nvme0", "emu:emu"),
            Box::new(move |r| {
                tx.send(r.map_err(|e| e.to_string())).unwrap();
            }),
        );
        assert!(
            bdevkit_test::env::wait_for(30, || rx.try_recv().map(|r| r.unwrap()).is_ok()).await,
            "attach finished"
        );
    }

    #[test]
    fn steady_state_nvme_io_allocates_nothing() {
        let env = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
        let SteadyState { failures, allocs } = steady::measure_with(&env, "Nvme0n1", attach);
        assert_eq!(failures, 0);
        assert_eq!(
            allocs, 0,
            "{allocs} heap allocations during {MEASURED} steady-state I/Os"
        );
    }
}
