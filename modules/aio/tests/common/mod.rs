//! The aio module as the shared kernel-file tests see it
//! (`bdevkit_test::kernel`). Bdevs are created with `fallocate` on, so the
//! conformance suite also covers unmap and write zeroes.

use bdevkit::bdev::module::{Bdev, BdevManager};
use bdevkit_aio::AioCreateParams;
use bdevkit_test::kernel::Backend;

/// The aio module under test.
pub const AIO: Backend = Backend::new(
    "aio",
    bdevkit_aio::register,
    bdevkit_aio::rpc::register_rpcs,
    create,
);

fn create(mgr: &BdevManager, name: &str, path: &str, block_size: Option<u32>) -> Bdev {
    let mut p = AioCreateParams::new(name, path);
    p.block_size = block_size;
    p.fallocate = Some(true);
    bdevkit_aio::create(mgr, p).unwrap_or_else(|e| panic!("create {name}: {e}"))
}
