//! Multipath and failover against our NVMe-oF/TCP target (in process, one
//! subsystem with two listeners on 127.0.0.1): a failover controller moves
//! to its alternate address when its listener goes, under verify I/O;
//! two multipath paths serve one bdev (`bdev_nvme_get_io_paths`,
//! active_active round_robin sends I/O down both); one path detached (or
//! its listener removed) under I/O, and I/O goes on on the other; SPDK's
//! attach errors; save_config.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};

    use bdevkit::bdev::module::BdevModule;
    use bdevkit::bdev::BdevManager;
    use bdevkit::dma::DmaBuf;
    use bdevkit::thread::{Thread, ThreadHandle};
    use bdevkit_nvmf::Target;
    use bdevkit_test::env::wait_for;
    use bdevkit_test::nvmf::{free_port, listener, NvmfEnv, HOSTNQN, SUBNQN};
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{conformance, TestEnv};
    use serde_json::{json, Value};

    const RPCS: &[RegisterRpcs] = &[bdevkit_nvme::register_rpcs];

    /// The target with a second listener; its two ports.
    fn target() -> (NvmfEnv, u16, u16) {
        let t = NvmfEnv::start();
        let p2 = free_port();
        let r: Result<(), String> = t.call(move |tg, tx| {
            tx.send(
                tg.add_listener(&listener(SUBNQN, p2))
                    .map_err(|e| e.to_string()),
            )
            .unwrap();
        });
        r.unwrap();
        let p1 = t.addr.port();
        (t, p1, p2)
    }

    fn params(name: &str, port: u16, multipath: Option<&str>) -> Value {
        let mut p = json!({
            "name": name,
            "trtype": "tcp",
            "adrfam": "ipv4",
            "traddr": "127.0.0.1",
            "trsvcid": port.to_string(),
            "subnqn": SUBNQN,
            "hostnqn": HOSTNQN,
        });
        if let Some(m) = multipath {
            p["multipath"] = json!(m);
        }
        p
    }

    /// What removes a listener of the target from a host thread.
    #[derive(Clone)]
    struct Remote {
        target: Target,
        app: ThreadHandle,
    }

    impl Remote {
        fn of(t: &NvmfEnv) -> Remote {
            Remote {
                target: t.target.clone(),
                app: t.env.runtime().app_thread(),
            }
        }

        /// Removes the listener on `port` (its connections close).
        async fn remove_listener(&self, port: u16) {
            let done = Arc::new(AtomicBool::new(false));
            let (t, d) = (self.target.clone(), Arc::clone(&done));
            self.app
                .send_msg(move || {
                    t.remove_listener(&listener(SUBNQN, port), move |r| {
                        r.unwrap();
                        d.store(true, Ordering::Release);
                    });
                })
                .unwrap();
            assert!(wait_for(30, || done.load(Ordering::Acquire)).await);
        }
    }

    impl Remote {
        /// Adds the listener on `port` back.
        async fn add_listener(&self, port: u16) {
            let done = Arc::new(AtomicBool::new(false));
            let (t, d) = (self.target.clone(), Arc::clone(&done));
            self.app
                .send_msg(move || {
                    t.add_listener(&listener(SUBNQN, port)).unwrap();
                    d.store(true, Ordering::Release);
                })
                .unwrap();
            assert!(wait_for(30, || done.load(Ordering::Acquire)).await);
        }
    }

    /// Write/read/compare workers on bdev `name`: `qd` of them, `rounds`
    /// each, each on its own blocks. Returns the counters: rounds done,
    /// mismatches, errors.
    struct Load {
        done: Rc<Cell<u64>>,
        bad: Rc<Cell<u64>>,
        errors: Rc<Cell<u64>>,
        finished: Rc<Cell<u64>>,
        qd: u64,
    }

    fn start_load(mgr: &BdevManager, name: &str, qd: u64, rounds: u64) -> Load {
        let desc = Rc::new(mgr.open(name, true, |_| {}).unwrap());
        let ch = desc.get_io_channel().unwrap();
        let l = Load {
            done: Rc::new(Cell::new(0)),
            bad: Rc::new(Cell::new(0)),
            errors: Rc::new(Cell::new(0)),
            finished: Rc::new(Cell::new(0)),
            qd,
        };
        let t = Thread::current().unwrap();
        for q in 0..qd {
            let (ch, desc) = (ch.clone(), Rc::clone(&desc));
            let (done, bad, errors, finished) = (
                Rc::clone(&l.done),
                Rc::clone(&l.bad),
                Rc::clone(&l.errors),
                Rc::clone(&l.finished),
            );
            t.spawn_local(async move {
                let _keep = desc;
                for r in 0..rounds {
                    let lba = (q * 64 + (r % 8) * 8) * 8;
                    let data = conformance::pattern(4096 * 8, (q << 32) ^ r);
                    let expect = data.to_vec();
                    if ch.write(lba, 64, data).await.is_err() {
                        errors.set(errors.get() + 1);
                        continue;
                    }
                    match ch.read(lba, 64, DmaBuf::new(4096 * 8).unwrap()).await {
                        Ok(got) if got[..] == expect[..] => {}
                        Ok(_) => bad.set(bad.get() + 1),
                        Err(_) => errors.set(errors.get() + 1),
                    }
                    done.set(done.get() + 1);
                }
                finished.set(finished.get() + 1);
            });
        }
        l
    }

    impl Load {
        async fn wait_rounds(&self, n: u64) {
            let d = Rc::clone(&self.done);
            assert!(wait_for(60, move || d.get() >= n).await, "I/O stalled");
        }

        /// Waits for the end; asserts that nothing failed or differed.
        async fn finish(self) {
            let (f, qd) = (Rc::clone(&self.finished), self.qd);
            assert!(wait_for(120, move || f.get() == qd).await, "I/O stalled");
            assert_eq!((self.bad.get(), self.errors.get()), (0, 0));
        }
    }

    async fn controllers(reg: &bdevkit_jsonrpc::MethodRegistry, name: &str) -> Value {
        call(reg, "bdev_nvme_get_controllers", json!({"name": name}))
            .await
            .unwrap()
    }

    #[test]
    fn failover_moves_to_the_alternate_address_under_io() {
        let (t, p1, p2) = target();
        let remote = Remote::of(&t);
        let host = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
        host.run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let names = call(
                &reg,
                "bdev_nvme_attach_controller",
                params("F", p1, Some("failover")),
            )
            .await
            .unwrap();
            assert_eq!(names, json!(["Fn1"]));
            let names = call(
                &reg,
                "bdev_nvme_attach_controller",
                params("F", p2, Some("failover")),
            )
            .await
            .unwrap();
            assert_eq!(names, json!(["Fn1"]));
            let c = controllers(&reg, "F").await;
            let ctrlrs = c[0]["ctrlrs"].as_array().unwrap();
            assert_eq!(ctrlrs.len(), 1, "{c}");
            assert_eq!(ctrlrs[0]["trid"]["trsvcid"], p1.to_string());
            assert_eq!(ctrlrs[0]["alternate_trids"][0]["trsvcid"], p2.to_string());
            let cfg = bdevkit_nvme::module(&mgr).unwrap().config_json(&mgr);
            let attaches: Vec<&Value> = cfg
                .iter()
                .filter(|e| e["method"] == "bdev_nvme_attach_controller")
                .collect();
            assert_eq!(attaches.len(), 2);
            assert_eq!(attaches[1]["params"]["multipath"], "failover");
            assert_eq!(attaches[1]["params"]["trsvcid"], p2.to_string());

            let load = start_load(&mgr, "Fn1", 4, 200);
            load.wait_rounds(50).await;
            remote.remove_listener(p1).await;
            load.finish().await;
            let ctrlr = bdevkit_nvme::controller(&mgr, "F").unwrap();
            assert!(
                wait_for(30, || ctrlr.info_json()["ctrlrs"][0]["state"] == "enabled").await,
                "the reset finished"
            );
            let c = controllers(&reg, "F").await;
            assert_eq!(c[0]["ctrlrs"][0]["trid"]["trsvcid"], p2.to_string(), "{c}");
            assert_eq!(
                c[0]["ctrlrs"][0]["alternate_trids"][0]["trsvcid"],
                p1.to_string()
            );
            drop(ctrlr);
            // Detaching the address it left keeps the controller.
            call(
                &reg,
                "bdev_nvme_detach_controller",
                json!({"name": "F", "trsvcid": p1.to_string()}),
            )
            .await
            .unwrap();
            let c = controllers(&reg, "F").await;
            assert!(c[0]["ctrlrs"][0].get("alternate_trids").is_none(), "{c}");
            assert!(mgr.get("Fn1").is_some());
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "F"}))
                .await
                .unwrap();
            assert!(mgr.get("Fn1").is_none());
        });
    }

    /// Path id → I/Os sent down it, for bdev `name`.
    async fn counts(mgr: &BdevManager, name: &str) -> Vec<(u64, u64)> {
        let (tx, rx) = mpsc::channel();
        bdevkit_nvme::path_io_counts(mgr, name, move |v| tx.send(v).unwrap()).unwrap();
        let got = Rc::new(Cell::new(None));
        let g2 = Rc::clone(&got);
        assert!(
            wait_for(30, move || {
                if let Ok(v) = rx.try_recv() {
                    g2.set(Some(v));
                }
                let v = g2.take();
                let ok = v.is_some();
                g2.set(v);
                ok
            })
            .await
        );
        got.take().unwrap()
    }

    #[test]
    fn multipath_active_active_uses_both_paths_and_survives_a_detach() {
        let (t, p1, p2) = target();
        let host = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
        host.run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            // No `multipath`: SPDK's default, another path.
            let names = call(&reg, "bdev_nvme_attach_controller", params("M", p1, None))
                .await
                .unwrap();
            assert_eq!(names, json!(["Mn1"]));
            let names = call(&reg, "bdev_nvme_attach_controller", params("M", p2, None))
                .await
                .unwrap();
            assert_eq!(names, json!(["Mn1"]));
            let c = controllers(&reg, "M").await;
            let ctrlrs = c[0]["ctrlrs"].as_array().unwrap();
            assert_eq!(ctrlrs.len(), 2, "{c}");
            assert_ne!(ctrlrs[0]["cntlid"], ctrlrs[1]["cntlid"]);
            let info = mgr.get("Mn1").unwrap().dump_info_json();
            assert_eq!(info["nvme"].as_array().unwrap().len(), 2, "{info}");
            assert_eq!(info["mp_policy"], "active_passive");

            call(
                &reg,
                "bdev_nvme_set_multipath_policy",
                json!({"name": "Mn1", "policy": "active_active",
                       "selector": "round_robin", "rr_min_io": 1}),
            )
            .await
            .unwrap();
            let info = mgr.get("Mn1").unwrap().dump_info_json();
            assert_eq!(
                (&info["mp_policy"], &info["selector"], &info["rr_min_io"]),
                (&json!("active_active"), &json!("round_robin"), &json!(1))
            );

            let load = start_load(&mgr, "Mn1", 8, 300);
            load.wait_rounds(20).await;
            let p = call(&reg, "bdev_nvme_get_io_paths", json!({"name": "Mn1"}))
                .await
                .unwrap();
            let paths = p["poll_groups"][0]["io_paths"].as_array().unwrap();
            assert_eq!(paths.len(), 2, "{p}");
            for x in paths {
                assert_eq!(x["bdev_name"], "Mn1");
                assert_eq!(x["current"], true, "{p}");
                assert_eq!(x["connected"], true);
                assert_eq!(x["transport"]["trtype"], "TCP");
            }
            let n = counts(&mgr, "Mn1").await;
            assert_eq!(n.len(), 2);
            assert!(n.iter().all(|x| x.1 > 0), "both paths took I/O: {n:?}");

            let cfg = bdevkit_nvme::module(&mgr).unwrap().config_json(&mgr);
            let methods: Vec<&Value> = cfg.iter().map(|e| &e["method"]).collect();
            let attaches: Vec<&Value> = cfg
                .iter()
                .filter(|e| e["method"] == "bdev_nvme_attach_controller")
                .collect();
            assert_eq!(attaches.len(), 2);
            assert!(attaches
                .iter()
                .all(|e| e["params"]["multipath"] == "multipath"));
            let pol = cfg
                .iter()
                .find(|e| e["method"] == "bdev_nvme_set_multipath_policy")
                .unwrap();
            assert_eq!(pol["params"]["policy"], "active_active", "{methods:?}");

            // A reset of the name resets every path, under I/O.
            call(&reg, "bdev_nvme_reset_controller", json!({"name": "M"}))
                .await
                .unwrap();
            // (A reset is a new association: a new controller id.)
            let cntlid = controllers(&reg, "M").await[0]["ctrlrs"][1]["cntlid"].clone();
            call(
                &reg,
                "bdev_nvme_reset_controller",
                json!({"name": "M", "cntlid": cntlid}),
            )
            .await
            .unwrap();
            let e = call(
                &reg,
                "bdev_nvme_reset_controller",
                json!({"name": "M", "cntlid": 999}),
            )
            .await
            .unwrap_err();
            assert_eq!(e.code, -19);

            // One path goes under I/O: the rest continues on the other.
            call(
                &reg,
                "bdev_nvme_detach_controller",
                json!({"name": "M", "trsvcid": p1.to_string()}),
            )
            .await
            .unwrap();
            load.finish().await;
            let c = controllers(&reg, "M").await;
            assert_eq!(c[0]["ctrlrs"].as_array().unwrap().len(), 1, "{c}");
            assert_eq!(c[0]["ctrlrs"][0]["trid"]["trsvcid"], p2.to_string());
            let desc = mgr.open("Mn1", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let p = call(&reg, "bdev_nvme_get_io_paths", json!({}))
                .await
                .unwrap();
            assert_eq!(
                p["poll_groups"][0]["io_paths"].as_array().unwrap().len(),
                1,
                "{p}"
            );
            drop(ch);
            drop(desc);
            // The last path takes the bdev with it.
            call(
                &reg,
                "bdev_nvme_detach_controller",
                json!({"name": "M", "trsvcid": p2.to_string()}),
            )
            .await
            .unwrap();
            assert!(mgr.get("Mn1").is_none());
            assert!(bdevkit_nvme::controllers(&mgr).is_empty());
        });
        drop(t);
    }

    #[test]
    fn multipath_active_passive_fails_over_when_a_listener_goes() {
        let (t, p1, p2) = target();
        let remote = Remote::of(&t);
        let host = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
        host.run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let mut a = params("P", p1, Some("multipath"));
            a["multipath_opts"] = json!({"policy": "active_passive"});
            call(&reg, "bdev_nvme_attach_controller", a).await.unwrap();
            call(
                &reg,
                "bdev_nvme_attach_controller",
                params("P", p2, Some("multipath")),
            )
            .await
            .unwrap();
            let load = start_load(&mgr, "Pn1", 4, 200);
            load.wait_rounds(20).await;
            let p = call(&reg, "bdev_nvme_get_io_paths", json!({"name": "Pn1"}))
                .await
                .unwrap();
            let cur: Vec<&Value> = p["poll_groups"][0]["io_paths"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| x["current"] == true)
                .collect();
            assert_eq!(cur.len(), 1, "{p}");
            assert_eq!(cur[0]["transport"]["trsvcid"], p1.to_string());
            let before = counts(&mgr, "Pn1").await;
            assert_eq!(before.iter().filter(|x| x.1 > 0).count(), 1, "{before:?}");

            remote.remove_listener(p1).await;
            load.finish().await;
            // The lost path left the bdev (ctrlr_loss_timeout_sec 0).
            let m2 = mgr.clone();
            assert!(
                wait_for(30, move || bdevkit_nvme::controllers(&m2).len() == 1).await,
                "the lost path went"
            );
            let desc = mgr.open("Pn1", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let p = call(&reg, "bdev_nvme_get_io_paths", json!({"name": "Pn1"}))
                .await
                .unwrap();
            let paths = p["poll_groups"][0]["io_paths"].as_array().unwrap();
            assert_eq!(paths.len(), 1, "{p}");
            assert_eq!(paths[0]["transport"]["trsvcid"], p2.to_string());
            assert_eq!(paths[0]["current"], true);
            drop(ch);
            drop(desc);
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "P"}))
                .await
                .unwrap();
            assert!(mgr.get("Pn1").is_none());
        });
    }

    /// The state of each path of `name`, in attach order.
    async fn states(reg: &bdevkit_jsonrpc::MethodRegistry, name: &str) -> Vec<String> {
        controllers(reg, name).await[0]["ctrlrs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["state"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn io_moves_off_a_reconnecting_path_and_back_when_it_returns() {
        let (t, p1, p2) = target();
        let remote = Remote::of(&t);
        let host = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
        host.run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for port in [p1, p2] {
                let mut a = params("R", port, Some("multipath"));
                a["ctrlr_loss_timeout_sec"] = json!(-1);
                a["reconnect_delay_sec"] = json!(1);
                call(&reg, "bdev_nvme_attach_controller", a).await.unwrap();
            }
            let load = start_load(&mgr, "Rn1", 4, 200);
            load.wait_rounds(20).await;
            remote.remove_listener(p1).await;
            // The first path keeps trying to reconnect; I/O does not wait
            // for it: it all completes on the second one meanwhile.
            load.finish().await;
            let st = states(&reg, "R").await;
            assert_ne!(st[0], "enabled", "{st:?}");
            assert_eq!(st[1], "enabled", "{st:?}");
            let desc = mgr.open("Rn1", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let p = call(&reg, "bdev_nvme_get_io_paths", json!({"name": "Rn1"}))
                .await
                .unwrap();
            // A channel made while the first path is down has the second
            // one only.
            let paths = p["poll_groups"][0]["io_paths"].as_array().unwrap();
            assert_eq!(paths.len(), 1, "{p}");
            assert_eq!(paths[0]["transport"]["trsvcid"], p2.to_string());
            assert_eq!(paths[0]["current"], true);
            // Back: the first path reconnects and is the current one again.
            remote.add_listener(p1).await;
            let m2 = mgr.clone();
            assert!(
                wait_for(60, move || {
                    let c = bdevkit_nvme::controllers_json(&m2, Some("R"));
                    c.is_some_and(|c| c[0]["ctrlrs"][0]["state"] == "enabled")
                })
                .await,
                "the first path reconnected"
            );
            ch.write(0, 8, conformance::pattern(4096, 5)).await.unwrap();
            let p = call(&reg, "bdev_nvme_get_io_paths", json!({"name": "Rn1"}))
                .await
                .unwrap();
            // It joined that channel too, in front (active_passive).
            let paths = p["poll_groups"][0]["io_paths"].as_array().unwrap();
            assert_eq!(paths.len(), 2, "{p}");
            assert_eq!(paths[0]["transport"]["trsvcid"], p1.to_string());
            assert_eq!(paths[0]["current"], true, "{p}");
            assert_eq!(paths[1]["current"], false, "{p}");
            drop(ch);
            drop(desc);
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "R"}))
                .await
                .unwrap();
        });
    }

    #[test]
    fn second_path_errors_are_spdks() {
        let (_t, p1, p2) = target();
        let host = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
        host.run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(&reg, "bdev_nvme_attach_controller", params("E", p1, None))
                .await
                .unwrap();
            let e = call(
                &reg,
                "bdev_nvme_attach_controller",
                params("E", p2, Some("disable")),
            )
            .await
            .unwrap_err();
            assert_eq!(
                (e.code, e.message.as_str()),
                (
                    -114,
                    "A controller named E already exists and multipath is disabled"
                )
            );
            for m in [None, Some("failover"), Some("multipath")] {
                let e = call(&reg, "bdev_nvme_attach_controller", params("E", p1, m))
                    .await
                    .unwrap_err();
                assert_eq!(e.code, -114, "{m:?}: {}", e.message);
            }
            let mut p = params("E", p2, None);
            p["subnqn"] = json!("nqn.2016-06.io.bdevkit:other");
            let e = call(&reg, "bdev_nvme_attach_controller", p)
                .await
                .unwrap_err();
            assert_eq!(e.code, -22, "{}", e.message);
            let mut p = params("E", p2, Some("failover"));
            p["hostnqn"] =
                json!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000002");
            let e = call(&reg, "bdev_nvme_attach_controller", p)
                .await
                .unwrap_err();
            assert_eq!(e.code, -22, "{}", e.message);
            let mut p = params("E", p2, Some("sideways"));
            p["multipath"] = json!("sideways");
            let e = call(&reg, "bdev_nvme_attach_controller", p)
                .await
                .unwrap_err();
            assert_eq!(e.code, -22);
            let e = call(
                &reg,
                "bdev_nvme_detach_controller",
                json!({"name": "E", "trsvcid": p2.to_string()}),
            )
            .await
            .unwrap_err();
            assert_eq!(e.code, -19);
            let e = call(
                &reg,
                "bdev_nvme_set_multipath_policy",
                json!({"name": "En1", "policy": "sideways"}),
            )
            .await
            .unwrap_err();
            assert_eq!(e.code, -22);
            let e = call(
                &reg,
                "bdev_nvme_set_multipath_policy",
                json!({"name": "En1", "policy": "active_active", "rr_min_io": 0}),
            )
            .await
            .unwrap_err();
            assert_eq!(e.code, -22);
            let e = call(&reg, "bdev_nvme_get_io_paths", json!({"name": "Nope"}))
                .await
                .unwrap_err();
            assert_eq!(e.code, -19);
            // Nothing of the refused attaches stayed.
            let c = controllers(&reg, "E").await;
            assert_eq!(c[0]["ctrlrs"].as_array().unwrap().len(), 1);
            assert!(c[0]["ctrlrs"][0].get("alternate_trids").is_none());
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "E"}))
                .await
                .unwrap();
        });
    }
}
