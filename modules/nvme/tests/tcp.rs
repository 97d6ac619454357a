//! The nvme module over NVMe/TCP, against the driver's in-test NVMe/TCP
//! controller (`modules/nvme-driver/tests/mini_target`, shared, not
//! copied): attach over RPC with SPDK's parameter names and errors,
//! `bdev_nvme_get_controllers` with the TCP trid, the bdev conformance
//! suite (its reset is a controller reset: every connection made again),
//! the controller dropping the I/O connection under outstanding I/O
//! (a reset reconnects and the I/O completes), and detach.

// Test code (and the shared helper module): a failed unwrap is a failed
// test, and the test sizes fit every integer type they are cast to.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

#[path = "../../nvme-driver/tests/mini_target/mod.rs"]
mod mini_target;

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use bdevkit::dma::DmaBuf;
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{conformance, TestEnv};
    use serde_json::{json, Value};

    use crate::mini_target::{MiniTarget, NQN};

    const RPCS: &[RegisterRpcs] = &[bdevkit_nvme::register_rpcs];

    fn env() -> TestEnv {
        TestEnv::with_modules("0x1", &[bdevkit_nvme::register])
    }

    fn params(name: &str, t: &MiniTarget) -> Value {
        json!({
            "name": name,
            "trtype": "tcp",
            "adrfam": "ipv4",
            "traddr": "127.0.0.1",
            "trsvcid": t.port(),
            "subnqn": NQN,
            "hdgst": true,
            "ddgst": true,
        })
    }

    #[test]
    fn attach_get_conformance_detach() {
        let t = MiniTarget::start();
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let names = call(&reg, "bdev_nvme_attach_controller", params("Tcp0", &t))
                .await
                .unwrap();
            assert_eq!(names, json!(["Tcp0n1"]));
            let c = call(&reg, "bdev_nvme_get_controllers", json!({"name": "Tcp0"}))
                .await
                .unwrap();
            let ctrlr = &c[0]["ctrlrs"][0];
            assert_eq!(ctrlr["state"], "enabled");
            assert_eq!(
                ctrlr["trid"],
                json!({"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1",
                       "trsvcid": t.port(), "subnqn": NQN})
            );
            assert_eq!(ctrlr["cntlid"], 1);
            let hostnqn = ctrlr["host"]["nqn"].as_str().unwrap();
            assert!(
                hostnqn.starts_with("nqn.2014-08.org.nvmexpress:uuid:"),
                "{hostnqn}"
            );
            let b = mgr.get("Tcp0n1").unwrap();
            let info = b.dump_info_json();
            assert_eq!(info["nvme"][0]["trid"]["trtype"], "TCP");
            assert!(info["nvme"][0].get("pci_address").is_none());
            assert_eq!(info["nvme"][0]["ctrlr_data"]["subnqn"], NQN);
            let cfg = bdevkit_nvme::controller(&mgr, "Tcp0")
                .unwrap()
                .config_json();
            assert_eq!(cfg["params"]["trtype"], "TCP");
            assert_eq!(cfg["params"]["trsvcid"], t.port());
            assert_eq!(cfg["params"]["hdgst"], true);

            // The same path twice; another name on it too.
            let e = call(&reg, "bdev_nvme_attach_controller", params("Tcp0", &t))
                .await
                .unwrap_err();
            assert_eq!(e.code, -114);
            let e = call(&reg, "bdev_nvme_attach_controller", params("Tcp1", &t))
                .await
                .unwrap_err();
            assert_eq!(e.code, -114);

            let before = t.state.connections.load(Ordering::Relaxed);
            conformance::run(&mgr, "Tcp0n1", None).await;
            // Its reset made the admin and I/O connections again.
            assert!(t.state.connections.load(Ordering::Relaxed) >= before + 2);

            call(&reg, "bdev_nvme_detach_controller", json!({"name": "Tcp0"}))
                .await
                .unwrap();
            let c = call(&reg, "bdev_nvme_get_controllers", json!({}))
                .await
                .unwrap();
            assert_eq!(c, json!([]));
            assert!(mgr.get("Tcp0n1").is_none());
        });
    }

    #[test]
    fn attach_errors() {
        let t = MiniTarget::start();
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let mut p = params("E", &t);
            p["trtype"] = json!("rdma");
            let e = call(&reg, "bdev_nvme_attach_controller", p)
                .await
                .unwrap_err();
            assert_eq!(e.code, -95);
            let mut p = params("E", &t);
            p["adrfam"] = json!("ipx");
            let e = call(&reg, "bdev_nvme_attach_controller", p)
                .await
                .unwrap_err();
            assert_eq!(
                (e.code, e.message.as_str()),
                (-22, "Failed to parse adrfam: ipx")
            );
            let mut p = params("E", &t);
            p.as_object_mut().unwrap().remove("subnqn");
            let e = call(&reg, "bdev_nvme_attach_controller", p)
                .await
                .unwrap_err();
            assert_eq!(e.code, -22);
            let mut p = params("E", &t);
            p["hostnqn"] = json!("not-an-nqn");
            let e = call(&reg, "bdev_nvme_attach_controller", p)
                .await
                .unwrap_err();
            assert_eq!(e.code, -22);
            let mut p = params("E", &t);
            p["trsvcid"] = json!("port");
            let e = call(&reg, "bdev_nvme_attach_controller", p)
                .await
                .unwrap_err();
            assert_eq!(e.code, -22);
            // Nobody listens there.
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port().to_string();
            drop(l);
            let mut p = params("E", &t);
            p["trsvcid"] = json!(port);
            let e = call(&reg, "bdev_nvme_attach_controller", p)
                .await
                .unwrap_err();
            assert_eq!(e.code, -libc::ECONNREFUSED);
            assert!(bdevkit_nvme::controllers(&mgr).is_empty());
        });
    }

    #[test]
    fn dropped_connection_resets_and_io_completes() {
        let t = MiniTarget::start();
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(&reg, "bdev_nvme_attach_controller", params("Tcp2", &t))
                .await
                .unwrap();
            let desc = mgr.open("Tcp2n1", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let data = conformance::pattern(65536, 11);
            let expect = data.to_vec();
            ch.write(64, 128, data).await.unwrap();
            // The next read is held by the controller, which then drops
            // the connection: the read comes back for a retry, the
            // channel asks for a reset, the queue connects again and the
            // read completes there.
            t.state.faults.hold_io.store(true, Ordering::Release);
            t.state.faults.close_io.store(true, Ordering::Release);
            let got = ch.read(64, 128, DmaBuf::new(65536).unwrap()).await.unwrap();
            assert_eq!(&got[..], &expect[..]);
            assert!(!t.state.faults.close_io.load(Ordering::Acquire));
            let c = call(&reg, "bdev_nvme_get_controllers", json!({"name": "Tcp2"}))
                .await
                .unwrap();
            assert_eq!(c[0]["ctrlrs"][0]["state"], "enabled", "{c}");
            drop(ch);
            drop(desc);
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "Tcp2"}))
                .await
                .unwrap();
        });
    }
}
