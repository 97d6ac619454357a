//! The `zone_block` virtual bdev module (SPDK's `bdev_zone_block`): a zoned
//! block device emulated over a conventional bdev, for developing and
//! testing what drives zoned devices (bdevperf's zoned workloads, the
//! NVMe-oF target's ZNS namespaces) without one.
//!
//! `bdev_zone_block_create` names the base, the zone capacity (writable
//! blocks per zone; the zone size is the next power of two, so a zone's
//! blocks past its capacity are unused) and the optimal number of open
//! zones. The bdev has `base blocks / zone size` zones, block for block on
//! the base. As in SPDK its zones start full (it cannot know what the base
//! holds): reset a zone before writing it.
//!
//! What it serves: reads (within a zone's capacity), writes at a zone's
//! write pointer, zone appends (it picks the blocks; the completion says
//! which), zone reports and zone management (open, close, finish, reset;
//! a reset unmaps the zone on the base where the base can). A refused I/O
//! completes with the ZNS status the spec names for it
//! ([`ZoneError`](bdevkit::bdev::module::ZoneError)), which an NVMe-oF
//! host receives unchanged. Zone state is one atomic word per zone, so
//! channels on every thread write without a lock.
//!
//! ```
//! use bdevkit::bdev::module::BdevManager;
//! use bdevkit_zone_block::ZoneBlockCreateParams;
//!
//! let mgr = BdevManager::default();
//! bdevkit_zone_block::register(&mgr);
//! // The base does not exist yet: the configuration waits for it.
//! let p = ZoneBlockCreateParams::new("Z0", "Malloc0", 1000);
//! assert_eq!(bdevkit_zone_block::create(&mgr, p).unwrap(), "Z0");
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod bdev;
pub mod rpc;
mod zones;

use bdevkit::bdev::module::{BdevManager, Result};
use uuid::Uuid;

pub use bdev::{ZoneBlockBdev, ZoneBlockChannel, ZoneBlockModule};
pub use rpc::{ZoneBlockCreateParams, ZoneBlockDeleteParams};

/// Module name.
pub const MODULE: &str = "zone_block";
/// `product_name` of zone_block bdevs (SPDK's).
pub const PRODUCT_NAME: &str = "zone_block";
/// SPDK's namespace of the name-based UUID a zone_block bdev gets:
/// `v5(NAMESPACE_UUID, base bdev UUID bytes)`.
pub const NAMESPACE_UUID: Uuid = Uuid::from_u128(0x5f3f_485a_d6bb_4443_9de7_0236_83b7_7389);

/// Adds the zone_block module to `mgr`.
pub fn register(mgr: &BdevManager) {
    ZoneBlockModule::register(mgr);
}

/// What an app links of this module.
pub const MODULE_DEF: bdevkit::bdev::module::ModuleDef<
    bdevkit_jsonrpc::MethodRegistry,
    bdevkit_jsonrpc::Error,
> = bdevkit::bdev::module::ModuleDef {
    name: MODULE,
    register,
    register_rpcs: rpc::register_rpcs,
    log_flags: &[bdevkit::bdev::module::LogFlag {
        name: "vbdev_zone_block",
        targets: &["bdevkit_zone_block"],
        aliases: &["bdev_zone_block"],
    }],
};

/// `bdev_zone_block_create`: records the configuration and builds the
/// bdev now if the base exists, else when it appears. Returns the name.
/// Call on a bdevkit thread (the app thread).
///
/// Errors (`EINVAL`): a zero zone capacity or optimal open zones count, a
/// base that is zoned already or smaller than one zone; `EEXIST`: a
/// configuration or bdev with that name; `EPERM`: the base is claimed.
pub fn create(mgr: &BdevManager, params: ZoneBlockCreateParams) -> Result<String> {
    bdev::create(mgr, params)
}

/// `bdev_zone_block_delete`: forgets the configuration and unregisters the
/// bdev; `done` gets the outcome once it is gone (`ENODEV` when there is
/// neither).
pub fn delete(mgr: &BdevManager, name: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
    ZoneBlockModule::delete(mgr, name, done);
}
