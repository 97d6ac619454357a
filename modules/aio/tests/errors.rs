//! A real kernel error reaches the I/O: a sparse file on a 64 KiB tmpfs
//! (mounted for the test; needs root, skips with the reason otherwise)
//! runs out of space, and writes past that fail with `ENOSPC` in
//! `IoStatus::Errno` while reads and the bdev itself keep working.

#[cfg(test)]
mod tests {
    use std::fs::{self, File};
    use std::path::PathBuf;
    use std::process::Command;

    use bdevkit::bdev::IoStatus;
    use bdevkit::dma::DmaBuf;
    use bdevkit_aio::AioCreateParams;
    use bdevkit_test::{conformance, TestEnv};

    /// A 64 KiB tmpfs mounted on a fresh directory; unmounted on drop.
    struct SmallFs(PathBuf);

    impl SmallFs {
        fn new() -> Result<SmallFs, String> {
            let dir =
                std::env::temp_dir().join(format!("bdevkit-aio-enospc-{}", std::process::id()));
            fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let out = Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
                .arg(&dir)
                .output()
                .map_err(|e| format!("mount: {e}"))?;
            if !out.status.success() {
                let _ = fs::remove_dir(&dir);
                return Err(format!(
                    "mount: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            Ok(SmallFs(dir))
        }
    }

    impl Drop for SmallFs {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
            let _ = fs::remove_dir(&self.0);
        }
    }

    #[test]
    fn enospc_reaches_the_io_status() {
        let small = match SmallFs::new() {
            Ok(s) => s,
            Err(e) => {
                println!("skipped: cannot mount a small tmpfs: {e}");
                return;
            }
        };
        let file = small.0.join("disk");
        // 1 MiB of address space, 64 KiB of room.
        File::create(&file).unwrap().set_len(1 << 20).unwrap();
        let env = TestEnv::with_modules("0x1", &[bdevkit_aio::register]);
        let path = file.to_string_lossy().into_owned();
        env.run(move |mgr| async move {
            bdevkit_aio::create(&mgr, AioCreateParams::new("full", path)).unwrap();
            let desc = mgr.open("full", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let mut status = IoStatus::Success;
            for i in 0..32u64 {
                if let Err(e) = ch
                    .write(i * 64, 64, conformance::pattern(32 << 10, i))
                    .await
                {
                    status = match e.error {
                        bdevkit::Error::Io(s) => s,
                        other => panic!("unexpected {other:?}"),
                    };
                    break;
                }
            }
            assert_eq!(status, IoStatus::Errno(libc::ENOSPC));
            // The bdev still serves what it can.
            ch.read(0, 64, DmaBuf::new(32 << 10).unwrap())
                .await
                .unwrap();
            ch.flush(0, 1).await.unwrap();
        });
    }
}
