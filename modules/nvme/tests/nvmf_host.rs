//! Our NVMe/TCP initiator against our NVMe-oF/TCP target (bdevkit-nvmf,
//! in the same process on 127.0.0.1; `bdevkit_test::nvmf::NvmfEnv`): the
//! bdev conformance suite and a bdevperf-style verify on two reactors,
//! with header and data digests, through the bdev API on both sides (the
//! target serves a malloc bdev); data written through the initiator is
//! in the target's bdev; a host the target does not allow is refused.

#[cfg(test)]
mod tests {
    use bdevkit::dma::DmaBuf;
    use bdevkit_test::nvmf::{tcp_transport, NvmfEnv, HOSTNQN, STRANGER, SUBNQN};
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{conformance, verify, TestEnv};
    use serde_json::{json, Value};

    const RPCS: &[RegisterRpcs] = &[bdevkit_nvme::register_rpcs];

    fn params(t: &NvmfEnv, hostnqn: &str, digests: bool) -> Value {
        json!({
            "name": "Nvmf0",
            "trtype": "TCP",
            "adrfam": "IPv4",
            "traddr": "127.0.0.1",
            "trsvcid": t.addr.port().to_string(),
            "subnqn": SUBNQN,
            "hostnqn": hostnqn,
            "hdgst": digests,
            "ddgst": digests,
        })
    }

    #[test]
    fn conformance_and_verify_on_two_cores_with_digests() {
        let target = NvmfEnv::start_with("0x1", tcp_transport());
        let host = TestEnv::with_modules("0x3", &[bdevkit_nvme::register]);
        let p = params(&target, HOSTNQN, true);
        host.run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let names = call(&reg, "bdev_nvme_attach_controller", p).await.unwrap();
            assert_eq!(names, json!(["Nvmf0n1"]));
            let b = mgr.get("Nvmf0n1").unwrap();
            assert_eq!((b.block_size(), b.num_blocks()), (512, 16384));
            let info = b.dump_info_json();
            assert_eq!(info["nvme"][0]["ctrlr_data"]["subnqn"], SUBNQN);
            assert_eq!(
                info["nvme"][0]["ctrlr_data"]["serial_number"],
                "BDEVKITTEST"
            );
            conformance::run(&mgr, "Nvmf0n1", None).await;
        });
        let r = verify::run(&host, "Nvmf0n1", 16, 16, 300);
        assert_eq!((r.mismatches, r.errors), (0, 0), "{r:?}");
        assert!(r.verified > 0);

        // What the initiator wrote is in the target's bdev.
        let data = conformance::pattern(65536, 42);
        let expect = data.to_vec();
        host.run(move |mgr| async move {
            let desc = mgr.open("Nvmf0n1", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            ch.write(1024, 128, data).await.unwrap();
        });
        let got = target.env.run(move |mgr| async move {
            let desc = mgr.open("Malloc0", false, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            ch.read(1024, 128, DmaBuf::new(65536).unwrap())
                .await
                .unwrap()
                .to_vec()
        });
        assert_eq!(got, expect);

        host.run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(
                &reg,
                "bdev_nvme_detach_controller",
                json!({"name": "Nvmf0"}),
            )
            .await
            .unwrap();
            assert!(mgr.get("Nvmf0n1").is_none());
        });
    }

    #[test]
    fn a_host_not_allowed_is_refused() {
        let target = NvmfEnv::start();
        let host = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
        let p = params(&target, STRANGER, false);
        host.run(move |mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            let e = call(&reg, "bdev_nvme_attach_controller", p)
                .await
                .unwrap_err();
            assert_eq!(e.code, -libc::EIO, "{}", e.message);
            assert!(bdevkit_nvme::controllers(&mgr).is_empty());
        });
    }
}
