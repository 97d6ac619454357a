//! The `split` virtual bdev module: cuts one base bdev into `split_count`
//! parts `<base>p0`, `<base>p1`, ... of equal size, each a bdev of its
//! own. A part translates offsets (part block `n` is base block
//! `offset_blocks + n`) and forwards the I/O; the bdev layer's range checks
//! keep every I/O inside its part, so none reaches a neighbour.
//!
//! The model is passthru's (see `modules/passthru` and
//! `doc/writing-a-module.md`): configurations live in the module and attach
//! through examine; the base is opened once and claimed `exclusive_write`
//! for all parts; removing the base unregisters every part, and the base is
//! closed (on the thread that opened it) once the last part is destructed.
//!
//! Sizes follow SPDK: with `split_size_mb` each part is that many MiB (a
//! whole number of blocks, else `EINVAL`) and the count is clamped to what
//! fits; without it the base is divided by `split_count` (the remainder is
//! unused).
//!
//! RPCs: `bdev_split_create`, `bdev_split_delete` (see [`rpc`]).
//! `save_config` emits one `bdev_split_create` per configuration.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod bdev;
pub mod rpc;

use bdevkit::bdev::module::{BdevManager, Result};

pub use bdev::{SplitBdev, SplitChannel, SplitModule};
pub use rpc::{SplitCreateParams, SplitDeleteParams};

/// Module name (also the RPC infix).
pub const MODULE: &str = "split";
/// `product_name` of split bdevs.
pub const PRODUCT_NAME: &str = "Split Disk";

/// Adds the split module to `mgr`.
pub fn register(mgr: &BdevManager) {
    SplitModule::register(mgr);
}

/// What an app links of this module: [`register`], the RPC methods of
/// [`rpc`] and its log flags (`log_set_flag`).
pub const MODULE_DEF: bdevkit::bdev::module::ModuleDef<
    bdevkit_jsonrpc::MethodRegistry,
    bdevkit_jsonrpc::Error,
> = bdevkit::bdev::module::ModuleDef {
    name: MODULE,
    register,
    register_rpcs: rpc::register_rpcs,
    log_flags: &[bdevkit::bdev::module::LogFlag {
        name: "vbdev_split",
        targets: &["bdevkit_split"],
        aliases: &["bdev_split"],
    }],
};

/// `bdev_split_create`: records the configuration and splits the base now
/// if it exists. Returns the names of the parts created (none while the
/// base is missing). Call on a bdevkit thread.
///
/// Errors: `split_count` 0 or a size that does not fit (`EINVAL`), a
/// configuration for this base exists (`EEXIST`), the base is claimed
/// (`EPERM`).
pub fn create(mgr: &BdevManager, params: SplitCreateParams) -> Result<Vec<String>> {
    bdev::create(&*SplitModule::of(mgr)?, mgr, params)
}

/// `bdev_split_delete`: forgets the configuration of `base_bdev` and
/// unregisters its parts; `done` runs on the calling thread once they are
/// all gone. `ENOENT` when there is no such configuration (then `done` is
/// not called).
pub fn delete(
    mgr: &BdevManager,
    base_bdev: &str,
    done: impl FnOnce() + Send + 'static,
) -> Result<()> {
    bdev::delete(&*SplitModule::of(mgr)?, mgr, base_bdev, done)
}
