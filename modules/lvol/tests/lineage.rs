//! Snapshots and clones through the lvol module: the RPCs with SPDK's
//! params, results and errors, reads through the parent chain,
//! copy-on-write, snapshot delete (merge), inflate / decouple / set_parent,
//! what `bdev_lvol_get_lvols` and `driver_specific.lvol` show, and a
//! snapshot taken while two threads verify on the volume.

#[cfg(test)]
mod common;

#[cfg(test)]
mod tests {
    use bdevkit::bdev::BdevManager;
    use bdevkit::dma::DmaBuf;
    use bdevkit_jsonrpc::RpcError;
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{malloc, verify, TestEnv};
    use serde_json::{json, Value};

    use crate::common::{lvol, store, MIB};

    const CLUSTER: u64 = 64 << 10;
    const BPC: u64 = CLUSTER / 512;

    fn env(mask: &str) -> TestEnv {
        TestEnv::with_modules(mask, &[bdevkit_malloc::register, bdevkit_lvol::register])
    }

    const RPCS: &[RegisterRpcs] = &[
        bdevkit_malloc::rpc::register_rpcs,
        bdevkit_lvol::rpc::register_rpcs,
    ];

    fn err(r: Result<Value, RpcError>) -> (i32, String) {
        let e = r.expect_err("an error");
        (e.code, e.message)
    }

    async fn write(mgr: &BdevManager, name: &str, lba: u64, byte: u8) {
        let d = mgr.open(name, true, |_| {}).unwrap();
        let ch = d.get_io_channel().unwrap();
        let mut b = DmaBuf::new(4096).unwrap();
        b.as_mut_slice().fill(byte);
        ch.write(lba, 8, b).await.unwrap();
    }

    /// The first byte of 4 KiB at each of `lbas` (each 4 KiB uniform).
    async fn read(mgr: &BdevManager, name: &str, lbas: &[u64]) -> Vec<u8> {
        let d = mgr.open(name, false, |_| {}).unwrap();
        let ch = d.get_io_channel().unwrap();
        let mut out = Vec::new();
        for &lba in lbas {
            let got = ch.read(lba, 8, DmaBuf::new(4096).unwrap()).await.unwrap();
            let s = got.as_slice();
            assert!(s.iter().all(|&x| x == s[0]), "mixed 4 KiB at {lba}");
            out.push(s[0]);
        }
        out
    }

    async fn lvol_info(mgr: &BdevManager, name: &str) -> Value {
        let all = bdevkit_lvol::get_lvols(mgr, None).await.unwrap();
        all.into_iter().find(|l| l["name"] == name).expect("listed")
    }

    #[test]
    fn snapshot_clone_and_delete_through_the_rpcs() {
        env("0x1").run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            malloc(&mgr, "M0", 64 * MIB / 512);
            store(&mgr, "M0", "lvs0", 64 << 10).await;
            let v = lvol(&mgr, "lvs0", "vol", 1, true).await;
            let at = [0, 8, 2 * BPC, 3 * BPC];
            write(&mgr, &v, 0, 1).await;
            write(&mgr, &v, 2 * BPC, 2).await;
            assert_eq!(read(&mgr, &v, &at).await, [1, 0, 2, 0]);

            let snap = call(
                &reg,
                "bdev_lvol_snapshot",
                json!({"lvol_name": "lvs0/vol", "snapshot_name": "snap"}),
            )
            .await
            .unwrap();
            let snap = snap.as_str().unwrap().to_string();
            assert_eq!(mgr.get("lvs0/snap").unwrap().name(), snap);
            assert_eq!(read(&mgr, &v, &at).await, [1, 0, 2, 0]);
            assert_eq!(read(&mgr, &snap, &at).await, [1, 0, 2, 0]);
            let (vi, si) = (lvol_info(&mgr, "vol").await, lvol_info(&mgr, "snap").await);
            assert_eq!(
                (vi["is_clone"].clone(), vi["num_allocated_clusters"].clone()),
                (json!(true), json!(0))
            );
            assert_eq!(
                (
                    si["is_snapshot"].clone(),
                    si["num_allocated_clusters"].clone()
                ),
                (json!(true), json!(2))
            );
            let di = mgr.get(&v).unwrap().dump_info_json();
            assert_eq!(di["lvol"]["clone"], true);
            assert_eq!(di["lvol"]["base_snapshot"], "snap");
            assert_eq!(
                mgr.get(&snap).unwrap().dump_info_json()["lvol"]["clones"],
                json!(["vol"])
            );

            // Copy-on-write: a write into the snapshot's cluster keeps the rest.
            write(&mgr, &v, 8, 9).await;
            assert_eq!(read(&mgr, &v, &at).await, [1, 9, 2, 0]);
            assert_eq!(read(&mgr, &snap, &at).await, [1, 0, 2, 0]);
            // Write zeroes over a cluster the parent holds reads zeros.
            {
                let d = mgr.open(&v, true, |_| {}).unwrap();
                let ch = d.get_io_channel().unwrap();
                ch.write_zeroes(2 * BPC, 8).await.unwrap();
            }
            assert_eq!(read(&mgr, &v, &at).await, [1, 9, 0, 0]);
            assert_eq!(read(&mgr, &snap, &at).await, [1, 0, 2, 0]);

            // Clone of the snapshot; refusals as SPDK's.
            let c = call(
                &reg,
                "bdev_lvol_clone",
                json!({"snapshot_name": "lvs0/snap", "clone_name": "c1"}),
            )
            .await
            .unwrap();
            let c = c.as_str().unwrap().to_string();
            assert_eq!(read(&mgr, &c, &at).await, [1, 0, 2, 0]);
            assert_eq!(
                err(call(
                    &reg,
                    "bdev_lvol_clone",
                    json!({"snapshot_name": "lvs0/vol", "clone_name": "x"})
                )
                .await),
                (-32602, "Invalid argument".into())
            );
            assert_eq!(
                err(call(
                    &reg,
                    "bdev_lvol_snapshot",
                    json!({"lvol_name": "lvs0/snap", "snapshot_name": "x"})
                )
                .await),
                (-32602, "Invalid argument".into())
            );
            assert_eq!(
                err(call(
                    &reg,
                    "bdev_lvol_snapshot",
                    json!({"lvol_name": "nope", "snapshot_name": "x"})
                )
                .await),
                (-19, "No such device".into())
            );
            assert_eq!(
                err(call(
                    &reg,
                    "bdev_lvol_snapshot",
                    json!({"lvol_name": "lvs0/vol", "snapshot_name": "c1"})
                )
                .await),
                (-32602, "File exists".into())
            );
            let mut clones = mgr.get(&snap).unwrap().dump_info_json()["lvol"]["clones"].clone();
            clones
                .as_array_mut()
                .unwrap()
                .sort_by_key(|x| x.to_string());
            assert_eq!(clones, json!(["c1", "vol"]));
            // Two clones: EBUSY, nothing changes.
            assert_eq!(
                err(call(&reg, "bdev_lvol_delete", json!({"name": "lvs0/snap"})).await),
                (-32603, "Device or resource busy".into())
            );
            assert!(mgr.get(&snap).is_some());
            assert_eq!(lvol_info(&mgr, "snap").await["is_snapshot"], true);
            // One clone: merged into it.
            call(&reg, "bdev_lvol_delete", json!({"name": "lvs0/c1"}))
                .await
                .unwrap();
            call(&reg, "bdev_lvol_delete", json!({"name": "lvs0/snap"}))
                .await
                .unwrap();
            assert!(mgr.get(&snap).is_none());
            assert_eq!(read(&mgr, &v, &at).await, [1, 9, 0, 0]);
            let vi = lvol_info(&mgr, "vol").await;
            assert_eq!(vi["is_clone"], false);
            assert_eq!(
                mgr.get(&v).unwrap().dump_info_json()["lvol"]["clone"],
                false
            );
        });
    }

    #[test]
    fn inflate_decouple_and_set_parent() {
        env("0x1").run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            malloc(&mgr, "M0", 64 * MIB / 512);
            store(&mgr, "M0", "lvs0", 64 << 10).await;
            let v = lvol(&mgr, "lvs0", "vol", 1, true).await;
            let at = [0, BPC, 2 * BPC];
            write(&mgr, &v, 0, 1).await;
            let ok = |m: &'static str, p: Value| call(&reg, m, p);
            ok(
                "bdev_lvol_snapshot",
                json!({"lvol_name": "lvs0/vol", "snapshot_name": "s1"}),
            )
            .await
            .unwrap();
            write(&mgr, &v, BPC, 2).await;
            ok(
                "bdev_lvol_snapshot",
                json!({"lvol_name": "lvs0/vol", "snapshot_name": "s2"}),
            )
            .await
            .unwrap();
            write(&mgr, &v, 2 * BPC, 3).await;
            assert_eq!(read(&mgr, &v, &at).await, [1, 2, 3]);
            ok("bdev_lvol_decouple_parent", json!({"name": "lvs0/vol"}))
                .await
                .unwrap();
            assert_eq!(
                mgr.get(&v).unwrap().dump_info_json()["lvol"]["base_snapshot"],
                "s1"
            );
            assert_eq!(read(&mgr, &v, &at).await, [1, 2, 3]);
            assert_eq!(lvol_info(&mgr, "vol").await["num_allocated_clusters"], 2);
            // set_parent back to s2 (same size, a snapshot).
            ok(
                "bdev_lvol_set_parent",
                json!({"lvol_name": "lvs0/vol", "parent_name": "lvs0/s2"}),
            )
            .await
            .unwrap();
            assert_eq!(
                err(ok(
                    "bdev_lvol_set_parent",
                    json!({"lvol_name": "lvs0/vol", "parent_name": "lvs0/s2"})
                )
                .await),
                (-32602, "File exists".into())
            );
            let t = lvol(&mgr, "lvs0", "thick", 1, false).await;
            assert_eq!(
                err(ok(
                    "bdev_lvol_set_parent",
                    json!({"lvol_name": t, "parent_name": "lvs0/s2"})
                )
                .await),
                (-32602, "Invalid argument".into())
            );
            assert_eq!(
                err(ok("bdev_lvol_decouple_parent", json!({"name": t})).await),
                (-32602, "Invalid argument".into())
            );
            ok("bdev_lvol_inflate", json!({"name": "lvs0/vol"}))
                .await
                .unwrap();
            let vi = lvol_info(&mgr, "vol").await;
            assert_eq!(
                (vi["is_clone"].clone(), vi["is_thin_provisioned"].clone()),
                (json!(false), json!(false))
            );
            assert_eq!(vi["num_allocated_clusters"], 16);
            assert_eq!(
                read(&mgr, &v, &[0, BPC, 2 * BPC, 5 * BPC]).await,
                [1, 2, 3, 0]
            );
            // The snapshots have no clones left: plain deletes.
            ok("bdev_lvol_delete", json!({"name": "lvs0/s2"}))
                .await
                .unwrap();
            ok("bdev_lvol_delete", json!({"name": "lvs0/s1"}))
                .await
                .unwrap();
            assert_eq!(read(&mgr, &v, &at).await, [1, 2, 3]);
        });
    }

    #[test]
    fn snapshots_taken_while_two_threads_verify() {
        let env = env("0x3");
        let name = env.run(|mgr| async move {
            malloc(&mgr, "M0", 64 * MIB / 512);
            store(&mgr, "M0", "lvs0", 64 << 10).await;
            lvol(&mgr, "lvs0", "v", 16, true).await
        });
        let r = std::thread::scope(|s| {
            let worker = s.spawn(|| verify::run(&env, &name, 8, 16, 600));
            for i in 0..3 {
                std::thread::sleep(std::time::Duration::from_millis(20));
                let n = name.clone();
                env.run(move |mgr| async move {
                    bdevkit_lvol::snapshot_lvol(&mgr, &n, &format!("s{i}"))
                        .await
                        .unwrap();
                });
            }
            worker.join().unwrap()
        });
        assert_eq!((r.mismatches, r.errors), (0, 0), "{r:?}");
        assert_eq!(r.verified, 2 * 16 * 600);
        // The volume still reads what was written last, through its chain.
        let r2 = verify::run(&env, &name, 8, 16, 50);
        assert_eq!((r2.mismatches, r2.errors), (0, 0));
        env.run(|mgr| async move {
            let l = bdevkit_lvol::get_lvols(&mgr, None).await.unwrap();
            assert_eq!(l.len(), 4);
            assert_eq!(l.iter().filter(|x| x["is_snapshot"] == true).count(), 3);
        });
    }
}
