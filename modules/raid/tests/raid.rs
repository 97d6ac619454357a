//! raid0, raid1 and concat over malloc: conformance, data placement,
//! configuring/examine, degraded and offline, deletion, config replay and
//! the RPCs.

#[cfg(test)]
mod tests {
    use bdevkit::bdev::{BdevManager, ClaimType};
    use bdevkit::dma::DmaBuf;
    use bdevkit_error::{ErrorCreateParams, ErrorInjectParams, InjectErrorType, InjectIoType};
    use bdevkit_jsonrpc::{MethodRegistry, RpcError};
    use bdevkit_raid::{RaidCreateParams, RaidLevel, RaidState};
    use bdevkit_test::env::wait_for;
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{conformance, contents, delete_malloc, fill, malloc, verify, TestEnv};
    use serde_json::{json, Value};

    fn env(mask: &str) -> TestEnv {
        TestEnv::with_modules(
            mask,
            &[
                bdevkit_malloc::register,
                bdevkit_error::register,
                bdevkit_raid::register,
            ],
        )
    }

    /// The RPC methods the tests call.
    const RPCS: &[RegisterRpcs] = &[
        bdevkit_malloc::rpc::register_rpcs,
        bdevkit_raid::rpc::register_rpcs,
    ];

    fn state(mgr: &BdevManager, name: &str) -> RaidState {
        bdevkit_raid::raid(mgr, name).unwrap().state()
    }

    #[test]
    fn raid0_conformance_on_four_mallocs() {
        env("0x1").run(|mgr| async move {
            for i in 0..4 {
                malloc(&mgr, &format!("M{i}"), 1024);
            }
            let p = RaidCreateParams::new("r0", RaidLevel::Raid0, 4, &["M0", "M1", "M2", "M3"]);
            bdevkit_raid::create(&mgr, p).await.unwrap();
            let b = mgr.get("r0").unwrap();
            assert_eq!(b.product_name(), "Raid Volume");
            assert_eq!(b.num_blocks(), 4096);
            assert_eq!(state(&mgr, "r0"), RaidState::Online);
            assert_eq!(
                mgr.get("M2").unwrap().claim(),
                Some((ClaimType::ExclusiveWrite, "raid".to_string()))
            );
            conformance::run(&mgr, "r0", Some(bdevkit_raid::delete)).await;
            assert!(
                bdevkit_raid::raid(&mgr, "r0").is_none(),
                "deleted raid is forgotten"
            );
            assert!(wait_for(60, || mgr.get("M2").unwrap().claim().is_none()).await);
        });
    }

    #[test]
    fn raid1_and_concat_conformance() {
        env("0x1").run(|mgr| async move {
            malloc(&mgr, "A", 600);
            malloc(&mgr, "B", 500);
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r1", RaidLevel::Raid1, 0, &["A", "B"]),
            )
            .await
            .unwrap();
            assert_eq!(mgr.get("r1").unwrap().num_blocks(), 500, "smallest member");
            conformance::run(&mgr, "r1", Some(bdevkit_raid::delete)).await;

            // Sizes rounded down to whole strips (8 blocks): 96 + 64 + 200.
            malloc(&mgr, "C0", 100);
            malloc(&mgr, "C1", 64);
            malloc(&mgr, "C2", 200);
            let p = RaidCreateParams::new("c0", RaidLevel::Concat, 4, &["C0", "C1", "C2"]);
            bdevkit_raid::create(&mgr, p).await.unwrap();
            assert_eq!(mgr.get("c0").unwrap().num_blocks(), 96 + 64 + 200);
            conformance::run(&mgr, "c0", Some(bdevkit_raid::delete)).await;
        });
    }

    #[test]
    fn data_lands_on_the_mapped_member() {
        env("0x1").run(|mgr| async move {
            for n in ["X0", "X1", "Y0", "Y1"] {
                malloc(&mgr, n, 64);
            }
            // raid0, strip 1 KiB = 2 blocks: raid block 2 is member 1's block 0.
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r0", RaidLevel::Raid0, 1, &["X0", "X1"]),
            )
            .await
            .unwrap();
            // concat: raid block 64 is member 1's block 0.
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("c0", RaidLevel::Concat, 1, &["Y0", "Y1"]),
            )
            .await
            .unwrap();
            for (raid, block, member) in [("r0", 2, "X1"), ("r0", 5, "X0"), ("c0", 64, "Y1")] {
                let d = mgr.open(raid, true, |_| {}).unwrap();
                let ch = d.get_io_channel().unwrap();
                let data = conformance::pattern(512, block);
                let expect = data.to_vec();
                ch.write(block, 1, data).await.unwrap();
                let m = mgr.open(member, false, |_| {}).unwrap();
                let mch = m.get_io_channel().unwrap();
                let mblock = match (raid, block) {
                    ("r0", 2) => 0,
                    ("r0", 5) => 3, // strip 2 -> member 0's strip 1, second block
                    _ => 0,
                };
                let got = mch
                    .read(mblock, 1, DmaBuf::new(512).unwrap())
                    .await
                    .unwrap();
                assert_eq!(&got[..], &expect[..], "{raid} block {block} on {member}");
            }
            // A write across a strip boundary is split by the bdev layer.
            let d = mgr.open("r0", true, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            let data = conformance::pattern(512 * 7, 9);
            let expect = data.to_vec();
            ch.write(1, 7, data).await.unwrap();
            let got = ch.read(1, 7, DmaBuf::new(512 * 7).unwrap()).await.unwrap();
            assert_eq!(&got[..], &expect[..]);
            ch.flush(0, 128).await.unwrap();
            ch.unmap(3, 9).await.unwrap();
        });
    }

    #[test]
    fn raid0_and_raid1_grow_with_their_members() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;

        use bdevkit::bdev::BdevEvent;
        use bdevkit_null::NullCreateParams;

        let env = TestEnv::with_modules("0x1", &[bdevkit_null::register, bdevkit_raid::register]);
        env.run(|mgr| async move {
            const MIB: u64 = 2048; // 512-byte blocks per MiB
            for n in ["N0", "N1", "N2", "N3", "N4", "N5"] {
                bdevkit_null::create(&mgr, NullCreateParams::new(n, 512, 16 * MIB)).unwrap();
            }
            // Strip 64 KiB = 128 blocks.
            for (name, level, strip, members) in [
                ("r0", RaidLevel::Raid0, 64, ["N0", "N1"]),
                ("r1", RaidLevel::Raid1, 0, ["N2", "N3"]),
                ("c0", RaidLevel::Concat, 64, ["N4", "N5"]),
            ] {
                bdevkit_raid::create(&mgr, RaidCreateParams::new(name, level, strip, &members))
                    .await
                    .unwrap();
            }
            let resized = Arc::new(AtomicUsize::new(0));
            let mut descs = Vec::new();
            for name in ["r0", "r1", "c0"] {
                let r = Arc::clone(&resized);
                descs.push(
                    mgr.open(name, true, move |e| {
                        if e == BdevEvent::Resize {
                            r.fetch_add(1, Ordering::SeqCst);
                        }
                    })
                    .unwrap(),
                );
            }
            let blocks = |n: &str| mgr.get(n).unwrap().num_blocks();
            assert_eq!(blocks("r0"), 32 * MIB);
            assert_eq!(blocks("r1"), 16 * MIB);
            // One member grown: the smallest still bounds the raid.
            bdevkit_null::resize(&mgr, "N0", 40).unwrap();
            bdevkit_null::resize(&mgr, "N2", 40).unwrap();
            bdevkit_null::resize(&mgr, "N4", 40).unwrap();
            bdevkit_test::env::sleep_ms(20).await;
            assert_eq!((blocks("r0"), blocks("r1")), (32 * MIB, 16 * MIB));
            assert_eq!(resized.load(Ordering::SeqCst), 0);
            // Both grown: raid0 by whole strips of the smaller, raid1 to it.
            // 24 MiB + 3 blocks is not a whole number of strips.
            let n1 = mgr.get("N1").unwrap();
            n1.notify_resize(24 * MIB + 3);
            bdevkit_null::resize(&mgr, "N3", 24).unwrap();
            bdevkit_null::resize(&mgr, "N5", 24).unwrap();
            assert!(wait_for(60, || resized.load(Ordering::SeqCst) == 2).await);
            assert_eq!(blocks("r0"), 2 * 24 * MIB);
            assert_eq!(blocks("r1"), 24 * MIB);
            assert_eq!(blocks("c0"), 32 * MIB, "concat keeps its size");
            let info = bdevkit_raid::get_bdevs(&mgr, "all").unwrap();
            let r0 = info.iter().find(|r| r["name"] == "r0").unwrap();
            assert_eq!(r0["base_bdevs_list"][1]["data_size"], 24 * MIB);
            // The new blocks serve I/O, mapped as before.
            for name in ["r0", "r1"] {
                let d = mgr.open(name, true, |_| {}).unwrap();
                let ch = d.get_io_channel().unwrap();
                let last = blocks(name) - 1;
                ch.write(last, 1, DmaBuf::new(512).unwrap()).await.unwrap();
                ch.read(last, 1, DmaBuf::new(512).unwrap()).await.unwrap();
            }
            drop(descs);
        });
    }

    #[test]
    fn remove_base_bdev_degrades_offlines_or_unconfigures() {
        env("0x1").run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for n in ["A0", "A1", "B0", "B1", "C0"] {
                malloc(&mgr, n, 256);
            }
            for (name, level, strip, members) in [
                ("r1", RaidLevel::Raid1, 0, ["A0", "A1"]),
                ("r0", RaidLevel::Raid0, 4, ["B0", "B1"]),
                ("rc", RaidLevel::Raid1, 0, ["C0", "C1"]),
            ] {
                bdevkit_raid::create(&mgr, RaidCreateParams::new(name, level, strip, &members))
                    .await
                    .unwrap();
            }
            let remove =
                |name: &str| call(&reg, "bdev_raid_remove_base_bdev", json!({ "name": name }));
            let unclaimed = |name: &str| mgr.get(name).unwrap().claim().is_none();

            // raid1: degraded, still serving from A0; A1 released.
            let d = mgr.open("r1", true, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            assert_eq!(remove("A1").await, Ok(json!(true)));
            assert_eq!(state(&mgr, "r1"), RaidState::Degraded);
            assert!(wait_for(60, || unclaimed("A1")).await);
            let data = conformance::pattern(512, 3);
            let expect = data.to_vec();
            ch.write(7, 1, data).await.unwrap();
            let got = ch.read(7, 1, DmaBuf::new(512).unwrap()).await.unwrap();
            assert_eq!(&got[..], &expect[..]);
            // Its last member: offline.
            assert_eq!(remove("A0").await, Ok(json!(true)));
            assert!(ch.read(7, 1, DmaBuf::new(512).unwrap()).await.is_err());
            drop(ch);
            drop(d);
            assert!(wait_for(60, || mgr.get("r1").is_none()).await);

            // raid0 has no redundancy: offline, its bdev unregistered; the
            // other member stays held until the raid is deleted.
            assert_eq!(remove("B1").await, Ok(json!(true)));
            assert!(wait_for(60, || mgr.get("r0").is_none()).await);
            assert_eq!(state(&mgr, "r0"), RaidState::Offline);
            assert!(unclaimed("B1") && !unclaimed("B0"));
            assert_eq!(
                call(&reg, "bdev_raid_delete", json!({"name": "r0"})).await,
                Ok(json!(true))
            );
            assert!(wait_for(60, || unclaimed("B0")).await);

            // A configuring raid waits for the member again.
            assert_eq!(remove("C0").await, Ok(json!(true)));
            assert_eq!(state(&mgr, "rc"), RaidState::Configuring);
            assert!(unclaimed("C0"));
            let cfg = bdevkit_raid::get_bdevs(&mgr, "configuring").unwrap();
            assert_eq!(cfg[0]["num_base_bdevs_discovered"], 0);

            // Not a member of any raid (any more), or no such bdev.
            let fail = Err(RpcError::new(
                -19,
                "Failed to remove base bdev from raid bdev",
            ));
            assert_eq!(remove("C0").await, fail.clone());
            assert_eq!(remove("nope").await, fail);
            assert_eq!(
                call(&reg, "bdev_raid_remove_base_bdev", json!({"base": "C0"})).await,
                Err(RpcError::new(-32700, "spdk_json_decode_object failed"))
            );
        });
    }

    /// Raid1 `r1` of `members` with 4 KiB rebuild windows, its second
    /// member taken out.
    async fn degraded_raid1(mgr: &BdevManager, reg: &MethodRegistry, members: [&str; 2]) {
        bdevkit_raid::create(
            mgr,
            RaidCreateParams::new("r1", RaidLevel::Raid1, 0, &members),
        )
        .await
        .unwrap();
        let opts = json!({"process_window_size_kb": 4});
        assert_eq!(
            call(reg, "bdev_raid_set_options", opts).await,
            Ok(json!(true))
        );
        assert_eq!(
            call(
                reg,
                "bdev_raid_remove_base_bdev",
                json!({"name": members[1]})
            )
            .await,
            Ok(json!(true))
        );
        assert_eq!(state(mgr, "r1"), RaidState::Degraded);
    }

    #[test]
    fn add_base_bdev_rebuilds_a_degraded_raid1() {
        env("0x1").run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            malloc(&mgr, "A0", 2048);
            malloc(&mgr, "A1", 2048);
            malloc(&mgr, "A2", 4096);
            degraded_raid1(&mgr, &reg, ["A0", "A1"]).await;
            // Only A0 holds the data.
            fill(&mgr, "r1", 0, 2048, 1).await;
            fill(&mgr, "r1", 100, 300, 2).await;
            let expect = contents(&mgr, "r1", 2048).await;
            let r = call(
                &reg,
                "bdev_raid_add_base_bdev",
                json!({"raid_bdev": "r1", "base_bdev": "A2"}),
            )
            .await;
            assert_eq!(r, Ok(json!(true)));
            let info = &bdevkit_raid::get_bdevs(&mgr, "all").unwrap()[0];
            assert_eq!(info["process"]["type"], "rebuild", "{info}");
            assert_eq!(info["process"]["target"], "A2");
            assert_eq!(info["base_bdevs_list"][1]["name"], "A2");
            assert_eq!(info["num_base_bdevs_operational"], 1);
            assert!(wait_for(60, || state(&mgr, "r1") == RaidState::Online).await);
            let info = &bdevkit_raid::get_bdevs(&mgr, "all").unwrap()[0];
            assert!(info.get("process").is_none(), "{info}");
            assert_eq!(info["num_base_bdevs_operational"], 2);
            // The new member holds what the old one does.
            assert!(
                contents(&mgr, "A2", 2048).await == expect,
                "A2 differs from the raid"
            );
            // And serves reads alone once A0 is gone.
            assert_eq!(
                call(&reg, "bdev_raid_remove_base_bdev", json!({"name": "A0"})).await,
                Ok(json!(true))
            );
            assert!(contents(&mgr, "r1", 2048).await == expect);
            // save_config names the new member, and not the one taken out.
            let b = mgr.get("r1").unwrap();
            let cfg = b.write_config_json().unwrap();
            assert_eq!(
                cfg["params"]["base_bdevs"],
                json!(["removed_base_bdev_0", "A2"])
            );
        });
    }

    /// Taking out the member a rebuild writes to returns once the rebuild
    /// let go of it: it can be added back at once (found by the stress
    /// lane: the add failed with "Device or resource busy").
    #[test]
    fn a_rebuild_target_taken_out_can_be_added_back_at_once() {
        env("0x1").run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for n in ["B0", "B1", "B2"] {
                malloc(&mgr, n, 4096);
            }
            degraded_raid1(&mgr, &reg, ["B0", "B1"]).await;
            let slow = json!({"process_max_bandwidth_mb_sec": 1});
            assert_eq!(
                call(&reg, "bdev_raid_set_options", slow).await,
                Ok(json!(true))
            );
            let add = json!({"raid_bdev": "r1", "base_bdev": "B2"});
            for _ in 0..3 {
                assert_eq!(
                    call(&reg, "bdev_raid_add_base_bdev", add.clone()).await,
                    Ok(json!(true))
                );
                assert!(bdevkit_raid::raid(&mgr, "r1").unwrap().is_rebuilding());
                assert_eq!(
                    call(&reg, "bdev_raid_remove_base_bdev", json!({"name": "B2"})).await,
                    Ok(json!(true))
                );
                assert!(!bdevkit_raid::raid(&mgr, "r1").unwrap().is_rebuilding());
            }
        });
    }

    /// Writes running during the rebuild end up on the new member too: a
    /// writer on the other core keeps writing until the raid is whole
    /// again; afterwards both members hold exactly what it wrote last. The
    /// source member reads slowly (a delay bdev), so writes land while a
    /// window's copy is under way: without the window's quiesce, the copy
    /// would put old data over them.
    #[test]
    fn rebuild_under_concurrent_writes() {
        use bdevkit::thread::CpuSet;
        use bdevkit_delay::DelayCreateParams;

        const CHUNKS: u64 = 256; // of 8 blocks: 1 MiB
        let env = TestEnv::with_modules(
            "0x3",
            &[
                bdevkit_malloc::register,
                bdevkit_delay::register,
                bdevkit_raid::register,
            ],
        );
        env.run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for n in ["B0", "B1", "B2"] {
                malloc(&mgr, n, CHUNKS * 8);
            }
            let mut slow = DelayCreateParams::new("DB0", "B0", 0);
            slow.avg_read_latency = 2_000;
            slow.p99_read_latency = 2_000;
            bdevkit_delay::create(&mgr, slow).unwrap();
            // 256 windows of 4 KiB, each read in 2 ms: about half a second.
            degraded_raid1(&mgr, &reg, ["DB0", "B1"]).await;
        });
        let writer_thread = env
            .runtime()
            .handle()
            .spawn_thread("writer", Some(&CpuSet::single(1)))
            .unwrap();
        let mgr = env.mgr().clone();
        let (during, last) = std::thread::scope(|s| {
            let writer = s.spawn(move || {
                writer_thread
                    .block_on(move || async move {
                        let d = mgr.open("r1", true, |_| {}).unwrap();
                        let ch = d.get_io_channel().unwrap();
                        let mut last = vec![0u64; usize::try_from(CHUNKS).unwrap()];
                        let (mut during, mut seq, mut x) = (0u64, 0u64, 12345u64);
                        loop {
                            let raid = bdevkit_raid::raid(&mgr, "r1").unwrap();
                            let progress = raid.rebuild_progress();
                            if raid.state() == RaidState::Online && progress.is_none() {
                                break;
                            }
                            // Mostly the window being copied right now,
                            // sometimes anywhere.
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let chunk = match progress {
                                Some(p) if x % 4 != 0 => (p.done / 8).min(CHUNKS - 1),
                                _ => x % CHUNKS,
                            };
                            seq += 1;
                            let data = conformance::pattern(8 * 512, seq);
                            ch.write(chunk * 8, 8, data).await.unwrap();
                            last[usize::try_from(chunk).unwrap()] = seq;
                            during += u64::from(progress.is_some());
                        }
                        (during, last)
                    })
                    .unwrap()
            });
            env.run(|mgr| async move {
                bdevkit_raid::add_base_bdev(&mgr, "r1", "B2").await.unwrap();
            });
            writer.join().unwrap()
        });
        assert!(during > 100, "only {during} writes ran during the rebuild");
        env.run(move |mgr| async move {
            let a = contents(&mgr, "DB0", CHUNKS * 8).await;
            let b = contents(&mgr, "B2", CHUNKS * 8).await;
            let first_diff = a.iter().zip(&b).position(|(x, y)| x != y);
            assert_eq!(first_diff, None, "members differ after the rebuild");
            for (chunk, seq) in last.iter().enumerate() {
                if *seq != 0 {
                    let at = chunk * 8 * 512;
                    assert!(
                        b[at..at + 8 * 512] == conformance::pattern(8 * 512, *seq)[..],
                        "chunk {chunk} lost write {seq}"
                    );
                }
            }
        });
    }

    /// A write in flight in a window when the rebuild reaches it is waited
    /// for before the window is copied: here it is held by an error bdev,
    /// and the rebuild does not move until it lands.
    #[test]
    fn rebuild_waits_for_writes_in_flight_in_its_window() {
        env("0x1").run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for n in ["S", "T0", "T1"] {
                malloc(&mgr, n, 64);
            }
            bdevkit_error::create(&mgr, ErrorCreateParams::new("S")).unwrap();
            degraded_raid1(&mgr, &reg, ["EE_S", "T0"]).await;
            // A write to blocks 0..8, held on its way to the only member.
            let mut p =
                ErrorInjectParams::new("EE_S", InjectIoType::Write, InjectErrorType::Pending);
            p.num = Some(1);
            bdevkit_error::inject_error(&mgr, &p).unwrap();
            let d = mgr.open("r1", true, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            let data = conformance::pattern(8 * 512, 77);
            let expect = data.to_vec();
            let done = std::rc::Rc::new(std::cell::Cell::new(false));
            let d2 = std::rc::Rc::clone(&done);
            bdevkit::thread::Thread::current()
                .unwrap()
                .spawn_local(async move {
                    ch.write(0, 8, data).await.unwrap();
                    d2.set(true);
                    drop(d);
                });
            bdevkit_test::env::sleep_ms(5).await;
            bdevkit_raid::add_base_bdev(&mgr, "r1", "T1").await.unwrap();
            bdevkit_test::env::sleep_ms(50).await;
            let raid = bdevkit_raid::raid(&mgr, "r1").unwrap();
            assert_eq!(
                raid.rebuild_progress().map(|p| p.done),
                Some(0),
                "waits for the write"
            );
            assert!(!done.get());
            bdevkit_error::resume_pending(&mgr, "EE_S").unwrap();
            assert!(wait_for(60, || state(&mgr, "r1") == RaidState::Online).await);
            assert!(done.get());
            assert!(
                contents(&mgr, "T1", 8).await == expect,
                "the copy carries the write"
            );
        });
    }

    #[test]
    fn add_base_bdev_errors() {
        env("0x1").run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for n in ["C0", "C1", "C2", "C3", "D0", "D1", "E0", "E1", "E2", "F0"] {
                malloc(&mgr, n, 256);
            }
            malloc(&mgr, "Tiny", 16);
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r0", RaidLevel::Raid0, 4, &["C0", "C1"]),
            )
            .await
            .unwrap();
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r1", RaidLevel::Raid1, 0, &["D0", "D1"]),
            )
            .await
            .unwrap();
            let add = |raid: &str, base: &str| {
                call(
                    &reg,
                    "bdev_raid_add_base_bdev",
                    json!({"raid_bdev": raid, "base_bdev": base}),
                )
            };
            let fail = |raid: &str, base: &str, code: i32, text: &str| {
                Err(RpcError::new(
                    code,
                    format!("Failed to add base bdev {base} to RAID bdev {raid}: {text}"),
                ))
            };
            assert_eq!(
                add("nope", "C2").await,
                Err(RpcError::new(-19, "raid bdev nope is not found in config"))
            );
            assert_eq!(
                add("r0", "C2").await,
                fail("r0", "C2", -22, "Invalid argument")
            );
            assert_eq!(
                add("r1", "C2").await,
                fail("r1", "C2", -22, "Invalid argument"),
                "no empty slot"
            );
            assert_eq!(
                call(&reg, "bdev_raid_remove_base_bdev", json!({"name": "D1"})).await,
                Ok(json!(true))
            );
            assert_eq!(
                add("r1", "Tiny").await,
                fail("r1", "Tiny", -22, "Invalid argument")
            );
            assert_eq!(add("r1", "Q").await, fail("r1", "Q", -19, "No such device"));
            assert_eq!(
                add("r1", "C0").await,
                fail("r1", "C0", -1, "Operation not permitted")
            );
            assert!(mgr.get("Tiny").unwrap().claim().is_none());
            assert_eq!(
                call(&reg, "bdev_raid_add_base_bdev", json!({"raid_bdev": "r1"})).await,
                Err(RpcError::new(-32700, "spdk_json_decode_object failed"))
            );
            // One rebuild at a time.
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r3", RaidLevel::Raid1, 0, &["E0", "E1", "E2"]),
            )
            .await
            .unwrap();
            for m in ["E1", "E2"] {
                assert_eq!(
                    call(&reg, "bdev_raid_remove_base_bdev", json!({"name": m})).await,
                    Ok(json!(true))
                );
            }
            let slow = json!({"process_window_size_kb": 4, "process_max_bandwidth_mb_sec": 1});
            assert_eq!(
                call(&reg, "bdev_raid_set_options", slow).await,
                Ok(json!(true))
            );
            assert_eq!(add("r3", "C2").await, Ok(json!(true)));
            assert_eq!(
                add("r3", "C3").await,
                fail("r3", "C3", -16, "Device or resource busy")
            );
            // Deleting the raid stops the rebuild and frees every member.
            assert_eq!(
                call(&reg, "bdev_raid_delete", json!({"name": "r3"})).await,
                Ok(json!(true))
            );
            assert!(wait_for(60, || mgr.get("C2").unwrap().claim().is_none()).await);
            // A configuring raid takes the member it waits for, and only that.
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("rc", RaidLevel::Raid1, 0, &["F0", "F1"]),
            )
            .await
            .unwrap();
            assert_eq!(
                add("rc", "C3").await,
                fail("rc", "C3", -22, "Invalid argument")
            );
            malloc(&mgr, "F1", 256);
            assert_eq!(state(&mgr, "rc"), RaidState::Online, "examine took F1");
        });
    }

    #[test]
    fn configuring_until_the_last_member_appears() {
        env("0x1").run(|mgr| async move {
            malloc(&mgr, "M0", 256);
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r1", RaidLevel::Raid1, 0, &["M0", "M1"]),
            )
            .await
            .unwrap();
            assert_eq!(state(&mgr, "r1"), RaidState::Configuring);
            assert!(mgr.get("r1").is_none());
            let cfg = bdevkit_raid::get_bdevs(&mgr, "configuring").unwrap();
            assert_eq!(cfg.len(), 1);
            assert_eq!(cfg[0]["num_base_bdevs_discovered"], 1);
            assert_eq!(cfg[0]["base_bdevs_list"][1]["is_configured"], false);
            assert_eq!(cfg[0]["base_bdevs_list"][1]["name"], "M1");
            malloc(&mgr, "M1", 256);
            assert_eq!(state(&mgr, "r1"), RaidState::Online);
            assert!(mgr.get("r1").is_some());
            assert!(bdevkit_raid::get_bdevs(&mgr, "configuring")
                .unwrap()
                .is_empty());
            let (tx, rx) = std::sync::mpsc::channel();
            mgr.wait_for_examine(move || tx.send(()).unwrap());
            assert!(wait_for(60, || rx.try_recv().is_ok()).await);
        });
    }

    #[test]
    fn raid1_degrades_on_member_failures_and_verify_keeps_passing() {
        let env = env("0x3");
        env.run(|mgr| async move {
            malloc(&mgr, "M0", 8192);
            malloc(&mgr, "M1", 8192);
            bdevkit_error::create(&mgr, ErrorCreateParams::new("M0")).unwrap();
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r1", RaidLevel::Raid1, 0, &["EE_M0", "M1"]),
            )
            .await
            .unwrap();
            let mut p =
                ErrorInjectParams::new("EE_M0", InjectIoType::All, InjectErrorType::Failure);
            p.num = Some(1_000_000);
            bdevkit_error::inject_error(&mgr, &p).unwrap();
        });
        let r = verify::run(&env, "r1", 8, 16, 40);
        assert_eq!((r.mismatches, r.errors), (0, 0), "{r:?}");
        assert_eq!(r.verified, 2 * 16 * 40);
        env.run(|mgr| async move {
            assert_eq!(state(&mgr, "r1"), RaidState::Degraded);
            let info = &bdevkit_raid::get_bdevs(&mgr, "online").unwrap()[0];
            assert_eq!(
                info["state"], "online",
                "SPDK reports a degraded raid1 as online"
            );
            assert_eq!(info["num_base_bdevs_operational"], 1);
            assert_eq!(info["num_base_bdevs_discovered"], 2);
        });
    }

    #[test]
    fn raid1_read_failure_is_retried_on_the_mirror() {
        env("0x1").run(|mgr| async move {
            malloc(&mgr, "M0", 256);
            malloc(&mgr, "M1", 256);
            bdevkit_error::create(&mgr, ErrorCreateParams::new("M1")).unwrap();
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r1", RaidLevel::Raid1, 0, &["M0", "EE_M1"]),
            )
            .await
            .unwrap();
            let d = mgr.open("r1", true, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            let data = conformance::pattern(512 * 4, 5);
            let expect = data.to_vec();
            ch.write(0, 4, data).await.unwrap();
            let mut p =
                ErrorInjectParams::new("EE_M1", InjectIoType::Read, InjectErrorType::Failure);
            p.num = Some(100);
            bdevkit_error::inject_error(&mgr, &p).unwrap();
            for _ in 0..8 {
                let got = ch.read(0, 4, DmaBuf::new(2048).unwrap()).await.unwrap();
                assert_eq!(&got[..], &expect[..]);
            }
            assert_eq!(state(&mgr, "r1"), RaidState::Degraded);
            // The mirror is the last operational member: its failures are
            // the caller's, and it is not failed out.
            let mut p =
                ErrorInjectParams::new("EE_M1", InjectIoType::Clear, InjectErrorType::Failure);
            p.num = Some(0);
            bdevkit_error::inject_error(&mgr, &p).unwrap();
            ch.write(8, 1, conformance::pattern(512, 1)).await.unwrap();
        });
    }

    #[test]
    fn member_removal_degrades_raid1_and_takes_raid0_offline() {
        env("0x1").run(|mgr| async move {
            for n in ["A0", "A1", "B0", "B1"] {
                malloc(&mgr, n, 256);
            }
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r1", RaidLevel::Raid1, 0, &["A0", "A1"]),
            )
            .await
            .unwrap();
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r0", RaidLevel::Raid0, 4, &["B0", "B1"]),
            )
            .await
            .unwrap();
            let d1 = mgr.open("r1", true, |_| {}).unwrap();
            let c1 = d1.get_io_channel().unwrap();
            let data = conformance::pattern(512, 3);
            let expect = data.to_vec();
            c1.write(7, 1, data).await.unwrap();

            // raid1 survives losing a member, with its channels open.
            delete_malloc(&mgr, "A0").await;
            assert_eq!(state(&mgr, "r1"), RaidState::Degraded);
            let got = c1.read(7, 1, DmaBuf::new(512).unwrap()).await.unwrap();
            assert_eq!(&got[..], &expect[..]);
            c1.write(8, 1, conformance::pattern(512, 4)).await.unwrap();
            let info = &bdevkit_raid::get_bdevs(&mgr, "online").unwrap()[0];
            assert_eq!(info["base_bdevs_list"][0]["name"], Value::Null);
            assert_eq!(info["base_bdevs_list"][0]["is_configured"], false);
            assert_eq!(info["num_base_bdevs_operational"], 1);

            // raid0 goes offline: its bdev is unregistered.
            delete_malloc(&mgr, "B1").await;
            assert!(wait_for(60, || mgr.get("r0").is_none()).await);
            assert_eq!(state(&mgr, "r0"), RaidState::Offline);
            let off = bdevkit_raid::get_bdevs(&mgr, "offline").unwrap();
            assert_eq!(off[0]["name"], "r0");
            assert_eq!(off[0]["num_base_bdevs_discovered"], 1);
            // The survivor stays claimed until the raid is deleted.
            assert!(mgr.get("B0").unwrap().claim().is_some());
            let (tx, rx) = std::sync::mpsc::channel();
            bdevkit_raid::delete(&mgr, "r0", move |r| tx.send(r.is_ok()).unwrap());
            assert!(wait_for(60, || rx.try_recv() == Ok(true)).await);
            assert!(mgr.get("B0").unwrap().claim().is_none());
            assert!(bdevkit_raid::raid(&mgr, "r0").is_none());
        });
    }

    #[test]
    fn save_config_replays_in_any_order() {
        let entries = env("0x1").run(|mgr| async move {
            for n in ["M0", "M1", "M2"] {
                malloc(&mgr, n, 256);
            }
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r0", RaidLevel::Raid0, 64, &["M0", "M1"]),
            )
            .await
            .unwrap();
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r1", RaidLevel::Raid1, 0, &["M2", "Later"]),
            )
            .await
            .unwrap();
            let uuid = mgr.get("r0").unwrap().uuid().to_string();
            let entries: Vec<Value> = mgr
                .config_json()
                .into_iter()
                .filter(|e| {
                    let m = e["method"].as_str().unwrap_or("");
                    m.starts_with("bdev_raid_") || m == "bdev_malloc_create"
                })
                .collect();
            let r0 = entries
                .iter()
                .find(|e| e["params"]["name"] == "r0")
                .unwrap();
            assert_eq!(
                r0["params"],
                json!({"name": "r0", "uuid": uuid, "strip_size_kb": 64,
                    "raid_level": "raid0", "base_bdevs": ["M0", "M1"]})
            );
            let opts = entries
                .iter()
                .find(|e| e["method"] == "bdev_raid_set_options")
                .unwrap();
            assert_eq!(
                opts["params"],
                json!({"process_window_size_kb": 1024, "process_max_bandwidth_mb_sec": 0})
            );
            (entries, uuid)
        });
        let (entries, uuid) = entries;
        env("0x1").run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for e in entries.iter().rev() {
                call(&reg, e["method"].as_str().unwrap(), e["params"].clone())
                    .await
                    .unwrap();
            }
            assert_eq!(mgr.get("r0").unwrap().uuid().to_string(), uuid);
            assert_eq!(state(&mgr, "r1"), RaidState::Configuring);
        });
    }

    #[test]
    fn rpcs_and_their_errors() {
        env("0x1").run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for n in ["M0", "M1", "M2"] {
                malloc(&mgr, n, 256);
            }
            // What spdk-rpc sends.
            let r = call(
                &reg,
                "bdev_raid_create",
                json!({"name": "r0", "strip_size_kb": 64, "raid_level": "RAID0",
                    "base_bdevs": ["M0", "M1"], "superblock": false}),
            )
            .await;
            assert_eq!(r, Ok(json!(true)));
            let fail = |name: &str, code: i32, text: &str| {
                Err(RpcError::new(code, format!("Failed to create RAID bdev {name}: {text}")))
            };
            let r = call(
                &reg,
                "bdev_raid_create",
                json!({"name": "r0", "strip_size_kb": 64, "raid_level": "0", "base_bdevs": ["M2"]}),
            )
            .await;
            assert_eq!(r, fail("r0", -17, "File exists"));
            for (params, name) in [
                (json!({"name": "x", "strip_size_kb": 3, "raid_level": "raid0", "base_bdevs": ["M2"]}), "x"),
                (json!({"name": "x", "raid_level": "raid0", "base_bdevs": ["M2"]}), "x"),
                (json!({"name": "x", "strip_size_kb": 4, "raid_level": "raid1", "base_bdevs": ["M2", "Q"]}), "x"),
                (json!({"name": "x", "raid_level": "raid1", "base_bdevs": ["M2"]}), "x"),
                (json!({"name": "x", "raid_level": "raid5f", "strip_size_kb": 4, "base_bdevs": ["a", "b", "c"]}), "x"),
                (json!({"name": "x", "raid_level": "1", "base_bdevs": ["M2", "M2"]}), "x"),
                (json!({"name": "x", "raid_level": "0", "strip_size_kb": 4, "base_bdevs": ["M2", "removed_base_bdev_1"]}), "x"),
                (json!({"name": "x", "raid_level": "1", "base_bdevs": ["removed_base_bdev_0", "removed_base_bdev_1"]}), "x"),
                (json!({"name": "n".repeat(64), "raid_level": "concat", "strip_size_kb": 4, "base_bdevs": ["M2"]}), &*"n".repeat(64)),
            ] {
                let r = call(&reg, "bdev_raid_create", params.clone()).await;
                assert_eq!(r, fail(name, -22, "Invalid argument"), "{params}");
            }
            assert!(mgr.get("M2").unwrap().claim().is_none(), "failed creates released M2");
            // A member claimed elsewhere: the whole create fails and
            // releases what it took.
            let r = call(
                &reg,
                "bdev_raid_create",
                json!({"name": "r9", "raid_level": "raid1", "base_bdevs": ["M2", "M0"]}),
            )
            .await;
            assert_eq!(r, fail("r9", -1, "Operation not permitted"));
            assert!(mgr.get("M2").unwrap().claim().is_none());
            assert!(bdevkit_raid::raid(&mgr, "r9").is_none());
            let r = call(
                &reg,
                "bdev_raid_create",
                json!({"name": "x", "raid_level": "raid1", "base_bdevs": ["M2", ""]}),
            )
            .await;
            assert_eq!(
                r,
                Err(RpcError::new(-22, "The base bdev name cannot be empty: Invalid argument"))
            );
            let parse = Err(RpcError::new(-32700, "spdk_json_decode_object failed"));
            for bad in [
                json!({"name": "x", "base_bdevs": ["M2"]}),
                json!({"name": "x", "raid_level": "raid7", "base_bdevs": ["M2"]}),
                json!({"name": "x", "raid_level": "raid1", "base_bdevs": ["M2"], "extra": 1}),
                json!({"name": "x", "raid_level": "raid1", "base_bdevs": "M2 M1"}),
            ] {
                assert_eq!(call(&reg, "bdev_raid_create", bad).await, parse.clone());
            }

            let all = call(&reg, "bdev_raid_get_bdevs", json!({"category": "all"}))
                .await
                .unwrap();
            let r0 = &all[0];
            let keys: Vec<&str> = r0.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(
                keys,
                [
                    "name", "uuid", "strip_size_kb", "state", "raid_level", "superblock",
                    "num_base_bdevs", "num_base_bdevs_discovered",
                    "num_base_bdevs_operational", "base_bdevs_list"
                ]
            );
            assert_eq!(r0["state"], "online");
            assert_eq!(r0["raid_level"], "raid0");
            assert_eq!(
                r0["base_bdevs_list"][1],
                json!({"name": "M1", "uuid": mgr.get("M1").unwrap().uuid().to_string(),
                    "is_configured": true, "data_offset": 0, "data_size": 256})
            );
            let driver = mgr.get("r0").unwrap().dump_info_json();
            assert_eq!(driver["raid"]["num_base_bdevs"], 2);
            assert!(driver["raid"].get("name").is_none());
            assert_eq!(
                call(&reg, "bdev_raid_get_bdevs", json!({"category": "offline"})).await,
                Ok(json!([]))
            );
            assert_eq!(
                call(&reg, "bdev_raid_get_bdevs", json!({"category": "degraded"})).await,
                Err(RpcError::new(-22, "Invalid argument"))
            );
            assert_eq!(call(&reg, "bdev_raid_get_bdevs", json!({})).await, parse.clone());

            assert_eq!(
                call(&reg, "bdev_raid_set_options", json!({"process_window_size_kb": 2048})).await,
                Ok(json!(true))
            );
            assert_eq!(
                call(&reg, "bdev_raid_set_options", json!({"process_window_size_kb": 0})).await,
                Err(RpcError::new(-22, "Invalid argument"))
            );
            assert_eq!(
                call(&reg, "bdev_raid_set_options", json!({"x": 1})).await,
                parse.clone()
            );

            assert_eq!(
                call(&reg, "bdev_raid_delete", json!({"name": "r0", "clear_sb": false})).await,
                Ok(json!(true))
            );
            assert!(mgr.get("r0").is_none());
            assert!(mgr.get("M0").unwrap().claim().is_none());
            assert_eq!(
                call(&reg, "bdev_raid_delete", json!({"name": "r0"})).await,
                Err(RpcError::new(-19, "raid bdev r0 not found"))
            );
            assert_eq!(call(&reg, "bdev_raid_delete", json!({})).await, parse);
            // A configuring raid can be deleted too.
            call(
                &reg,
                "bdev_raid_create",
                json!({"name": "rc", "raid_level": "raid1", "base_bdevs": ["M2", "Q"]}),
            )
            .await
            .unwrap();
            assert!(mgr.get("M2").unwrap().claim().is_some());
            assert_eq!(
                call(&reg, "bdev_raid_delete", json!({"name": "rc"})).await,
                Ok(json!(true))
            );
            assert!(mgr.get("M2").unwrap().claim().is_none());
        });
    }
}
