//! The uring module end to end: conformance and verify on tmpfs and on the
//! root disk, durability of flush, the RPC handlers' errors, delete with
//! I/O in flight, rescan, end of file inside the bdev, the module's
//! options (per manager: two managers in one process keep their own, so
//! these tests share this binary with the others), SQPOLL and IOPOLL
//! rings, `ENOSPC`, and a block device: a loop device with 4 KiB logical
//! sectors over a tmpfs file (needs root and the loop driver; skips with
//! the reason otherwise). What every kernel-file module does alike runs from
//! `bdevkit_test::kernel`; the uring-specific checks are here. Every test
//! first checks that io_uring is usable here and skips with the reason if
//! not.

mod common;

#[cfg(test)]
mod tests {
    use bdevkit::bdev::module::{Bdev, BdevManager, IoType};
    use bdevkit_jsonrpc::RpcError;
    use bdevkit_test::conformance;
    use bdevkit_test::kernel::{self, Backend};
    use bdevkit_test::TestEnv;
    use bdevkit_uring::{KfileBdev as _, UringCreateParams, UringOptions};
    use serde_json::{json, Value};

    use super::common::URING;

    bdevkit_test::kernel_tests!(URING, on_tmpfs);

    /// The module's own check of a fresh bdev on tmpfs.
    fn on_tmpfs(b: &Bdev) {
        assert_eq!(b.product_name(), "URING bdev");
        assert!(b.supports(IoType::Flush) && !b.supports(IoType::Unmap));
        let u = b.ops_as::<bdevkit_uring::UringBdev>().unwrap();
        assert!(u.is_direct(), "tmpfs takes O_DIRECT on this kernel");
    }

    #[test]
    fn rpc_create_result_info_and_config() {
        if URING.skip() {
            return;
        }
        let f = URING.temp_file("/dev/shm", 1 << 20);
        let env = URING.env("0x1");
        // What `spdk-rpc bdev_uring_create FILE u_rpc` sends.
        let b = URING.rpc_create(&env, "u_rpc", &f.path(), json!({}));
        assert_eq!((b.block_size(), b.num_blocks()), (512, 2048));
        assert_eq!(b.dump_info_json(), json!({"uring": {"filename": f.path()}}));
        // The saved entry recreates the bdev through the same handler.
        URING.recreate_from_config(&env, "u_rpc", &["name", "block_size", "filename", "uuid"]);
        let b = URING.rpc_create(&env, "u_rpc4k", &f.path(), json!({"block_size": 4096}));
        assert_eq!((b.block_size(), b.num_blocks()), (4096, 256));
        assert_eq!(
            b.write_config_json().unwrap()["params"]["block_size"],
            json!(4096)
        );
    }

    #[test]
    fn rpc_errors() {
        if URING.skip() {
            return;
        }
        let f = URING.temp_file("/dev/shm", 1 << 20);
        let odd = URING.temp_file("/dev/shm", 1000);
        let dir = std::env::temp_dir();
        let env = URING.env("0x1");
        let create = |params: Value| URING.rpc(&env, "bdev_uring_create", params);
        // SPDK's code and sentence for every create failure, then the
        // cause (SPDK sends the sentence alone).
        let failed = |cause: &str| {
            Err(RpcError::new(
                -32603,
                format!("Unable to create URING bdev. {cause}"),
            ))
        };
        assert_eq!(
            create(json!({"filename": "/nonexistent/bdevkit", "name": "e1"})),
            failed("No such file or directory")
        );
        assert_eq!(
            create(json!({"filename": dir.to_string_lossy(), "name": "e2"})),
            failed("Is a directory")
        );
        assert_eq!(
            create(json!({"filename": odd.path(), "name": "e3"})),
            failed("Invalid argument")
        );
        assert_eq!(
            create(json!({"filename": f.path(), "name": "e4", "block_size": 1000})),
            failed("Invalid argument")
        );
        assert_eq!(
            create(json!({"filename": f.path(), "name": "e6"})),
            Ok(json!("e6"))
        );
        assert_eq!(
            create(json!({"filename": f.path(), "name": "e6"})),
            failed("File exists")
        );
        assert_eq!(
            create(json!({"filename": f.path(), "name": ""})),
            failed("Invalid argument")
        );
        assert_eq!(
            create(json!({"filename": f.path()})),
            Err(RpcError::new(-32603, "spdk_json_decode_object failed"))
        );
        assert_eq!(
            create(json!({"filename": f.path(), "name": "e7", "readonly": false})),
            Err(RpcError::new(-32603, "spdk_json_decode_object failed"))
        );
        let (odd_path, dir_path, f_path) =
            (odd.path(), dir.to_string_lossy().into_owned(), f.path());
        env.run(move |mgr| async move {
            let errno = |p: UringCreateParams| bdevkit_uring::create(&mgr, p).unwrap_err().errno();
            assert_eq!(
                errno(UringCreateParams::new("x", "/nonexistent/bdevkit")),
                libc::ENOENT
            );
            assert_eq!(errno(UringCreateParams::new("x", dir_path)), libc::EISDIR);
            assert_eq!(errno(UringCreateParams::new("x", odd_path)), libc::EINVAL);
            assert_eq!(errno(UringCreateParams::new("e6", f_path)), libc::EEXIST);
        });
    }

    /// A file the daemon may not read: the RPC answers SPDK's -32603 with
    /// the cause, as aio does (errno `EACCES`).
    #[test]
    fn rpc_no_permission() {
        let denied = RpcError::new(-32603, "Unable to create URING bdev. Permission denied");
        kernel::create_without_permission(&URING, "tests::rpc_no_permission", denied);
    }

    /// The params of `env`'s saved `bdev_uring_set_options` entry, if any.
    fn saved_options(env: &TestEnv) -> Option<Value> {
        env.mgr()
            .config_json()
            .into_iter()
            .find(|e| e["method"] == "bdev_uring_set_options")
            .map(|e| e["params"].clone())
    }

    /// `bdev_uring_set_options` through its handler: invalid values and
    /// unknown keys are refused, absent keys keep their value, non-default
    /// options are part of the saved config. Then a tmpfs bdev on this
    /// manager's rings: IOPOLL does not apply to it, and its thread's plain
    /// ring is an SQPOLL ring where the kernel allows it (else a logged
    /// fallback); both must serve I/O correctly.
    #[test]
    fn options_over_rpc_and_an_sqpoll_ring() {
        if URING.skip() {
            return;
        }
        let env = URING.env("0x1");
        assert_eq!(saved_options(&env), None);
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
        let o = bdevkit_uring::options(env.mgr()).unwrap();
        assert!(o.sqpoll && o.iopoll && o.sq_entries == 64 && o.idle_yield);
        assert_eq!(saved_options(&env), Some(json!(o)));
        let shm = URING.temp_file("/dev/shm", 1 << 20);
        let shm_path = shm.path();
        env.run(move |mgr| async move {
            let b = bdevkit_uring::create(&mgr, UringCreateParams::new("sq", shm_path)).unwrap();
            assert!(!b.ops_as::<bdevkit_uring::UringBdev>().unwrap().is_polled());
            conformance::run(&mgr, "sq", Some(URING.delete)).await;
        });
    }

    /// Two managers in one process keep their own options, set through
    /// each one's handler and saved in each one's config, and each serves
    /// I/O on rings built from its own.
    #[test]
    fn two_managers_keep_their_own_options() {
        if URING.skip() {
            return;
        }
        let (a, b) = (URING.env("0x1"), URING.env("0x1"));
        let set = json!({"sq_entries": 32, "sqpoll_idle_ms": 5, "idle_yield": false});
        assert_eq!(
            URING.rpc(&a, "bdev_uring_set_options", set),
            Ok(json!(true))
        );
        assert_eq!(
            URING.rpc(&b, "bdev_uring_set_options", json!({"sq_entries": 1024})),
            Ok(json!(true))
        );
        let want_a = UringOptions {
            sq_entries: 32,
            sqpoll_idle_ms: 5,
            idle_yield: false,
            ..UringOptions::default()
        };
        let want_b = UringOptions {
            sq_entries: 1024,
            ..UringOptions::default()
        };
        assert_eq!(bdevkit_uring::options(a.mgr()).unwrap(), want_a);
        assert_eq!(bdevkit_uring::options(b.mgr()).unwrap(), want_b);
        assert_eq!(saved_options(&a), Some(json!(want_a)));
        assert_eq!(saved_options(&b), Some(json!(want_b)));
        // A third manager is untouched by both.
        let c = URING.env("0x1");
        assert_eq!(
            bdevkit_uring::options(c.mgr()).unwrap(),
            UringOptions::default()
        );
        assert_eq!(saved_options(&c), None);
        for (env, name) in [(&a, "two_a"), (&b, "two_b")] {
            let f = URING.temp_file("/dev/shm", 1 << 20);
            let path = f.path();
            env.run(move |mgr| async move {
                bdevkit_uring::create(&mgr, UringCreateParams::new(name, path)).unwrap();
                conformance::run(&mgr, name, Some(URING.delete)).await;
            });
        }
    }

    /// A block device, with IOPOLL asked for on this manager: loop devices
    /// do not serve polled I/O, so the probe falls back to the plain ring.
    #[test]
    fn loop_device_with_4k_sectors() {
        fn register_iopoll(mgr: &BdevManager) {
            bdevkit_uring::register(mgr);
            let iopoll = UringOptions {
                iopoll: true,
                ..UringOptions::default()
            };
            bdevkit_uring::set_options(mgr, iopoll).unwrap();
        }
        let iopoll = Backend {
            register: register_iopoll,
            ..URING
        };
        kernel::loop_device_with_4k_sectors(&iopoll, |b| {
            assert!(!b.ops_as::<bdevkit_uring::UringBdev>().unwrap().is_polled());
        });
    }
}
