//! The uring module's options and block devices. Options are process-wide,
//! so these tests live in their own binary: SQPOLL (where the kernel allows
//! it) and IOPOLL requested, `bdev_uring_set_options` through its handler,
//! then a loop device with 4 KiB logical sectors over a tmpfs file (needs
//! root and the loop driver; skips with the reason otherwise): geometry
//! ioctls, block size rules, the IOPOLL probe falling back (loop devices do
//! not poll), and the conformance suite.

#[cfg(test)]
mod tests {
    use std::fs::{self, File};
    use std::path::PathBuf;
    use std::process::Command;

    use std::time::Duration;

    use bdevkit::bdev::BdevManager;
    use bdevkit_jsonrpc::{MethodRegistry, Responder, RpcError};
    use bdevkit_test::{conformance, TestEnv};
    use bdevkit_uring::UringCreateParams;
    use serde_json::{json, Value};

    /// A loop device over a fresh file; detached and removed on drop.
    struct Loop {
        dev: String,
        file: PathBuf,
    }

    impl Loop {
        fn new(size: u64, sector: u32) -> Result<Loop, String> {
            let file = PathBuf::from(format!(
                "/dev/shm/bdevkit-uring-loop-{}",
                std::process::id()
            ));
            File::create(&file)
                .and_then(|f| f.set_len(size))
                .map_err(|e| e.to_string())?;
            let out = Command::new("losetup")
                .args(["-f", "--show", "--sector-size", &sector.to_string()])
                .arg(&file)
                .output()
                .map_err(|e| format!("losetup: {e}"))?;
            if !out.status.success() {
                let _ = fs::remove_file(&file);
                return Err(format!(
                    "losetup: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
            Ok(Loop { dev, file })
        }
    }

    impl Drop for Loop {
        fn drop(&mut self) {
            let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
            let _ = fs::remove_file(&self.file);
        }
    }

    fn delete_fn(mgr: &BdevManager, name: &str, done: Box<dyn FnOnce(bdevkit::Result<()>) + Send>) {
        let n = name.to_string();
        bdevkit_uring::delete(mgr, name, move |r| {
            done(r.map_err(|_| bdevkit::Error::NotFound(n)));
        });
    }

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

    /// One test (options are process-wide): set options over RPC, run a
    /// tmpfs bdev on an SQPOLL ring, then the loop device.
    #[test]
    fn options_sqpoll_iopoll_and_loop_device() {
        if let Err(e) = bdevkit_uring::available() {
            println!("skipped: io_uring not available: {e}");
            return;
        }
        let env = TestEnv::with_modules("0x1", &[bdevkit_uring::register]);
        assert_eq!(
            rpc(&env, "bdev_uring_set_options", json!({"sq_entries": 100})),
            Err(RpcError::new(-22, "Invalid argument"))
        );
        assert_eq!(
            rpc(&env, "bdev_uring_set_options", json!({"bogus": 1})),
            Err(RpcError::new(-32603, "spdk_json_decode_object failed"))
        );
        assert_eq!(
            rpc(
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
        let shm = PathBuf::from(format!("/dev/shm/bdevkit-uring-sq-{}", std::process::id()));
        File::create(&shm).unwrap().set_len(1 << 20).unwrap();
        let shm_path = shm.to_string_lossy().into_owned();
        env.run(move |mgr| async move {
            let b = bdevkit_uring::create(&mgr, UringCreateParams::new("sq", shm_path)).unwrap();
            assert!(!b.ops_as::<bdevkit_uring::UringBdev>().unwrap().is_polled());
            conformance::run(&mgr, "sq", Some(delete_fn)).await;
        });
        let _ = fs::remove_file(&shm);

        let lo = match Loop::new(8 << 20, 4096) {
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
            conformance::run(&mgr, "lo", Some(delete_fn)).await;
        });
    }
}
