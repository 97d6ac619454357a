//! NVMe-oF discovery (`bdev_nvme_start_discovery` and friends) against our
//! NVMe-oF/TCP target in the same process (`bdevkit_test::nvmf::NvmfEnv`,
//! whose discovery subsystem answers on every listener): the subsystems
//! of the log are attached as `nvme0`, `nvme1` with working I/O; a
//! subsystem added later (its listener sends the Discovery Log Change
//! event) is attached, one whose listener goes is detached; the saved
//! config has the discovery entry, not the attaches; SPDK's errors for a
//! name or address in use, an unknown name, an unreachable discovery
//! controller; stop detaches everything; a lost discovery connection is
//! made again and follows the log; a subsystem listed on two listeners is
//! one controller name with two multipath paths, and a path whose
//! listener goes leaves it.

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use bdevkit::bdev::BdevManager;
    use bdevkit::dma::DmaBuf;
    use bdevkit_nvmf::params::NamespaceParams;
    use bdevkit_nvmf::CreateSubsystemParams;
    use bdevkit_test::nvmf::{free_port, listener, NvmfEnv, HOSTNQN, SUBNQN};
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{conformance, sleep_ms, TestEnv};
    use serde_json::{json, Value};

    const RPCS: &[RegisterRpcs] = &[bdevkit_nvme::register_rpcs];
    const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
    const SUB2: &str = "nqn.2016-06.io.bdevkit:disc2";
    const SUB3: &str = "nqn.2016-06.io.bdevkit:disc3";
    /// Longest a change may take to show (a hang fails the test; nothing
    /// asserts on how quick it is).
    const PATIENCE: Duration = Duration::from_secs(30);

    /// Subsystem `nqn` with a malloc namespace `bdev`, allowing
    /// [`HOSTNQN`], listening on `port` when `listen`.
    fn add_subsystem(t: &NvmfEnv, nqn: &'static str, bdev: &'static str, listen: bool) {
        let port = t.addr.port();
        let mgr = t.mgr().clone();
        let r: Result<u32, String> = t.call(move |tg, tx: mpsc::Sender<Result<u32, String>>| {
            bdevkit_test::malloc(&mgr, bdev, 8192);
            let r = tg
                .create_subsystem(&CreateSubsystemParams::new(nqn))
                .and_then(|()| tg.add_host(nqn, HOSTNQN, None));
            if let Err(e) = r {
                let _ = tx.send(Err(e.to_string()));
                return;
            }
            let tg2 = tg.clone();
            tg.add_ns(nqn, &NamespaceParams::new(bdev), move |r| {
                let r = r.map_err(|e| e.to_string()).and_then(|nsid| {
                    if listen {
                        tg2.add_listener(&listener(nqn, port))
                            .map_err(|e| e.to_string())?;
                    }
                    Ok(nsid)
                });
                let _ = tx.send(r);
            });
        });
        assert_eq!(r, Ok(1), "subsystem {nqn}");
    }

    fn remove_listener(t: &NvmfEnv, nqn: &'static str) {
        let port = t.addr.port();
        let r: Result<(), String> = t.call(move |tg, tx| {
            tg.remove_listener(&listener(nqn, port), move |r| {
                let _ = tx.send(r.map_err(|e| e.to_string()));
            });
        });
        assert_eq!(r, Ok(()));
    }

    fn start_params(t: &NvmfEnv, name: &str) -> Value {
        json!({
            "name": name,
            "trtype": "tcp",
            "adrfam": "ipv4",
            "traddr": "127.0.0.1",
            "trsvcid": t.addr.port().to_string(),
            "hostnqn": HOSTNQN,
            "wait_for_attach": true,
        })
    }

    fn ctrlr_names(mgr: &BdevManager) -> Vec<String> {
        let mut v: Vec<String> = bdevkit_nvme::controllers(mgr)
            .iter()
            .map(|c| c.name().to_string())
            .collect();
        v.sort();
        v
    }

    /// Waits (polling the reactor) until `f` holds.
    async fn until(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !f() {
            assert!(Instant::now() < deadline, "never happened: {what}");
            sleep_ms(20).await;
        }
    }

    /// Writes a pattern to `bdev` and reads it back.
    async fn round_trip(mgr: &BdevManager, bdev: &str, seed: u64) {
        let desc = mgr.open(bdev, true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        let data = conformance::pattern(8192, seed);
        let expect = data.to_vec();
        ch.write(64, 16, data).await.unwrap();
        let back = ch.read(64, 16, DmaBuf::new(8192).unwrap()).await.unwrap();
        assert_eq!(back.to_vec(), expect, "{bdev}");
    }

    #[test]
    fn discovery_attaches_follows_the_log_and_stops() {
        let target = NvmfEnv::start();
        add_subsystem(&target, SUB2, "Malloc1", true);
        // The discovery subsystem's own listener: a referral entry.
        let port = target.addr.port();
        let r: Result<(), String> = target.call(move |tg, tx| {
            let _ = tx.send(
                tg.add_listener(&listener("discovery", port))
                    .map_err(|e| e.to_string()),
            );
        });
        assert_eq!(r, Ok(()));
        let host = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
        let p = start_params(&target, "nvme");
        let saved = host.run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let r = call(&reg, "bdev_nvme_start_discovery", p.clone()).await;
            assert_eq!(r.unwrap(), json!(true));
            // Log order: the target's first subsystem, then SUB2.
            assert_eq!(ctrlr_names(&mgr), ["nvme0", "nvme1"]);
            let c = bdevkit_nvme::controller(&mgr, "nvme1").unwrap();
            assert_eq!(c.info_json()["ctrlrs"][0]["trid"]["subnqn"], SUB2);
            assert_eq!(
                bdevkit_nvme::controller(&mgr, "nvme0").unwrap().info_json()["ctrlrs"][0]["trid"]
                    ["subnqn"],
                SUBNQN
            );
            round_trip(&mgr, "nvme0n1", 1).await;
            round_trip(&mgr, "nvme1n1", 2).await;

            let info = call(&reg, "bdev_nvme_get_discovery_info", json!({}))
                .await
                .unwrap();
            let trid = json!({"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1",
                "trsvcid": p["trsvcid"], "subnqn": DISCOVERY_NQN});
            assert_eq!(
                info,
                json!([{"name": "nvme", "trid": trid, "referrals": [{"trid": trid}]}])
            );

            // SPDK's errors: the name again, the address again (-EEXIST).
            let e = call(&reg, "bdev_nvme_start_discovery", p.clone())
                .await
                .unwrap_err();
            assert_eq!(e.code, -libc::EEXIST, "{}", e.message);
            let mut other = p.clone();
            other["name"] = json!("other");
            let e = call(&reg, "bdev_nvme_start_discovery", other)
                .await
                .unwrap_err();
            assert_eq!(e.code, -libc::EEXIST, "{}", e.message);
            let e = call(&reg, "bdev_nvme_stop_discovery", json!({"name": "nope"}))
                .await
                .unwrap_err();
            assert_eq!(e.code, -libc::ENOENT, "{}", e.message);

            // The saved config starts the discovery, and leaves its
            // controllers to it.
            let cfg = Value::Array(mgr.config_json());
            let methods: Vec<&str> = cfg
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|e| e["method"].as_str())
                .collect();
            assert!(!methods.contains(&"bdev_nvme_attach_controller"), "{cfg}");
            let entry = cfg
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["method"] == "bdev_nvme_start_discovery")
                .unwrap();
            let sp = &entry["params"];
            assert_eq!(
                (&sp["name"], &sp["trtype"], &sp["traddr"], &sp["trsvcid"]),
                (
                    &json!("nvme"),
                    &json!("TCP"),
                    &json!("127.0.0.1"),
                    &p["trsvcid"]
                )
            );
            assert_eq!(
                (&sp["hostnqn"], &sp["wait_for_attach"]),
                (&json!(HOSTNQN), &json!(true))
            );
            let hp = methods.iter().position(|m| *m == "bdev_nvme_set_hotplug");
            let dp = methods
                .iter()
                .position(|m| *m == "bdev_nvme_start_discovery");
            assert!(dp < hp, "discovery before hotplug: {methods:?}");
            sp.clone()
        });

        // A third subsystem: its listener changes the log, the event
        // brings it in.
        add_subsystem(&target, SUB3, "Malloc2", true);
        host.run(|mgr| async move {
            let m = mgr.clone();
            until("nvme2n1 attached", move || m.get("nvme2n1").is_some()).await;
            assert_eq!(ctrlr_names(&mgr), ["nvme0", "nvme1", "nvme2"]);
            round_trip(&mgr, "nvme2n1", 3).await;
        });

        // SUB2's listener goes: nvme1 is detached.
        remove_listener(&target, SUB2);
        host.run(|mgr| async move {
            let m = mgr.clone();
            until("nvme1 detached", move || {
                bdevkit_nvme::controller(&m, "nvme1").is_none() && m.get("nvme1n1").is_none()
            })
            .await;
            assert_eq!(ctrlr_names(&mgr), ["nvme0", "nvme2"]);
        });

        // Stop: everything it attached goes.
        host.run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let r = call(&reg, "bdev_nvme_stop_discovery", json!({"name": "nvme"})).await;
            assert_eq!(r.unwrap(), json!(true));
            assert!(ctrlr_names(&mgr).is_empty());
            assert!(mgr.get("nvme0n1").is_none() && mgr.get("nvme2n1").is_none());
            let info = call(&reg, "bdev_nvme_get_discovery_info", json!({}))
                .await
                .unwrap();
            assert_eq!(info, json!([]));
            // The name is free again; the saved entry replays; the counter
            // starts over (SUBNQN and SUB3 are listed now).
            let r = call(&reg, "bdev_nvme_start_discovery", saved).await;
            assert_eq!(r.unwrap(), json!(true));
            assert_eq!(ctrlr_names(&mgr), ["nvme0", "nvme1"]);
            // Detached by hand: attached again at the next log change.
            call(
                &reg,
                "bdev_nvme_detach_controller",
                json!({"name": "nvme0"}),
            )
            .await
            .unwrap();
        });
        let r: Result<(), String> = target.call(move |tg, tx| {
            let _ = tx.send(
                tg.add_listener(&listener(SUB2, port))
                    .map_err(|e| e.to_string()),
            );
        });
        assert_eq!(r, Ok(()));
        host.run(|mgr| async move {
            let m = mgr.clone();
            // Both new entries attach at once, in any order: wait for
            // both.
            until("nvme2 and nvme3 attached", move || {
                m.get("nvme2n1").is_some() && m.get("nvme3n1").is_some()
            })
            .await;
            // Log order: SUBNQN (again, as nvme2), SUB2 (nvme3), SUB3 (kept).
            assert_eq!(ctrlr_names(&mgr), ["nvme1", "nvme2", "nvme3"]);
            let c = bdevkit_nvme::controller(&mgr, "nvme2").unwrap();
            assert_eq!(c.info_json()["ctrlrs"][0]["trid"]["subnqn"], SUBNQN);
            let reg = rpc::registry(&mgr, RPCS);
            let r = call(&reg, "bdev_nvme_stop_discovery", json!({"name": "nvme"})).await;
            assert_eq!(r.unwrap(), json!(true));
            assert!(ctrlr_names(&mgr).is_empty());
        });
    }

    /// The discovery subsystem's controllers' ids on the target.
    fn discovery_cntlids(t: &NvmfEnv) -> Vec<u64> {
        let v: Vec<Value> = t.call(|tg, tx| {
            let _ = tx.send(tg.controllers_json(DISCOVERY_NQN).unwrap());
        });
        v.iter().filter_map(|c| c["cntlid"].as_u64()).collect()
    }

    #[test]
    fn a_lost_discovery_connection_is_made_again() {
        let target = NvmfEnv::start();
        let port = target.addr.port();
        let add_disc_listener = |t: &NvmfEnv| {
            let r: Result<(), String> = t.call(move |tg, tx| {
                let _ = tx.send(
                    tg.add_listener(&listener("discovery", port))
                        .map_err(|e| e.to_string()),
                );
            });
            assert_eq!(r, Ok(()));
        };
        add_disc_listener(&target);
        let host = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
        let p = start_params(&target, "disc");
        host.run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let r = call(&reg, "bdev_nvme_start_discovery", p).await;
            assert_eq!(r.unwrap(), json!(true));
            assert_eq!(ctrlr_names(&mgr), ["disc0"]);
        });
        let before = discovery_cntlids(&target);
        assert_eq!(before.len(), 1, "{before:?}");
        // Removing the discovery subsystem's listener closes the discovery
        // controller's connection (the subsystem's stays: another one).
        remove_listener(&target, DISCOVERY_NQN);
        let deadline = Instant::now() + PATIENCE;
        loop {
            let now = discovery_cntlids(&target);
            if now.len() == 1 && now != before {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no new discovery controller: {now:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // The new connection follows the log: a new subsystem is attached.
        add_subsystem(&target, SUB2, "Malloc1", true);
        host.run(|mgr| async move {
            let m = mgr.clone();
            until("disc1n1 attached", move || m.get("disc1n1").is_some()).await;
            assert_eq!(ctrlr_names(&mgr), ["disc0", "disc1"]);
            round_trip(&mgr, "disc0n1", 4).await;
            let reg = rpc::registry(&mgr, RPCS);
            let r = call(&reg, "bdev_nvme_stop_discovery", json!({"name": "disc"})).await;
            assert_eq!(r.unwrap(), json!(true));
            assert!(ctrlr_names(&mgr).is_empty());
        });
    }

    #[test]
    fn an_unreachable_discovery_controller_fails_the_start() {
        let host = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
        host.run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let port = free_port().to_string();
            let p = json!({"name": "gone", "trtype": "tcp", "traddr": "127.0.0.1",
                "trsvcid": port, "attach_timeout_ms": 300});
            let e = call(&reg, "bdev_nvme_start_discovery", p)
                .await
                .unwrap_err();
            assert_eq!(e.code, -libc::ETIMEDOUT, "{}", e.message);
            let p = json!({"name": "gone", "trtype": "tcp", "traddr": "127.0.0.1",
                "trsvcid": port, "wait_for_attach": true});
            let e = call(&reg, "bdev_nvme_start_discovery", p)
                .await
                .unwrap_err();
            assert_eq!(e.code, -libc::ECONNREFUSED, "{}", e.message);
            let info = call(&reg, "bdev_nvme_get_discovery_info", json!({}))
                .await
                .unwrap();
            assert_eq!(info, json!([]));
            let e = call(
                &reg,
                "bdev_nvme_start_discovery",
                json!({"name": "x", "trtype": "tcp", "traddr": "127.0.0.1", "adrfam": "ipx"}),
            )
            .await
            .unwrap_err();
            assert_eq!(
                (e.code, e.message.as_str()),
                (-22, "Failed to parse adrfam: ipx")
            );
        });
    }

    #[test]
    fn two_listeners_of_a_subsystem_are_two_paths_of_one_controller() {
        let target = NvmfEnv::start();
        let (port, p2) = (target.addr.port(), free_port());
        let r: Result<(), String> = target.call(move |tg, tx| {
            let _ = tx.send(
                tg.add_listener(&listener(SUBNQN, p2))
                    .map_err(|e| e.to_string()),
            );
        });
        assert_eq!(r, Ok(()));
        let host = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
        let p = start_params(&target, "nvme");
        let paths = |mgr: &BdevManager| {
            mgr.get("nvme0n1").map_or(0, |b| {
                b.dump_info_json()["nvme"].as_array().map_or(0, Vec::len)
            })
        };
        host.run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let r = call(&reg, "bdev_nvme_start_discovery", p).await;
            assert_eq!(r.unwrap(), json!(true));
            // The second path's attach waits for the first one's.
            let m = mgr.clone();
            until("both paths attached", move || ctrlr_names(&m).len() == 2).await;
            assert_eq!(ctrlr_names(&mgr), ["nvme0", "nvme0"]);
            assert_eq!(paths(&mgr), 2);
            let ports: Vec<String> = bdevkit_nvme::controllers(&mgr)
                .iter()
                .map(|c| {
                    c.info_json()["ctrlrs"][0]["trid"]["trsvcid"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect();
            assert!(
                ports.contains(&port.to_string()) && ports.contains(&p2.to_string()),
                "{ports:?}"
            );
            round_trip(&mgr, "nvme0n1", 7).await;
        });
        let r: Result<(), String> = target.call(move |tg, tx| {
            tg.remove_listener(&listener(SUBNQN, p2), move |r| {
                let _ = tx.send(r.map_err(|e| e.to_string()));
            });
        });
        assert_eq!(r, Ok(()));
        host.run(move |mgr| async move {
            let m = mgr.clone();
            until("the path of the removed listener detached", move || {
                ctrlr_names(&m).len() == 1
            })
            .await;
            assert_eq!(paths(&mgr), 1, "the bdev keeps its other path");
            let c = bdevkit_nvme::controller(&mgr, "nvme0").unwrap();
            assert_eq!(
                c.info_json()["ctrlrs"][0]["trid"]["trsvcid"],
                port.to_string()
            );
            round_trip(&mgr, "nvme0n1", 8).await;
            let reg = rpc::registry(&mgr, RPCS);
            let r = call(&reg, "bdev_nvme_stop_discovery", json!({"name": "nvme"})).await;
            assert_eq!(r.unwrap(), json!(true));
            assert!(ctrlr_names(&mgr).is_empty());
            assert!(mgr.get("nvme0n1").is_none());
        });
    }
}
