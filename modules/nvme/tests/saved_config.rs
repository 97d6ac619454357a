//! SPDK's own saved config loads: the `bdev_nvme_set_options` and
//! `bdev_nvme_set_hotplug` entries `spdk_tgt`'s `save_config` writes (its
//! own process: options are refused while controllers are attached).

#[cfg(test)]
mod tests {
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::TestEnv;
    use serde_json::{json, Value};

    const RPCS: &[RegisterRpcs] = &[bdevkit_nvme::register_rpcs];

    fn env() -> TestEnv {
        TestEnv::with_modules("0x1", &[bdevkit_nvme::register])
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
            assert_eq!(bdevkit_nvme::options::options().bdev_retry_count, 3);
            let bad = call(&reg, "bdev_nvme_set_options", json!({"no_such_key": 1}))
                .await
                .unwrap_err();
            assert_eq!(bad.code, -32603, "SPDK: spdk_json_decode_object failed");
        });
    }
}
