//! After warm-up, the steady-state reads and writes of
//! `bdevkit_test::steady` through the nvme module over NVMe/TCP, against
//! our NVMe-oF/TCP target in the same process (127.0.0.1, digests on),
//! cause zero heap allocations — initiator (channel, queue pair, TCP
//! transport, admin poller with its keep-alive) and target together: the
//! counting allocator counts every thread of the process. Its own binary,
//! for the global allocator.

#[cfg(test)]
mod tests {
    use bdevkit::bdev::BdevManager;
    use bdevkit_nvme::AttachArgs;
    use bdevkit_nvme_driver::TcpOptions;
    use bdevkit_nvme_spec::tcp::Digests;
    use bdevkit_test::nvmf::{NvmfEnv, HOSTNQN, SUBNQN};
    use bdevkit_test::steady::{self, CountingAlloc, SteadyState, MEASURED};
    use bdevkit_test::TestEnv;

    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;

    #[test]
    fn steady_state_nvme_tcp_io_allocates_nothing() {
        let target = NvmfEnv::start();
        let port = target.addr.port().to_string();
        let env = TestEnv::with_modules("0x1", &[bdevkit_nvme::register]);
        let SteadyState { failures, allocs } =
            steady::measure_with(&env, "Nvmf0n1", move |mgr: BdevManager| async move {
                let mut o = TcpOptions::new("127.0.0.1", &port, SUBNQN);
                o.hostnqn = Some(HOSTNQN.into());
                o.digests = Digests {
                    header: true,
                    data: true,
                };
                let (tx, rx) = std::sync::mpsc::channel();
                bdevkit_nvme::attach(
                    &mgr,
                    AttachArgs {
                        name: "Nvmf0".into(),
                        traddr: "127.0.0.1".into(),
                        num_io_queues: None,
                        tcp: Some(o),
                        reconnect: None,
                        multipath: None,
                        policy: None,
                    },
                    Box::new(move |r| {
                        tx.send(r.map_err(|e| e.to_string())).unwrap();
                    }),
                );
                assert!(
                    bdevkit_test::env::wait_for(30, || rx.try_recv().map(|r| r.unwrap()).is_ok())
                        .await,
                    "attach finished"
                );
            });
        assert_eq!(failures, 0);
        assert_eq!(
            allocs, 0,
            "{allocs} heap allocations during {MEASURED} steady-state I/Os over NVMe/TCP"
        );
        drop(env);
        drop(target);
    }
}
