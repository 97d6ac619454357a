//! The `passthru` virtual bdev module: the reference example for anyone
//! writing a module. A passthru bdev sits on one base bdev and forwards
//! every I/O to it unchanged. It does nothing useful by itself; it shows,
//! in as little code as possible, everything a virtual bdev owes:
//!
//! 1. **Configuration first, bdev later.** `bdev_passthru_create` records a
//!    configuration in the module ([`PassthruModule`]). If the base exists
//!    the passthru bdev is built at once; if not, the module's
//!    [`examine_config`](bdevkit::bdev::module::BdevModule::examine_config) builds
//!    it when the base registers. Creation order does not matter, which is
//!    what lets a saved config replay in any order.
//! 2. **Open and claim the base.** The bdev opens its base with an event
//!    callback and takes an `exclusive_write` claim, so nobody else writes
//!    under it.
//! 3. **A channel per thread wrapping the base's channel.** I/O never
//!    crosses threads and takes no lock.
//! 4. **Forward each I/O as a child.** `submit` allocates a child `BdevIo`
//!    on the base channel, which takes the parent with its request, and
//!    submits it; the child's completion completes the parent. No
//!    allocation per I/O: both `BdevIo`s come from the per-thread pool.
//! 5. **Follow the base's events.** A resize of the base resizes the
//!    passthru bdev; a removal unregisters it (its own openers get a remove
//!    event), fails new I/O, lets the I/O in flight finish, and closes the
//!    base only after its last channel is gone, on the thread that opened
//!    it.
//!
//! RPCs: `bdev_passthru_create`, `bdev_passthru_delete` (see [`rpc`]).
//! `save_config` emits one `bdev_passthru_create` per configuration
//! (module-level, as SPDK does).
//!
//! The code is in `src/bdev.rs` (module, bdev, channel, I/O path) and
//! `src/rpc.rs` (parameters, handlers); `doc/writing-a-module.md` walks
//! through it. The steps every virtual bdev takes the same way (keeping
//! configurations, opening the base, forwarding a child I/O) come from
//! [`bdevkit::bdev::module::vbdev`], shared with the other virtual bdev modules;
//! `src/bdev.rs` says what each helper does where it uses it.
//!
//! ```
//! use bdevkit::bdev::module::BdevManager;
//! use bdevkit_passthru::PassthruCreateParams;
//!
//! let mgr = BdevManager::default();
//! bdevkit_passthru::register(&mgr);
//! // The base does not exist yet: the passthru waits for it (examine).
//! let name = bdevkit_passthru::create(&mgr, PassthruCreateParams::new("Malloc0", "PT0")).unwrap();
//! assert_eq!(name, "PT0");
//! assert!(mgr.get("PT0").is_none());
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod bdev;
pub mod rpc;

use bdevkit::bdev::module::{BdevManager, Result};
use uuid::Uuid;

pub use bdev::{PassthruBdev, PassthruChannel, PassthruModule};
pub use rpc::{PassthruCreateParams, PassthruDeleteParams};

/// Module name (also the RPC infix).
pub const MODULE: &str = "passthru";
/// `product_name` of passthru bdevs.
pub const PRODUCT_NAME: &str = "passthru";
/// Namespace of the name-based (v5, SHA-1) UUID a passthru bdev gets when
/// none is configured: `v5(NAMESPACE_UUID, base bdev UUID bytes)`, as SPDK.
pub const NAMESPACE_UUID: Uuid = Uuid::from_u128(0x7e25_812e_c8c0_4d3f_8599_16d7_9055_5b85);

/// Adds the passthru module to `mgr`.
pub fn register(mgr: &BdevManager) {
    PassthruModule::register(mgr);
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
        name: "vbdev_passthru",
        targets: &["bdevkit_passthru"],
        aliases: &["bdev_passthru"],
    }],
};

/// `bdev_passthru_create`: records the configuration and builds the bdev
/// now if the base exists, else when it appears. Returns the name. Call on
/// a bdevkit thread (the app thread): the base is opened there.
///
/// Errors: a configuration with that name exists (`EEXIST`), the base is
/// claimed by someone else (`EPERM`), the name is taken by another bdev
/// (`EEXIST`).
pub fn create(mgr: &BdevManager, params: PassthruCreateParams) -> Result<String> {
    bdev::create(mgr, params)
}

/// `bdev_passthru_delete`: forgets the configuration and unregisters the
/// bdev; `done` gets the outcome on the calling thread once the bdev is
/// gone (`ENODEV` when there is neither a configuration nor a bdev).
pub fn delete(mgr: &BdevManager, name: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
    PassthruModule::delete(mgr, name, done);
}

/// `doc/writing-a-module.md`, whose code compiles as doctests of this
/// crate (so the guide cannot go stale).
#[cfg(doctest)]
#[doc = include_str!("../../../doc/writing-a-module.md")]
pub struct WritingAModuleGuide;
