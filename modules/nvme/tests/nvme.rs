//! The nvme module over the emulated controller: conformance, the RPCs
//! (attach, get, send_cmd admin and io, reset, detach, set_options /
//! set_hotplug with SPDK's saved config), namespace UUIDs, I/O sizes and
//! alignments, two managers in one process, and the faults at bdev level:
//! error statuses reach the caller, retries, CSTS.CFS resets, surprise
//! removal fails I/O and hot-removes the bdev. All module state is per
//! manager: every test uses the same names.

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use base64::Engine;
    use bdevkit::bdev::module::BdevModule;
    use bdevkit::bdev::{BdevEvent, BdevManager, IoStatus, IoType, NvmeCmd};
    use bdevkit::dma::DmaBuf;
    use bdevkit_nvme_driver::emu::{
        EmuController, EmuKind, EmuNamespace, EmuOptions, Fault, FaultAction,
    };
    use bdevkit_nvme_spec::Status;
    use bdevkit_test::env::wait_for;
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{conformance, TestEnv};
    use serde_json::{json, Value};

    const RPCS: &[RegisterRpcs] = &[bdevkit_nvme::register_rpcs];

    fn env() -> TestEnv {
        TestEnv::with_modules("0x1", &[bdevkit_nvme::register])
    }

    fn start_emu(mgr: &BdevManager, name: &str, sgl: bool) -> Arc<EmuController> {
        bdevkit_nvme::emu_start(
            mgr,
            name,
            EmuOptions {
                sgl,
                serial: format!("SN-{name}"),
                namespaces: vec![
                    EmuNamespace {
                        nsid: 1,
                        kind: EmuKind::Ram,
                        block_size: 512,
                        num_blocks: 32768,
                    },
                    EmuNamespace {
                        nsid: 2,
                        kind: EmuKind::Null,
                        block_size: 4096,
                        num_blocks: 1 << 20,
                    },
                ],
                ..EmuOptions::default()
            },
        )
        .unwrap()
    }

    async fn attach(reg: &bdevkit_jsonrpc::MethodRegistry, name: &str, emu: &str) -> Value {
        call(
            reg,
            "bdev_nvme_attach_controller",
            json!({"name": name, "trtype": "PCIe", "traddr": format!("emu:{emu}")}),
        )
        .await
        .unwrap()
    }

    async fn detach(reg: &bdevkit_jsonrpc::MethodRegistry, name: &str) {
        call(reg, "bdev_nvme_detach_controller", json!({"name": name}))
            .await
            .unwrap();
    }

    #[test]
    fn conformance_and_rpcs() {
        env().run(|mgr| async move {
            start_emu(&mgr, "conf", true);
            let reg = rpc::registry(&mgr, RPCS);
            let names = attach(&reg, "Nvme0", "conf").await;
            assert_eq!(names, json!(["Nvme0n1", "Nvme0n2"]));
            let b = mgr.get("Nvme0n1").unwrap();
            assert_eq!(b.product_name(), "NVMe disk");
            assert_eq!((b.block_size(), b.num_blocks()), (512, 32768));
            for t in [
                IoType::Read,
                IoType::Write,
                IoType::Flush,
                IoType::Unmap,
                IoType::WriteZeroes,
                IoType::Compare,
                IoType::CompareAndWrite,
                IoType::Reset,
                IoType::NvmeIo,
                IoType::NvmeAdmin,
            ] {
                assert!(b.supports(t), "{t}");
            }
            let info = b.dump_info_json();
            assert_eq!(info["nvme"][0]["ctrlr_data"]["serial_number"], "SN-conf");
            assert_eq!(info["nvme"][0]["trid"]["trtype"], "PCIe");
            assert_eq!(info["nvme"][0]["ns_data"]["id"], 1);
            let ctrls = call(&reg, "bdev_nvme_get_controllers", json!({}))
                .await
                .unwrap();
            assert_eq!(ctrls[0]["name"], "Nvme0");
            assert_eq!(ctrls[0]["ctrlrs"][0]["state"], "enabled");
            assert_eq!(ctrls[0]["ctrlrs"][0]["trid"]["traddr"], "emu:conf");
            let e = call(&reg, "bdev_nvme_get_controllers", json!({"name": "Nope"}))
                .await
                .unwrap_err();
            assert_eq!(e.code, -22);
            let e = call(
                &reg,
                "bdev_nvme_attach_controller",
                json!({"name": "Nvme0", "trtype": "PCIe", "traddr": "emu:conf"}),
            )
            .await
            .unwrap_err();
            assert_eq!(e.code, -114);
            // Identify Controller through bdev_nvme_send_cmd: the serial.
            let mut cmd = [0u8; 64];
            cmd[0] = 0x06;
            cmd[40] = 1;
            let b64 = base64::engine::general_purpose::URL_SAFE;
            let r = call(
                &reg,
                "bdev_nvme_send_cmd",
                json!({
                "name": "Nvme0", "cmd_type": "admin", "data_direction": "c2h",
                "cmdbuf": b64.encode(cmd), "data_len": 4096}),
            )
            .await
            .unwrap();
            let data = b64.decode(r["data"].as_str().unwrap()).unwrap();
            assert_eq!(&data[4..11], b"SN-conf");
            let cpl = b64.decode(r["cpl"].as_str().unwrap()).unwrap();
            assert_eq!(cpl.len(), 16);
            assert_eq!(
                u16::from_le_bytes([cpl[14], cpl[15]]) >> 1,
                0,
                "success status"
            );
            // The saved config: options, the attach, hotplug last.
            let cfg = serde_json::to_string(&mgr.config_json()).unwrap();
            let (o, a, h) = (
                cfg.find("bdev_nvme_set_options").unwrap(),
                cfg.find("bdev_nvme_attach_controller").unwrap(),
                cfg.find("bdev_nvme_set_hotplug").unwrap(),
            );
            assert!(o < a && a < h, "{cfg}");
            conformance::run(&mgr, "Nvme0n1", None).await;
            call(&reg, "bdev_nvme_reset_controller", json!({"name": "Nvme0"}))
                .await
                .unwrap();
            detach(&reg, "Nvme0").await;
            assert!(mgr.get("Nvme0n1").is_none());
            let left = call(&reg, "bdev_nvme_get_controllers", json!({}))
                .await
                .unwrap();
            assert!(
                !left
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c["name"] == "Nvme0"),
                "{left}"
            );
        });
    }

    /// 512 B … 1 MiB (split by the bdev layer at MDTS) from aligned,
    /// unaligned and two- and three-segment buffers, read back into
    /// unaligned ones: PRP lists, SGLs (when the controller has them) and
    /// bounce buffers (when it has not).
    #[test]
    fn sizes_and_alignments_roundtrip() {
        for sgl in [true, false] {
            env().run(move |mgr| async move {
                start_emu(&mgr, "sz", sgl);
                let reg = rpc::registry(&mgr, RPCS);
                attach(&reg, "NvS", "sz").await;
                let report = bdevkit_test::sizes::roundtrip(&mgr, "NvSn1", 0)
                    .await
                    .unwrap_or_else(|e| panic!("sgl {sgl}: {e}"));
                assert_eq!(report.len(), bdevkit_test::sizes::SIZES.len());
                detach(&reg, "NvS").await;
            });
        }
    }

    #[test]
    fn nvme_status_reaches_the_caller_and_retries_stop_at_dnr() {
        env().run(move |mgr| async move {
            let e2 = start_emu(&mgr, "emu", true);
            let reg = rpc::registry(&mgr, RPCS);
            attach(&reg, "NvE", "emu").await;
            let desc = mgr.open("NvEn1", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            // A retryable error twice: retried, then it works.
            e2.inject(Fault {
                admin: false,
                opcode: Some(0x02),
                count: 2,
                action: FaultAction::Status(Status::INTERNAL_ERROR),
            });
            ch.read(0, 1, DmaBuf::new(512).unwrap()).await.unwrap();
            // DNR: not retried, the status reaches the caller.
            e2.inject(Fault {
                admin: false,
                opcode: Some(0x02),
                count: 1,
                action: FaultAction::Status(Status::new(2, 0x81).with_dnr()),
            });
            let mut io = ch.alloc_io_async().await;
            io.read(0, 1, DmaBuf::new(512).unwrap());
            let done = ch.submit_async(io).unwrap().await;
            assert_eq!(done.status(), IoStatus::Nvme { sct: 2, sc: 0x81 });
            // A completed I/O holds its channel: give it back.
            drop(done);
            // Passthrough: an NVMe Read through nvme_io.
            let mut cmd = NvmeCmd::default();
            cmd.cdw[0] = 0x02;
            cmd.cdw[1] = 1;
            let mut io = ch.alloc_io_async().await;
            io.nvme_io(cmd, Some(DmaBuf::new(512).unwrap()));
            let done = ch.submit_async(io).unwrap().await;
            assert_eq!(done.status(), IoStatus::Success);
            drop(done);
            drop(ch);
            drop(desc);
            detach(&reg, "NvE").await;
        });
    }

    #[test]
    fn fatal_status_resets_and_io_goes_on() {
        env().run(move |mgr| async move {
            let e2 = start_emu(&mgr, "emu", true);
            let reg = rpc::registry(&mgr, RPCS);
            attach(&reg, "NvF", "emu").await;
            let desc = mgr.open("NvFn1", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let data = conformance::pattern(4096, 3);
            let expect = data.to_vec();
            ch.write(8, 8, data).await.unwrap();
            e2.set_fatal();
            // The admin poller sees CFS and resets; I/O waits and goes on.
            let got = ch.read(8, 8, DmaBuf::new(4096).unwrap()).await.unwrap();
            assert_eq!(&got[..], &expect[..]);
            // "resetting" until every channel reconnected, then "enabled".
            let ctrlr = bdevkit_nvme::controller(&mgr, "NvF").unwrap();
            assert!(
                wait_for(30, || ctrlr.info_json()["ctrlrs"][0]["state"] == "enabled").await,
                "the reset finished"
            );
            drop(ctrlr);
            drop(ch);
            drop(desc);
            detach(&reg, "NvF").await;
        });
    }

    #[test]
    fn surprise_removal_fails_io_and_hot_removes() {
        env().run(move |mgr| async move {
            let e2 = start_emu(&mgr, "emu", true);
            let reg = rpc::registry(&mgr, RPCS);
            attach(&reg, "NvR", "emu").await;
            let removed = Arc::new(AtomicUsize::new(0));
            let r2 = Arc::clone(&removed);
            let desc = mgr
                .open("NvRn1", true, move |ev| {
                    if ev == BdevEvent::Remove {
                        r2.fetch_add(1, Ordering::SeqCst);
                    }
                })
                .unwrap();
            let ch = desc.get_io_channel().unwrap();
            ch.read(0, 1, DmaBuf::new(512).unwrap()).await.unwrap();
            e2.inject(Fault {
                admin: false,
                opcode: Some(0x02),
                count: 1,
                action: FaultAction::Drop,
            });
            let mut io = ch.alloc_io_async().await;
            io.read(0, 1, DmaBuf::new(512).unwrap());
            let pending = ch.submit_async(io).unwrap();
            e2.remove();
            let done = pending.await;
            assert_ne!(done.status(), IoStatus::Success, "I/O in flight fails");
            drop(done);
            assert!(
                wait_for(60, || removed.load(Ordering::SeqCst) > 0).await,
                "remove event"
            );
            drop(ch);
            drop(desc);
            assert!(
                wait_for(60, || mgr.get("NvRn1").is_none()).await,
                "bdev gone"
            );
            // The controller goes with its bdevs (as SPDK's): nothing is
            // left to detach, and its name is free again.
            assert!(
                wait_for(60, || bdevkit_nvme::controllers(&mgr).is_empty()).await,
                "controller gone"
            );
            call(&reg, "bdev_nvme_detach_controller", json!({"name": "NvR"}))
                .await
                .unwrap_err();
        });
    }

    fn b64() -> base64::engine::GeneralPurpose {
        base64::engine::general_purpose::URL_SAFE
    }

    /// `bdev_nvme_send_cmd` with `cmd_type: io`: an NVMe Write (h2c) then
    /// a Read (c2h) of the same block on namespace 1, and the data comes
    /// back; the bdev layer saw the same bytes.
    #[test]
    fn send_cmd_io_writes_and_reads() {
        env().run(|mgr| async move {
            start_emu(&mgr, "emu", true);
            let reg = rpc::registry(&mgr, RPCS);
            attach(&reg, "Nvme0", "emu").await;
            let data: Vec<u8> = (0..512u32)
                .map(|i| u8::try_from(i % 251).unwrap())
                .collect();
            let cmd = |opcode: u8| {
                let mut c = [0u8; 64];
                c[0] = opcode;
                c[4..8].copy_from_slice(&1u32.to_le_bytes());
                c[40..48].copy_from_slice(&7u64.to_le_bytes());
                c
            };
            let w = call(
                &reg,
                "bdev_nvme_send_cmd",
                json!({"name": "Nvme0", "cmd_type": "io", "data_direction": "h2c",
                       "cmdbuf": b64().encode(cmd(0x01)), "data": b64().encode(&data)}),
            )
            .await
            .unwrap();
            let cpl = b64().decode(w["cpl"].as_str().unwrap()).unwrap();
            assert_eq!(u16::from_le_bytes([cpl[14], cpl[15]]) >> 1, 0, "write ok");
            assert!(w.get("data").is_none());
            let r = call(
                &reg,
                "bdev_nvme_send_cmd",
                json!({"name": "Nvme0", "cmd_type": "io", "data_direction": "c2h",
                       "cmdbuf": b64().encode(cmd(0x02)), "data_len": 512}),
            )
            .await
            .unwrap();
            assert_eq!(b64().decode(r["data"].as_str().unwrap()).unwrap(), data);
            let desc = mgr.open("Nvme0n1", false, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let got = ch.read(7, 1, DmaBuf::new(512).unwrap()).await.unwrap();
            assert_eq!(&got[..], &data[..]);
            drop(ch);
            drop(desc);
            // A namespace without a bdev is refused.
            let mut bad = cmd(0x02);
            bad[4..8].copy_from_slice(&9u32.to_le_bytes());
            let e = call(
                &reg,
                "bdev_nvme_send_cmd",
                json!({"name": "Nvme0", "cmd_type": "io", "data_direction": "c2h",
                       "cmdbuf": b64().encode(bad), "data_len": 512}),
            )
            .await
            .unwrap_err();
            assert_eq!(e.code, -22);
            detach(&reg, "Nvme0").await;
        });
    }

    /// A namespace bdev's UUID is its NGUID (the emulated controller
    /// reports one in its descriptor list), the same after a detach and a
    /// new attach; `generate_uuids` makes no difference when the
    /// namespace has an identifier.
    #[test]
    fn namespace_uuid_comes_from_nguid_and_is_stable() {
        env().run(|mgr| async move {
            let e = start_emu(&mgr, "emu", true);
            let reg = rpc::registry(&mgr, RPCS);
            let mut seen = Vec::new();
            for _ in 0..2 {
                attach(&reg, "Nvme0", "emu").await;
                let b = mgr.get("Nvme0n1").unwrap();
                seen.push((b.uuid(), mgr.get("Nvme0n2").unwrap().uuid()));
                drop(b);
                detach(&reg, "Nvme0").await;
            }
            assert_eq!(seen[0], seen[1], "stable across attaches");
            assert_ne!(seen[0].0, seen[0].1, "one per namespace");
            // The same bytes the controller reports as NGUID.
            let t = bdevkit_nvme_driver::PcieTransport::new(e.function()).unwrap();
            let d = bdevkit_nvme_driver::Controller::attach(
                t,
                bdevkit_nvme_driver::ControllerOptions::default(),
            )
            .unwrap();
            let ns = d.namespaces();
            let nguid = ns[0].ids.nguid.expect("an NGUID");
            assert_eq!(seen[0].0.as_bytes(), &nguid);
            d.shutdown().unwrap();
        });
    }

    /// Two managers in one process: the same controller and emulator
    /// names in both, each sees only its own.
    #[test]
    fn two_managers_are_independent() {
        let (a, b) = (env(), env());
        a.run(|mgr| async move {
            start_emu(&mgr, "emu", true);
            let reg = rpc::registry(&mgr, RPCS);
            assert_eq!(
                attach(&reg, "Nvme0", "emu").await,
                json!(["Nvme0n1", "Nvme0n2"])
            );
        });
        b.run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let none = call(&reg, "bdev_nvme_get_controllers", json!({}))
                .await
                .unwrap();
            assert_eq!(
                none,
                json!([]),
                "the other manager's controller is not here"
            );
            let e = call(
                &reg,
                "bdev_nvme_attach_controller",
                json!({"name": "Nvme0", "trtype": "PCIe", "traddr": "emu:emu"}),
            )
            .await
            .unwrap_err();
            assert_eq!(e.code, -libc::ENODEV, "nor its emulated controller");
            // Options are per manager too: settable here while the other
            // manager has a controller attached.
            call(
                &reg,
                "bdev_nvme_set_options",
                json!({"bdev_retry_count": 7}),
            )
            .await
            .unwrap();
            start_emu(&mgr, "emu", false);
            assert_eq!(
                attach(&reg, "Nvme0", "emu").await,
                json!(["Nvme0n1", "Nvme0n2"])
            );
            let c = call(&reg, "bdev_nvme_get_controllers", json!({}))
                .await
                .unwrap();
            assert_eq!(c.as_array().unwrap().len(), 1);
            detach(&reg, "Nvme0").await;
        });
        a.run(|mgr| async move {
            assert_eq!(bdevkit_nvme::options(&mgr).unwrap().bdev_retry_count, 3);
            assert!(mgr.get("Nvme0n1").is_some(), "still attached here");
            let reg = rpc::registry(&mgr, RPCS);
            let e = call(
                &reg,
                "bdev_nvme_set_options",
                json!({"bdev_retry_count": 1}),
            )
            .await
            .unwrap_err();
            assert_eq!(e.code, -1, "refused while attached");
            detach(&reg, "Nvme0").await;
        });
    }

    /// SPDK's own saved config (format of `spdk_tgt`'s `save_config`):
    /// its bdev_nvme_set_options and bdev_nvme_set_hotplug entries load.
    #[test]
    fn spdk_saved_options_load() {
        let cfg: Value =
            serde_json::from_str(include_str!("fixtures/spdk_tgt_bdev_nvme.json")).unwrap();
        env().run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let entries = cfg["subsystems"][0]["config"].as_array().unwrap().clone();
            for e in entries {
                let m = e["method"].as_str().unwrap();
                if m.starts_with("bdev_nvme_set") {
                    call(&reg, m, e["params"].clone())
                        .await
                        .unwrap_or_else(|err| panic!("{m}: {err:?}"));
                }
            }
            assert_eq!(bdevkit_nvme::options(&mgr).unwrap().bdev_retry_count, 3);
            let bad = call(&reg, "bdev_nvme_set_options", json!({"no_such_key": 1}))
                .await
                .unwrap_err();
            assert_eq!(bad.code, -32603, "SPDK: spdk_json_decode_object failed");
        });
    }

    /// SPDK v26.05 saves `multipath_opts` in bdev_nvme_set_options (the
    /// policy of bdevs attached without their own): accepted, applied to
    /// the next attach, saved back in SPDK's shape; a bad one is refused.
    #[test]
    fn set_options_multipath_opts_is_the_attach_default() {
        env().run(|mgr| async move {
            start_emu(&mgr, "mpo", true);
            let reg = rpc::registry(&mgr, RPCS);
            let mp = json!({"policy": "active_active", "selector": "queue_depth"});
            call(&reg, "bdev_nvme_set_options", json!({"multipath_opts": mp}))
                .await
                .unwrap();
            attach(&reg, "Nvme0", "mpo").await;
            let p = bdevkit_nvme::multipath_policy(&mgr, "Nvme0n1").unwrap();
            assert_eq!(
                (p.policy_name(), p.selector_name()),
                ("active_active", "queue_depth")
            );
            let cfg = bdevkit_nvme::module(&mgr).unwrap().config_json(&mgr);
            let entry = |m: &str| cfg.iter().find(|e| e["method"] == m).unwrap().clone();
            assert_eq!(
                entry("bdev_nvme_set_options")["params"]["multipath_opts"],
                mp
            );
            assert_eq!(
                entry("bdev_nvme_attach_controller")["params"]["multipath_opts"],
                mp
            );
            assert_eq!(
                entry("bdev_nvme_set_multipath_policy")["params"],
                json!({"name": "Nvme0n1", "policy": "active_active", "selector": "queue_depth"})
            );
            detach(&reg, "Nvme0").await;
            // round_robin saves its min_io; active_passive neither key.
            for (given, saved) in [
                (
                    json!({"policy": "active_active", "min_io": 8}),
                    json!({"policy": "active_active", "selector": "round_robin", "min_io": 8}),
                ),
                (
                    json!({"policy": "active_passive"}),
                    json!({"policy": "active_passive"}),
                ),
            ] {
                call(
                    &reg,
                    "bdev_nvme_set_options",
                    json!({"multipath_opts": given}),
                )
                .await
                .unwrap();
                let o = bdevkit_nvme::options(&mgr).unwrap();
                assert_eq!(serde_json::to_value(&o.multipath_opts).unwrap(), saved);
            }
            // SPDK's answers: names and keys fail decoding, min_io 0
            // fails spdk_bdev_nvme_set_opts.
            for (bad, code) in [
                (json!({"policy": "sideways"}), -32603),
                (json!({"policy": "active_active", "selector": "x"}), -32603),
                (json!({"policy": "active_passive", "typo": 1}), -32603),
                (json!({"policy": "active_active", "min_io": 0}), -22),
            ] {
                let e = call(
                    &reg,
                    "bdev_nvme_set_options",
                    json!({"multipath_opts": bad}),
                )
                .await
                .unwrap_err();
                assert_eq!(e.code, code, "{e:?}");
            }
        });
    }
}
