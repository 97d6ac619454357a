//! The aio module end to end: conformance and verify on tmpfs and on the
//! root disk, durability of flush, the RPC handlers' errors, delete with
//! I/O in flight, read-only bdevs, rescan, end of file inside the bdev,
//! `ENOSPC`, and a block device (a loop device with 4 KiB logical sectors
//! over a tmpfs file; needs root and the loop driver, skips with the
//! reason otherwise).
//! What every kernel-file module does alike runs from
//! `bdevkit_test::kernel`; the aio-specific checks are here.

mod common;

#[cfg(test)]
mod tests {
    use std::fs;

    use bdevkit::bdev::module::{Bdev, BdevManager, IoType};
    use bdevkit::dma::DmaBuf;
    use bdevkit_aio::{AioCreateParams, KfileBdev as _};
    use bdevkit_jsonrpc::RpcError;
    use bdevkit_test::kernel::{self, Backend};
    use serde_json::{json, Value};

    use super::common::AIO;

    bdevkit_test::kernel_tests!(AIO, on_tmpfs);

    /// The module's own check of a fresh bdev on tmpfs.
    fn on_tmpfs(b: &Bdev) {
        assert_eq!(b.product_name(), "AIO disk");
        assert!(b.supports(IoType::Unmap) && b.supports(IoType::Flush));
        let a = b.ops_as::<bdevkit_aio::AioBdev>().unwrap();
        assert!(a.is_direct(), "tmpfs takes O_DIRECT on this kernel");
    }

    #[test]
    fn rpc_create_result_info_and_config() {
        let f = AIO.temp_file("/dev/shm", 1 << 20);
        let env = AIO.env("0x1");
        let b = AIO.rpc_create(
            &env,
            "aio_rpc",
            &f.path(),
            json!({"readonly": false, "fallocate": true, "nowait": false}),
        );
        assert_eq!((b.block_size(), b.num_blocks()), (512, 2048));
        assert_eq!(
            b.dump_info_json(),
            json!({"aio": {"filename": f.path(), "block_size_override": false,
                   "readonly": false, "fallocate": true, "nowait": false}})
        );
        // The saved entry recreates the bdev through the same handler.
        AIO.recreate_from_config(
            &env,
            "aio_rpc",
            &[
                "name",
                "filename",
                "readonly",
                "fallocate",
                "uuid",
                "nowait",
            ],
        );
        // A block size override is saved and reported.
        let b = AIO.rpc_create(&env, "aio_rpc4k", &f.path(), json!({"block_size": 4096}));
        assert_eq!((b.block_size(), b.num_blocks()), (4096, 256));
        assert_eq!(
            b.dump_info_json()["aio"]["block_size_override"],
            json!(true)
        );
        assert_eq!(
            b.write_config_json().unwrap()["params"]["block_size"],
            json!(4096)
        );
    }

    #[test]
    fn rpc_errors() {
        let f = AIO.temp_file("/dev/shm", 1 << 20);
        let odd = AIO.temp_file("/dev/shm", 1000);
        let dir = std::env::temp_dir();
        let env = AIO.env("0x1");
        let create = |params: Value| AIO.rpc(&env, "bdev_aio_create", params);
        assert_eq!(
            create(json!({"filename": "/nonexistent/bdevkit", "name": "e1"})),
            Err(RpcError::new(-2, "No such file or directory"))
        );
        assert_eq!(
            create(json!({"filename": dir.to_string_lossy(), "name": "e2"})),
            Err(RpcError::new(-21, "Is a directory"))
        );
        assert_eq!(
            create(json!({"filename": dir.to_string_lossy(), "name": "e2", "readonly": true})),
            Err(RpcError::new(-21, "Is a directory"))
        );
        assert_eq!(
            create(json!({"filename": odd.path(), "name": "e3"})),
            Err(RpcError::new(-22, "Invalid argument"))
        );
        assert_eq!(
            create(json!({"filename": f.path(), "name": "e4", "block_size": 1000})),
            Err(RpcError::new(-22, "Invalid argument"))
        );
        assert_eq!(
            create(json!({"filename": f.path(), "name": "e5", "nowait": true})),
            Err(RpcError::new(-95, "Operation not supported"))
        );
        assert_eq!(
            create(json!({"filename": f.path(), "name": "e6"})),
            Ok(json!("e6"))
        );
        assert_eq!(
            create(json!({"filename": f.path(), "name": "e6"})),
            Err(RpcError::new(-17, "File exists"))
        );
        assert_eq!(
            create(json!({"filename": f.path()})),
            Err(RpcError::new(-32603, "spdk_json_decode_object failed"))
        );
        assert_eq!(
            create(json!({"filename": f.path(), "name": "e7", "bogus": 1})),
            Err(RpcError::new(-32603, "spdk_json_decode_object failed"))
        );
    }

    /// Opening a file the daemon may not read answers SPDK's errno style:
    /// -13 "Permission denied".
    #[test]
    fn rpc_no_permission() {
        let denied = RpcError::new(-13, "Permission denied");
        kernel::create_without_permission(&AIO, "tests::rpc_no_permission", denied);
    }

    #[test]
    fn readonly_bdev_refuses_writes() {
        let f = AIO.temp_file("/dev/shm", 1 << 20);
        fs::write(&f.0, vec![7u8; 1 << 20]).unwrap();
        let env = AIO.env("0x1");
        let path = f.path();
        env.run(move |mgr| async move {
            let mut p = AioCreateParams::new("aio_ro", path);
            p.readonly = Some(true);
            p.fallocate = Some(true);
            let b = bdevkit_aio::create(&mgr, p).unwrap();
            assert!(!b.supports(IoType::Write));
            assert!(!b.supports(IoType::WriteZeroes));
            assert!(!b.supports(IoType::Unmap));
            let desc = mgr.open("aio_ro", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let e = ch.write(0, 1, DmaBuf::new(512).unwrap()).await.unwrap_err();
            assert!(
                matches!(e.error, bdevkit::Error::NotSupported(IoType::Write)),
                "{e:?}"
            );
            let got = ch.read(0, 1, DmaBuf::new(512).unwrap()).await.unwrap();
            assert!(got.iter().all(|b| *b == 7));
            ch.flush(0, 1).await.unwrap();
        });
    }

    /// A block device, created with `nowait` (allowed there: `EAGAIN`
    /// completions are retried without it) and without `fallocate` (a
    /// loop device refuses punching holes).
    #[test]
    fn loop_device_with_4k_sectors() {
        fn create_nowait(mgr: &BdevManager, name: &str, path: &str, bs: Option<u32>) -> Bdev {
            let mut p = AioCreateParams::new(name, path);
            p.block_size = bs;
            p.nowait = Some(true);
            bdevkit_aio::create(mgr, p).unwrap_or_else(|e| panic!("create {name}: {e}"))
        }
        let nowait = Backend {
            create: create_nowait,
            ..AIO
        };
        kernel::loop_device_with_4k_sectors(&nowait, |b| {
            assert_eq!(b.dump_info_json()["aio"]["nowait"], true);
        });
    }
}
