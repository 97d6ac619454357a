//! Virtual bdevs stacked on each other: data integrity through deep stacks
//! on two cores, hot removal of a base under a QD-64 workload, and a saved
//! config of a whole stack replayed in reverse order.

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use bdevkit::bdev::{BdevManager, IoStat};
    use bdevkit_delay::DelayCreateParams;
    use bdevkit_error::ErrorCreateParams;

    use bdevkit_passthru::PassthruCreateParams;
    use bdevkit_raid::{RaidCreateParams, RaidLevel, RaidState};
    use bdevkit_split::SplitCreateParams;
    use bdevkit_test::env::wait_for;
    use bdevkit_test::{malloc, rpc, sleep_ms, verify, TestEnv};

    fn env() -> TestEnv {
        TestEnv::with_modules(
            "0x3",
            &[
                bdevkit_null::register,
                bdevkit_malloc::register,
                bdevkit_passthru::register,
                bdevkit_split::register,
                bdevkit_raid::register,
                bdevkit_delay::register,
                bdevkit_error::register,
            ],
        )
    }

    /// passthru `PT` on split part `R1p0` on raid1 `R1` of `M0` and `M1`.
    async fn deep_stack(mgr: &BdevManager) {
        malloc(mgr, "M0", 16384);
        malloc(mgr, "M1", 16384);
        bdevkit_raid::create(
            mgr,
            RaidCreateParams::new("R1", RaidLevel::Raid1, 0, &["M0", "M1"]),
        )
        .await
        .unwrap();
        bdevkit_split::create(mgr, SplitCreateParams::new("R1", 2)).unwrap();
        bdevkit_passthru::create(mgr, PassthruCreateParams::new("R1p0", "PT")).unwrap();
    }

    async fn iostat(mgr: &BdevManager, name: &str) -> IoStat {
        let (tx, rx) = mpsc::channel();
        mgr.get(name)
            .unwrap()
            .get_iostat(move |s| tx.send(s).unwrap());
        loop {
            if let Ok(s) = rx.try_recv() {
                return s;
            }
            sleep_ms(1).await;
        }
    }

    #[test]
    fn verify_through_passthru_on_split_on_raid1() {
        let env = env();
        env.run(|mgr| async move {
            deep_stack(&mgr).await;
            assert_eq!(mgr.get("PT").unwrap().num_blocks(), 8192);
        });
        let r = verify::run(&env, "PT", 8, 16, 60);
        assert_eq!((r.mismatches, r.errors), (0, 0), "{r:?}");
        assert_eq!(r.verified, 2 * 16 * 60);
        env.run(|mgr| async move {
            // Both mirrors got every write.
            let (a, b) = (iostat(&mgr, "M0").await, iostat(&mgr, "M1").await);
            assert!(a.num_write_ops > 0 && a.num_write_ops == b.num_write_ops);
        });
    }

    #[test]
    fn verify_through_raid0_and_concat_of_four() {
        let env = env();
        env.run(|mgr| async move {
            for i in 0..8 {
                malloc(&mgr, &format!("M{i}"), 4096);
            }
            let p = RaidCreateParams::new("R0", RaidLevel::Raid0, 4, &["M0", "M1", "M2", "M3"]);
            bdevkit_raid::create(&mgr, p).await.unwrap();
            let p = RaidCreateParams::new("C0", RaidLevel::Concat, 4, &["M4", "M5", "M6", "M7"]);
            bdevkit_raid::create(&mgr, p).await.unwrap();
        });
        // 24 blocks: every I/O crosses strips (raid0) and some cross
        // members (concat), so the boundary split is exercised.
        for name in ["R0", "C0"] {
            let r = verify::run(&env, name, 24, 16, 40);
            assert_eq!((r.mismatches, r.errors), (0, 0), "{name}: {r:?}");
            assert_eq!(r.verified, 2 * 16 * 40);
        }
        env.run(|mgr| async move {
            for i in 0..4 {
                let s = iostat(&mgr, &format!("M{i}")).await;
                assert!(s.num_write_ops > 0, "raid0 member M{i} got writes");
            }
            for i in 4..8 {
                let s = iostat(&mgr, &format!("M{i}")).await;
                assert!(s.num_write_ops > 0, "concat member M{i} got writes");
            }
        });
    }

    /// Runs a QD-64 verify on `top` on both cores and, once I/O flows,
    /// deletes malloc `victim` from the app thread. Returns the report.
    fn verify_while_deleting(
        env: &TestEnv,
        top: &str,
        victim: &'static str,
    ) -> verify::VerifyReport {
        std::thread::scope(|s| {
            let load = s.spawn(|| verify::run(env, top, 8, 64, 600));
            let top2 = top.to_string();
            env.run(move |mgr| async move {
                // Both workers are in and I/O flows.
                let bdev = mgr.get(&top2).unwrap();
                assert!(wait_for(60, || bdev.open_descriptors() >= 2).await);
                loop {
                    if iostat(&mgr, victim).await.num_write_ops >= 256 {
                        break;
                    }
                    sleep_ms(1).await;
                }
                let (tx, rx) = mpsc::channel();
                bdevkit_malloc::delete(&mgr, victim, move |r| tx.send(r.is_ok()).unwrap());
                // Completes once the workload closes the top of the stack.
                assert!(wait_for(60, || rx.try_recv() == Ok(true)).await);
            });
            load.join().unwrap()
        })
    }

    /// Every `BdevIo` is back: in the pool or in this thread's cache.
    async fn pool_is_full(mgr: &BdevManager) -> bool {
        let size = mgr.options().bdev_io_pool_size as usize;
        wait_for(60, || {
            mgr.io_pool_available() + mgr.io_cached_on_this_thread() == size
        })
        .await
    }

    #[test]
    fn hot_remove_under_load_passthru_on_split() {
        let env = env();
        env.run(|mgr| async move {
            malloc(&mgr, "M0", 8192);
            bdevkit_split::create(&mgr, SplitCreateParams::new("M0", 2)).unwrap();
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("M0p1", "PT")).unwrap();
        });
        let r = verify_while_deleting(&env, "PT", "M0");
        assert!(r.errors > 0, "the workload saw its base go: {r:?}");
        assert_eq!(r.mismatches, 0, "{r:?}");
        env.run(|mgr| async move {
            // The stack unwinds as the workers' descriptors close.
            let gone = ["PT", "M0p0", "M0p1", "M0"];
            assert!(
                wait_for(60, || gone.iter().all(|n| mgr.get(n).is_none())).await,
                "every bdev of the stack is gone"
            );
            assert!(pool_is_full(&mgr).await, "every BdevIo came back");
        });
    }

    #[test]
    fn hot_remove_under_load_delay_on_error_on_raid0() {
        let env = env();
        env.run(|mgr| async move {
            for i in 0..4 {
                malloc(&mgr, &format!("M{i}"), 4096);
            }
            let p = RaidCreateParams::new("R0", RaidLevel::Raid0, 4, &["M0", "M1", "M2", "M3"]);
            bdevkit_raid::create(&mgr, p).await.unwrap();
            bdevkit_error::create(&mgr, ErrorCreateParams::new("R0")).unwrap();
            bdevkit_delay::create(&mgr, DelayCreateParams::new("D0", "EE_R0", 0)).unwrap();
        });
        let r = verify_while_deleting(&env, "D0", "M2");
        assert!(r.errors > 0, "the workload saw the raid go offline: {r:?}");
        assert_eq!(r.mismatches, 0, "{r:?}");
        env.run(|mgr| async move {
            let gone = ["D0", "EE_R0", "R0", "M2"];
            assert!(
                wait_for(60, || gone.iter().all(|n| mgr.get(n).is_none())).await,
                "every bdev of the stack is gone"
            );
            assert_eq!(
                bdevkit_raid::raid(&mgr, "R0").unwrap().state(),
                RaidState::Offline
            );
            assert!(pool_is_full(&mgr).await, "every BdevIo came back");
            let (tx, rx) = mpsc::channel();
            bdevkit_raid::delete(&mgr, "R0", move |r| tx.send(r.is_ok()).unwrap());
            assert!(wait_for(60, || rx.try_recv() == Ok(true)).await);
            assert!(
                mgr.get("M0").unwrap().claim().is_none(),
                "survivors released"
            );
        });
    }

    #[test]
    fn raid1_member_hot_removed_under_load_keeps_serving() {
        let env = env();
        env.run(|mgr| async move {
            deep_stack(&mgr).await;
        });
        let r = verify_while_deleting(&env, "PT", "M0");
        assert_eq!(
            (r.mismatches, r.errors),
            (0, 0),
            "raid1 rides it out: {r:?}"
        );
        env.run(|mgr| async move {
            assert_eq!(
                bdevkit_raid::raid(&mgr, "R1").unwrap().state(),
                RaidState::Degraded
            );
            assert!(mgr.get("PT").is_some() && mgr.get("M0").is_none());
            assert!(pool_is_full(&mgr).await, "every BdevIo came back");
        });
    }

    #[test]
    fn saved_config_of_a_whole_stack_replays_backwards() {
        let (saved, uuids) = env().run(|mgr| async move {
            deep_stack(&mgr).await;
            bdevkit_error::create(&mgr, ErrorCreateParams::new("R1p1")).unwrap();
            bdevkit_delay::create(&mgr, DelayCreateParams::new("D0", "EE_R1p1", 5)).unwrap();
            let uuids: Vec<String> = ["PT", "R1", "D0"]
                .iter()
                .map(|n| mgr.get(n).unwrap().uuid().to_string())
                .collect();
            (mgr.config_json(), uuids)
        });
        let methods: Vec<&str> = saved.iter().filter_map(|e| e["method"].as_str()).collect();
        assert_eq!(methods.first(), Some(&"bdev_set_options"));
        assert_eq!(methods.last(), Some(&"bdev_wait_for_examine"));
        env().run(move |mgr| async move {
            let reg = rpc::registry(
                &mgr,
                &[
                    bdevkit_malloc::rpc::register_rpcs,
                    bdevkit_passthru::rpc::register_rpcs,
                    bdevkit_split::rpc::register_rpcs,
                    bdevkit_raid::rpc::register_rpcs,
                    bdevkit_delay::rpc::register_rpcs,
                    bdevkit_error::rpc::register_rpcs,
                ],
            );
            // Top of the stack first: examine assembles it as bases appear.
            for e in saved.iter().rev() {
                let m = e["method"].as_str().unwrap();
                if reg.contains(m) {
                    let r = rpc::call(&reg, m, e["params"].clone()).await;
                    r.unwrap_or_else(|e| panic!("{m}: {e}"));
                }
            }
            let now: Vec<String> = ["PT", "R1", "D0"]
                .iter()
                .map(|n| mgr.get(n).unwrap().uuid().to_string())
                .collect();
            assert_eq!(now, uuids);
            let (tx, rx) = mpsc::channel();
            mgr.wait_for_examine(move || tx.send(()).unwrap());
            assert!(wait_for(60, || rx.try_recv().is_ok()).await);
        });
    }
}
