//! The nvme module over NVMe/TCP, against the driver's in-test NVMe/TCP
//! controller (`lib/nvme-driver/tests/mini_target`, shared, not
//! copied): attach over RPC with SPDK's parameter names and errors,
//! `bdev_nvme_get_controllers` with the TCP trid, the bdev conformance
//! suite (its reset is a controller reset: every connection made again),
//! the controller dropping the I/O connection under outstanding I/O
//! (a reset reconnects and the I/O completes), and detach.

// Test code (and the shared helper module): a failed unwrap is a failed
// test, and the test sizes fit every integer type they are cast to.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

#[path = "../../../lib/nvme-driver/tests/mini_target/mod.rs"]
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
            let ctrlr = bdevkit_nvme::controller(&mgr, "Tcp2").unwrap();
            assert!(
                bdevkit_test::env::wait_for(30, || {
                    ctrlr.info_json()["ctrlrs"][0]["state"] == "enabled"
                })
                .await,
                "the reset finished"
            );
            drop(ctrlr);
            drop(ch);
            drop(desc);
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "Tcp2"}))
                .await
                .unwrap();
        });
    }

    fn with_reconnect(name: &str, t: &MiniTarget, loss: i32, delay: u32, fast: u32) -> Value {
        let mut p = params(name, t);
        p["ctrlr_loss_timeout_sec"] = json!(loss);
        p["reconnect_delay_sec"] = json!(delay);
        p["fast_io_fail_timeout_sec"] = json!(fast);
        p
    }

    /// Takes the target down: the next I/O command is held, then its
    /// connection dropped, and new connections are refused. Returns the
    /// refused-connection count before.
    fn target_down(t: &MiniTarget) -> usize {
        let before = t.state.refused.load(Ordering::Acquire);
        t.state.faults.down.store(true, Ordering::Release);
        t.state.faults.hold_io.store(true, Ordering::Release);
        t.state.faults.close_io.store(true, Ordering::Release);
        before
    }

    /// Brings the target back once `n` more connections were refused (so
    /// that reconnects were retried), from another thread.
    fn target_back_after(t: &MiniTarget, before: usize, n: usize) {
        let st = std::sync::Arc::clone(&t.state);
        std::thread::spawn(move || {
            while st.refused.load(Ordering::Acquire) < before + n {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            st.faults.down.store(false, Ordering::Release);
        });
    }

    #[test]
    fn reconnect_params_checked() {
        let t = MiniTarget::start();
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            for (l, d, f) in [(-2, 1, 0), (0, 1, 0), (-1, 0, 0), (5, 6, 0), (10, 3, 2)] {
                let e = call(
                    &reg,
                    "bdev_nvme_attach_controller",
                    with_reconnect("R", &t, l, d, f),
                )
                .await
                .unwrap_err();
                assert_eq!(e.code, -22, "{l} {d} {f}: {}", e.message);
            }
            // A psk or dhchap_key that names no key is SPDK's -ENOKEY
            // (TLS: test/tests/e2e/nvmf_tls.rs; DH-HMAC-CHAP:
            // test/tests/e2e/nvmf_auth.rs); a controller key without
            // a host key is -EINVAL.
            for (key, errno) in [
                ("psk", libc::ENOKEY),
                ("dhchap_key", libc::ENOKEY),
                ("dhchap_ctrlr_key", libc::EINVAL),
            ] {
                let mut p = with_reconnect("R", &t, -1, 1, 0);
                p[key] = json!("key0");
                let e = call(&reg, "bdev_nvme_attach_controller", p)
                    .await
                    .unwrap_err();
                assert_eq!(e.code, -errno, "{key}");
            }
            call(
                &reg,
                "bdev_nvme_attach_controller",
                with_reconnect("R", &t, -1, 1, 0),
            )
            .await
            .unwrap();
            let cfg = bdevkit_nvme::controller(&mgr, "R").unwrap().config_json();
            assert_eq!(cfg["params"]["ctrlr_loss_timeout_sec"], -1);
            assert_eq!(cfg["params"]["reconnect_delay_sec"], 1);
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "R"}))
                .await
                .unwrap();
        });
    }

    #[test]
    fn io_waits_for_the_reconnect() {
        let t = MiniTarget::start();
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(
                &reg,
                "bdev_nvme_attach_controller",
                with_reconnect("W", &t, 60, 1, 0),
            )
            .await
            .unwrap();
            let desc = mgr.open("Wn1", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let data = conformance::pattern(8192, 21);
            let expect = data.to_vec();
            ch.write(0, 16, data).await.unwrap();
            let before = target_down(&t);
            target_back_after(&t, before, 2);
            // Waits through two refused reconnects, then completes.
            let got = ch.read(0, 16, DmaBuf::new(8192).unwrap()).await.unwrap();
            assert_eq!(&got[..], &expect[..]);
            assert!(t.state.refused.load(Ordering::Acquire) >= before + 2);
            let ctrlr = bdevkit_nvme::controller(&mgr, "W").unwrap();
            assert!(
                bdevkit_test::env::wait_for(30, || {
                    ctrlr.info_json()["ctrlrs"][0]["state"] == "enabled"
                })
                .await,
                "the reset finished"
            );
            drop(ctrlr);
            drop(ch);
            drop(desc);
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "W"}))
                .await
                .unwrap();
        });
    }

    #[test]
    fn fast_io_fail_then_back() {
        let t = MiniTarget::start();
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(
                &reg,
                "bdev_nvme_attach_controller",
                with_reconnect("F", &t, 60, 1, 1),
            )
            .await
            .unwrap();
            let desc = mgr.open("Fn1", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            ch.write(0, 8, conformance::pattern(4096, 1)).await.unwrap();
            target_down(&t);
            // Lost past fast_io_fail_timeout_sec: the read fails, the
            // controller stays (reconnecting).
            assert!(ch.read(0, 8, DmaBuf::new(4096).unwrap()).await.is_err());
            let c = call(&reg, "bdev_nvme_get_controllers", json!({"name": "F"}))
                .await
                .unwrap();
            assert_ne!(c[0]["ctrlrs"][0]["state"], "enabled", "{c}");
            t.state.faults.down.store(false, Ordering::Release);
            let ctrlr = bdevkit_nvme::controller(&mgr, "F").unwrap();
            let back = bdevkit_test::env::wait_for(60, || {
                ctrlr.info_json()["ctrlrs"][0]["state"] == "enabled"
            })
            .await;
            assert!(back, "the controller reconnected");
            ch.read(0, 8, DmaBuf::new(4096).unwrap()).await.unwrap();
            drop(ch);
            drop(desc);
            drop(ctrlr);
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "F"}))
                .await
                .unwrap();
        });
    }

    #[test]
    fn lost_for_good_removes_the_controller() {
        let t = MiniTarget::start();
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(
                &reg,
                "bdev_nvme_attach_controller",
                with_reconnect("G", &t, 2, 1, 0),
            )
            .await
            .unwrap();
            let desc = mgr.open("Gn1", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            ch.write(0, 8, conformance::pattern(4096, 2)).await.unwrap();
            target_down(&t);
            // Waits until ctrlr_loss_timeout_sec, then fails.
            assert!(ch.read(0, 8, DmaBuf::new(4096).unwrap()).await.is_err());
            drop(ch);
            drop(desc);
            let m2 = mgr.clone();
            assert!(bdevkit_test::env::wait_for(60, move || m2.get("Gn1").is_none()).await);
        });
    }

    #[test]
    fn channel_on_a_slow_target_does_not_wait_for_it() {
        let t = MiniTarget::start();
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(&reg, "bdev_nvme_attach_controller", params("Slow", &t))
                .await
                .unwrap();
            let desc = mgr.open("Slown1", true, |_| {}).unwrap();
            // The controller does not answer the I/O queue's ICReq until
            // the channel exists: a channel that waited for the answer
            // would never be made (its connect times out and fails).
            let created = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            t.state.faults.hold_icresp.store(true, Ordering::Release);
            let (st, flag) = (
                std::sync::Arc::clone(&t.state),
                std::sync::Arc::clone(&created),
            );
            let answer = std::thread::spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                st.faults.hold_icresp.store(false, Ordering::Release);
            });
            let ch = desc.get_io_channel().unwrap();
            created.store(true, Ordering::Release);
            // I/O issued meanwhile completes once the controller answered.
            let data = conformance::pattern(8192, 31);
            let expect = data.to_vec();
            ch.write(0, 16, data).await.unwrap();
            let got = ch.read(0, 16, DmaBuf::new(8192).unwrap()).await.unwrap();
            assert_eq!(&got[..], &expect[..]);
            answer.join().unwrap();
            drop(ch);
            drop(desc);
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "Slow"}))
                .await
                .unwrap();
        });
    }

    #[test]
    fn reset_whose_io_queue_is_rejected_fails_and_is_retried() {
        let t = MiniTarget::start();
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(
                &reg,
                "bdev_nvme_attach_controller",
                with_reconnect("J", &t, 60, 1, 0),
            )
            .await
            .unwrap();
            let desc = mgr.open("Jn1", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let data = conformance::pattern(8192, 32);
            let expect = data.to_vec();
            ch.write(0, 16, data).await.unwrap();
            // A reset whose admin queue connects but whose I/O queue's
            // Connect is rejected failed (the reset waits for the channels'
            // queues); the next one, reconnect_delay_sec later, connects,
            // and I/O issued meanwhile completes there.
            let f = &t.state.faults;
            f.reject_io_connect.store(true, Ordering::Release);
            let e = call(&reg, "bdev_nvme_reset_controller", json!({"name": "J"}))
                .await
                .unwrap_err();
            assert_eq!(e.code, -libc::EIO, "{}", e.message);
            let got = ch.read(0, 16, DmaBuf::new(8192).unwrap()).await.unwrap();
            assert_eq!(&got[..], &expect[..]);
            assert!(!f.reject_io_connect.load(Ordering::Acquire));
            let ctrlr = bdevkit_nvme::controller(&mgr, "J").unwrap();
            assert!(
                bdevkit_test::env::wait_for(30, || {
                    ctrlr.info_json()["ctrlrs"][0]["state"] == "enabled"
                })
                .await,
                "the reset finished"
            );
            drop(ctrlr);
            drop(ch);
            drop(desc);
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "J"}))
                .await
                .unwrap();
        });
    }

    /// With `ctrlr_loss_timeout_sec` 0, a reset whose admin queue connects
    /// but whose I/O queue does not gives the controller up: it is
    /// removed (bdevs hot-removed, gone from the registry), not left
    /// "failed" with a healthy admin queue; the same name and path attach
    /// again.
    #[test]
    fn io_queue_lost_for_good_removes_the_controller() {
        let t = MiniTarget::start();
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(&reg, "bdev_nvme_attach_controller", params("K", &t))
                .await
                .unwrap();
            let desc = mgr.open("Kn1", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            ch.write(0, 8, conformance::pattern(4096, 41))
                .await
                .unwrap();
            t.state
                .faults
                .reject_io_connect
                .store(true, Ordering::Release);
            let e = call(&reg, "bdev_nvme_reset_controller", json!({"name": "K"}))
                .await
                .unwrap_err();
            assert_eq!(e.code, -libc::EIO, "{}", e.message);
            assert!(ch.read(0, 8, DmaBuf::new(4096).unwrap()).await.is_err());
            drop(ch);
            drop(desc);
            let m2 = mgr.clone();
            assert!(
                bdevkit_test::env::wait_for(30, move || m2.get("Kn1").is_none()).await,
                "bdev hot-removed"
            );
            let m2 = mgr.clone();
            assert!(
                bdevkit_test::env::wait_for(30, move || bdevkit_nvme::controllers(&m2).is_empty())
                    .await,
                "controller gone"
            );
            let c = call(&reg, "bdev_nvme_get_controllers", json!({}))
                .await
                .unwrap();
            assert_eq!(c, json!([]));
            let names = call(&reg, "bdev_nvme_attach_controller", params("K", &t))
                .await
                .unwrap();
            assert_eq!(names, json!(["Kn1"]));
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "K"}))
                .await
                .unwrap();
        });
    }

    /// `timeout_us` counts from when a command reaches the controller: a
    /// command held by its queue while the queue connects does not time
    /// out there (`action_on_timeout` reset would make new connections).
    #[test]
    fn timeout_does_not_count_the_connect() {
        let t = MiniTarget::start();
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(
                &reg,
                "bdev_nvme_set_options",
                json!({"timeout_us": 1_000_000, "action_on_timeout": "reset"}),
            )
            .await
            .unwrap();
            call(&reg, "bdev_nvme_attach_controller", params("To", &t))
                .await
                .unwrap();
            let desc = mgr.open("Ton1", true, |_| {}).unwrap();
            let before = t.state.connections.load(Ordering::Acquire);
            t.state.faults.hold_icresp.store(true, Ordering::Release);
            let ch = desc.get_io_channel().unwrap();
            let data = conformance::pattern(8192, 43);
            let expect = data.to_vec();
            let mut io = ch.alloc_io_async().await;
            io.write(0, 16, data);
            let pending = ch.submit_async(io).unwrap();
            // The timeout poller runs past four periods (the timeout)
            // while the queue connects.
            let runs = || {
                bdevkit::thread::Thread::current()
                    .unwrap()
                    .pollers()
                    .iter()
                    .find(|p| p.name == "bdev_nvme_timeouts")
                    .map_or(0, |p| p.run_count)
            };
            let start = runs();
            assert!(bdevkit_test::env::wait_for(30, || runs() >= start + 6).await);
            t.state.faults.hold_icresp.store(false, Ordering::Release);
            let done = pending.await;
            assert_eq!(done.status(), bdevkit::bdev::IoStatus::Success);
            drop(done);
            let got = ch.read(0, 16, DmaBuf::new(8192).unwrap()).await.unwrap();
            assert_eq!(&got[..], &expect[..]);
            // One connection (the channel's queue): no reset made more.
            assert_eq!(t.state.connections.load(Ordering::Acquire), before + 1);
            drop(ch);
            drop(desc);
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "To"}))
                .await
                .unwrap();
        });
    }

    thread_local! {
        /// What a test keeps alive on a reactor thread between its calls.
        static KEEP: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }

    /// Run count of `name` on the calling thread (0 if none).
    fn runs_of(name: &str) -> u64 {
        bdevkit::thread::Thread::current()
            .unwrap()
            .pollers()
            .iter()
            .filter(|p| p.name == name)
            .map(|p| p.run_count)
            .sum()
    }

    /// Waits (off the reactors) until `f` holds.
    fn wait_until(what: &str, f: impl Fn() -> bool) {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !f() {
            assert!(std::time::Instant::now() < end, "timed out: {what}");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Interrupt mode: a channel with a command outstanding at a
    /// controller that does not answer yet sleeps on its socket (its
    /// poller hardly runs, where a spinning one runs without end), and
    /// the answer wakes it (nothing else wakes that reactor: the I/O
    /// completes only if the socket does).
    #[test]
    fn interrupt_mode_sleeps_on_the_socket() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::Arc;

        let t = MiniTarget::start();
        let host = TestEnv::with_modules("0x3", &[bdevkit_nvme::register]);
        let p = params("Irq", &t);
        host.run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(&reg, "bdev_nvme_attach_controller", p).await.unwrap();
        });
        let core1 = "0x2".parse().unwrap();
        let io = host
            .runtime()
            .handle()
            .spawn_thread("irq", Some(&core1))
            .unwrap();
        let stage = Arc::new(AtomicUsize::new(0));
        let data = conformance::pattern(8192, 51);
        let expect = data.to_vec();
        let (mgr, st) = (host.mgr().clone(), Arc::clone(&stage));
        io.run_sync(move || {
            bdevkit::thread::Thread::current()
                .unwrap()
                .spawn_local(async move {
                    let desc = mgr.open("Irqn1", true, |_| {}).unwrap();
                    let ch = desc.get_io_channel().unwrap();
                    ch.write(0, 16, data).await.unwrap();
                    KEEP.with(|k| k.borrow_mut().push(Box::new((ch, desc))));
                    st.store(1, Ordering::Release);
                });
        })
        .unwrap();
        wait_until("write done", || stage.load(Ordering::Acquire) == 1);

        // Idle: nothing outstanding, the poller sleeps.
        let idle0 = io.run_sync(|| runs_of("bdev_nvme_poll")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let idle1 = io.run_sync(|| runs_of("bdev_nvme_poll")).unwrap();
        assert!(
            idle1 - idle0 <= 20,
            "idle channel polled {} times",
            idle1 - idle0
        );

        // A read the controller holds.
        t.state.faults.pause_io.store(true, Ordering::Release);
        let cmds = t.state.io_cmds.load(Ordering::Acquire);
        let st = Arc::clone(&stage);
        io.run_sync(move || {
            bdevkit::thread::Thread::current()
                .unwrap()
                .spawn_local(async move {
                    let kept = KEEP.with(|k| k.borrow_mut().pop()).unwrap();
                    let kept = kept
                        .downcast::<(bdevkit::bdev::BdevChannel, bdevkit::bdev::BdevDesc)>()
                        .unwrap();
                    let got = kept
                        .0
                        .read(0, 16, DmaBuf::new(8192).unwrap())
                        .await
                        .unwrap();
                    assert_eq!(&got[..], &expect[..]);
                    KEEP.with(|k| k.borrow_mut().push(kept));
                    st.store(2, Ordering::Release);
                });
        })
        .unwrap();
        wait_until("read at the controller", || {
            t.state.io_cmds.load(Ordering::Acquire) > cmds
        });
        let held0 = io.run_sync(|| runs_of("bdev_nvme_poll")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let held1 = io.run_sync(|| runs_of("bdev_nvme_poll")).unwrap();
        assert!(
            held1 - held0 <= 20,
            "channel with a command outstanding polled {} times",
            held1 - held0
        );
        assert_eq!(stage.load(Ordering::Acquire), 1);
        // The answer wakes the thread.
        t.state.faults.pause_io.store(false, Ordering::Release);
        wait_until("read done", || stage.load(Ordering::Acquire) == 2);

        io.run_sync(|| KEEP.with(|k| k.borrow_mut().clear()))
            .unwrap();
        host.run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "Irq"}))
                .await
                .unwrap();
        });
    }

    /// Interrupt mode: an admin command's completion wakes the app thread
    /// through the admin queue's socket, though the timed admin poller is
    /// a minute away (without the socket, nothing would poll the queue
    /// before then).
    #[test]
    fn interrupt_mode_admin_completion_wakes_the_app_thread() {
        use bdevkit_nvme_spec::Command as _;
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;

        let t = MiniTarget::start();
        let host = env();
        let p = params("Adm", &t);
        host.run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(
                &reg,
                "bdev_nvme_set_options",
                json!({"nvme_adminq_poll_period_us": 60_000_000}),
            )
            .await
            .unwrap();
            call(&reg, "bdev_nvme_attach_controller", p).await.unwrap();
        });
        let kas = t.state.keep_alives.load(Ordering::Acquire);
        let done = Arc::new(AtomicBool::new(false));
        let (mgr, d) = (host.mgr().clone(), Arc::clone(&done));
        host.runtime()
            .app_thread()
            .run_sync(move || {
                let c = bdevkit_nvme::controller(&mgr, "Adm").unwrap();
                c.driver().submit_admin(
                    bdevkit_nvme_spec::admin::KeepAlive.to_sqe(0),
                    None,
                    Box::new(move |st, _, _| {
                        assert!(st.is_success(), "{st}");
                        d.store(true, Ordering::Release);
                    }),
                );
            })
            .unwrap();
        wait_until("admin completion", || done.load(Ordering::Acquire));
        assert!(t.state.keep_alives.load(Ordering::Acquire) > kas);
        host.run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "Adm"}))
                .await
                .unwrap();
        });
    }
}
