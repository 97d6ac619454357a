//! The uring module end to end: conformance and verify on tmpfs and on the
//! root disk, durability of flush, the RPC handlers' errors, delete with
//! I/O in flight, rescan, end of file inside the bdev. What every
//! kernel-file module does alike runs from `bdevkit_test::kernel`; the
//! uring-specific checks are here. Every test first checks that io_uring
//! is usable here and skips with the reason if not.

mod common;

#[cfg(test)]
mod tests {
    use bdevkit::bdev::{Bdev, IoType};
    use bdevkit_jsonrpc::RpcError;
    use bdevkit_test::kernel;
    use bdevkit_uring::UringCreateParams;
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
        let r = URING.rpc(
            &env,
            "bdev_uring_create",
            json!({"filename": f.path(), "name": "u_rpc"}),
        );
        assert_eq!(r, Ok(json!("u_rpc")));
        let b = env.mgr().get("u_rpc").unwrap();
        assert_eq!(b.block_size(), 512);
        assert_eq!(b.num_blocks(), 2048);
        assert_eq!(b.dump_info_json(), json!({"uring": {"filename": f.path()}}));
        // The saved entry recreates the bdev through the same handler.
        URING.recreate_from_config(&env, "u_rpc", &["name", "block_size", "filename", "uuid"]);
        let r = URING.rpc(
            &env,
            "bdev_uring_create",
            json!({"filename": f.path(), "name": "u_rpc4k", "block_size": 4096}),
        );
        assert_eq!(r, Ok(json!("u_rpc4k")));
        let b = env.mgr().get("u_rpc4k").unwrap();
        assert_eq!(b.block_size(), 4096);
        assert_eq!(b.num_blocks(), 256);
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
        let failed = Err(RpcError::new(-32603, "Unable to create URING bdev."));
        // SPDK answers every create failure the same way; the Rust API
        // keeps the cause.
        assert_eq!(
            create(json!({"filename": "/nonexistent/bdevkit", "name": "e1"})),
            failed
        );
        assert_eq!(
            create(json!({"filename": dir.to_string_lossy(), "name": "e2"})),
            failed
        );
        assert_eq!(
            create(json!({"filename": odd.path(), "name": "e3"})),
            failed
        );
        assert_eq!(
            create(json!({"filename": f.path(), "name": "e4", "block_size": 1000})),
            failed
        );
        assert_eq!(
            create(json!({"filename": f.path(), "name": "e6"})),
            Ok(json!("e6"))
        );
        assert_eq!(create(json!({"filename": f.path(), "name": "e6"})), failed);
        assert_eq!(
            create(json!({"filename": f.path()})),
            Err(RpcError::new(-32603, "spdk_json_decode_object failed"))
        );
        assert_eq!(
            create(json!({"filename": f.path(), "name": "e7", "readonly": false})),
            Err(RpcError::new(-32603, "spdk_json_decode_object failed"))
        );
        assert_eq!(
            URING.rpc(&env, "bdev_uring_delete", json!({"name": "nope"})),
            Err(RpcError::new(-19, "No such device"))
        );
        assert_eq!(
            URING.rpc(&env, "bdev_uring_rescan", json!({"name": "nope"})),
            Err(RpcError::new(-19, "No such device"))
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

    /// A file the daemon may not read: the RPC answers SPDK's fixed
    /// -32603; the Rust API reports EACCES.
    #[test]
    fn rpc_no_permission() {
        kernel::as_nobody(&URING, "tests::rpc_no_permission", |path| {
            let env = URING.env("0x1");
            let r = URING.rpc(
                &env,
                "bdev_uring_create",
                json!({"filename": path, "name": "np"}),
            );
            assert_eq!(
                r,
                Err(RpcError::new(-32603, "Unable to create URING bdev."))
            );
            let path = path.to_string();
            let errno = env.run(move |mgr| async move {
                bdevkit_uring::create(&mgr, UringCreateParams::new("np", path))
                    .unwrap_err()
                    .errno()
            });
            assert_eq!(errno, libc::EACCES);
        });
    }
}
