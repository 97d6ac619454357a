//! The aio module on a block device: a loop device with 4 KiB logical
//! sectors over a tmpfs file (needs root and the loop driver; skips with
//! the reason otherwise). Checks the geometry ioctls, the block size
//! rules, `nowait`, and runs the conformance suite.

#[cfg(test)]
mod tests {
    use std::fs::{self, File};
    use std::path::PathBuf;
    use std::process::Command;

    use bdevkit::bdev::BdevManager;
    use bdevkit_aio::AioCreateParams;
    use bdevkit_test::{conformance, TestEnv};

    /// A loop device over a fresh file; detached and removed on drop.
    struct Loop {
        dev: String,
        file: PathBuf,
    }

    impl Loop {
        fn new(size: u64, sector: u32) -> Result<Loop, String> {
            let file = PathBuf::from(format!("/dev/shm/bdevkit-aio-loop-{}", std::process::id()));
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
        bdevkit_aio::delete(mgr, name, move |r| {
            done(r.map_err(|_| bdevkit::Error::NotFound(n)));
        });
    }

    #[test]
    fn loop_device_with_4k_sectors() {
        let lo = match Loop::new(8 << 20, 4096) {
            Ok(l) => l,
            Err(e) => {
                println!("skipped: no loop device: {e}");
                return;
            }
        };
        let env = TestEnv::with_modules("0x1", &[bdevkit_aio::register]);
        let dev = lo.dev.clone();
        env.run(move |mgr| async move {
            // Smaller than the device's logical block size: refused.
            let mut p = AioCreateParams::new("lo_small", dev.clone());
            p.block_size = Some(512);
            assert_eq!(
                bdevkit_aio::create(&mgr, p).unwrap_err().errno(),
                libc::EINVAL
            );
            // Detected from BLKSSZGET / BLKGETSIZE64; nowait is allowed on a
            // block device (EAGAIN completions are retried without it).
            let mut p = AioCreateParams::new("lo", dev);
            p.nowait = Some(true);
            let b = bdevkit_aio::create(&mgr, p).unwrap();
            assert_eq!(b.block_size(), 4096);
            assert_eq!(b.num_blocks(), 2048);
            assert_eq!(b.props().required_alignment, 12);
            assert_eq!(b.dump_info_json()["aio"]["nowait"], true);
            conformance::run(&mgr, "lo", Some(delete_fn)).await;
        });
    }
}
