//! The uring module end to end: conformance and verify on tmpfs and on the
//! root disk, durability of flush, the RPC handlers' errors, delete with
//! I/O in flight, rescan, end of file inside the bdev. Every test first
//! checks that io_uring is usable here and skips with the reason if not.

#[cfg(test)]
mod tests {
    use std::fs::{self, File, OpenOptions};
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use bdevkit::bdev::{BdevEvent, BdevManager, IoStatus, IoType};
    use bdevkit::dma::DmaBuf;
    use bdevkit_jsonrpc::{MethodRegistry, Responder, RpcError};
    use bdevkit_test::{conformance, sleep_ms, verify, TestEnv};
    use bdevkit_uring::UringCreateParams;
    use serde_json::{json, Value};

    static NEXT: AtomicU32 = AtomicU32::new(0);

    /// Skips the test (with the reason) when io_uring cannot be used here.
    macro_rules! require_uring {
        () => {
            if let Err(e) = bdevkit_uring::available() {
                println!("skipped: io_uring not available: {e}");
                return;
            }
        };
    }

    /// A zero-filled file of `size` bytes in `dir`, removed on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(dir: &str, size: u64) -> TempFile {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let p = PathBuf::from(dir).join(format!("bdevkit-uring-{}-{n}", std::process::id()));
            let f = File::create(&p).unwrap();
            f.set_len(size).unwrap();
            TempFile(p)
        }
        fn path(&self) -> String {
            self.0.to_string_lossy().into_owned()
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = fs::remove_file(&self.0);
        }
    }

    fn env() -> TestEnv {
        TestEnv::with_modules("0x1", &[bdevkit_uring::register])
    }

    fn delete_fn(mgr: &BdevManager, name: &str, done: Box<dyn FnOnce(bdevkit::Result<()>) + Send>) {
        let n = name.to_string();
        bdevkit_uring::delete(mgr, name, move |r| {
            done(r.map_err(|_| bdevkit::Error::NotFound(n)));
        });
    }

    /// Calls an RPC handler in-process on the app thread; returns its answer.
    fn rpc(env: &TestEnv, method: &str, params: Value) -> Result<Value, RpcError> {
        let reg = MethodRegistry::new();
        bdevkit_uring::rpc::register_rpcs(&reg, env.mgr()).unwrap();
        reg.set_state(bdevkit_jsonrpc::RUNTIME);
        let (resp, rx) = Responder::channel();
        let method = method.to_string();
        env.runtime()
            .app_thread()
            .send_msg(move || reg.dispatch(&method, Some(params), resp))
            .unwrap();
        rx.recv_timeout(Duration::from_secs(30)).unwrap()
    }

    #[test]
    fn conformance_on_tmpfs() {
        require_uring!();
        let f = TempFile::new("/dev/shm", 4 << 20);
        let env = env();
        let path = f.path();
        env.run(move |mgr| async move {
            let p = UringCreateParams::new("u_shm", path);
            let b = bdevkit_uring::create(&mgr, p).unwrap();
            assert_eq!(b.product_name(), "URING bdev");
            assert!(b.supports(IoType::Flush) && !b.supports(IoType::Unmap));
            let a = b.ops_as::<bdevkit_uring::UringBdev>().unwrap();
            assert!(a.is_direct(), "tmpfs takes O_DIRECT on this kernel");
            conformance::run(&mgr, "u_shm", Some(delete_fn)).await;
        });
    }

    #[test]
    fn conformance_on_root_disk() {
        require_uring!();
        let f = TempFile::new("/var/tmp", 4 << 20);
        let env = env();
        let path = f.path();
        env.run(move |mgr| async move {
            let p = UringCreateParams::new("u_disk", path);
            bdevkit_uring::create(&mgr, p).unwrap();
            conformance::run(&mgr, "u_disk", Some(delete_fn)).await;
        });
    }

    #[test]
    fn verify_on_two_cores() {
        require_uring!();
        let f = TempFile::new("/dev/shm", 8 << 20);
        let env = TestEnv::with_modules("0x3", &[bdevkit_uring::register]);
        let path = f.path();
        env.run(move |mgr| async move {
            let mut p = UringCreateParams::new("u_v", path);
            p.block_size = Some(4096);
            bdevkit_uring::create(&mgr, p).unwrap();
        });
        let r = verify::run(&env, "u_v", 2, 16, 40);
        assert_eq!(r.mismatches, 0);
        assert_eq!(r.errors, 0);
        assert_eq!(r.verified, 2 * 16 * 40);
    }

    #[test]
    fn flushed_data_is_in_the_file() {
        require_uring!();
        let f = TempFile::new("/var/tmp", 1 << 20);
        let env = env();
        let path = f.path();
        let expect = env.run(move |mgr| async move {
            bdevkit_uring::create(&mgr, UringCreateParams::new("u_dur", path)).unwrap();
            let desc = mgr.open("u_dur", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let data = conformance::pattern(64 * 512, 42);
            let expect = data.to_vec();
            ch.write(100, 64, data).await.unwrap();
            ch.flush(0, 2048).await.unwrap();
            expect
        });
        let mut got = vec![0u8; expect.len()];
        let mut file = File::open(&f.0).unwrap();
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(100 * 512)).unwrap();
        file.read_exact(&mut got).unwrap();
        assert_eq!(got, expect, "flushed data read through a plain file handle");
    }

    #[test]
    fn rpc_create_result_info_and_config() {
        require_uring!();
        let f = TempFile::new("/dev/shm", 1 << 20);
        let env = env();
        // What `spdk-rpc bdev_uring_create FILE u_rpc` sends.
        let r = rpc(
            &env,
            "bdev_uring_create",
            json!({"filename": f.path(), "name": "u_rpc"}),
        );
        assert_eq!(r, Ok(json!("u_rpc")));
        let b = env.mgr().get("u_rpc").unwrap();
        assert_eq!(b.block_size(), 512);
        assert_eq!(b.num_blocks(), 2048);
        assert_eq!(b.dump_info_json(), json!({"uring": {"filename": f.path()}}));
        let cfg = b.write_config_json().unwrap();
        assert_eq!(cfg["method"], "bdev_uring_create");
        let keys: Vec<&str> = cfg["params"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["name", "block_size", "filename", "uuid"]);
        assert_eq!(cfg["params"]["uuid"], json!(b.uuid().to_string()));
        // The saved entry recreates the bdev through the same handler.
        assert_eq!(
            rpc(&env, "bdev_uring_delete", json!({"name": "u_rpc"})),
            Ok(json!(true))
        );
        assert!(env.mgr().get("u_rpc").is_none());
        assert_eq!(
            rpc(&env, "bdev_uring_create", cfg["params"].clone()),
            Ok(json!("u_rpc"))
        );
        assert_eq!(env.mgr().get("u_rpc").unwrap().uuid(), b.uuid());
        let r = rpc(
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
        require_uring!();
        let f = TempFile::new("/dev/shm", 1 << 20);
        let odd = TempFile::new("/dev/shm", 1000);
        let dir = std::env::temp_dir();
        let env = env();
        let create = |params: Value| rpc(&env, "bdev_uring_create", params);
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
            rpc(&env, "bdev_uring_delete", json!({"name": "nope"})),
            Err(RpcError::new(-19, "No such device"))
        );
        assert_eq!(
            rpc(&env, "bdev_uring_rescan", json!({"name": "nope"})),
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

    const CHILD_ENV: &str = "BDEVKIT_URING_NOPERM_FILE";

    /// Root ignores file mode bits, so the permission check runs in a child
    /// process (this test binary again) started as uid/gid 65534, against a
    /// root-owned 0600 file: open() fails there with EACCES exactly as for
    /// an unprivileged daemon. The RPC answers SPDK's fixed -32603; the
    /// Rust API reports EACCES.
    #[test]
    fn rpc_no_permission() {
        require_uring!();
        if let Ok(path) = std::env::var(CHILD_ENV) {
            let env = env();
            let r = rpc(
                &env,
                "bdev_uring_create",
                json!({"filename": path, "name": "np"}),
            );
            assert_eq!(
                r,
                Err(RpcError::new(-32603, "Unable to create URING bdev."))
            );
            let errno = env.run(move |mgr| async move {
                bdevkit_uring::create(&mgr, UringCreateParams::new("np", path))
                    .unwrap_err()
                    .errno()
            });
            assert_eq!(errno, libc::EACCES);
            println!("NOPERM-CHILD-OK");
            return;
        }
        let f = TempFile::new("/dev/shm", 1 << 20);
        fs::set_permissions(&f.0, fs::Permissions::from_mode(0o600)).unwrap();
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args(["--exact", "tests::rpc_no_permission", "--nocapture"])
            .env(CHILD_ENV, f.path())
            .uid(65534)
            .gid(65534)
            .output();
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                println!("skipped: cannot start the test binary as uid 65534: {e}");
                return;
            }
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && (stdout.contains("NOPERM-CHILD-OK") || stdout.contains("skipped")),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn delete_while_io_runs() {
        require_uring!();
        let f = TempFile::new("/var/tmp", 8 << 20);
        let env = env();
        let path = f.path();
        env.run(move |mgr| async move {
            bdevkit_uring::create(&mgr, UringCreateParams::new("u_del", path)).unwrap();
            let removed = Arc::new(AtomicU32::new(0));
            let r2 = Arc::clone(&removed);
            let desc = mgr
                .open("u_del", true, move |e| {
                    if e == BdevEvent::Remove {
                        r2.fetch_add(1, Ordering::SeqCst);
                    }
                })
                .unwrap();
            let ch = desc.get_io_channel().unwrap();
            let finished = Arc::new(AtomicU32::new(0));
            for i in 0..64u64 {
                let mut io = ch.alloc_io_async().await;
                let fin = Arc::clone(&finished);
                io.write(i * 128, 128, conformance::pattern(128 * 512, i))
                    .on_done_closure(move |io| {
                        assert_ne!(io.status(), IoStatus::Pending);
                        fin.fetch_add(1, Ordering::SeqCst);
                    });
                ch.submit(io).unwrap();
            }
            let (tx, rx) = std::sync::mpsc::channel();
            bdevkit_uring::delete(&mgr, "u_del", move |r| tx.send(r.is_ok()).unwrap());
            assert!(bdevkit_test::env::wait_for(10, || removed.load(Ordering::SeqCst) > 0).await);
            drop(ch);
            drop(desc);
            let mut deleted = None;
            for _ in 0..10_000 {
                if let Ok(ok) = rx.try_recv() {
                    deleted = Some(ok);
                    break;
                }
                sleep_ms(1).await;
            }
            assert_eq!(deleted, Some(true), "delete finished");
            assert_eq!(
                finished.load(Ordering::SeqCst),
                64,
                "every I/O completed before destruct"
            );
            assert!(mgr.get("u_del").is_none());
        });
    }

    #[test]
    fn rescan_after_growing_and_emptying_the_file() {
        require_uring!();
        let f = TempFile::new("/dev/shm", 1 << 20);
        let env = env();
        let resized = Arc::new(AtomicU32::new(0));
        let r2 = Arc::clone(&resized);
        let path = f.path();
        let desc = env.run(move |mgr| async move {
            bdevkit_uring::create(&mgr, UringCreateParams::new("u_rs", path)).unwrap();
            mgr.open("u_rs", false, move |e| {
                if e == BdevEvent::Resize {
                    r2.fetch_add(1, Ordering::SeqCst);
                }
            })
            .unwrap()
        });
        OpenOptions::new()
            .write(true)
            .open(&f.0)
            .unwrap()
            .set_len(3 << 20)
            .unwrap();
        assert_eq!(
            rpc(&env, "bdev_uring_rescan", json!({"name": "u_rs"})),
            Ok(json!(true))
        );
        assert_eq!(env.mgr().get("u_rs").unwrap().num_blocks(), 6144);
        let mgr = env.mgr().clone();
        let r3 = Arc::clone(&resized);
        assert!(env.run(move |_| async move {
            bdevkit_test::env::wait_for(10, || r3.load(Ordering::SeqCst) == 1).await
        }));
        // Shrinking under an open descriptor is refused (SPDK: -EBUSY).
        OpenOptions::new()
            .write(true)
            .open(&f.0)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        assert_eq!(
            rpc(&env, "bdev_uring_rescan", json!({"name": "u_rs"})),
            Err(RpcError::new(-16, "Device or resource busy"))
        );
        drop(desc);
        // Size 0 hot-removes the bdev.
        OpenOptions::new()
            .write(true)
            .open(&f.0)
            .unwrap()
            .set_len(0)
            .unwrap();
        assert_eq!(
            rpc(&env, "bdev_uring_rescan", json!({"name": "u_rs"})),
            Ok(json!(true))
        );
        assert!(env.run(move |_| async move {
            bdevkit_test::env::wait_for(10, || mgr.get("u_rs").is_none()).await
        }));
    }

    /// The file shrinks under the bdev: a read that straddles the new end
    /// gets a short transfer, is resubmitted for the rest, hits end of file
    /// and fails cleanly with EIO; I/O inside the file still works.
    #[test]
    fn read_past_end_of_shrunk_file_fails_cleanly() {
        require_uring!();
        let f = TempFile::new("/dev/shm", 1 << 20);
        let env = env();
        let path = f.path();
        let p2 = f.path();
        env.run(move |mgr| async move {
            bdevkit_uring::create(&mgr, UringCreateParams::new("u_eof", path)).unwrap();
            let desc = mgr.open("u_eof", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            OpenOptions::new()
                .write(true)
                .open(&p2)
                .unwrap()
                .set_len((1 << 20) - 1536)
                .unwrap();
            let e = ch
                .read(2044, 4, DmaBuf::new(2048).unwrap())
                .await
                .unwrap_err();
            assert!(
                matches!(e.error, bdevkit::Error::Io(IoStatus::Errno(libc::EIO))),
                "{e:?}"
            );
            ch.read(0, 8, DmaBuf::new(4096).unwrap()).await.unwrap();
        });
    }

    #[test]
    fn file_unlinked_under_the_bdev_keeps_working() {
        require_uring!();
        let f = TempFile::new("/dev/shm", 1 << 20);
        let env = env();
        let path = f.path();
        env.run(move |mgr| async move {
            bdevkit_uring::create(&mgr, UringCreateParams::new("u_unl", path.clone())).unwrap();
            fs::remove_file(&path).unwrap();
            let desc = mgr.open("u_unl", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let buf = ch.write(5, 2, conformance::pattern(1024, 3)).await.unwrap();
            let got = ch.read(5, 2, DmaBuf::new(1024).unwrap()).await.unwrap();
            assert_eq!(got[..], buf[..]);
            ch.flush(0, 1).await.unwrap();
        });
    }
}
