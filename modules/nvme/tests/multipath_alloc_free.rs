//! After warm-up, the steady-state reads and writes of
//! `bdevkit_test::steady` on a bdev with two NVMe/TCP paths under
//! active_active round_robin (`rr_min_io` 1: the path changes every
//! I/O), against our NVMe-oF/TCP target in the same process with two
//! listeners, cause zero heap allocations (initiator and target
//! together). Its own binary, for the global allocator.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[cfg(test)]
mod tests {
    use bdevkit::bdev::BdevManager;
    use bdevkit_test::nvmf::{free_port, listener, NvmfEnv, HOSTNQN, SUBNQN};
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::steady::{self, CountingAlloc, SteadyState, MEASURED};
    use bdevkit_test::TestEnv;
    use serde_json::json;

    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;

    const RPCS: &[RegisterRpcs] = &[bdevkit_nvme::register_rpcs];

    #[test]
    fn steady_state_multipath_io_allocates_nothing() {
        let target = NvmfEnv::start();
        let p2 = free_port();
        let r: Result<(), String> = target.call(move |t, tx| {
            tx.send(
                t.add_listener(&listener(SUBNQN, p2))
                    .map_err(|e| e.to_string()),
            )
            .unwrap();
        });
        r.unwrap();
        let ports = [target.addr.port(), p2];
        let env = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
        let SteadyState { failures, allocs } =
            steady::measure_with(&env, "Mpn1", move |mgr: BdevManager| async move {
                let reg = rpc::registry(&mgr, RPCS);
                for port in ports {
                    let names = call(
                        &reg,
                        "bdev_nvme_attach_controller",
                        json!({"name": "Mp", "trtype": "tcp", "adrfam": "ipv4",
                               "traddr": "127.0.0.1", "trsvcid": port.to_string(),
                               "subnqn": SUBNQN, "hostnqn": HOSTNQN,
                               "hdgst": true, "ddgst": true, "multipath": "multipath"}),
                    )
                    .await
                    .unwrap();
                    assert_eq!(names, json!(["Mpn1"]));
                }
                call(
                    &reg,
                    "bdev_nvme_set_multipath_policy",
                    json!({"name": "Mpn1", "policy": "active_active",
                           "selector": "round_robin", "rr_min_io": 1}),
                )
                .await
                .unwrap();
                let info = mgr.get("Mpn1").unwrap().dump_info_json();
                assert_eq!(info["nvme"].as_array().unwrap().len(), 2);
            });
        assert_eq!(failures, 0);
        assert_eq!(
            allocs, 0,
            "{allocs} heap allocations during {MEASURED} steady-state I/Os over two paths"
        );
        drop(env);
        drop(target);
    }
}
