//! The aio module on a block device: a loop device with 4 KiB logical
//! sectors over a tmpfs file (needs root and the loop driver; skips with
//! the reason otherwise). Checks the geometry ioctls, the block size
//! rules, `nowait`, and runs the conformance suite.

mod common;

#[cfg(test)]
mod tests {
    use bdevkit_aio::AioCreateParams;
    use bdevkit_test::conformance;
    use bdevkit_test::kernel::LoopDevice;

    use super::common::AIO;

    #[test]
    fn loop_device_with_4k_sectors() {
        let lo = match LoopDevice::new("aio", 8 << 20, 4096) {
            Ok(l) => l,
            Err(e) => {
                println!("skipped: no loop device: {e}");
                return;
            }
        };
        let env = AIO.env("0x1");
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
            conformance::run(&mgr, "lo", Some(AIO.delete)).await;
        });
    }
}
