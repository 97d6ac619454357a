//! The uring module's options and block devices. Options are process-wide,
//! so these tests live in their own binary: SQPOLL (where the kernel allows
//! it) and IOPOLL requested, `bdev_uring_set_options` through its handler,
//! then a loop device with 4 KiB logical sectors over a tmpfs file (needs
//! root and the loop driver; skips with the reason otherwise): geometry
//! ioctls, block size rules, the IOPOLL probe falling back (loop devices do
//! not poll), and the conformance suite.

mod common;

#[cfg(test)]
mod tests {
    use bdevkit_jsonrpc::RpcError;
    use bdevkit_test::conformance;
    use bdevkit_test::kernel::LoopDevice;
    use bdevkit_uring::UringCreateParams;
    use serde_json::json;

    use super::common::URING;

    /// One test (options are process-wide): set options over RPC, run a
    /// tmpfs bdev on an SQPOLL ring, then the loop device.
    #[test]
    fn options_sqpoll_iopoll_and_loop_device() {
        if URING.skip() {
            return;
        }
        let env = URING.env("0x1");
        assert_eq!(
            URING.rpc(&env, "bdev_uring_set_options", json!({"sq_entries": 100})),
            Err(RpcError::new(-22, "Invalid argument"))
        );
        assert_eq!(
            URING.rpc(&env, "bdev_uring_set_options", json!({"bogus": 1})),
            Err(RpcError::new(-32603, "spdk_json_decode_object failed"))
        );
        assert_eq!(
            URING.rpc(
                &env,
                "bdev_uring_set_options",
                json!({"sq_entries": 64, "sqpoll": true, "sqpoll_idle_ms": 10, "iopoll": true})
            ),
            Ok(json!(true))
        );
        let o = bdevkit_uring::options();
        assert!(o.sqpoll && o.iopoll && o.sq_entries == 64 && o.idle_yield);
        // Non-default options are part of the saved config.
        let cfg = env.mgr().config_json();
        assert!(
            cfg.iter().any(|e| e["method"] == "bdev_uring_set_options"
                && e["params"]["sq_entries"] == 64),
            "{cfg:?}"
        );
        // A file on tmpfs: IOPOLL does not apply, the thread's plain ring
        // is an SQPOLL ring where the kernel allows it (else a logged
        // fallback); both must serve I/O correctly.
        let shm = URING.temp_file("/dev/shm", 1 << 20);
        let shm_path = shm.path();
        env.run(move |mgr| async move {
            let b = bdevkit_uring::create(&mgr, UringCreateParams::new("sq", shm_path)).unwrap();
            assert!(!b.ops_as::<bdevkit_uring::UringBdev>().unwrap().is_polled());
            conformance::run(&mgr, "sq", Some(URING.delete)).await;
        });
        drop(shm);

        let lo = match LoopDevice::new("uring", 8 << 20, 4096) {
            Ok(l) => l,
            Err(e) => {
                println!("skipped: no loop device: {e}");
                return;
            }
        };
        let dev = lo.dev.clone();
        env.run(move |mgr| async move {
            let mut p = UringCreateParams::new("lo_small", dev.clone());
            p.block_size = Some(512);
            assert_eq!(
                bdevkit_uring::create(&mgr, p).unwrap_err().errno(),
                libc::EINVAL
            );
            let b = bdevkit_uring::create(&mgr, UringCreateParams::new("lo", dev)).unwrap();
            assert_eq!(b.block_size(), 4096);
            assert_eq!(b.num_blocks(), 2048);
            assert_eq!(b.props().required_alignment, 12);
            // Loop devices do not serve polled I/O: the probe falls back.
            assert!(!b.ops_as::<bdevkit_uring::UringBdev>().unwrap().is_polled());
            conformance::run(&mgr, "lo", Some(URING.delete)).await;
        });
    }
}
