//! passthru on malloc and null: conformance, examine, events, claims,
//! config replay and the RPCs.

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use bdevkit::bdev::{BdevEvent, ClaimType, IoStatus, IoType};
    use bdevkit::dma::DmaBuf;
    use bdevkit::Error;
    use bdevkit_jsonrpc::RpcError;
    use bdevkit_malloc::MallocCreateParams;
    use bdevkit_null::NullCreateParams;
    use bdevkit_passthru::{PassthruCreateParams, NAMESPACE_UUID};
    use bdevkit_test::env::wait_for;
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{conformance, delete_malloc, malloc, TestEnv};
    use serde_json::{json, Value};
    use uuid::Uuid;

    fn env() -> TestEnv {
        TestEnv::with_modules(
            "0x1",
            &[
                bdevkit_null::register,
                bdevkit_malloc::register,
                bdevkit_passthru::register,
            ],
        )
    }

    /// The RPC methods the tests call.
    const RPCS: &[RegisterRpcs] = &[
        bdevkit_malloc::rpc::register_rpcs,
        bdevkit_passthru::rpc::register_rpcs,
    ];

    #[test]
    fn conformance_on_malloc() {
        env().run(|mgr| async move {
            malloc(&mgr, "M0", 4096);
            let name =
                bdevkit_passthru::create(&mgr, PassthruCreateParams::new("M0", "PT0")).unwrap();
            assert_eq!(name, "PT0");
            let pt = mgr.get("PT0").unwrap();
            assert_eq!(pt.product_name(), "passthru");
            assert_eq!(pt.num_blocks(), 4096);
            assert_eq!(
                mgr.get("M0").unwrap().claim(),
                Some((ClaimType::ExclusiveWrite, "passthru".to_string()))
            );
            assert_eq!(
                pt.dump_info_json(),
                json!({"passthru": {"name": "PT0", "base_bdev_name": "M0"}})
            );
            conformance::run(&mgr, "PT0", Some(bdevkit_passthru::delete)).await;
            // Deleting released the base.
            assert!(wait_for(60, || mgr.get("M0").unwrap().claim().is_none()).await);
        });
    }

    #[test]
    fn forwards_exactly_the_base_io_types() {
        env().run(|mgr| async move {
            bdevkit_null::create(&mgr, NullCreateParams::new("N0", 4096, 256)).unwrap();
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("N0", "PTn")).unwrap();
            let (n, pt) = (mgr.get("N0").unwrap(), mgr.get("PTn").unwrap());
            for t in IoType::ALL {
                assert_eq!(pt.supports(t), n.supports(t), "{t}");
            }
            assert!(!pt.supports(IoType::Flush));
        });
    }

    #[test]
    fn deferred_until_the_base_appears_by_name_or_alias() {
        env().run(|mgr| async move {
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("Later", "PT1")).unwrap();
            assert!(mgr.get("PT1").is_none(), "no base yet");
            let uuid = Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0);
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new(uuid.to_string(), "PT2"))
                .unwrap();

            malloc(&mgr, "Later", 128);
            let mut p = MallocCreateParams::new("ByUuid", 512, 128);
            p.uuid = Some(uuid);
            bdevkit_malloc::create(&mgr, p).unwrap();

            assert_eq!(mgr.get("PT1").unwrap().num_blocks(), 128);
            assert!(mgr.get("PT2").is_some(), "attached through the UUID alias");
            let (tx, rx) = std::sync::mpsc::channel();
            mgr.wait_for_examine(move || tx.send(()).unwrap());
            assert!(wait_for(60, || rx.try_recv().is_ok()).await);
        });
    }

    #[test]
    fn uuid_is_derived_from_the_base_or_configured() {
        env().run(|mgr| async move {
            malloc(&mgr, "M0", 64);
            malloc(&mgr, "M1", 64);
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("M0", "PT0")).unwrap();
            let base = mgr.get("M0").unwrap().uuid();
            let derived = Uuid::new_v5(&NAMESPACE_UUID, base.as_bytes());
            assert_eq!(mgr.get("PT0").unwrap().uuid(), derived);
            assert_eq!(derived.get_version_num(), 5);
            let mut p = PassthruCreateParams::new("M1", "PT1");
            let fixed = Uuid::from_u128(42);
            p.uuid = Some(fixed);
            bdevkit_passthru::create(&mgr, p).unwrap();
            assert_eq!(mgr.get("PT1").unwrap().uuid(), fixed);
            assert!(mgr.get(&fixed.to_string()).is_some(), "UUID is an alias");
        });
    }

    #[test]
    fn base_removal_cascades_and_config_reattaches() {
        env().run(|mgr| async move {
            malloc(&mgr, "M0", 256);
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("M0", "PT0")).unwrap();
            let removed = Arc::new(AtomicUsize::new(0));
            let r2 = Arc::clone(&removed);
            let desc = mgr
                .open("PT0", true, move |e| {
                    if e == BdevEvent::Remove {
                        r2.fetch_add(1, Ordering::SeqCst);
                    }
                })
                .unwrap();
            let ch = desc.get_io_channel().unwrap();
            ch.write(0, 1, conformance::pattern(512, 1)).await.unwrap();

            let (tx, rx) = std::sync::mpsc::channel();
            bdevkit_malloc::delete(&mgr, "M0", move |r| tx.send(r.is_ok()).unwrap());
            assert!(wait_for(60, || removed.load(Ordering::SeqCst) == 1).await);
            // The base is going: new I/O fails instead of reaching it.
            let e = ch
                .read(0, 1, DmaBuf::new(512).unwrap())
                .await
                .expect_err("I/O after the base's removal");
            assert!(
                matches!(e.error, Error::Io(IoStatus::Aborted)),
                "{}",
                e.error
            );
            assert!(
                rx.try_recv().is_err(),
                "base gone while the passthru is open"
            );
            drop(ch);
            drop(desc);
            assert!(wait_for(60, || rx.try_recv() == Ok(true)).await);
            assert!(mgr.get("PT0").is_none() && mgr.get("M0").is_none());

            // The configuration stays: a new M0 gets its passthru back.
            malloc(&mgr, "M0", 256);
            assert!(mgr.get("PT0").is_some());
        });
    }

    #[test]
    fn resize_of_the_base_resizes_the_passthru() {
        env().run(|mgr| async move {
            bdevkit_null::create(&mgr, NullCreateParams::new("N0", 4096, 1024)).unwrap();
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("N0", "PT0")).unwrap();
            bdevkit_null::resize(&mgr, "N0", 8).unwrap();
            let pt = mgr.get("PT0").unwrap();
            assert!(wait_for(60, || pt.num_blocks() == 2048).await);
        });
    }

    #[test]
    fn save_config_replays_in_any_order() {
        let saved = env().run(|mgr| async move {
            malloc(&mgr, "M0", 64);
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("M0", "PT0")).unwrap();
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("Missing", "PTw")).unwrap();
            let uuid = mgr.get("PT0").unwrap().uuid();
            let entries: Vec<Value> = mgr
                .config_json()
                .into_iter()
                .filter(|e| {
                    let m = e["method"].as_str().unwrap_or("");
                    m == "bdev_malloc_create" || m == "bdev_passthru_create"
                })
                .collect();
            assert_eq!(entries.len(), 3, "{entries:?}");
            (entries, uuid)
        });
        let (entries, uuid) = saved;
        let pt = entries
            .iter()
            .find(|e| e["params"]["name"] == "PT0")
            .unwrap();
        assert_eq!(
            pt["params"],
            json!({"base_bdev_name": "M0", "name": "PT0", "uuid": uuid.to_string()})
        );
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            // Vbdevs first: examine makes the order irrelevant.
            for e in entries.iter().rev() {
                let m = e["method"].as_str().unwrap();
                call(&reg, m, e["params"].clone()).await.unwrap();
            }
            assert_eq!(mgr.get("PT0").unwrap().uuid(), uuid);
            let again = serde_json::to_string(&mgr.config_json()).unwrap();
            assert!(again.contains("\"PTw\""), "waiting config kept: {again}");
        });
    }

    #[test]
    fn rpc_create_delete_and_errors() {
        env().run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            malloc(&mgr, "M0", 64);
            let r = call(
                &reg,
                "bdev_passthru_create",
                json!({"base_bdev_name": "M0", "name": "PT0"}),
            )
            .await;
            assert_eq!(r, Ok(json!("PT0")));
            // Same name again.
            let r = call(
                &reg,
                "bdev_passthru_create",
                json!({"base_bdev_name": "M0", "name": "PT0"}),
            )
            .await;
            assert_eq!(r, Err(RpcError::new(-17, "File exists")));
            // The base is claimed by PT0.
            let r = call(
                &reg,
                "bdev_passthru_create",
                json!({"base_bdev_name": "M0", "name": "PT1"}),
            )
            .await;
            assert_eq!(r, Err(RpcError::new(-1, "Operation not permitted")));
            assert!(
                call(&reg, "bdev_passthru_delete", json!({"name": "PT1"}))
                    .await
                    .is_err(),
                "a failed create leaves no configuration"
            );
            // Missing base: accepted, deferred.
            let r = call(
                &reg,
                "bdev_passthru_create",
                json!({"base_bdev_name": "Nope", "name": "PT2", "uuid": Uuid::from_u128(7)}),
            )
            .await;
            assert_eq!(r, Ok(json!("PT2")));
            for bad in [
                json!({"base_bdev_name": "M0"}),
                json!({"base_bdev_name": "M0", "name": "X", "extra": 1}),
                json!({"base_bdev_name": "M0", "name": "X", "uuid": "not-a-uuid"}),
                json!({"base_bdev_name": 5, "name": "X"}),
            ] {
                let r = call(&reg, "bdev_passthru_create", bad).await;
                assert_eq!(
                    r,
                    Err(RpcError::new(-32603, "spdk_json_decode_object failed"))
                );
            }
            let r = call(&reg, "bdev_passthru_delete", json!({})).await;
            assert_eq!(r.unwrap_err().code, -32603);
            let r = call(&reg, "bdev_passthru_delete", json!({"name": "PT0"})).await;
            assert_eq!(r, Ok(json!(true)));
            assert!(mgr.get("PT0").is_none());
            let r = call(&reg, "bdev_passthru_delete", json!({"name": "PT0"})).await;
            assert_eq!(r, Err(RpcError::new(-19, "No such device")));
            // A waiting configuration can be deleted too.
            let r = call(&reg, "bdev_passthru_delete", json!({"name": "PT2"})).await;
            assert_eq!(r, Ok(json!(true)));
            // Not a passthru bdev.
            let r = call(&reg, "bdev_passthru_delete", json!({"name": "M0"})).await;
            assert_eq!(r, Err(RpcError::new(-19, "No such device")));
            delete_malloc(&mgr, "M0").await;
        });
    }
}
