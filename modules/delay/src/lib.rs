//! The `delay` virtual bdev module: adds latency to reads and writes. Each
//! read (write) is held until `submit tick + latency`, where the latency is
//! the configured average, or with probability 1/100 the configured p99
//! value (a per-channel xorshift generator: no allocation, no lock). Other
//! I/O types pass through undelayed.
//!
//! The I/O goes to the base at once; when the base completes it, the parent
//! waits in a per-channel min-heap ordered by due tick. One timed poller
//! per channel completes what is due; it is paused while the heap is
//! empty, so an idle delay bdev costs nothing. No thread ever sleeps.
//!
//! A reset aborts every held I/O (on every thread) and resets the base; an
//! abort finds its target among the held I/Os or passes down. Latencies can
//! change at run time (`bdev_delay_update_latency`), for new I/O.
//!
//! Configuration, examine and removal follow passthru (see
//! `modules/passthru` and `doc/writing-a-module.md`).
//!
//! RPCs: `bdev_delay_create`, `bdev_delay_delete`,
//! `bdev_delay_update_latency` (see [`rpc`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod bdev;
pub mod rpc;

use bdevkit::bdev::module::{BdevManager, Result};
use uuid::Uuid;

pub use bdev::{Delay, DelayBdev, DelayChannel, DelayModule};
pub use rpc::{DelayCreateParams, DelayDeleteParams, DelayUpdateParams, LatencyType};

/// Module name (also the RPC infix).
pub const MODULE: &str = "delay";
/// `product_name` of delay bdevs.
pub const PRODUCT_NAME: &str = "delay";
/// Namespace of the name-based (v5, SHA-1) UUID a delay bdev gets when
/// none is configured: `v5(NAMESPACE_UUID, base bdev UUID bytes)`, as SPDK.
pub const NAMESPACE_UUID: Uuid = Uuid::from_u128(0x4009_b574_6430_4f1b_bc40_ace8_1109_1027);

/// Adds the delay module to `mgr`.
pub fn register(mgr: &BdevManager) {
    DelayModule::register(mgr);
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
        name: "vbdev_delay",
        targets: &["bdevkit_delay"],
        aliases: &["bdev_delay"],
    }],
};

/// `bdev_delay_create`: records the configuration and builds the bdev now
/// if the base exists, else when it appears. Returns the name. Call on a
/// bdevkit thread. `EINVAL` when a p99 latency is below its average,
/// `EEXIST` for a duplicate name, `EPERM` for a claimed base.
pub fn create(mgr: &BdevManager, params: DelayCreateParams) -> Result<String> {
    bdev::create(&*DelayModule::of(mgr)?, mgr, params)
}

/// `bdev_delay_delete`: forgets the configuration and unregisters the bdev;
/// `done` gets the outcome on the calling thread (`ENODEV` when there is
/// no such delay bdev or configuration).
pub fn delete(mgr: &BdevManager, name: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
    match DelayModule::of(mgr) {
        Ok(m) => bdev::delete(&m, mgr, name, done),
        Err(e) => done(Err(e)),
    }
}

/// `bdev_delay_update_latency`: sets one latency (µs) of the delay bdev
/// `name` for I/O submitted from now on. No ordering check against the
/// other latencies (as SPDK). `ENODEV` when `name` is not a delay bdev.
pub fn update_latency(
    mgr: &BdevManager,
    name: &str,
    latency_type: LatencyType,
    latency_us: u64,
) -> Result<()> {
    bdev::update_latency(&*DelayModule::of(mgr)?, mgr, name, latency_type, latency_us)
}
