//! The xnvme module on the host (no NVMe device here: `io_uring_cmd` runs
//! in the VM lane, `test/vm/xnvme*.sh`): the `io_uring` and `libaio`
//! mechanisms against regular files through the shared kernel-file
//! scenarios (conformance on tmpfs and on the root disk, verify on two
//! cores, durability of flush, delete with I/O in flight, end of file
//! inside the bdev, an unlinked file, `ENOSPC`), then the RPC handlers:
//! create results, info and saved config replayed, every create failure
//! (SPDK's code and sentence plus the cause, nothing registered), delete.

mod common;

#[cfg(test)]
mod tests {
    use bdevkit::bdev::{Bdev, IoType};
    use bdevkit_jsonrpc::RpcError;
    use bdevkit_test::kernel;
    use bdevkit_test::TestEnv;
    use bdevkit_xnvme::{Mechanism, XnvmeCreateParams};
    use serde_json::{json, Value};

    use super::common::{IO_URING, LIBAIO};

    fn on_tmpfs(b: &Bdev) {
        assert_eq!(b.product_name(), "xNVMe bdev");
        assert_eq!(b.module_name(), "xnvme");
        assert!(b.supports(IoType::Flush) && !b.supports(IoType::Unmap));
        assert!(!b.supports(IoType::NvmeIo) && !b.supports(IoType::NvmeAdmin));
    }

    macro_rules! mechanism_tests {
        ($m:ident, $backend:path) => {
            mod $m {
                use super::*;

                #[test]
                fn conformance_on_tmpfs() {
                    kernel::conformance(&$backend, "/dev/shm", "xn_shm", on_tmpfs);
                }

                #[test]
                fn conformance_on_root_disk() {
                    kernel::conformance(&$backend, "/var/tmp", "xn_disk", |_| {});
                }

                #[test]
                fn verify_on_two_cores() {
                    kernel::verify_on_two_cores(&$backend);
                }

                #[test]
                fn flushed_data_is_in_the_file() {
                    kernel::flushed_data_is_in_the_file(&$backend);
                }

                #[test]
                fn delete_while_io_runs() {
                    kernel::delete_while_io_runs(&$backend);
                }

                #[test]
                fn read_past_end_of_shrunk_file_fails_cleanly() {
                    kernel::read_past_end_of_shrunk_file_fails_cleanly(&$backend);
                }

                #[test]
                fn file_unlinked_under_the_bdev_keeps_working() {
                    kernel::file_unlinked_under_the_bdev_keeps_working(&$backend);
                }

                #[test]
                fn enospc_reaches_the_io_status() {
                    kernel::enospc_reaches_the_io_status(&$backend);
                }
            }
        };
    }

    mechanism_tests!(io_uring, IO_URING);
    mechanism_tests!(libaio, LIBAIO);

    fn create_params(name: &str, filename: &str, mechanism: &str, conserve_cpu: bool) -> Value {
        json!({"name": name, "filename": filename, "io_mechanism": mechanism, "conserve_cpu": conserve_cpu})
    }

    /// What `spdk-rpc bdev_xnvme_create [-c] FILE NAME MECHANISM` sends, for
    /// both mechanisms: the name, the bdev's info, and a saved entry that
    /// recreates the same bdev through the same handler.
    #[test]
    fn rpc_create_info_and_config() {
        if IO_URING.skip() {
            return;
        }
        let f = IO_URING.temp_file("/dev/shm", 1 << 20);
        let env = IO_URING.env("0x1");
        for (name, mech, conserve_cpu) in [("xu", "io_uring", true), ("xa", "libaio", false)] {
            let params = create_params(name, &f.path(), mech, conserve_cpu);
            let r = IO_URING.rpc(&env, "bdev_xnvme_create", params.clone());
            assert_eq!(r, Ok(json!(name)));
            let b = env.mgr().get(name).unwrap();
            assert_eq!((b.block_size(), b.num_blocks()), (512, 2048));
            // driver_specific is SPDK's: empty; info() says what it is.
            assert_eq!(b.dump_info_json(), json!({}));
            assert_eq!(
                bdevkit_xnvme::info(&b),
                Some(
                    json!({"filename": f.path(), "io_mechanism": mech, "conserve_cpu": conserve_cpu})
                )
            );
            let entry = b.write_config_json().unwrap();
            assert_eq!(
                entry,
                json!({"method": "bdev_xnvme_create", "params": params})
            );
            // The whole saved config carries it too.
            let cfg = serde_json::to_string(&env.mgr().config_json()).unwrap();
            assert!(cfg.contains("\"bdev_xnvme_create\""), "{cfg}");
            drop(b);
            let del = IO_URING.rpc(&env, "bdev_xnvme_delete", json!({"name": name}));
            assert_eq!(del, Ok(json!(true)));
            assert!(env.mgr().get(name).is_none());
            let r = IO_URING.rpc(&env, "bdev_xnvme_create", entry["params"].clone());
            assert_eq!(r, Ok(json!(name)));
            assert_eq!(
                bdevkit_xnvme::info(&env.mgr().get(name).unwrap()).unwrap()["io_mechanism"],
                mech
            );
        }
        // conserve_cpu is optional (false).
        let r = IO_URING.rpc(
            &env,
            "bdev_xnvme_create",
            json!({"name": "xd", "filename": f.path(), "io_mechanism": "libaio"}),
        );
        assert_eq!(r, Ok(json!("xd")));
        let b = env.mgr().get("xd").unwrap();
        assert_eq!(
            b.write_config_json().unwrap()["params"]["conserve_cpu"],
            json!(false)
        );
    }

    fn bdev_names(env: &TestEnv) -> Vec<String> {
        let mut v: Vec<String> = env
            .mgr()
            .bdevs()
            .iter()
            .map(|b| b.name().to_string())
            .collect();
        v.sort();
        v
    }

    /// Every create failure answers SPDK's code and sentence, then the
    /// cause, and registers nothing; a bad request is a decoding error.
    #[test]
    fn rpc_create_errors_register_nothing() {
        if IO_URING.skip() {
            return;
        }
        let f = IO_URING.temp_file("/dev/shm", 1 << 20);
        let odd = IO_URING.temp_file("/dev/shm", 1000);
        let dir = std::env::temp_dir().to_string_lossy().into_owned();
        let env = IO_URING.env("0x1");
        let create = |p: Value| IO_URING.rpc(&env, "bdev_xnvme_create", p);
        let failed = |cause: &str| {
            Err(RpcError::new(
                -32603,
                format!("Unable to create xNVMe bdev. {cause}"),
            ))
        };
        assert_eq!(
            create(create_params("ok", &f.path(), "io_uring", false)),
            Ok(json!("ok"))
        );
        let before = bdev_names(&env);
        let path = f.path();
        let cases = [
            (
                create_params("e1", "/nonexistent/bdevkit", "io_uring", false),
                "No such file or directory",
            ),
            (
                create_params("e2", "/nonexistent/bdevkit", "libaio", false),
                "No such file or directory",
            ),
            (
                create_params("e3", "/dev/ng9n9", "io_uring_cmd", false),
                "No such file or directory",
            ),
            (
                create_params("e4", &path, "spdk", false),
                "Invalid argument",
            ),
            (create_params("e5", &path, "", false), "Invalid argument"),
            // A regular file given to io_uring_cmd: not an NVMe char device.
            (
                create_params("e6", &path, "io_uring_cmd", false),
                "Invalid argument",
            ),
            // A char device that is not NVMe.
            (
                create_params("e7", "/dev/null", "io_uring_cmd", true),
                "Inappropriate ioctl for device",
            ),
            (
                create_params("e8", &dir, "io_uring", false),
                "Is a directory",
            ),
            (
                create_params("e9", &odd.path(), "libaio", false),
                "Invalid argument",
            ),
            (create_params("ok", &path, "libaio", false), "File exists"),
            (
                create_params("ok", "/dev/ng9n9", "io_uring_cmd", false),
                "File exists",
            ),
            (
                create_params("", &path, "io_uring", false),
                "Invalid argument",
            ),
        ];
        for (params, cause) in cases {
            assert_eq!(create(params.clone()), failed(cause), "{params}");
            assert_eq!(
                bdev_names(&env),
                before,
                "nothing registered after {params}"
            );
        }
        let decode = Err(RpcError::new(-32603, "spdk_json_decode_object failed"));
        assert_eq!(create(json!({"name": "d1", "filename": path})), decode);
        assert_eq!(
            create(json!({"name": "d2", "io_mechanism": "libaio"})),
            decode
        );
        let mut extra = create_params("d3", &path, "libaio", false);
        extra["block_size"] = json!(4096);
        assert_eq!(create(extra), decode);
        assert_eq!(bdev_names(&env), before);
        // The errno of each failure, from the library.
        let path2 = path.clone();
        env.run(move |mgr| async move {
            let errno = |p| bdevkit_xnvme::create(&mgr, p).unwrap_err().errno();
            assert_eq!(
                errno(XnvmeCreateParams::new("x", &path2, "spdk")),
                libc::EINVAL
            );
            assert_eq!(
                errno(XnvmeCreateParams::new("x", &path2, "io_uring_cmd")),
                libc::EINVAL
            );
            assert_eq!(
                errno(XnvmeCreateParams::new("x", "/dev/null", "io_uring_cmd")),
                libc::ENOTTY
            );
            assert_eq!(
                errno(XnvmeCreateParams::new("ok", &path2, "libaio")),
                libc::EEXIST
            );
        });
    }

    #[test]
    fn delete_of_unknown_bdevs() {
        let env = LIBAIO.env("0x1");
        let f = LIBAIO.temp_file("/dev/shm", 1 << 20);
        let no_such = Err(RpcError::new(-19, "No such device"));
        let del = |name: &str| LIBAIO.rpc(&env, "bdev_xnvme_delete", json!({"name": name}));
        assert_eq!(del("nope"), no_such);
        // A bdev of another module is not an xnvme bdev.
        let path = f.path();
        env.run(move |mgr| async move {
            bdevkit_aio::create(&mgr, bdevkit_aio::AioCreateParams::new("plain_aio", path))
                .unwrap();
        });
        assert_eq!(del("plain_aio"), no_such);
        assert!(env.mgr().get("plain_aio").is_some());
        assert_eq!(
            LIBAIO.rpc(&env, "bdev_xnvme_delete", json!({})),
            Err(RpcError::new(-32603, "spdk_json_decode_object failed"))
        );
    }

    /// Without the uring and aio modules their mechanisms are refused
    /// (`EINVAL`), and io_uring_cmd still checks its device.
    #[test]
    fn mechanisms_need_their_modules() {
        let f = LIBAIO.temp_file("/dev/shm", 1 << 20);
        let env = TestEnv::with_modules("0x1", &[bdevkit_xnvme::register]);
        let path = f.path();
        env.run(move |mgr| async move {
            for m in [Mechanism::IoUring, Mechanism::Libaio] {
                let e = bdevkit_xnvme::create(&mgr, XnvmeCreateParams::new("x", &path, m.name()))
                    .unwrap_err();
                assert_eq!(e.errno(), libc::EINVAL, "{m:?}: {e}");
                assert!(mgr.get("x").is_none());
            }
        });
        // And without the xnvme module itself.
        let env = TestEnv::with_modules("0x1", &[bdevkit_uring::register]);
        let path = f.path();
        env.run(move |mgr| async move {
            let e = bdevkit_xnvme::create(&mgr, XnvmeCreateParams::new("x", &path, "io_uring"))
                .unwrap_err();
            assert_eq!(e.errno(), libc::EINVAL, "{e}");
        });
    }

    #[test]
    fn mechanism_names() {
        for m in [Mechanism::IoUringCmd, Mechanism::IoUring, Mechanism::Libaio] {
            assert_eq!(Mechanism::parse(m.name()).unwrap(), m);
        }
        assert!(Mechanism::parse("IO_URING").is_err());
    }
}
