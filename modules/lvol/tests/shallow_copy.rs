//! Shallow copy through the RPCs (`bdev_lvol_start_shallow_copy`,
//! `bdev_lvol_check_shallow_copy`): only the clusters the lvol holds
//! itself reach the destination, at their offsets, the rest of it keeps
//! what it had; progress and the finished operation as SPDK reports them;
//! SPDK's errors, at the start and in the check; the lvol busy (and the
//! destination claimed) while the copy runs.
//!
//! Copies are waited for by checking their status a bounded number of
//! times with a reactor turn between checks; a copy held in flight is
//! held by an error bdev's `pending` injection. Nothing waits on time.

#[cfg(test)]
mod common;

#[cfg(test)]
mod tests {
    use bdevkit::bdev::{BdevManager, ClaimType, IoType};
    use bdevkit_error::{ErrorBdev, ErrorCreateParams, ErrorInjectParams};
    use bdevkit_error::{InjectErrorType, InjectIoType};
    use bdevkit_jsonrpc::{MethodRegistry, RpcError};
    use bdevkit_malloc::MallocCreateParams;
    use bdevkit_test::env::wait_for;
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{contents, fill, malloc, sleep_ms, TestEnv};
    use serde_json::{json, Value};

    use crate::common::{lvol, store, MIB};

    const CLUSTER: u64 = 64 << 10;
    /// 512-byte blocks per cluster.
    const BPC: u64 = CLUSTER / 512;
    /// The lvol: 1 MiB, 16 clusters.
    const LVOL_BLOCKS: u64 = MIB / 512;
    /// Checks before a copy must be over.
    const CHECKS: usize = 10_000;
    /// The destinations' pattern before the copy.
    const PREFILL: u64 = 0xabc;

    fn env() -> TestEnv {
        TestEnv::with_modules(
            "0x1",
            &[
                bdevkit_malloc::register,
                bdevkit_error::register,
                bdevkit_lvol::register,
            ],
        )
    }

    const RPCS: &[RegisterRpcs] = &[
        bdevkit_malloc::rpc::register_rpcs,
        bdevkit_lvol::rpc::register_rpcs,
    ];

    fn err(r: Result<Value, RpcError>) -> (i32, String) {
        let e = r.expect_err("an error");
        (e.code, e.message)
    }

    /// A store with 64 KiB clusters and, in it, a thin lvol `vol` whose
    /// snapshot `snap` holds clusters 1 and 3; `vol` itself holds cluster
    /// 0 and cluster 2, half written (the rest of it zeros). Returns the
    /// two bdev names.
    async fn lineage(mgr: &BdevManager) -> (String, String) {
        malloc(mgr, "M0", 32 * MIB / 512);
        store(mgr, "M0", "lvs0", 64 << 10).await;
        let vol = lvol(mgr, "lvs0", "vol", 1, true).await;
        fill(mgr, &vol, BPC, BPC, 1).await;
        fill(mgr, &vol, 3 * BPC, BPC, 3).await;
        let snap = bdevkit_lvol::snapshot_lvol(mgr, &vol, "snap")
            .await
            .unwrap();
        fill(mgr, &vol, 0, BPC, 10).await;
        fill(mgr, &vol, 2 * BPC, BPC / 2, 12).await;
        (vol, snap)
    }

    /// A malloc bdev `name` as large as the lvol, filled with [`PREFILL`].
    async fn destination(mgr: &BdevManager, name: &str) -> Vec<u8> {
        malloc(mgr, name, LVOL_BLOCKS);
        fill(mgr, name, 0, LVOL_BLOCKS, PREFILL).await;
        contents(mgr, name, LVOL_BLOCKS).await
    }

    async fn start(reg: &MethodRegistry, src: &str, dst: &str) -> Result<Value, RpcError> {
        call(
            reg,
            "bdev_lvol_start_shallow_copy",
            json!({"src_lvol_name": src, "dst_bdev_name": dst}),
        )
        .await
    }

    async fn check(reg: &MethodRegistry, id: u64) -> Result<Value, RpcError> {
        call(
            reg,
            "bdev_lvol_check_shallow_copy",
            json!({ "operation_id": id }),
        )
        .await
    }

    /// Starts a copy and returns its operation id.
    async fn started(reg: &MethodRegistry, src: &str, dst: &str) -> u64 {
        let v = start(reg, src, dst).await.unwrap();
        v["operation_id"].as_u64().expect("an operation id")
    }

    /// Checks copy `id` until it is no longer in progress; progress only
    /// grows and never passes the total meanwhile.
    async fn finished(reg: &MethodRegistry, id: u64) -> Value {
        let mut last = 0;
        for _ in 0..CHECKS {
            let v = check(reg, id).await.unwrap();
            let (copied, total) = (
                v["copied_clusters"].as_u64().unwrap(),
                v["total_clusters"].as_u64().unwrap(),
            );
            assert!(last <= copied && copied <= total, "{v}");
            last = copied;
            if v["state"] != "in progress" {
                return v;
            }
            sleep_ms(1).await;
        }
        panic!("shallow copy {id} still in progress after {CHECKS} checks");
    }

    /// `cluster` of a bdev's contents.
    fn cl(data: &[u8], cluster: u64) -> &[u8] {
        let n = usize::try_from(CLUSTER).unwrap();
        let i = usize::try_from(cluster).unwrap();
        &data[i * n..(i + 1) * n]
    }

    #[test]
    fn copies_the_clusters_the_lvol_holds_and_nothing_else() {
        env().run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let (vol, snap) = lineage(&mgr).await;
            let before = destination(&mgr, "D0").await;
            call(&reg, "bdev_lvol_set_read_only", json!({"name": "lvs0/vol"}))
                .await
                .unwrap();

            // The clone: its own clusters 0 and 2, not the snapshot's.
            let id = started(&reg, "lvs0/vol", "D0").await;
            assert_eq!(id, 1);
            let v = finished(&reg, id).await;
            assert_eq!(
                v,
                json!({"state": "complete", "copied_clusters": 2, "total_clusters": 2})
            );
            // Reported finished: forgotten, as SPDK's.
            assert_eq!(err(check(&reg, id).await), (-19, "No such device".into()));
            let (got, src) = (
                contents(&mgr, "D0", LVOL_BLOCKS).await,
                contents(&mgr, &vol, LVOL_BLOCKS).await,
            );
            for c in 0..16 {
                let want = if c == 0 || c == 2 { &src } else { &before };
                assert!(cl(&got, c) == cl(want, c), "cluster {c}");
            }
            // The half-written cluster goes whole (zeros after the half).
            assert!(cl(&got, 2)[32 << 10..].iter().all(|&b| b == 0));
            // Released: no claim, writable by anyone.
            assert!(mgr.get("D0").unwrap().claim().is_none());
            drop(mgr.open("D0", true, |_| {}).unwrap());

            // The snapshot, by bdev name: its clusters 1 and 3.
            let before = destination(&mgr, "D1").await;
            let id = started(&reg, &snap, "D1").await;
            assert_eq!(id, 2);
            let v = finished(&reg, id).await;
            assert_eq!(
                v,
                json!({"state": "complete", "copied_clusters": 2, "total_clusters": 2})
            );
            let (got, src) = (
                contents(&mgr, "D1", LVOL_BLOCKS).await,
                contents(&mgr, &snap, LVOL_BLOCKS).await,
            );
            for c in 0..16 {
                let want = if c == 1 || c == 3 { &src } else { &before };
                assert!(cl(&got, c) == cl(want, c), "cluster {c}");
            }

            // An lvol that holds nothing: complete at once, 0 of 0, and the
            // destination untouched.
            let empty = lvol(&mgr, "lvs0", "empty", 1, true).await;
            call(&reg, "bdev_lvol_set_read_only", json!({"name": empty}))
                .await
                .unwrap();
            let before = contents(&mgr, "D0", LVOL_BLOCKS).await;
            let id = started(&reg, "lvs0/empty", "D0").await;
            assert_eq!(
                finished(&reg, id).await,
                json!({"state": "complete", "copied_clusters": 0, "total_clusters": 0})
            );
            assert!(contents(&mgr, "D0", LVOL_BLOCKS).await == before);
        });
    }

    #[test]
    fn errors_are_spdk_s() {
        env().run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let (_vol, snap) = lineage(&mgr).await;
            destination(&mgr, "D0").await;
            let nodev = (-19, "No such device".to_string());

            // Lookups of the source: -19, and no operation id taken.
            assert_eq!(err(start(&reg, "nope", "D0").await), nodev);
            assert_eq!(err(start(&reg, "D0", "D0").await), nodev);
            // The destination: missing, or claimed (the store's base), or
            // open for writing elsewhere.
            assert_eq!(
                err(start(&reg, "lvs0/snap", "nope").await),
                (-32602, "No such device".into())
            );
            assert_eq!(
                err(start(&reg, "lvs0/snap", "M0").await),
                (-32602, "Operation not permitted".into())
            );
            let writer = mgr.open("D0", true, |_| {}).unwrap();
            assert_eq!(
                err(start(&reg, "lvs0/snap", "D0").await),
                (-32602, "Operation not permitted".into())
            );
            drop(writer);
            // Params: as SPDK's decoder.
            let decode = (-32603, "spdk_json_decode_object failed".to_string());
            assert_eq!(
                err(call(
                    &reg,
                    "bdev_lvol_start_shallow_copy",
                    json!({"src_lvol_name": snap})
                )
                .await),
                decode
            );
            assert_eq!(
                err(call(&reg, "bdev_lvol_check_shallow_copy", json!({})).await),
                decode
            );
            assert_eq!(
                err(call(
                    &reg,
                    "bdev_lvol_check_shallow_copy",
                    json!({"operation_id": -1})
                )
                .await),
                decode
            );

            // The three failed starts past the lookup took ids 1 to 3 (as
            // SPDK's counter); the checks found at the copy's start are
            // reported by the check, the destination released.
            let id = started(&reg, "lvs0/vol", "D0").await;
            assert_eq!(id, 4);
            assert_eq!(
                finished(&reg, id).await,
                json!({"state": "error", "error": "Operation not permitted",
                    "copied_clusters": 0, "total_clusters": 2})
            );
            assert_eq!(err(check(&reg, id).await), nodev);
            assert!(mgr.get("D0").unwrap().claim().is_none());
            for (want_id, dst, blocks, block_size) in [
                (5, "small", LVOL_BLOCKS - 1, 512),
                (6, "big", LVOL_BLOCKS / 8, 4096),
            ] {
                bdevkit_malloc::create(&mgr, MallocCreateParams::new(dst, block_size, blocks))
                    .unwrap();
                let id = started(&reg, &snap, dst).await;
                assert_eq!(id, want_id);
                assert_eq!(
                    finished(&reg, id).await,
                    json!({"state": "error", "error": "Invalid argument",
                        "copied_clusters": 0, "total_clusters": 2}),
                    "{dst}"
                );
                assert!(mgr.get(dst).unwrap().claim().is_none());
            }
            // No such operation.
            assert_eq!(err(check(&reg, 999).await), nodev);
        });
    }

    /// The `pending` injection of `EE_D0` has taken the write it was armed
    /// for: that write is held.
    fn write_held(mgr: &BdevManager) -> bool {
        let eb = mgr.get("EE_D0").unwrap().ops_as::<ErrorBdev>().unwrap();
        eb.remaining(IoType::Write) == 0
    }

    #[test]
    fn the_lvol_is_busy_and_the_destination_claimed_while_the_copy_runs() {
        env().run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let (vol, snap) = lineage(&mgr).await;
            let before = destination(&mgr, "D0").await;
            bdevkit_error::create(&mgr, ErrorCreateParams::new("D0")).unwrap();
            destination(&mgr, "D1").await;
            let mut p =
                ErrorInjectParams::new("EE_D0", InjectIoType::Write, InjectErrorType::Pending);
            p.num = Some(1);
            bdevkit_error::inject_error(&mgr, &p).unwrap();

            let id = started(&reg, "lvs0/snap", "EE_D0").await;
            assert!(wait_for(60, || write_held(&mgr)).await);
            let v = check(&reg, id).await.unwrap();
            assert_eq!(v["state"], "in progress");
            assert_eq!(v["total_clusters"], 2);
            assert!(v["copied_clusters"].as_u64().unwrap() < 2);
            // Claimed by the copy (as SPDK's: read-many-write-one).
            assert_eq!(
                mgr.get("EE_D0").unwrap().claim(),
                Some((ClaimType::ReadManyWriteOne, "lvol".to_string()))
            );
            assert!(mgr.open("EE_D0", true, |_| {}).is_err());
            drop(mgr.open("EE_D0", false, |_| {}).unwrap());
            // The snapshot: not deleted, cloned or copied again meanwhile.
            let busy = "Device or resource busy".to_string();
            assert_eq!(
                err(call(&reg, "bdev_lvol_delete", json!({"name": "lvs0/snap"})).await),
                (-32603, busy.clone())
            );
            assert_eq!(
                err(call(
                    &reg,
                    "bdev_lvol_clone",
                    json!({"snapshot_name": "lvs0/snap", "clone_name": "c"})
                )
                .await),
                (-32602, busy.clone())
            );
            let again = started(&reg, "lvs0/snap", "D1").await;
            assert_eq!(
                finished(&reg, again).await,
                json!({"state": "error", "error": busy,
                    "copied_clusters": 0, "total_clusters": 2})
            );
            assert!(mgr.get(&snap).is_some());

            // Let the write go: the copy completes, the claim goes.
            bdevkit_error::resume_pending(&mgr, "EE_D0").unwrap();
            assert_eq!(
                finished(&reg, id).await,
                json!({"state": "complete", "copied_clusters": 2, "total_clusters": 2})
            );
            assert!(mgr.get("EE_D0").unwrap().claim().is_none());
            let (got, src) = (
                contents(&mgr, "EE_D0", LVOL_BLOCKS).await,
                contents(&mgr, &snap, LVOL_BLOCKS).await,
            );
            for c in 0..16 {
                let want = if c == 1 || c == 3 { &src } else { &before };
                assert!(cl(&got, c) == cl(want, c), "cluster {c}");
            }
            // No longer busy: the snapshot merges into its clone.
            call(&reg, "bdev_lvol_delete", json!({"name": "lvs0/snap"}))
                .await
                .unwrap();
            assert!(mgr.get(&snap).is_none());
            assert!(mgr.get(&vol).is_some());
        });
    }

    /// Writes `len` bytes of `seed`'s pattern at byte `at` of `name`.
    async fn write_bytes(mgr: &BdevManager, name: &str, at: u64, len: u64, seed: u64) {
        let d = mgr.open(name, true, |_| {}).unwrap();
        let bs = u64::from(d.bdev().block_size());
        let ch = d.get_io_channel().unwrap();
        let buf = bdevkit_test::conformance::pattern(usize::try_from(len).unwrap(), seed);
        ch.write(at / bs, len / bs, buf).await.unwrap();
    }

    /// All of `name`, whatever its block size.
    async fn all_bytes(mgr: &BdevManager, name: &str) -> Vec<u8> {
        let d = mgr.open(name, false, |_| {}).unwrap();
        let b = d.bdev();
        let (bs, n) = (u64::from(b.block_size()), b.num_blocks());
        let ch = d.get_io_channel().unwrap();
        let buf = bdevkit::dma::DmaBuf::new(usize::try_from(bs * n).unwrap()).unwrap();
        ch.read(0, n, buf).await.unwrap().as_slice().to_vec()
    }

    /// Clusters of 1.5 MiB go in a 1 MiB chunk and a 512 KiB one, at the
    /// same byte offsets on a destination whose blocks (512 bytes) are
    /// smaller than the store's (4096).
    #[test]
    fn large_clusters_go_in_chunks_to_the_same_byte_offsets() {
        const BIG: u64 = 1536 << 10;
        env().run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            bdevkit_malloc::create(&mgr, MallocCreateParams::new("M0", 4096, 32 * MIB / 4096))
                .unwrap();
            store(&mgr, "M0", "lvs0", u32::try_from(BIG).unwrap()).await;
            // 4 clusters: 1 and 2 written (2 across its chunk boundary).
            let vol = lvol(&mgr, "lvs0", "vol", 6, true).await;
            write_bytes(&mgr, &vol, BIG, BIG, 1).await;
            write_bytes(&mgr, &vol, 2 * BIG + MIB - 8192, 16384, 2).await;
            call(&reg, "bdev_lvol_set_read_only", json!({"name": vol}))
                .await
                .unwrap();
            malloc(&mgr, "D0", 4 * BIG / 512);
            fill(&mgr, "D0", 0, 4 * BIG / 512, PREFILL).await;
            let before = all_bytes(&mgr, "D0").await;

            let id = started(&reg, &vol, "D0").await;
            assert_eq!(
                finished(&reg, id).await,
                json!({"state": "complete", "copied_clusters": 2, "total_clusters": 2})
            );
            let (got, src) = (all_bytes(&mgr, "D0").await, all_bytes(&mgr, &vol).await);
            let n = usize::try_from(BIG).unwrap();
            for c in 0..4 {
                let want = if c == 1 || c == 2 { &src } else { &before };
                assert!(
                    got[c * n..(c + 1) * n] == want[c * n..(c + 1) * n],
                    "cluster {c}"
                );
            }
        });
    }

    /// The store's base goes while the copy runs: the lvol's bdev is
    /// unregistered, the clusters in flight finish, the copy ends with
    /// ENODEV and lets the lvol's bdev (and then the store) go.
    #[test]
    fn the_copy_ends_in_error_when_the_lvol_goes() {
        env().run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            malloc(&mgr, "M0", 32 * MIB / 512);
            store(&mgr, "M0", "lvs0", 64 << 10).await;
            let vol = lvol(&mgr, "lvs0", "vol", 1, true).await;
            fill(&mgr, &vol, 0, 8 * BPC, 1).await;
            call(&reg, "bdev_lvol_set_read_only", json!({"name": vol}))
                .await
                .unwrap();
            destination(&mgr, "D0").await;
            bdevkit_error::create(&mgr, ErrorCreateParams::new("D0")).unwrap();
            // Every slot's first write is held.
            let mut p =
                ErrorInjectParams::new("EE_D0", InjectIoType::Write, InjectErrorType::Pending);
            p.num = Some(u32::try_from(bdevkit_lvol::SLOTS).unwrap());
            bdevkit_error::inject_error(&mgr, &p).unwrap();
            let id = started(&reg, &vol, "EE_D0").await;
            assert!(wait_for(60, || write_held(&mgr)).await);

            let vb = mgr.get(&vol).unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            bdevkit_malloc::delete(&mgr, "M0", move |r| {
                let _ = tx.send(r.is_ok());
            });
            assert!(wait_for(60, || vb.is_removing()).await);
            bdevkit_error::resume_pending(&mgr, "EE_D0").unwrap();
            assert_eq!(
                finished(&reg, id).await,
                json!({"state": "error", "error": "No such device",
                    "copied_clusters": bdevkit_lvol::SLOTS, "total_clusters": 8})
            );
            assert!(wait_for(60, || rx.try_recv() == Ok(true)).await);
            assert!(mgr.get(&vol).is_none() && mgr.get("M0").is_none());
            assert!(mgr.get("EE_D0").unwrap().claim().is_none());
        });
    }
}
