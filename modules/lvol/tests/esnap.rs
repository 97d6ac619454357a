//! External-snapshot clones through the lvol module: `bdev_lvol_clone_bdev`
//! and `bdev_lvol_set_parent_bdev` with SPDK's params, results and errors;
//! reads through the external bdev and copy-on-write from it; snapshots,
//! inflate and decouple of esnap clones; the external bdev's claim; a
//! missing external bdev degrading its clones until it comes back, at run
//! time and at load.

#[cfg(test)]
mod common;

#[cfg(test)]
mod tests {
    use bdevkit::bdev::BdevManager;
    use bdevkit::dma::DmaBuf;
    use bdevkit_jsonrpc::RpcError;
    use bdevkit_passthru::PassthruCreateParams;
    use bdevkit_test::env::wait_for;
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{malloc, TestEnv};
    use serde_json::{json, Value};
    use uuid::Uuid;

    use crate::common::{lvol, store, MIB};

    const CLUSTER: u64 = 64 << 10;
    const CLUSTER_BYTES: usize = 64 << 10;
    const BPC: u64 = CLUSTER / 512;
    /// The external bdev: 2 MiB (32 clusters).
    const EXT_BLOCKS: u64 = 2 * MIB / 512;
    const EXT_UUID: &str = "6a1e3b52-0c8d-4b0e-9d7e-2f0e5c1a9b11";

    fn env(mask: &str) -> TestEnv {
        TestEnv::with_modules(
            mask,
            &[
                bdevkit_malloc::register,
                bdevkit_passthru::register,
                bdevkit_lvol::register,
            ],
        )
    }

    const RPCS: &[RegisterRpcs] = &[
        bdevkit_malloc::rpc::register_rpcs,
        bdevkit_passthru::rpc::register_rpcs,
        bdevkit_lvol::rpc::register_rpcs,
    ];

    fn err(r: Result<Value, RpcError>) -> (i32, String) {
        let e = r.expect_err("an error");
        (e.code, e.message)
    }

    /// The external bdev's byte at `at`.
    fn ext_byte(at: u64) -> u8 {
        ((at / 512) % 251) as u8 ^ 0x5a
    }

    /// Malloc `ME` filled with [`ext_byte`], under passthru `E0` with a
    /// fixed UUID (it can go and come back with the same identity).
    async fn external(mgr: &BdevManager) {
        malloc(mgr, "ME", EXT_BLOCKS);
        let d = mgr.open("ME", true, |_| {}).unwrap();
        let ch = d.get_io_channel().unwrap();
        for first in (0..EXT_BLOCKS).step_by(CLUSTER_BYTES / 512) {
            let mut b = DmaBuf::new(CLUSTER_BYTES).unwrap();
            for (i, x) in (0u64..).zip(b.as_mut_slice().iter_mut()) {
                *x = ext_byte(first * 512 + i);
            }
            ch.write(first, BPC, b).await.unwrap();
        }
        drop(ch);
        drop(d);
        ext_up(mgr);
    }

    fn ext_up(mgr: &BdevManager) {
        let mut p = PassthruCreateParams::new("ME", "E0");
        p.uuid = Some(Uuid::parse_str(EXT_UUID).unwrap());
        bdevkit_passthru::create(mgr, p).unwrap();
    }

    async fn passthru_down(mgr: &BdevManager, name: &str) {
        let (tx, rx) = std::sync::mpsc::channel();
        bdevkit_passthru::delete(mgr, name, move |r| tx.send(r.is_ok()).unwrap());
        assert!(wait_for(60, || rx.try_recv() == Ok(true)).await);
    }

    async fn examined(mgr: &BdevManager) {
        let (tx, rx) = std::sync::mpsc::channel();
        mgr.wait_for_examine(move || tx.send(()).unwrap());
        assert!(wait_for(60, || rx.try_recv().is_ok()).await);
    }

    async fn write(mgr: &BdevManager, name: &str, lba: u64, byte: u8) {
        let d = mgr.open(name, true, |_| {}).unwrap();
        let ch = d.get_io_channel().unwrap();
        let mut b = DmaBuf::new(4096).unwrap();
        b.as_mut_slice().fill(byte);
        ch.write(lba, 8, b).await.unwrap();
    }

    /// Reads a whole cluster `idx` of `name`.
    async fn cluster(mgr: &BdevManager, name: &str, idx: u64) -> Vec<u8> {
        let d = mgr.open(name, false, |_| {}).unwrap();
        let ch = d.get_io_channel().unwrap();
        let got = ch
            .read(idx * BPC, BPC, DmaBuf::new(CLUSTER_BYTES).unwrap())
            .await
            .unwrap();
        got.as_slice().to_vec()
    }

    /// What cluster `idx` of the external bdev holds, with 4 KiB of `byte`
    /// at `lba` within the lvol when it falls in the cluster.
    fn expect(idx: u64, writes: &[(u64, u8)]) -> Vec<u8> {
        let mut v: Vec<u8> = (0..CLUSTER).map(|i| ext_byte(idx * CLUSTER + i)).collect();
        for &(lba, byte) in writes {
            if lba / BPC == idx {
                let at = usize::try_from((lba % BPC) * 512).unwrap();
                v[at..at + 4096].fill(byte);
            }
        }
        v
    }

    async fn info(mgr: &BdevManager, name: &str) -> Value {
        let all = bdevkit_lvol::get_lvols(mgr, None).await.unwrap();
        all.into_iter().find(|l| l["name"] == name).expect("listed")
    }

    fn driver(mgr: &BdevManager, name: &str) -> Value {
        mgr.get(name).expect("registered").dump_info_json()["lvol"].clone()
    }

    #[test]
    fn an_esnap_clone_reads_its_bdev_and_copies_on_first_write() {
        env("0x1").run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            external(&mgr).await;
            malloc(&mgr, "M0", 64 * MIB / 512);
            store(&mgr, "M0", "lvs0", 64 << 10).await;
            let ec = call(
                &reg,
                "bdev_lvol_clone_bdev",
                json!({"bdev": "E0", "lvs_name": "lvs0", "clone_name": "ec"}),
            )
            .await
            .unwrap();
            let ec = ec.as_str().unwrap().to_string();
            assert_eq!(mgr.get("lvs0/ec").unwrap().name(), ec);
            assert_eq!(
                mgr.get(&ec).unwrap().num_blocks(),
                EXT_BLOCKS,
                "as long as its bdev"
            );
            // The external bdev is claimed read-many: nobody writes under
            // the clone.
            assert!(mgr.open("E0", true, |_| {}).is_err());
            for idx in [0, 5, 31] {
                assert_eq!(cluster(&mgr, &ec, idx).await, expect(idx, &[]));
            }
            let l = info(&mgr, "ec").await;
            assert_eq!(l["is_esnap_clone"], true);
            assert_eq!(l["is_clone"], false);
            assert_eq!(l["is_degraded"], false);
            assert_eq!(l["is_thin_provisioned"], true);
            assert_eq!(l["num_allocated_clusters"], 0);
            let d = driver(&mgr, &ec);
            assert_eq!(d["esnap_clone"], true);
            assert_eq!(d["external_snapshot_name"], EXT_UUID);

            // First write: the cluster is copied from the bdev, then
            // written.
            let w1 = (5 * BPC + 16, 0xa1);
            write(&mgr, &ec, w1.0, w1.1).await;
            assert_eq!(cluster(&mgr, &ec, 5).await, expect(5, &[w1]));
            assert_eq!(
                cluster(&mgr, "E0", 5).await,
                expect(5, &[]),
                "bdev untouched"
            );
            assert_eq!(info(&mgr, "ec").await["num_allocated_clusters"], 1);

            // A snapshot of the esnap clone becomes the esnap clone; the
            // volume its clone.
            call(
                &reg,
                "bdev_lvol_snapshot",
                json!({"lvol_name": "lvs0/ec", "snapshot_name": "s1"}),
            )
            .await
            .unwrap();
            let s1 = info(&mgr, "s1").await;
            assert_eq!(s1["is_esnap_clone"], true);
            assert_eq!(s1["is_snapshot"], true);
            let l = info(&mgr, "ec").await;
            assert_eq!(l["is_esnap_clone"], false);
            assert_eq!(l["is_clone"], true);
            assert_eq!(driver(&mgr, "lvs0/ec")["base_snapshot"], "s1");
            assert_eq!(driver(&mgr, "lvs0/s1")["external_snapshot_name"], EXT_UUID);
            let w2 = (9 * BPC, 0xb2);
            write(&mgr, &ec, w2.0, w2.1).await;
            for idx in [0, 5, 9, 31] {
                assert_eq!(cluster(&mgr, &ec, idx).await, expect(idx, &[w1, w2]));
                assert_eq!(cluster(&mgr, "lvs0/s1", idx).await, expect(idx, &[w1]));
            }

            // Inflate: every cluster allocated from the chain and the bdev.
            call(&reg, "bdev_lvol_inflate", json!({"name": "lvs0/ec"}))
                .await
                .unwrap();
            let l = info(&mgr, "ec").await;
            assert_eq!(
                (l["is_clone"].clone(), l["is_esnap_clone"].clone()),
                (json!(false), json!(false))
            );
            assert_eq!(l["num_allocated_clusters"], 32);
            for idx in [0, 5, 9, 31] {
                assert_eq!(cluster(&mgr, &ec, idx).await, expect(idx, &[w1, w2]));
            }
            // The snapshot still reads the bdev; once it is deleted nobody
            // does, and the claim goes.
            assert!(mgr.open("E0", true, |_| {}).is_err());
            bdevkit_lvol::delete_lvol(&mgr, "lvs0/s1").await.unwrap();
            assert!(wait_for(60, || mgr.open("E0", true, |_| {}).is_ok()).await);
        });
    }

    #[test]
    fn clone_bdev_and_set_parent_bdev_answer_as_spdk() {
        env("0x1").run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            external(&mgr).await;
            malloc(&mgr, "M0", 64 * MIB / 512);
            malloc(&mgr, "ODD", EXT_BLOCKS + 3);
            store(&mgr, "M0", "lvs0", 64 << 10).await;
            let clone = |bdev: &str, lvs: &str, name: &str| {
                json!({"bdev": bdev, "lvs_name": lvs, "clone_name": name})
            };
            let p = |m: &str| (RpcError::INVALID_PARAMS, m.to_string());
            assert_eq!(
                err(call(&reg, "bdev_lvol_clone_bdev", clone("E0", "nope", "c")).await),
                p("lvs does not exist")
            );
            assert_eq!(
                err(call(&reg, "bdev_lvol_clone_bdev", clone("nope", "lvs0", "c")).await),
                p("bdev does not exist")
            );
            let v = lvol(&mgr, "lvs0", "v", 2, true).await;
            assert_eq!(
                err(call(&reg, "bdev_lvol_clone_bdev", clone(&v, "lvs0", "c")).await),
                p("bdev is an lvol in same lvs as clone; use bdev_lvol_clone instead")
            );
            assert_eq!(
                err(call(&reg, "bdev_lvol_clone_bdev", clone("ODD", "lvs0", "c")).await),
                p("Invalid argument")
            );
            assert!(
                mgr.open("ODD", true, |_| {}).is_ok(),
                "a refused bdev is not left claimed"
            );
            assert_eq!(
                err(call(&reg, "bdev_lvol_clone_bdev", clone("E0", "lvs0", "v")).await),
                p("File exists")
            );
            assert_eq!(
                err(call(&reg, "bdev_lvol_clone_bdev", json!({"bdev": "E0"})).await).0,
                RpcError::INTERNAL_ERROR
            );
            assert_eq!(bdevkit_lvol::get_lvols(&mgr, None).await.unwrap().len(), 1);
            assert!(mgr.open("E0", true, |_| {}).is_ok(), "nothing holds it");

            // set_parent_bdev: the lvol keeps its own clusters, the rest
            // read the bdev.
            let w = (BPC + 8, 0xc3);
            write(&mgr, &v, w.0, w.1).await;
            let sp = |l: &str, p: &str| json!({"lvol_name": l, "parent_name": p});
            call(&reg, "bdev_lvol_set_parent_bdev", sp("lvs0/v", "E0"))
                .await
                .unwrap();
            let mut own = vec![0u8; CLUSTER_BYTES];
            let at = usize::try_from((w.0 % BPC) * 512).unwrap();
            own[at..at + 4096].fill(w.1);
            assert_eq!(cluster(&mgr, &v, 1).await, own);
            assert_eq!(cluster(&mgr, &v, 7).await, expect(7, &[]));
            assert_eq!(info(&mgr, "v").await["is_esnap_clone"], true);
            assert_eq!(driver(&mgr, &v)["external_snapshot_name"], EXT_UUID);
            assert_eq!(
                err(call(&reg, "bdev_lvol_set_parent_bdev", sp("lvs0/v", "E0")).await),
                p("File exists")
            );
            assert_eq!(
                err(call(&reg, "bdev_lvol_set_parent_bdev", sp("lvs0/nope", "E0")).await),
                (-libc::ENODEV, "No such device".into())
            );
            assert_eq!(
                err(call(&reg, "bdev_lvol_set_parent_bdev", sp("lvs0/v", "nope")).await),
                p("No such device")
            );
            lvol(&mgr, "lvs0", "thick", 2, false).await;
            assert_eq!(
                err(call(&reg, "bdev_lvol_set_parent_bdev", sp("lvs0/thick", "E0")).await),
                p("Invalid argument")
            );
            // Decouple of an esnap clone inflates it (SPDK's): no parent
            // left, the bdev is free again.
            call(&reg, "bdev_lvol_decouple_parent", json!({"name": "lvs0/v"}))
                .await
                .unwrap();
            let l = info(&mgr, "v").await;
            assert_eq!(l["is_esnap_clone"], false);
            assert_eq!(l["is_thin_provisioned"], false);
            assert_eq!(cluster(&mgr, &v, 7).await, expect(7, &[]));
            assert_eq!(cluster(&mgr, &v, 1).await, own);
            assert!(wait_for(60, || mgr.open("E0", true, |_| {}).is_ok()).await);
        });
    }

    #[test]
    fn a_missing_bdev_degrades_its_clones_until_it_comes_back() {
        env("0x1").run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            external(&mgr).await;
            malloc(&mgr, "M0", 64 * MIB / 512);
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("M0", "PT0")).unwrap();
            store(&mgr, "PT0", "lvs0", 64 << 10).await;
            let ec = call(
                &reg,
                "bdev_lvol_clone_bdev",
                json!({"bdev": "E0", "lvs_name": "lvs0", "clone_name": "ec"}),
            )
            .await
            .unwrap();
            let ec = ec.as_str().unwrap().to_string();
            let w1 = (3 * BPC, 0x11);
            write(&mgr, &ec, w1.0, w1.1).await;
            call(
                &reg,
                "bdev_lvol_snapshot",
                json!({"lvol_name": "lvs0/ec", "snapshot_name": "s1"}),
            )
            .await
            .unwrap();
            let w2 = (4 * BPC, 0x22);
            write(&mgr, &ec, w2.0, w2.1).await;
            let check = || async {
                for idx in [0, 3, 4, 20] {
                    assert_eq!(cluster(&mgr, &ec, idx).await, expect(idx, &[w1, w2]));
                    assert_eq!(cluster(&mgr, "lvs0/s1", idx).await, expect(idx, &[w1]));
                }
            };
            check().await;

            // The bdev goes: both lvols of the chain go, listed degraded.
            passthru_down(&mgr, "E0").await;
            assert!(
                wait_for(60, || mgr.get(&ec).is_none()
                    && mgr.get("lvs0/s1").is_none())
                .await
            );
            for n in ["ec", "s1"] {
                assert_eq!(info(&mgr, n).await["is_degraded"], true, "{n}");
            }
            // ... and come back with it.
            ext_up(&mgr);
            examined(&mgr).await;
            assert!(
                wait_for(60, || mgr.get(&ec).is_some()
                    && mgr.get("lvs0/s1").is_some())
                .await
            );
            assert_eq!(info(&mgr, "ec").await["is_degraded"], false);
            check().await;

            // At load: the store comes back before the bdev.
            passthru_down(&mgr, "PT0").await;
            passthru_down(&mgr, "E0").await;
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("M0", "PT0")).unwrap();
            examined(&mgr).await;
            assert_eq!(
                bdevkit_lvol::get_lvstores(&mgr, None).await.unwrap().len(),
                1
            );
            assert!(mgr.get(&ec).is_none() && mgr.get("lvs0/s1").is_none());
            let l = info(&mgr, "s1").await;
            assert_eq!(
                (l["is_degraded"].clone(), l["is_esnap_clone"].clone()),
                (json!(true), json!(true))
            );
            ext_up(&mgr);
            examined(&mgr).await;
            assert!(
                wait_for(60, || mgr.get(&ec).is_some()
                    && mgr.get("lvs0/s1").is_some())
                .await
            );
            check().await;
            // The store going releases the bdev.
            passthru_down(&mgr, "PT0").await;
            assert!(wait_for(60, || mgr.open("E0", true, |_| {}).is_ok()).await);
        });
    }
}
