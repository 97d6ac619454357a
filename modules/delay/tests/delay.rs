//! The delay bdev on malloc: conformance, the hold, reset and abort of held
//! I/O, latency updates, examine and config replay, and the RPCs.

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use bdevkit::bdev::{BdevChannel, BdevManager, IoStatus};
    use bdevkit::clock;
    use bdevkit::dma::DmaBuf;
    use bdevkit_delay::{DelayBdev, DelayCreateParams, LatencyType};
    use bdevkit_jsonrpc::RpcError;
    use bdevkit_test::env::wait_for;
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{conformance, malloc, sleep_ms, TestEnv};
    use serde_json::{json, Value};

    fn env() -> TestEnv {
        TestEnv::with_modules("0x1", &[bdevkit_malloc::register, bdevkit_delay::register])
    }

    /// The RPC methods the tests call.
    const RPCS: &[RegisterRpcs] = &[
        bdevkit_malloc::rpc::register_rpcs,
        bdevkit_delay::rpc::register_rpcs,
    ];

    fn setup(mgr: &BdevManager, us: u64) {
        malloc(mgr, "M0", 1024);
        bdevkit_delay::create(mgr, DelayCreateParams::new("D0", "M0", us)).unwrap();
    }

    fn read_in_background(ch: &BdevChannel, off: u64, tag: u64) -> Rc<Cell<Option<IoStatus>>> {
        let got = Rc::new(Cell::new(None));
        let g = Rc::clone(&got);
        let mut io = ch.alloc_io().unwrap();
        io.read(off, 1, DmaBuf::new(512).unwrap())
            .set_tag(tag)
            .on_done_closure(move |io| g.set(Some(io.status())));
        ch.submit(io).unwrap();
        got
    }

    #[test]
    fn conformance_on_malloc() {
        env().run(|mgr| async move {
            malloc(&mgr, "M0", 4096);
            let mut p = DelayCreateParams::new("D0", "M0", 20);
            p.p99_read_latency = 200;
            p.p99_write_latency = 300;
            bdevkit_delay::create(&mgr, p).unwrap();
            let d = mgr.get("D0").unwrap();
            assert_eq!(d.product_name(), "delay");
            // No UUID configured: SPDK's, derived from the base's.
            let base = mgr.get("M0").unwrap().uuid();
            let uuid = uuid::Uuid::new_v5(&bdevkit_delay::NAMESPACE_UUID, base.as_bytes());
            assert_eq!(d.uuid(), uuid);
            assert_eq!(
                d.dump_info_json(),
                json!({"delay": {"name": "D0", "base_bdev_name": "M0", "uuid": uuid.to_string(),
                    "avg_read_latency": 20, "p99_read_latency": 200,
                    "avg_write_latency": 20, "p99_write_latency": 300}})
            );
            conformance::run(&mgr, "D0", Some(bdevkit_delay::delete)).await;
        });
    }

    #[test]
    fn completion_never_comes_before_the_latency() {
        env().run(|mgr| async move {
            setup(&mgr, 3000);
            let desc = mgr.open("D0", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            for _ in 0..3 {
                let start = clock::ticks();
                ch.read(0, 1, DmaBuf::new(512).unwrap()).await.unwrap();
                let waited = clock::ticks() - start;
                assert!(waited >= clock::us_to_ticks(3000), "held for the latency");
            }
            // Undelayed types pass straight through.
            ch.flush(0, 8).await.unwrap();
        });
    }

    #[test]
    fn reset_and_abort_release_held_io() {
        env().run(|mgr| async move {
            // Ten seconds: these reads only come back aborted.
            setup(&mgr, 10_000_000);
            let desc = mgr.open("D0", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let a = read_in_background(&ch, 0, 7);
            let b = read_in_background(&ch, 1, 8);
            sleep_ms(5).await;
            assert!(a.get().is_none() && b.get().is_none());
            let mut abort = ch.alloc_io().unwrap();
            abort.abort(7);
            let done = ch.submit_async(abort).unwrap().await;
            assert_eq!(done.status(), IoStatus::Success);
            assert!(wait_for(60, || a.get() == Some(IoStatus::Aborted)).await);
            assert!(b.get().is_none(), "only the target");
            ch.reset().await.unwrap();
            assert_eq!(b.get(), Some(IoStatus::Aborted));
            // A latency update applies to new I/O.
            bdevkit_delay::update_latency(&mgr, "D0", LatencyType::AvgRead, 0).unwrap();
            ch.read(0, 1, DmaBuf::new(512).unwrap()).await.unwrap();
        });
    }

    #[test]
    fn p99_below_average_is_rejected() {
        env().run(|mgr| async move {
            malloc(&mgr, "M0", 64);
            let mut p = DelayCreateParams::new("D0", "M0", 100);
            p.p99_write_latency = 99;
            assert_eq!(bdevkit_delay::create(&mgr, p).unwrap_err().errno(), 22);
            assert!(mgr.get("D0").is_none());
            assert!(mgr.get("M0").unwrap().claim().is_none());
        });
    }

    #[test]
    fn removal_cascades_with_held_io_completing() {
        env().run(|mgr| async move {
            setup(&mgr, 2000);
            let desc = mgr.open("D0", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let held = read_in_background(&ch, 0, 1);
            let (tx, rx) = std::sync::mpsc::channel();
            bdevkit_malloc::delete(&mgr, "M0", move |r| tx.send(r.is_ok()).unwrap());
            // The read in flight still completes (it reached the base).
            assert!(wait_for(60, || held.get() == Some(IoStatus::Success)).await);
            drop(ch);
            drop(desc);
            assert!(wait_for(60, || rx.try_recv() == Ok(true)).await);
            assert!(mgr.get("D0").is_none());
        });
    }

    #[test]
    fn save_config_keeps_updated_latencies_and_replays() {
        let entries = env().run(|mgr| async move {
            bdevkit_delay::create(&mgr, DelayCreateParams::new("D0", "M0", 10)).unwrap();
            assert!(mgr.get("D0").is_none(), "deferred");
            malloc(&mgr, "M0", 64);
            let d = mgr.get("D0").expect("attached by examine");
            bdevkit_delay::update_latency(&mgr, "D0", LatencyType::P99Write, 500).unwrap();
            assert_eq!(
                d.ops_as::<DelayBdev>()
                    .unwrap()
                    .latency_us(LatencyType::P99Write),
                500
            );
            let uuid = d.uuid().to_string();
            let entries: Vec<Value> = mgr
                .config_json()
                .into_iter()
                .filter(|e| {
                    e["method"] == "bdev_delay_create" || e["method"] == "bdev_malloc_create"
                })
                .collect();
            let de = entries
                .iter()
                .find(|e| e["method"] == "bdev_delay_create")
                .unwrap();
            assert_eq!(
                de["params"],
                json!({"name": "D0", "base_bdev_name": "M0", "uuid": uuid,
                    "avg_read_latency": 10, "p99_read_latency": 10,
                    "avg_write_latency": 10, "p99_write_latency": 500})
            );
            entries
        });
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for e in entries.iter().rev() {
                call(&reg, e["method"].as_str().unwrap(), e["params"].clone())
                    .await
                    .unwrap();
            }
            let d = mgr.get("D0").unwrap().ops_as::<DelayBdev>().unwrap();
            assert_eq!(d.latency_us(LatencyType::P99Write), 500);
        });
    }

    #[test]
    fn rpcs_and_their_errors() {
        env().run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            malloc(&mgr, "M0", 64);
            let create = json!({"base_bdev_name": "M0", "name": "D0",
                "avg_read_latency": 100, "p99_read_latency": 1000,
                "avg_write_latency": 200, "p99_write_latency": 2000});
            assert_eq!(
                call(&reg, "bdev_delay_create", create.clone()).await,
                Ok(json!("D0"))
            );
            assert_eq!(
                call(&reg, "bdev_delay_create", create).await,
                Err(RpcError::new(-17, "File exists"))
            );
            let r = call(
                &reg,
                "bdev_delay_create",
                json!({"base_bdev_name": "X", "name": "D1",
                    "avg_read_latency": 100, "p99_read_latency": 10,
                    "avg_write_latency": 1, "p99_write_latency": 1}),
            )
            .await;
            assert_eq!(r, Err(RpcError::new(-22, "Invalid argument")));
            // Every latency is required.
            let r = call(
                &reg,
                "bdev_delay_create",
                json!({"base_bdev_name": "X", "name": "D1", "avg_read_latency": 1,
                    "p99_read_latency": 1, "avg_write_latency": 1}),
            )
            .await;
            assert_eq!(
                r,
                Err(RpcError::new(-32603, "spdk_json_decode_object failed"))
            );
            let r = call(
                &reg,
                "bdev_delay_update_latency",
                json!({"delay_bdev_name": "D0", "latency_type": "p99_write", "latency_us": 5000}),
            )
            .await;
            assert_eq!(r, Ok(json!(true)));
            // No ordering check on update (as SPDK).
            let r = call(
                &reg,
                "bdev_delay_update_latency",
                json!({"delay_bdev_name": "D0", "latency_type": "p99_read", "latency_us": 1}),
            )
            .await;
            assert_eq!(r, Ok(json!(true)));
            let missing = RpcError::new(-32602, "The requested bdev does not exist.");
            for name in ["nope", "M0"] {
                let r = call(
                    &reg,
                    "bdev_delay_update_latency",
                    json!({"delay_bdev_name": name, "latency_type": "avg_read", "latency_us": 1}),
                )
                .await;
                assert_eq!(r, Err(missing.clone()), "{name}");
            }
            let r = call(
                &reg,
                "bdev_delay_update_latency",
                json!({"delay_bdev_name": "D0", "latency_type": "max_read", "latency_us": 1}),
            )
            .await;
            assert_eq!(r.unwrap_err().code, -32603);
            assert_eq!(
                call(&reg, "bdev_delay_delete", json!({"name": "D0"})).await,
                Ok(json!(true))
            );
            assert_eq!(
                call(&reg, "bdev_delay_delete", json!({"name": "D0"})).await,
                Err(RpcError::new(-19, "No such device"))
            );
        });
    }
}
