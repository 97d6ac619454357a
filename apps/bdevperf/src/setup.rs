//! The bdev used when no config is given.

use anyhow::{Context, Result};
use bdevkit::bdev::BdevManager;
use bdevkit::thread::ThreadHandle;

/// Name of the default bdev.
pub const DEFAULT_BDEV: &str = "Malloc0";
/// Its size.
pub const DEFAULT_SIZE_MIB: u64 = 256;
const DEFAULT_BLOCK_SIZE: u32 = 4096;

/// Creates the default bdev on the app thread.
pub fn default_bdev(app: &ThreadHandle, mgr: &BdevManager) -> Result<String> {
    let mgr = mgr.clone();
    app.run_sync(move || {
        let blocks = DEFAULT_SIZE_MIB * 1024 * 1024 / u64::from(DEFAULT_BLOCK_SIZE);
        bdevkit_malloc::create(
            &mgr,
            bdevkit_malloc::MallocCreateParams::new(DEFAULT_BDEV, DEFAULT_BLOCK_SIZE, blocks),
        )
        .map(|b| b.name().to_string())
    })?
    .context("create the default malloc bdev")
}
