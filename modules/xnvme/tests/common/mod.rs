//! The xnvme module's `io_uring` and `libaio` mechanisms as the shared
//! kernel-file tests see them (`bdevkit_test::kernel`): bdevs created
//! through `bdevkit_xnvme::create`, in a manager with the uring, aio and
//! xnvme modules registered. Every test skips, with the reason, where
//! io_uring cannot be used (the libaio one always runs).

use bdevkit::bdev::{Bdev, BdevManager};
use bdevkit_test::kernel::Backend;
use bdevkit_xnvme::XnvmeCreateParams;

/// xnvme bdevs over the `io_uring` mechanism.
pub const IO_URING: Backend = Backend {
    available: bdevkit_uring::available,
    ..Backend::new("xnvme", register_all, register_rpcs, create_io_uring)
};

/// xnvme bdevs over the `libaio` mechanism.
pub const LIBAIO: Backend = Backend::new("xnvme", register_all, register_rpcs, create_libaio);

/// The modules an xnvme bdev over io_uring or libaio needs.
pub fn register_all(mgr: &BdevManager) {
    bdevkit_uring::register(mgr);
    bdevkit_aio::register(mgr);
    bdevkit_xnvme::register(mgr);
}

/// The xnvme RPCs.
pub fn register_rpcs(
    reg: &bdevkit_jsonrpc::MethodRegistry,
    mgr: &BdevManager,
) -> Result<(), bdevkit_jsonrpc::Error> {
    bdevkit_xnvme::rpc::register_rpcs(reg, mgr)
}

fn create(mgr: &BdevManager, name: &str, path: &str, mechanism: &str) -> Bdev {
    bdevkit_xnvme::create(mgr, XnvmeCreateParams::new(name, path, mechanism))
        .unwrap_or_else(|e| panic!("create {name} ({mechanism}): {e}"))
}

/// `bdev_xnvme_create` has no block size: the file's (512 for a regular
/// file) is used whatever the scenario asks for.
fn create_io_uring(mgr: &BdevManager, name: &str, path: &str, _block_size: Option<u32>) -> Bdev {
    create(mgr, name, path, "io_uring")
}

fn create_libaio(mgr: &BdevManager, name: &str, path: &str, _block_size: Option<u32>) -> Bdev {
    create(mgr, name, path, "libaio")
}
