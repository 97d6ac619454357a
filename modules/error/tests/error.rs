//! The error bdev on malloc: conformance, each injection type, queue
//! depth, held I/O across resume, reset and removal, and the RPCs.

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use bdevkit::bdev::{BdevChannel, BdevManager, ClaimType, IoStatus};
    use bdevkit::dma::DmaBuf;
    use bdevkit::Error;
    use bdevkit_error::{ErrorCreateParams, ErrorInjectParams, InjectErrorType, InjectIoType};
    use bdevkit_jsonrpc::RpcError;
    use bdevkit_test::env::wait_for;
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{conformance, malloc, sleep_ms, TestEnv};
    use serde_json::{json, Value};

    fn env() -> TestEnv {
        TestEnv::with_modules("0x1", &[bdevkit_malloc::register, bdevkit_error::register])
    }

    /// The RPC methods the tests call.
    const RPCS: &[RegisterRpcs] = &[
        bdevkit_malloc::rpc::register_rpcs,
        bdevkit_error::rpc::register_rpcs,
    ];

    /// Malloc `M0` (512 x 256) and `EE_M0` on it.
    fn setup(mgr: &BdevManager) {
        malloc(mgr, "M0", 256);
        bdevkit_error::create(mgr, ErrorCreateParams::new("M0")).unwrap();
    }

    fn inject(mgr: &BdevManager, io: InjectIoType, ty: InjectErrorType, num: u32) {
        let mut p = ErrorInjectParams::new("EE_M0", io, ty);
        p.num = Some(num);
        bdevkit_error::inject_error(mgr, &p).unwrap();
    }

    async fn read_status(ch: &BdevChannel, off: u64) -> IoStatus {
        match ch.read(off, 1, DmaBuf::new(512).unwrap()).await {
            Ok(_) => IoStatus::Success,
            Err(e) => match e.error {
                Error::Io(s) => s,
                other => panic!("unexpected {other}"),
            },
        }
    }

    /// Submits a read whose completion sets the returned cell.
    fn read_in_background(ch: &BdevChannel, off: u64) -> Rc<Cell<Option<IoStatus>>> {
        let got = Rc::new(Cell::new(None));
        let g = Rc::clone(&got);
        let mut io = ch.alloc_io().unwrap();
        io.read(off, 1, DmaBuf::new(512).unwrap())
            .on_done_closure(move |io| g.set(Some(io.status())));
        ch.submit(io).unwrap();
        got
    }

    #[test]
    fn conformance_on_malloc() {
        env().run(|mgr| async move {
            setup(&mgr);
            let ee = mgr.get("EE_M0").unwrap();
            assert_eq!(ee.product_name(), "Error Injection Disk");
            assert_eq!(
                ee.dump_info_json(),
                json!({"error_disk": {"base_bdev": "M0"}})
            );
            assert_eq!(
                mgr.get("M0").unwrap().claim(),
                Some((ClaimType::ExclusiveWrite, "error".to_string()))
            );
            conformance::run(&mgr, "EE_M0", Some(bdevkit_error::delete)).await;
            assert!(wait_for(60, || mgr.get("M0").unwrap().claim().is_none()).await);
        });
    }

    #[test]
    fn failure_nvme_and_nomem_injections() {
        env().run(|mgr| async move {
            setup(&mgr);
            let d = mgr.open("EE_M0", true, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            inject(&mgr, InjectIoType::Read, InjectErrorType::Failure, 2);
            assert_eq!(read_status(&ch, 0).await, IoStatus::Failed);
            ch.write(0, 1, DmaBuf::new(512).unwrap())
                .await
                .expect("writes are not affected");
            assert_eq!(read_status(&ch, 0).await, IoStatus::Failed);
            assert_eq!(read_status(&ch, 0).await, IoStatus::Success, "num spent");

            let mut p =
                ErrorInjectParams::new("EE_M0", InjectIoType::All, InjectErrorType::NvmeFailure);
            p.nvme_sct = Some(1);
            p.nvme_sc = Some(0x81);
            bdevkit_error::inject_error(&mgr, &p).unwrap();
            assert_eq!(
                read_status(&ch, 1).await,
                IoStatus::Nvme { sct: 1, sc: 0x81 }
            );
            let e = ch.flush(0, 8).await.unwrap_err();
            assert!(
                matches!(e, Error::Io(IoStatus::Nvme { sct: 1, sc: 0x81 })),
                "flush gets it too: {e}"
            );
            inject(&mgr, InjectIoType::Clear, InjectErrorType::Failure, 0);
            assert_eq!(read_status(&ch, 1).await, IoStatus::Success, "cleared");

            // NOMEM is retried by the bdev layer: the write still succeeds.
            inject(&mgr, InjectIoType::Write, InjectErrorType::Nomem, 3);
            ch.write(2, 1, conformance::pattern(512, 3)).await.unwrap();
            let got = ch.read(2, 1, DmaBuf::new(512).unwrap()).await.unwrap();
            assert_eq!(&got[..], &conformance::pattern(512, 3)[..]);
        });
    }

    #[test]
    fn corrupt_data_on_write_and_read() {
        env().run(|mgr| async move {
            setup(&mgr);
            let d = mgr.open("EE_M0", true, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            let expect = conformance::pattern(1024, 9).to_vec();
            let mut p =
                ErrorInjectParams::new("EE_M0", InjectIoType::Write, InjectErrorType::CorruptData);
            p.corrupt_offset = Some(600);
            p.corrupt_value = Some(0xff);
            bdevkit_error::inject_error(&mgr, &p).unwrap();
            ch.write(4, 2, conformance::pattern(1024, 9)).await.unwrap();
            let got = ch.read(4, 2, DmaBuf::new(1024).unwrap()).await.unwrap();
            for (i, (a, b)) in got.iter().zip(&expect).enumerate() {
                if i == 600 {
                    assert_eq!(*a, b ^ 0xff, "byte 600 corrupted on the way down");
                } else {
                    assert_eq!(a, b, "byte {i}");
                }
            }
            ch.write(4, 2, conformance::pattern(1024, 9)).await.unwrap();
            p.io_type = InjectIoType::Read;
            p.corrupt_offset = Some(3);
            p.corrupt_value = Some(0x10);
            bdevkit_error::inject_error(&mgr, &p).unwrap();
            let got = ch.read(4, 2, DmaBuf::new(1024).unwrap()).await.unwrap();
            assert_eq!(got[3], expect[3] ^ 0x10, "corrupted on the way back");
            assert_eq!(&got[4..], &expect[4..]);
            let got = ch.read(4, 2, DmaBuf::new(1024).unwrap()).await.unwrap();
            assert_eq!(&got[..], &expect[..], "the stored data is intact");
        });
    }

    #[test]
    fn queue_depth_gates_the_injection() {
        env().run(|mgr| async move {
            setup(&mgr);
            let d = mgr.open("EE_M0", true, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            let mut p =
                ErrorInjectParams::new("EE_M0", InjectIoType::Read, InjectErrorType::Failure);
            p.queue_depth = Some(4);
            p.num = Some(1);
            bdevkit_error::inject_error(&mgr, &p).unwrap();
            for _ in 0..3 {
                assert_eq!(read_status(&ch, 0).await, IoStatus::Success, "QD 1 < 4");
            }
            let all: Vec<_> = (0..8).map(|i| read_in_background(&ch, i)).collect();
            assert!(wait_for(60, || all.iter().all(|c| c.get().is_some())).await);
            let failed = all
                .iter()
                .filter(|c| c.get() == Some(IoStatus::Failed))
                .count();
            assert_eq!(failed, 1, "exactly the I/O submitted at QD 4");
        });
    }

    #[test]
    fn pending_io_resumes_or_aborts() {
        env().run(|mgr| async move {
            setup(&mgr);
            let d = mgr.open("EE_M0", true, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            inject(&mgr, InjectIoType::Read, InjectErrorType::Pending, 2);
            let a = read_in_background(&ch, 0);
            let b = read_in_background(&ch, 1);
            sleep_ms(20).await;
            assert!(a.get().is_none() && b.get().is_none(), "held");
            bdevkit_error::resume_pending(&mgr, "EE_M0").unwrap();
            assert!(wait_for(60, || a.get().is_some() && b.get().is_some()).await);
            assert_eq!(a.get(), Some(IoStatus::Success));
            assert_eq!(b.get(), Some(IoStatus::Success));

            // A reset aborts what is held.
            inject(&mgr, InjectIoType::Read, InjectErrorType::Pending, 1);
            let c = read_in_background(&ch, 2);
            ch.reset().await.unwrap();
            assert_eq!(c.get(), Some(IoStatus::Aborted));
        });
    }

    #[test]
    fn base_removal_aborts_held_io_and_cascades() {
        env().run(|mgr| async move {
            setup(&mgr);
            let d = mgr.open("EE_M0", true, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            inject(&mgr, InjectIoType::Read, InjectErrorType::Pending, 1);
            let held = read_in_background(&ch, 0);
            let (tx, rx) = std::sync::mpsc::channel();
            bdevkit_malloc::delete(&mgr, "M0", move |r| tx.send(r.is_ok()).unwrap());
            assert!(wait_for(60, || held.get() == Some(IoStatus::Aborted)).await);
            drop(ch);
            drop(d);
            assert!(wait_for(60, || rx.try_recv() == Ok(true)).await);
            assert!(mgr.get("EE_M0").is_none());
        });
    }

    #[test]
    fn save_config_and_examine() {
        let entries = env().run(|mgr| async move {
            bdevkit_error::create(&mgr, ErrorCreateParams::new("M0")).unwrap();
            assert!(mgr.get("EE_M0").is_none(), "deferred");
            malloc(&mgr, "M0", 64);
            assert!(mgr.get("EE_M0").is_some(), "attached by examine");
            mgr.config_json()
                .into_iter()
                .filter(|e| {
                    e["method"] == "bdev_error_create" || e["method"] == "bdev_malloc_create"
                })
                .collect::<Vec<Value>>()
        });
        let ee = entries
            .iter()
            .find(|e| e["method"] == "bdev_error_create")
            .unwrap();
        assert_eq!(ee["params"], json!({"base_name": "M0"}));
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for e in entries.iter().rev() {
                call(&reg, e["method"].as_str().unwrap(), e["params"].clone())
                    .await
                    .unwrap();
            }
            assert!(mgr.get("EE_M0").is_some());
        });
    }

    #[test]
    fn rpcs_and_their_errors() {
        env().run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            malloc(&mgr, "M0", 64);
            let r = call(&reg, "bdev_error_create", json!({"base_name": "M0"})).await;
            assert_eq!(r, Ok(json!(true)));
            let r = call(&reg, "bdev_error_create", json!({"base_name": "M0"})).await;
            assert_eq!(r, Err(RpcError::new(-17, "File exists")));
            let r = call(&reg, "bdev_error_create", json!({"name": "M0"})).await;
            assert_eq!(
                r,
                Err(RpcError::new(-32603, "spdk_json_decode_object failed"))
            );
            let ok = json!({"name": "EE_M0", "io_type": "read", "error_type": "failure", "num": 3});
            assert_eq!(
                call(&reg, "bdev_error_inject_error", ok).await,
                Ok(json!(true))
            );
            let nvme_msg = RpcError::new(
                -22,
                "nvme_sct or nvme_sc should be specified for NVMe error injection",
            );
            let r = call(
                &reg,
                "bdev_error_inject_error",
                json!({"name": "EE_M0", "io_type": "all", "error_type": "nvme_failure"}),
            )
            .await;
            assert_eq!(r, Err(nvme_msg.clone()));
            let r = call(
                &reg,
                "bdev_error_inject_error",
                json!({"name": "EE_M0", "io_type": "all", "error_type": "failure", "nvme_sc": 1}),
            )
            .await;
            assert_eq!(r, Err(nvme_msg));
            let r = call(
                &reg,
                "bdev_error_inject_error",
                json!({"name": "EE_M0", "io_type": "all", "error_type": "nvme_failure",
                       "nvme_sct": 0, "nvme_sc": 1}),
            )
            .await;
            assert_eq!(r, Ok(json!(true)));
            let r = call(
                &reg,
                "bdev_error_inject_error",
                json!({"name": "EE_M0", "io_type": "write", "error_type": "corrupt_data"}),
            )
            .await;
            assert_eq!(r, Err(RpcError::new(-22, "Invalid argument")));
            let r = call(
                &reg,
                "bdev_error_inject_error",
                json!({"name": "M0", "io_type": "clear", "error_type": "failure"}),
            )
            .await;
            assert_eq!(r, Err(RpcError::new(-19, "No such device")));
            for bad in [
                json!({"name": "EE_M0", "io_type": "reset", "error_type": "failure"}),
                json!({"name": "EE_M0", "io_type": "read", "error_type": "boom"}),
                json!({"name": "EE_M0", "io_type": "read"}),
                json!({"name": "EE_M0", "io_type": "read", "error_type": "corrupt_data",
                       "corrupt_value": 256}),
            ] {
                let r = call(&reg, "bdev_error_inject_error", bad).await;
                assert_eq!(
                    r,
                    Err(RpcError::new(-32602, "spdk_json_decode_object failed"))
                );
            }
            let r = call(&reg, "bdev_error_resume_pending", json!({"name": "EE_M0"})).await;
            assert_eq!(r, Ok(json!(true)));
            let r = call(&reg, "bdev_error_resume_pending", json!({"name": "nope"})).await;
            assert_eq!(r, Err(RpcError::new(-19, "No such device")));
            let r = call(&reg, "bdev_error_delete", json!({"name": "EE_M0"})).await;
            assert_eq!(r, Ok(json!(true)));
            let r = call(&reg, "bdev_error_delete", json!({"name": "EE_M0"})).await;
            assert_eq!(r, Err(RpcError::new(-19, "No such device")));
            let r = call(&reg, "bdev_error_delete", json!({})).await;
            assert_eq!(r.unwrap_err().code, -32603);
        });
    }
}
