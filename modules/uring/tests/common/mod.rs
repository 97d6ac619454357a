//! The uring module as the shared kernel-file tests see it
//! (`bdevkit_test::kernel`). Every test skips, with the reason, where
//! io_uring cannot be used.

use bdevkit::bdev::module::{Bdev, BdevManager};
use bdevkit_test::kernel::Backend;
use bdevkit_uring::UringCreateParams;

/// The uring module under test.
pub const URING: Backend = Backend {
    available: bdevkit_uring::available,
    ..Backend::new(
        "uring",
        bdevkit_uring::register,
        bdevkit_uring::rpc::register_rpcs,
        create,
    )
};

fn create(mgr: &BdevManager, name: &str, path: &str, block_size: Option<u32>) -> Bdev {
    let mut p = UringCreateParams::new(name, path);
    p.block_size = block_size;
    bdevkit_uring::create(mgr, p).unwrap_or_else(|e| panic!("create {name}: {e}"))
}
