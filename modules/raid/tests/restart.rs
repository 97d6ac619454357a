//! What survives a restart: raids over aio bdevs on files, the process
//! "restarted" by ending one test runtime and starting another over the
//! same files (nothing is written at the end of a runtime, so for the raid
//! this is a crash).
//!
//! * Without superblock, `save_config` made while a member is being
//!   rebuilt or after one failed replays into a raid that never reads the
//!   stale member: byte comparison after the restart.
//! * With superblock (`-s`), the array reassembles by examine with no
//!   config; a removed or failed member is rebuilt, never trusted, in
//!   either examine order; an interrupted rebuild starts again and
//!   finishes with byte-identical members; a raid1 write is acknowledged
//!   only once the superblock says which member missed it.

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use bdevkit::bdev::BdevManager;
    use bdevkit_aio::AioCreateParams;
    use bdevkit_error::{ErrorCreateParams, ErrorInjectParams, InjectErrorType, InjectIoType};
    use bdevkit_jsonrpc::MethodRegistry;
    use bdevkit_raid::sb::{SbMemberState, Superblock};
    use bdevkit_raid::{RaidCreateParams, RaidLevel, RaidState};
    use bdevkit_test::env::wait_for;
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{conformance, contents, fill, TestEnv};
    use serde_json::{json, Value};
    use uuid::Uuid;

    /// 4 MiB members: 1 MiB superblock area, 3 MiB of data (512-byte
    /// blocks).
    const FILE_BYTES: u64 = 4 << 20;
    const BLOCKS: u64 = FILE_BYTES / 512;
    const SB_OFFSET: u64 = 2048;

    const RPCS: &[RegisterRpcs] = &[
        bdevkit_aio::rpc::register_rpcs,
        bdevkit_error::rpc::register_rpcs,
        bdevkit_raid::rpc::register_rpcs,
    ];

    fn env() -> TestEnv {
        TestEnv::with_modules(
            "0x1",
            &[
                bdevkit_aio::register,
                bdevkit_error::register,
                bdevkit_raid::register,
            ],
        )
    }

    struct Files {
        _dir: tempfile::TempDir,
        paths: Vec<PathBuf>,
    }

    fn files(n: usize) -> Files {
        let dir = tempfile::tempdir().unwrap();
        let paths = (0..n)
            .map(|i| {
                let p = dir.path().join(format!("m{i}"));
                std::fs::File::create(&p)
                    .unwrap()
                    .set_len(FILE_BYTES)
                    .unwrap();
                p
            })
            .collect();
        Files { _dir: dir, paths }
    }

    fn uuid(i: usize) -> Uuid {
        Uuid::from_u128(0xb0de_0000_0000_0000_0000_0000_0000_0000 + i as u128)
    }

    /// aio bdev `A<i>` over file `i`, with a stable UUID.
    fn aio(mgr: &BdevManager, paths: &[PathBuf], i: usize) {
        let mut p = AioCreateParams::new(format!("A{i}"), paths[i].to_str().unwrap());
        p.uuid = Some(uuid(i));
        bdevkit_aio::create(mgr, p).unwrap();
    }

    fn state(mgr: &BdevManager, name: &str) -> Option<RaidState> {
        bdevkit_raid::raid(mgr, name).map(|r| r.state())
    }

    /// Every read of the raid, spread over its mirrors (reads go
    /// round-robin), twice over: a stale member would show.
    async fn assert_reads(mgr: &BdevManager, name: &str, blocks: u64, expect: &[u8]) {
        for _ in 0..2 {
            let got = contents(mgr, name, blocks).await;
            let diff = got.iter().zip(expect).filter(|(a, b)| a != b).count();
            assert_eq!(
                diff, 0,
                "{diff} bytes of {name} differ from what was written"
            );
        }
    }

    fn sb_of(path: &Path) -> Superblock {
        let b = std::fs::read(path).unwrap();
        Superblock::decode(&b[..8192]).unwrap()
    }

    fn data_of(path: &Path) -> Vec<u8> {
        std::fs::read(path).unwrap()[usize::try_from(SB_OFFSET * 512).unwrap()..].to_vec()
    }

    async fn rebuilt(mgr: &BdevManager, name: &str) -> bool {
        wait_for(30, || {
            bdevkit_raid::raid(mgr, name)
                .is_some_and(|r| r.state() == RaidState::Online && !r.is_rebuilding())
        })
        .await
    }

    /// Replays saved config entries in order through the RPC handlers.
    async fn replay(reg: &MethodRegistry, entries: &[Value]) {
        for e in entries {
            let m = e["method"].as_str().unwrap();
            if m == "bdev_wait_for_examine" {
                continue;
            }
            call(reg, m, e["params"].clone())
                .await
                .unwrap_or_else(|err| panic!("{m} {}: {err:?}", e["params"]));
        }
    }

    /// The `base_bdevs` of the saved `bdev_raid_create` are `want`.
    fn assert_saved_members(entries: &[Value], want: &Value) {
        let create = entries
            .iter()
            .find(|e| e["method"] == "bdev_raid_create")
            .expect("a bdev_raid_create entry");
        assert_eq!(&create["params"]["base_bdevs"], want, "{create}");
    }

    fn saved(mgr: &BdevManager) -> Vec<Value> {
        mgr.config_json()
            .into_iter()
            .filter(|e| {
                let m = e["method"].as_str().unwrap_or("");
                m.starts_with("bdev_raid_")
                    || m.starts_with("bdev_aio_")
                    || m.starts_with("bdev_error_")
            })
            .collect()
    }

    /// `bdev_raid_add_base_bdev r1 <base>`, which must succeed.
    async fn add_member(reg: &MethodRegistry, base: &str) {
        let r = call(
            reg,
            "bdev_raid_add_base_bdev",
            json!({"raid_bdev": "r1", "base_bdev": base}),
        )
        .await;
        assert_eq!(r, Ok(json!(true)));
    }

    /// `bdev_raid_remove_base_bdev <name>`, which must succeed.
    async fn remove_member(reg: &MethodRegistry, name: &str) {
        let r = call(reg, "bdev_raid_remove_base_bdev", json!({"name": name})).await;
        assert_eq!(r, Ok(json!(true)));
    }

    async fn slow_rebuild(reg: &MethodRegistry) {
        let opts = json!({"process_window_size_kb": 64, "process_max_bandwidth_mb_sec": 1});
        assert_eq!(
            call(reg, "bdev_raid_set_options", opts).await,
            Ok(json!(true))
        );
    }

    /// Issue 31, point 1: `save_config` in the middle of a rebuild saved
    /// the half-built member as in sync; after a restart the raid came up
    /// with both and reads returned wrong data. Now the target is saved as
    /// a placeholder plus an add after every bdev: it is rebuilt again.
    #[test]
    fn save_config_during_a_rebuild_never_trusts_the_target() {
        let f = files(3);
        let data = BLOCKS;
        let paths = f.paths.clone();
        let (entries, expect) = env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for i in 0..3 {
                aio(&mgr, &paths, i);
            }
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r1", RaidLevel::Raid1, 0, &["A0", "A1"]),
            )
            .await
            .unwrap();
            fill(&mgr, "r1", 0, data, 7).await;
            let expect = contents(&mgr, "r1", data).await;
            slow_rebuild(&reg).await;
            remove_member(&reg, "A1").await;
            add_member(&reg, "A2").await;
            let raid = bdevkit_raid::raid(&mgr, "r1").unwrap();
            assert!(wait_for(60, || raid.rebuild_progress().is_some_and(|p| p.done > 0)).await);
            let entries = saved(&mgr);
            assert_saved_members(&entries, &json!(["A0", "removed_base_bdev_1"]));
            let last = entries.last().unwrap();
            assert_eq!(
                last,
                &json!({"method": "bdev_raid_add_base_bdev",
                        "params": {"raid_bdev": "r1", "base_bdev": "A2"}})
            );
            assert!(raid.is_rebuilding(), "saved while rebuilding");
            (entries, expect)
        });
        // Restart from the saved config: A2 holds part of the data only.
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            slow_rebuild(&reg).await;
            replay(&reg, &entries).await;
            assert_eq!(state(&mgr, "r1"), Some(RaidState::Degraded));
            assert!(bdevkit_raid::raid(&mgr, "r1").unwrap().is_rebuilding());
            // While the rebuild runs, reads come from A0 only.
            assert_reads(&mgr, "r1", data, &expect).await;
        });
        drop(f);
    }

    /// Issue 31, point 2: a member that failed and missed writes was saved
    /// as in sync. Now it is saved as a placeholder: the raid comes back
    /// degraded and reads only what holds every acknowledged write.
    #[test]
    fn save_config_after_a_member_failed_never_trusts_it() {
        let f = files(2);
        let paths = f.paths.clone();
        let (entries, expect) = env().run(move |mgr| async move {
            aio(&mgr, &paths, 0);
            aio(&mgr, &paths, 1);
            bdevkit_error::create(&mgr, ErrorCreateParams::new("A1")).unwrap();
            bdevkit_raid::create(
                &mgr,
                RaidCreateParams::new("r1", RaidLevel::Raid1, 0, &["A0", "EE_A1"]),
            )
            .await
            .unwrap();
            fill(&mgr, "r1", 0, BLOCKS, 1).await;
            let mut inj =
                ErrorInjectParams::new("EE_A1", InjectIoType::Write, InjectErrorType::Failure);
            inj.num = Some(u32::MAX);
            bdevkit_error::inject_error(&mgr, &inj).unwrap();
            // New data: A1 misses all of it.
            fill(&mgr, "r1", 0, BLOCKS, 2).await;
            assert_eq!(state(&mgr, "r1"), Some(RaidState::Degraded));
            let expect = contents(&mgr, "r1", BLOCKS).await;
            let entries = saved(&mgr);
            assert_saved_members(&entries, &json!(["A0", "removed_base_bdev_1"]));
            (entries, expect)
        });
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            replay(&reg, &entries).await;
            assert_eq!(state(&mgr, "r1"), Some(RaidState::Degraded));
            assert_reads(&mgr, "r1", BLOCKS, &expect).await;
            // Added back by hand, it is rebuilt.
            add_member(&reg, "EE_A1").await;
            assert!(rebuilt(&mgr, "r1").await);
            assert_reads(&mgr, "r1", BLOCKS, &expect).await;
        });
        drop(f);
    }

    fn sb_create(members: &[&str]) -> RaidCreateParams {
        let mut p = RaidCreateParams::new("r1", RaidLevel::Raid1, 0, members);
        p.superblock = Some(true);
        p.uuid = Some(Uuid::from_u128(0x5eed));
        p
    }

    /// The superblock is SPDK's, at block 0 of each member; data starts
    /// at 1 MiB; the array reassembles by examine alone.
    #[test]
    fn superblock_layout_and_reassembly_without_config() {
        let f = files(2);
        let paths = f.paths.clone();
        let expect = env().run(move |mgr| async move {
            aio(&mgr, &paths, 0);
            aio(&mgr, &paths, 1);
            bdevkit_raid::create(&mgr, sb_create(&["A0", "A1"]))
                .await
                .unwrap();
            let b = mgr.get("r1").unwrap();
            assert_eq!(b.num_blocks(), BLOCKS - SB_OFFSET);
            let info = &bdevkit_raid::get_bdevs(&mgr, "all").unwrap()[0];
            assert_eq!(info["superblock"], true);
            assert_eq!(info["base_bdevs_list"][1]["data_offset"], SB_OFFSET);
            assert_eq!(info["base_bdevs_list"][1]["data_size"], BLOCKS - SB_OFFSET);
            fill(&mgr, "r1", 0, BLOCKS - SB_OFFSET, 3).await;
            // Nothing in save_config: the superblock holds the raid.
            assert!(!mgr
                .config_json()
                .iter()
                .any(|e| e["method"] == "bdev_raid_create"));
            contents(&mgr, "r1", BLOCKS - SB_OFFSET).await
        });
        for p in &f.paths {
            let sb = sb_of(p);
            assert_eq!(sb.name, "r1");
            assert_eq!(sb.uuid, Uuid::from_u128(0x5eed));
            assert_eq!(sb.raid_size, BLOCKS - SB_OFFSET);
            assert_eq!(sb.num_base_bdevs, 2);
            assert_eq!(sb.configured(), 2);
            assert_eq!(sb.members[0].uuid, uuid(0));
            assert_eq!(sb.members[1].data_offset, SB_OFFSET);
            assert!(data_of(p) == expect, "data at the data offset");
        }
        let paths = f.paths.clone();
        env().run(move |mgr| async move {
            aio(&mgr, &paths, 1);
            aio(&mgr, &paths, 0);
            assert!(wait_for(60, || mgr.get("r1").is_some()).await);
            assert_eq!(state(&mgr, "r1"), Some(RaidState::Online));
            assert_eq!(mgr.get("r1").unwrap().uuid(), Uuid::from_u128(0x5eed));
            assert_reads(&mgr, "r1", BLOCKS - SB_OFFSET, &expect).await;
            // Delete with clear_sb: examine no longer finds it.
            let (tx, rx) = std::sync::mpsc::channel();
            bdevkit_raid::delete_with(&mgr, "r1", true, move |r| tx.send(r.is_ok()).unwrap());
            assert!(wait_for(60, || rx.try_recv() == Ok(true)).await);
        });
        for p in &f.paths {
            assert!(Superblock::decode(&std::fs::read(p).unwrap()[..512]).is_err());
        }
    }

    /// A member taken out (and one that failed) missed writes: its own
    /// copy is older and says it is in sync. Examine, in either order,
    /// never trusts it: the raid starts from the newer copy and rebuilds
    /// it.
    #[test]
    fn superblock_member_that_missed_writes_is_rebuilt_in_either_order() {
        for stale_first in [true, false] {
            let f = files(2);
            let paths = f.paths.clone();
            let expect = env().run(move |mgr| async move {
                let reg = rpc::registry(&mgr, RPCS);
                aio(&mgr, &paths, 0);
                aio(&mgr, &paths, 1);
                bdevkit_raid::create(&mgr, sb_create(&["A0", "A1"]))
                    .await
                    .unwrap();
                fill(&mgr, "r1", 0, BLOCKS - SB_OFFSET, 1).await;
                remove_member(&reg, "A1").await;
                fill(&mgr, "r1", 0, BLOCKS - SB_OFFSET, 2).await;
                contents(&mgr, "r1", BLOCKS - SB_OFFSET).await
            });
            let (a0, a1) = (sb_of(&f.paths[0]), sb_of(&f.paths[1]));
            assert!(a0.seq_number > a1.seq_number);
            assert_eq!(a0.member(1).unwrap().state, SbMemberState::Missing);
            assert_eq!(a0.member(1).unwrap().uuid, uuid(1), "kept to know it again");
            assert_eq!(a1.member(1).unwrap().state, SbMemberState::Configured);
            let paths = f.paths.clone();
            let want = expect.clone();
            env().run(move |mgr| async move {
                let expect = want;
                if stale_first {
                    aio(&mgr, &paths, 1);
                    aio(&mgr, &paths, 0);
                } else {
                    aio(&mgr, &paths, 0);
                    aio(&mgr, &paths, 1);
                }
                assert!(wait_for(60, || mgr.get("r1").is_some()).await);
                // Reads never come from A1 before it is rebuilt.
                assert_reads(&mgr, "r1", BLOCKS - SB_OFFSET, &expect).await;
                assert!(rebuilt(&mgr, "r1").await, "A1 rebuilt");
                assert_reads(&mgr, "r1", BLOCKS - SB_OFFSET, &expect).await;
            });
            assert!(data_of(&f.paths[1]) == expect, "stale_first={stale_first}");
            let (a0, a1) = (sb_of(&f.paths[0]), sb_of(&f.paths[1]));
            assert_eq!(a0, a1, "the same copy on both");
            assert_eq!(a0.configured(), 2);
        }
    }

    /// A raid1 write that a member failed is acknowledged only once the
    /// superblock on the others says that member failed: a crash right
    /// after the acknowledgement cannot bring the member back as in sync.
    #[test]
    fn superblock_records_a_failure_before_the_write_is_acknowledged() {
        let f = files(2);
        let paths = f.paths.clone();
        env().run(move |mgr| async move {
            aio(&mgr, &paths, 0);
            aio(&mgr, &paths, 1);
            bdevkit_error::create(&mgr, ErrorCreateParams::new("A1")).unwrap();
            let mut p = sb_create(&["A0", "EE_A1"]);
            p.name = "r1".into();
            bdevkit_raid::create(&mgr, p).await.unwrap();
            let before = sb_of(&paths[0]);
            assert_eq!(before.configured(), 2);
            let inj =
                ErrorInjectParams::new("EE_A1", InjectIoType::Write, InjectErrorType::Failure);
            bdevkit_error::inject_error(&mgr, &inj).unwrap();
            let d = mgr.open("r1", true, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            ch.write(5, 1, conformance::pattern(512, 5)).await.unwrap();
            // Acknowledged: A0's copy already says the member failed.
            let after = sb_of(&paths[0]);
            assert!(after.seq_number > before.seq_number);
            assert_eq!(after.member(1).unwrap().state, SbMemberState::Failed);
            assert_eq!(after.member(0).unwrap().state, SbMemberState::Configured);
            assert_eq!(state(&mgr, "r1"), Some(RaidState::Degraded));
        });
    }

    /// kill -9 in the middle of a rebuild: restarted with no config, the
    /// array reassembles, the rebuild starts again and finishes, and the
    /// members are byte-identical.
    #[test]
    fn superblock_interrupted_rebuild_starts_again_and_finishes() {
        let f = files(3);
        let paths = f.paths.clone();
        let expect = env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for i in 0..3 {
                aio(&mgr, &paths, i);
            }
            bdevkit_raid::create(&mgr, sb_create(&["A0", "A1"]))
                .await
                .unwrap();
            fill(&mgr, "r1", 0, BLOCKS - SB_OFFSET, 9).await;
            remove_member(&reg, "A1").await;
            slow_rebuild(&reg).await;
            add_member(&reg, "A2").await;
            let raid = bdevkit_raid::raid(&mgr, "r1").unwrap();
            assert!(wait_for(60, || raid.rebuild_progress().is_some_and(|p| p.done > 0)).await);
            contents(&mgr, "r1", BLOCKS - SB_OFFSET).await
            // The runtime ends here, mid-rebuild.
        });
        let a2 = sb_of(&f.paths[2]);
        let slot = a2.member_by_uuid(uuid(2)).expect("the target is named");
        assert_ne!(slot.state, SbMemberState::Configured);
        assert!(data_of(&f.paths[2]) != expect, "the rebuild was cut short");
        let paths = f.paths.clone();
        env().run(move |mgr| async move {
            // The target first: it must wait, not be trusted.
            aio(&mgr, &paths, 2);
            aio(&mgr, &paths, 0);
            assert!(wait_for(60, || mgr.get("r1").is_some()).await);
            assert_reads(&mgr, "r1", BLOCKS - SB_OFFSET, &expect).await;
            assert!(rebuilt(&mgr, "r1").await, "the rebuild finished");
        });
        let a0 = std::fs::read(&f.paths[0]).unwrap();
        let a2 = std::fs::read(&f.paths[2]).unwrap();
        assert!(a0 == a2, "members differ after the rebuild");
        assert_eq!(sb_of(&f.paths[0]).configured(), 2);
    }
}
