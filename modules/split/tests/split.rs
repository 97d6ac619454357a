//! split on malloc: conformance, offsets and neighbours, sizes, examine,
//! removal, config replay and the RPCs.

#[cfg(test)]
mod tests {
    use bdevkit::bdev::{BdevManager, ClaimType};
    use bdevkit::dma::DmaBuf;
    use bdevkit::Error;
    use bdevkit_jsonrpc::RpcError;
    use bdevkit_split::SplitCreateParams;
    use bdevkit_test::env::wait_for;
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{conformance, malloc, TestEnv};
    use serde_json::{json, Value};

    fn env() -> TestEnv {
        TestEnv::with_modules("0x1", &[bdevkit_malloc::register, bdevkit_split::register])
    }

    /// The RPC methods the tests call.
    const RPCS: &[RegisterRpcs] = &[
        bdevkit_malloc::rpc::register_rpcs,
        bdevkit_split::rpc::register_rpcs,
    ];

    /// Deletes one part (what the conformance suite's delete check needs).
    fn delete_part(
        mgr: &BdevManager,
        name: &str,
        done: Box<dyn FnOnce(bdevkit::Result<()>) + Send>,
    ) {
        mgr.unregister_by_name(name, bdevkit_split::MODULE, done);
    }

    #[test]
    fn conformance_on_a_part_of_malloc() {
        env().run(|mgr| async move {
            malloc(&mgr, "M0", 8192);
            let names = bdevkit_split::create(&mgr, SplitCreateParams::new("M0", 4)).unwrap();
            assert_eq!(names, ["M0p0", "M0p1", "M0p2", "M0p3"]);
            let p1 = mgr.get("M0p1").unwrap();
            assert_eq!(p1.product_name(), "Split Disk");
            assert_eq!(p1.num_blocks(), 2048);
            assert_eq!(
                p1.dump_info_json(),
                json!({"split": {"base_bdev": "M0", "offset_blocks": 2048}})
            );
            assert_eq!(
                mgr.get("M0").unwrap().claim(),
                Some((ClaimType::ExclusiveWrite, "split".to_string()))
            );
            conformance::run(&mgr, "M0p1", Some(delete_part)).await;
            assert!(mgr.get("M0p0").is_some(), "the other parts stay");
        });
    }

    #[test]
    fn offsets_translate_and_no_io_reaches_a_neighbour() {
        env().run(|mgr| async move {
            malloc(&mgr, "M0", 1024);
            bdevkit_split::create(&mgr, SplitCreateParams::new("M0", 2)).unwrap();
            let d0 = mgr.open("M0p0", true, |_| {}).unwrap();
            let d1 = mgr.open("M0p1", true, |_| {}).unwrap();
            let (c0, c1) = (d0.get_io_channel().unwrap(), d1.get_io_channel().unwrap());
            let a = conformance::pattern(512 * 4, 1);
            let b = conformance::pattern(512 * 4, 2);
            let (ea, eb) = (a.to_vec(), b.to_vec());
            // The last four blocks of p0 and the first four of p1.
            c0.write(508, 4, a).await.unwrap();
            c1.write(0, 4, b).await.unwrap();
            // Crossing the end of p0 is refused, not sent into p1.
            let e = c0
                .write(510, 4, DmaBuf::new(512 * 4).unwrap())
                .await
                .unwrap_err();
            assert!(matches!(e.error, Error::OutOfRange { .. }), "{}", e.error);
            // The base (read-only: it is claimed) sees both where expected.
            let base = mgr.open("M0", false, |_| {}).unwrap();
            let cb = base.get_io_channel().unwrap();
            let got = cb
                .read(508, 8, DmaBuf::new(512 * 8).unwrap())
                .await
                .unwrap();
            assert_eq!(&got[..512 * 4], &ea[..]);
            assert_eq!(&got[512 * 4..], &eb[..]);
            // Unmap and write zeroes stay inside the part too.
            c1.write_zeroes(0, 2).await.unwrap();
            let got = cb
                .read(508, 8, DmaBuf::new(512 * 8).unwrap())
                .await
                .unwrap();
            assert_eq!(&got[..512 * 4], &ea[..], "p0 untouched");
            assert!(got[512 * 4..512 * 6].iter().all(|x| *x == 0));
            assert_eq!(&got[512 * 6..], &eb[512 * 2..]);
        });
    }

    #[test]
    fn sizes_follow_spdk() {
        env().run(|mgr| async move {
            malloc(&mgr, "M0", 8192); // 4 MiB
            let mut p = SplitCreateParams::new("M0", 8);
            p.split_size_mb = Some(1);
            let names = bdevkit_split::create(&mgr, p).unwrap();
            assert_eq!(names.len(), 4, "count clamped to what fits");
            assert_eq!(mgr.get("M0p3").unwrap().num_blocks(), 2048);
            malloc(&mgr, "M1", 100);
            let names = bdevkit_split::create(&mgr, SplitCreateParams::new("M1", 3)).unwrap();
            assert_eq!(names.len(), 3);
            assert_eq!(mgr.get("M1p2").unwrap().num_blocks(), 33);
            malloc(&mgr, "M2", 100);
            let mut p = SplitCreateParams::new("M2", 1);
            p.split_size_mb = Some(1);
            let e = bdevkit_split::create(&mgr, p).unwrap_err();
            assert_eq!(e.errno(), 22);
            assert!(
                mgr.get("M2").unwrap().claim().is_none(),
                "failure releases the base"
            );
        });
    }

    #[test]
    fn deferred_removed_and_reattached() {
        env().run(|mgr| async move {
            let names = bdevkit_split::create(&mgr, SplitCreateParams::new("M0", 2)).unwrap();
            assert!(names.is_empty(), "no base yet");
            malloc(&mgr, "M0", 256);
            assert!(mgr.get("M0p0").is_some() && mgr.get("M0p1").is_some());
            let (tx, rx) = std::sync::mpsc::channel();
            bdevkit_malloc::delete(&mgr, "M0", move |r| tx.send(r.is_ok()).unwrap());
            assert!(wait_for(60, || rx.try_recv() == Ok(true)).await);
            assert!(mgr.get("M0p0").is_none() && mgr.get("M0p1").is_none());
            malloc(&mgr, "M0", 256);
            assert!(mgr.get("M0p1").is_some(), "configuration kept");
            let (tx, rx) = std::sync::mpsc::channel();
            bdevkit_split::delete(&mgr, "M0", move || tx.send(()).unwrap()).unwrap();
            assert!(wait_for(60, || rx.try_recv().is_ok()).await);
            assert!(mgr.get("M0p0").is_none());
            assert!(mgr.get("M0").unwrap().claim().is_none());
        });
    }

    #[test]
    fn save_config_replays_in_any_order() {
        let entries = env().run(|mgr| async move {
            malloc(&mgr, "M0", 8192);
            let mut p = SplitCreateParams::new("M0", 2);
            p.split_size_mb = Some(1);
            bdevkit_split::create(&mgr, p).unwrap();
            mgr.config_json()
                .into_iter()
                .filter(|e| {
                    let m = e["method"].as_str().unwrap_or("");
                    m == "bdev_malloc_create" || m == "bdev_split_create"
                })
                .collect::<Vec<Value>>()
        });
        let split = entries
            .iter()
            .find(|e| e["method"] == "bdev_split_create")
            .unwrap();
        assert_eq!(
            split["params"],
            json!({"base_bdev": "M0", "split_count": 2, "split_size_mb": 1})
        );
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for e in entries.iter().rev() {
                let m = e["method"].as_str().unwrap();
                call(&reg, m, e["params"].clone()).await.unwrap();
            }
            assert_eq!(mgr.get("M0p1").unwrap().num_blocks(), 2048);
        });
    }

    #[test]
    fn rpc_create_delete_and_errors() {
        env().run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            malloc(&mgr, "M0", 1024);
            let r = call(
                &reg,
                "bdev_split_create",
                json!({"base_bdev": "M0", "split_count": 2}),
            )
            .await;
            assert_eq!(r, Ok(json!(["M0p0", "M0p1"])));
            let r = call(
                &reg,
                "bdev_split_create",
                json!({"base_bdev": "M0", "split_count": 2}),
            )
            .await;
            assert_eq!(
                r,
                Err(RpcError::new(
                    -32602,
                    "Failed to create 2 split bdevs from 'M0': File exists"
                ))
            );
            let r = call(
                &reg,
                "bdev_split_create",
                json!({"base_bdev": "Nope", "split_count": 0}),
            )
            .await;
            assert_eq!(
                r,
                Err(RpcError::new(
                    -32602,
                    "Failed to create 0 split bdevs from 'Nope': Invalid argument"
                ))
            );
            // A base claimed by someone else.
            malloc(&mgr, "M1", 1024);
            let holder = mgr.open("M1", false, |_| {}).unwrap();
            holder.claim(ClaimType::ExclusiveWrite, "other").unwrap();
            let r = call(
                &reg,
                "bdev_split_create",
                json!({"base_bdev": "M1", "split_count": 2}),
            )
            .await;
            assert_eq!(
                r,
                Err(RpcError::new(
                    -32602,
                    "Failed to create 2 split bdevs from 'M1': Operation not permitted"
                ))
            );
            drop(holder);
            // Missing base: accepted, empty.
            let r = call(
                &reg,
                "bdev_split_create",
                json!({"base_bdev": "Later", "split_count": 4, "split_size_mb": 1}),
            )
            .await;
            assert_eq!(r, Ok(json!([])));
            for bad in [
                json!({"base_bdev": "M0"}),
                json!({"base_bdev": "M0", "split_count": -1}),
                json!({"base_bdev": "M0", "split_count": 1, "x": 1}),
            ] {
                let r = call(&reg, "bdev_split_create", bad).await;
                assert_eq!(r, Err(RpcError::new(-32602, "Invalid parameters")));
            }
            let r = call(&reg, "bdev_split_delete", json!({"base_bdev": "M0"})).await;
            assert_eq!(r, Ok(json!(true)));
            assert!(wait_for(60, || mgr.get("M0p0").is_none()).await);
            let r = call(&reg, "bdev_split_delete", json!({"base_bdev": "M0"})).await;
            assert_eq!(r, Err(RpcError::new(-32602, "No such file or directory")));
            let r = call(&reg, "bdev_split_delete", json!({"name": "M0"})).await;
            assert_eq!(r, Err(RpcError::new(-32602, "Invalid parameters")));
            let r = call(&reg, "bdev_split_delete", json!({"base_bdev": "Later"})).await;
            assert_eq!(r, Ok(json!(true)));
        });
    }
}
