//! After warm-up, 100 000 null-bdev reads and writes on one thread cause
//! zero heap allocations: the I/O path (pool, channel, module, completion)
//! allocates nothing per I/O in steady state. The same holds through each
//! virtual bdev stacked on null (passthru, a split part, error, delay),
//! which forward with the shared `bdevkit::bdev::vbdev::forward`. (Driver:
//! `bdevkit_test::steady`.)

#[cfg(test)]
mod tests {
    use bdevkit::bdev::BdevManager;
    use bdevkit_delay::DelayCreateParams;
    use bdevkit_error::ErrorCreateParams;
    use bdevkit_null::NullCreateParams;
    use bdevkit_passthru::PassthruCreateParams;
    use bdevkit_split::SplitCreateParams;
    use bdevkit_test::steady::{self, CountingAlloc, SteadyState, MEASURED};
    use bdevkit_test::TestEnv;

    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;

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
            let SteadyState { failures, allocs } = measure(target);
            assert_eq!(failures, 0, "{target}");
            assert_eq!(
                allocs, 0,
                "{target}: {allocs} heap allocations during {MEASURED} steady-state I/Os"
            );
        }
    }

    /// Runs the workload on `target` in a fresh runtime.
    fn measure(target: &'static str) -> SteadyState {
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
        steady::measure(&env, target, move |mgr| create(mgr, target))
    }
}
