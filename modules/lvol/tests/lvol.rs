//! The lvol module on malloc (and passthru over malloc, to take the base
//! away and bring it back): conformance of thick and thin lvols, thin
//! provisioning (zeros, allocation, racing writes, unmap giving clusters
//! back), examine after the base comes back, two-thread verify, and the
//! RPCs with SPDK's results and errors.

#[cfg(test)]
mod common;

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use bdevkit::bdev::{BdevEvent, BdevManager, IoType};
    use bdevkit::dma::DmaBuf;
    use bdevkit::thread::Thread;
    use bdevkit_jsonrpc::RpcError;
    use bdevkit_passthru::PassthruCreateParams;
    use bdevkit_test::env::wait_for;
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{conformance, malloc, verify, TestEnv};
    use serde_json::{json, Value};

    use crate::common::{lvol, store, MIB};

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

    fn delete(mgr: &BdevManager, name: &str, done: Box<dyn FnOnce(bdevkit::Result<()>) + Send>) {
        let (mgr, name) = (mgr.clone(), name.to_string());
        Thread::current()
            .expect("on a thread")
            .spawn_local(async move {
                let r = bdevkit_lvol::delete_lvol(&mgr, &name).await;
                done(r.map_err(|e| bdevkit::Error::InvalidArg(e.to_string())));
            });
    }

    fn pattern(len: usize, seed: u64) -> DmaBuf {
        let mut b = DmaBuf::new(len).unwrap();
        for (i, x) in b.as_mut_slice().iter_mut().enumerate() {
            *x = ((i as u64 * 7 + seed) % 251) as u8;
        }
        b
    }

    async fn lvols(mgr: &BdevManager) -> Vec<Value> {
        bdevkit_lvol::get_lvols(mgr, None).await.unwrap()
    }

    async fn one_store(mgr: &BdevManager) -> Value {
        bdevkit_lvol::get_lvstores(mgr, None).await.unwrap()[0].clone()
    }

    #[test]
    fn conformance_of_thick_and_thin_lvols() {
        env("0x1").run(|mgr| async move {
            malloc(&mgr, "M0", 64 * MIB / 512);
            store(&mgr, "M0", "lvs0", 1 << 20).await;
            for (name, thin) in [("thick", false), ("thin", true)] {
                let bdev = lvol(&mgr, "lvs0", name, 8, thin).await;
                let b = mgr.get(&bdev).unwrap();
                assert_eq!(b.aliases(), vec![format!("lvs0/{name}")]);
                assert_eq!(b.product_name(), "Logical Volume");
                assert_eq!(b.num_blocks(), 8 * MIB / 512);
                assert!(b.supports(IoType::Unmap) && b.supports(IoType::WriteZeroes));
                conformance::run(&mgr, &bdev, Some(delete)).await;
            }
            assert!(lvols(&mgr).await.is_empty());
            let s = one_store(&mgr).await;
            assert_eq!(s["free_clusters"], s["total_data_clusters"]);
        });
    }

    #[test]
    fn thin_lvols_read_zeros_allocate_on_write_and_give_back_on_unmap() {
        env("0x1").run(|mgr| async move {
            malloc(&mgr, "M0", 64 * MIB / 512);
            store(&mgr, "M0", "lvs0", 1 << 20).await;
            let name = lvol(&mgr, "lvs0", "t", 16, true).await;
            let free0 = one_store(&mgr).await["free_clusters"].as_u64().unwrap();
            let desc = mgr.open(&name, true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let c3 = 3 * MIB / 512;
            let mut junk = DmaBuf::new(4096).unwrap();
            junk.as_mut_slice().fill(0xaa);
            let got = ch.read(c3, 8, junk).await.unwrap();
            assert!(
                got.as_slice().iter().all(|&b| b == 0),
                "unallocated reads zeros"
            );
            assert_eq!(
                mgr.get(&name).unwrap().dump_info_json()["lvol"]["num_allocated_clusters"],
                0
            );
            // 64 writes into one cluster at once: one allocation.
            let mut waits = Vec::new();
            for i in 0..64u64 {
                let ch = ch.clone();
                waits
                    .push(async move { ch.write(c3 + i * 8, 8, pattern(4096, i)).await.map(drop) });
            }
            for r in futures::future::join_all(waits).await {
                r.unwrap();
            }
            let info = &lvols(&mgr).await[0];
            assert_eq!(info["num_allocated_clusters"], 1);
            assert_eq!(
                one_store(&mgr).await["free_clusters"].as_u64(),
                Some(free0 - 1)
            );
            for i in [0u64, 17, 63] {
                let got = ch
                    .read(c3 + i * 8, 8, DmaBuf::new(4096).unwrap())
                    .await
                    .unwrap();
                assert_eq!(got.as_slice(), pattern(4096, i).as_slice());
            }
            // A partial unmap keeps the cluster; a whole one gives it back.
            ch.unmap(c3, 8).await.unwrap();
            assert_eq!(lvols(&mgr).await[0]["num_allocated_clusters"], 1);
            ch.unmap(c3, MIB / 512).await.unwrap();
            assert_eq!(lvols(&mgr).await[0]["num_allocated_clusters"], 0);
            assert_eq!(one_store(&mgr).await["free_clusters"].as_u64(), Some(free0));
            let got = ch.read(c3 + 17 * 8, 8, pattern(4096, 1)).await.unwrap();
            assert!(got.as_slice().iter().all(|&b| b == 0));
            // Write zeroes and unmap of nothing allocate nothing.
            ch.write_zeroes(5 * MIB / 512, 16).await.unwrap();
            ch.unmap(6 * MIB / 512, MIB / 512).await.unwrap();
            assert_eq!(lvols(&mgr).await[0]["num_allocated_clusters"], 0);
            // An I/O over two clusters is split: both allocated.
            let at = 8 * MIB / 512 - 4;
            ch.write(at, 8, pattern(4096, 9)).await.unwrap();
            assert_eq!(lvols(&mgr).await[0]["num_allocated_clusters"], 2);
            let got = ch.read(at, 8, DmaBuf::new(4096).unwrap()).await.unwrap();
            assert_eq!(got.as_slice(), pattern(4096, 9).as_slice());
            ch.flush(0, 16 * MIB / 512).await.unwrap();
        });
    }

    #[test]
    fn verify_on_two_threads_over_a_thin_lvol() {
        let env = env("0x3");
        let name = env.run(|mgr| async move {
            malloc(&mgr, "M0", 64 * MIB / 512);
            store(&mgr, "M0", "lvs0", 64 << 10).await;
            lvol(&mgr, "lvs0", "t", 48, true).await
        });
        let r = verify::run(&env, &name, 8, 32, 400);
        assert_eq!((r.mismatches, r.errors), (0, 0), "{r:?}");
        assert_eq!(r.verified, 2 * 32 * 400);
        let n =
            env.run(|mgr| async move { lvols(&mgr).await[0]["num_allocated_clusters"].clone() });
        assert!(n.as_u64().unwrap() > 0);
    }

    #[test]
    fn the_store_goes_with_its_base_and_comes_back_by_examine() {
        env("0x1").run(|mgr| async move {
            malloc(&mgr, "M0", 64 * MIB / 512);
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("M0", "PT0")).unwrap();
            let uuid = store(&mgr, "PT0", "lvs0", 1 << 20).await;
            let thick = lvol(&mgr, "lvs0", "thick", 4, false).await;
            let thin = lvol(&mgr, "lvs0", "thin", 8, true).await;
            {
                let d = mgr.open(&thin, true, |_| {}).unwrap();
                let ch = d.get_io_channel().unwrap();
                ch.write(5 * MIB / 512, 8, pattern(4096, 5)).await.unwrap();
                let d = mgr.open(&thick, true, |_| {}).unwrap();
                let ch = d.get_io_channel().unwrap();
                ch.write(100, 8, pattern(4096, 6)).await.unwrap();
            }
            bdevkit_lvol::rename_lvol(&mgr, &thick, "big")
                .await
                .unwrap();
            let removed = Arc::new(AtomicUsize::new(0));
            let r2 = Arc::clone(&removed);
            let held = mgr
                .open("lvs0/thin", false, move |e| {
                    if e == BdevEvent::Remove {
                        r2.fetch_add(1, Ordering::SeqCst);
                    }
                })
                .unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            bdevkit_passthru::delete(&mgr, "PT0", move |r| tx.send(r.is_ok()).unwrap());
            assert!(wait_for(60, || removed.load(Ordering::SeqCst) == 1).await);
            drop(held);
            assert!(wait_for(60, || rx.try_recv() == Ok(true)).await);
            assert!(mgr.get(&thick).is_none() && mgr.get(&thin).is_none());
            assert!(bdevkit_lvol::get_lvstores(&mgr, None)
                .await
                .unwrap()
                .is_empty());
            // The base comes back: examine loads the store (it was
            // unloaded cleanly) and registers the lvols again.
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("M0", "PT0")).unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            mgr.wait_for_examine(move || tx.send(()).unwrap());
            assert!(wait_for(60, || rx.try_recv().is_ok()).await);
            let s = one_store(&mgr).await;
            assert_eq!(s["uuid"], uuid.as_str());
            assert_eq!(s["base_bdev"], "PT0");
            assert_eq!(mgr.get("lvs0/big").unwrap().name(), thick);
            assert_eq!(mgr.get("lvs0/thin").unwrap().name(), thin);
            let d = mgr.open("lvs0/thin", false, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            let got = ch
                .read(5 * MIB / 512, 8, DmaBuf::new(4096).unwrap())
                .await
                .unwrap();
            assert_eq!(got.as_slice(), pattern(4096, 5).as_slice());
            let d = mgr.open("lvs0/big", false, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            let got = ch.read(100, 8, DmaBuf::new(4096).unwrap()).await.unwrap();
            assert_eq!(got.as_slice(), pattern(4096, 6).as_slice());
            let l = lvols(&mgr).await;
            assert_eq!(l.len(), 2);
            assert_eq!(l[1]["num_allocated_clusters"], 1);
        });
    }

    fn err(r: Result<Value, RpcError>) -> (i32, String) {
        let e = r.expect_err("an error");
        (e.code, e.message)
    }

    #[test]
    fn rpcs_answer_as_spdk() {
        env("0x1").run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            malloc(&mgr, "M0", 32 * MIB / 512);
            malloc(&mgr, "M1", 16 * MIB / 512);
            let create = |p: Value| call(&reg, "bdev_lvol_create_lvstore", p);
            assert_eq!(
                err(create(json!({"bdev_name": "M0"})).await),
                (-32603, "spdk_json_decode_object failed".into())
            );
            assert_eq!(
                err(
                    create(json!({"bdev_name": "M0", "lvs_name": "x", "clear_method": "zap"}))
                        .await
                ),
                (-22, "Invalid clear_method parameter".into())
            );
            assert_eq!(
                err(create(json!({"bdev_name": "nope", "lvs_name": "x"})).await),
                (-19, "No such device".into())
            );
            let long = "n".repeat(64);
            assert_eq!(
                err(create(json!({"bdev_name": "M0", "lvs_name": long})).await).0,
                -22
            );
            assert_eq!(
                err(create(json!({"bdev_name": "M0", "lvs_name": "x", "cluster_sz": 1000})).await)
                    .0,
                -22
            );
            let u = create(
                json!({"bdev_name": "M0", "lvs_name": "lvs0", "cluster_sz": 1048576,
                                  "clear_method": "unmap", "num_md_pages_per_cluster_ratio": 100}),
            )
            .await
            .unwrap();
            let uuid = u.as_str().unwrap().to_string();
            assert_eq!(uuid.len(), 36);
            assert_eq!(
                err(create(json!({"bdev_name": "M1", "lvs_name": "lvs0"})).await),
                (-17, "File exists".into())
            );
            assert_eq!(
                err(create(json!({"bdev_name": "M0", "lvs_name": "other"})).await),
                (-1, "Operation not permitted".into())
            );
            let stores = call(&reg, "bdev_lvol_get_lvstores", json!({}))
                .await
                .unwrap();
            let s = &stores[0];
            let keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(
                keys,
                [
                    "uuid",
                    "name",
                    "base_bdev",
                    "total_data_clusters",
                    "free_clusters",
                    "block_size",
                    "cluster_size",
                    "max_growable_size"
                ]
            );
            assert_eq!(s["name"], "lvs0");
            assert_eq!(s["base_bdev"], "M0");
            assert_eq!(s["block_size"], 512);
            assert_eq!(s["cluster_size"], 1048576);
            let total = s["total_data_clusters"].as_u64().unwrap();
            assert_eq!(s["free_clusters"].as_u64(), Some(total));
            assert!(total > 25 && total < 32, "{s}");
            let by = |p: Value| call(&reg, "bdev_lvol_get_lvstores", p);
            assert_eq!(by(json!({"lvs_name": "lvs0"})).await.unwrap(), stores);
            assert_eq!(by(json!({"uuid": uuid})).await.unwrap(), stores);
            assert_eq!(
                err(by(json!({"lvs_name": "lvs0", "uuid": uuid})).await).0,
                -22
            );
            assert_eq!(err(by(json!({"lvs_name": "none"})).await).0, -19);

            let lc = |p: Value| call(&reg, "bdev_lvol_create", p);
            let thick = lc(json!({"lvs_name": "lvs0", "lvol_name": "thick", "size_in_mib": 3}))
                .await
                .unwrap();
            let thick = thick.as_str().unwrap().to_string();
            let thin = lc(
                json!({"uuid": uuid, "lvol_name": "thin", "size_in_mib": 100,
                                 "thin_provision": true, "clear_method": "none"}),
            )
            .await
            .unwrap();
            let thin = thin.as_str().unwrap().to_string();
            assert_eq!(
                err(lc(json!({"lvol_name": "x", "size_in_mib": 1})).await).0,
                -22
            );
            assert_eq!(
                err(lc(json!({"lvs_name": "zz", "lvol_name": "x", "size_in_mib": 1})).await).0,
                -19
            );
            assert_eq!(
                err(lc(json!({"lvs_name": "lvs0", "lvol_name": "thick", "size_in_mib": 1})).await),
                (-17, "File exists".into())
            );
            assert_eq!(
                err(
                    lc(json!({"lvs_name": "lvs0", "lvol_name": "n".repeat(64), "size_in_mib": 1}))
                        .await
                ),
                (-22, "Invalid argument".into())
            );
            assert_eq!(
                err(lc(
                    json!({"lvs_name": "lvs0", "lvol_name": "y", "size_in_mib": 1,
                              "clear_method": "zap"})
                )
                .await),
                (-22, "Invalid clean_method option".into())
            );
            // The store is full: nothing is created.
            let before = lvols(&mgr).await;
            assert_eq!(
                err(lc(json!({"lvs_name": "lvs0", "lvol_name": "huge", "size_in_mib": 64})).await),
                (-32602, "No space left on device".into())
            );
            assert_eq!(lvols(&mgr).await, before);
            assert!(mgr.get("lvs0/huge").is_none());

            let b = mgr.get(&thick).unwrap();
            assert_eq!(b.aliases(), vec!["lvs0/thick".to_string()]);
            assert_eq!(b.props().optimal_io_boundary, 2048);
            assert!(b.props().split_on_optimal_io_boundary);
            assert_eq!(
                b.dump_info_json(),
                json!({"lvol": {"lvol_store_uuid": uuid, "base_bdev": "M0",
                    "thin_provision": false, "num_allocated_clusters": 3, "snapshot": false,
                    "clone": false, "esnap_clone": false}})
            );
            let l = call(&reg, "bdev_lvol_get_lvols", json!({"lvs_name": "lvs0"}))
                .await
                .unwrap();
            assert_eq!(
                l[1],
                json!({"alias": "lvs0/thin", "uuid": thin, "name": "thin",
                    "is_thin_provisioned": true, "is_snapshot": false, "is_clone": false,
                    "is_esnap_clone": false, "is_degraded": false, "num_allocated_clusters": 0,
                    "lvs": {"name": "lvs0", "uuid": uuid}})
            );
            assert_eq!(
                call(&reg, "bdev_lvol_get_lvols", json!({})).await.unwrap(),
                l
            );

            // Rename, resize, read-only.
            let ok = |m: &'static str, p: Value| call(&reg, m, p);
            assert_eq!(
                ok(
                    "bdev_lvol_rename",
                    json!({"old_name": "lvs0/thin", "new_name": "thin2"})
                )
                .await,
                Ok(json!(true))
            );
            assert!(mgr.get("lvs0/thin").is_none());
            assert_eq!(mgr.get("lvs0/thin2").unwrap().name(), thin);
            assert_eq!(
                err(ok(
                    "bdev_lvol_rename",
                    json!({"old_name": thin, "new_name": "thick"})
                )
                .await),
                (-32602, "File exists".into())
            );
            assert_eq!(
                err(ok(
                    "bdev_lvol_rename",
                    json!({"old_name": "nope", "new_name": "a"})
                )
                .await),
                (-19, "No such device".into())
            );
            assert_eq!(
                ok(
                    "bdev_lvol_resize",
                    json!({"name": "lvs0/thick", "size_in_mib": 5})
                )
                .await,
                Ok(json!(true))
            );
            assert_eq!(mgr.get(&thick).unwrap().num_blocks(), 5 * MIB / 512);
            let free = one_store(&mgr).await["free_clusters"].clone();
            assert_eq!(
                err(ok(
                    "bdev_lvol_resize",
                    json!({"name": "lvs0/thick", "size_in_mib": 500})
                )
                .await),
                (-32602, "No space left on device".into())
            );
            assert_eq!(one_store(&mgr).await["free_clusters"], free);
            assert_eq!(mgr.get(&thick).unwrap().num_blocks(), 5 * MIB / 512);
            // Shrinking an open lvol: EBUSY, nothing changes.
            let d = mgr.open(&thick, false, |_| {}).unwrap();
            assert_eq!(
                err(ok("bdev_lvol_resize", json!({"name": thick, "size_in_mib": 1})).await),
                (-32602, "Device or resource busy".into())
            );
            assert_eq!(mgr.get(&thick).unwrap().num_blocks(), 5 * MIB / 512);
            drop(d);
            assert_eq!(
                ok("bdev_lvol_resize", json!({"name": thick, "size_in_mib": 1})).await,
                Ok(json!(true))
            );
            assert_eq!(mgr.get(&thick).unwrap().num_blocks(), MIB / 512);
            assert_eq!(
                err(ok(
                    "bdev_lvol_resize",
                    json!({"name": "nope", "size_in_mib": 1})
                )
                .await)
                .0,
                -19
            );
            assert_eq!(
                ok("bdev_lvol_set_read_only", json!({"name": thick})).await,
                Ok(json!(true))
            );
            let d = mgr.open(&thick, true, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            assert!(ch.write(0, 1, DmaBuf::new(512).unwrap()).await.is_err());
            ch.read(0, 1, DmaBuf::new(512).unwrap()).await.unwrap();
            drop((ch, d));

            // Store rename: every alias follows.
            assert_eq!(
                err(ok(
                    "bdev_lvol_rename_lvstore",
                    json!({"old_name": "no", "new_name": "a"})
                )
                .await),
                (-2, "Lvol store no not found".into())
            );
            assert_eq!(
                ok(
                    "bdev_lvol_rename_lvstore",
                    json!({"old_name": "lvs0", "new_name": "pool"})
                )
                .await,
                Ok(json!(true))
            );
            assert_eq!(mgr.get("pool/thin2").unwrap().name(), thin);
            assert_eq!(mgr.get("pool/thick").unwrap().name(), thick);
            assert!(mgr.get("lvs0/thick").is_none());
            assert_eq!(
                ok("bdev_lvol_grow_lvstore", json!({"lvs_name": "pool"})).await,
                Ok(json!(true))
            );

            // Delete an lvol, then the store (with an lvol still open:
            // its opener gets a remove event, as in SPDK).
            assert_eq!(
                err(ok("bdev_lvol_delete", json!({"name": "nope"})).await),
                (-19, "No such device".into())
            );
            assert_eq!(
                ok("bdev_lvol_delete", json!({"name": "pool/thick"})).await,
                Ok(json!(true))
            );
            assert!(mgr.get(&thick).is_none());
            let removed = Arc::new(AtomicUsize::new(0));
            let r2 = Arc::clone(&removed);
            let mgr2 = mgr.clone();
            let held = std::sync::Mutex::new(Some(
                mgr.open(&thin, false, move |e| {
                    if e == BdevEvent::Remove {
                        r2.fetch_add(1, Ordering::SeqCst);
                    }
                })
                .unwrap(),
            ));
            let del = call(
                &reg,
                "bdev_lvol_delete_lvstore",
                json!({"lvs_name": "pool"}),
            );
            let closer = async {
                assert!(wait_for(60, || removed.load(Ordering::SeqCst) == 1).await);
                held.lock().unwrap().take();
            };
            let (r, ()) = futures::join!(del, closer);
            assert_eq!(r, Ok(json!(true)));
            assert!(mgr2.get(&thin).is_none());
            assert!(mgr.get("M0").unwrap().claim().is_none());
            assert_eq!(
                call(&reg, "bdev_lvol_get_lvstores", json!({})).await,
                Ok(json!([]))
            );
            assert_eq!(
                err(call(
                    &reg,
                    "bdev_lvol_delete_lvstore",
                    json!({"lvs_name": "pool"})
                )
                .await)
                .0,
                -19
            );
            // The destroyed store does not come back: M0 is free for a new one.
            let u2 = create(json!({"bdev_name": "M0", "lvs_name": "again"}))
                .await
                .unwrap();
            assert_ne!(u2.as_str().unwrap(), uuid);
            // Nothing of this module in a saved config (SPDK writes none).
            let cfg = serde_json::to_string(&mgr.config_json()).unwrap();
            assert!(!cfg.contains("bdev_lvol"), "{cfg}");
        });
    }
}
