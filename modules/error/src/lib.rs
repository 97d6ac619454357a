//! The `error` virtual bdev module: fault injection. `EE_<base>` covers
//! its whole base and forwards I/O to it, except the I/Os an injection
//! picks:
//!
//! * `failure` completes them as failed, `nvme_failure` with an NVMe
//!   status, `nomem` with NOMEM (the bdev layer retries them);
//! * `pending` holds them until `bdev_error_resume_pending` (or a reset,
//!   which aborts them);
//! * `corrupt_data` XORs one byte (`corrupt_offset`, `corrupt_value`) of a
//!   write's data before it goes down, or of a read's data after it comes
//!   back.
//!
//! An injection is per I/O type (read, write, unmap, flush, or all of
//! them), for the next `num` I/Os of that type, and only while at least
//! `queue_depth` I/Os are in flight on the channel. Deciding costs one
//! atomic load per I/O when nothing is injected; the counters are shared by
//! all threads.
//!
//! Like every virtual bdev here, the configuration attaches through
//! examine and the bdev follows its base's removal (see `modules/passthru`
//! and `doc/writing-a-module.md`). Held I/Os are aborted when the base
//! goes or the bdev is deleted, so nothing is left hanging.
//!
//! RPCs: `bdev_error_create`, `bdev_error_delete`, `bdev_error_inject_error`,
//! `bdev_error_resume_pending` (see [`rpc`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod bdev;
pub mod rpc;

use std::sync::Arc;

use bdevkit::bdev::module::{BdevManager, Error, Result};

pub use bdev::{ErrorBdev, ErrorChannel, ErrorModule, Injections};
pub use rpc::{
    ErrorCreateParams, ErrorDeleteParams, ErrorInjectParams, ErrorResumeParams, InjectErrorType,
    InjectIoType,
};

/// Module name (also the RPC infix).
pub const MODULE: &str = "error";
/// `product_name` of error bdevs.
pub const PRODUCT_NAME: &str = "Error Injection Disk";
/// Prefix of an error bdev's name: `EE_<base>`.
pub const NAME_PREFIX: &str = "EE_";

/// Adds the error module to `mgr`.
pub fn register(mgr: &BdevManager) {
    ErrorModule::register(mgr);
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
        name: "vbdev_error",
        targets: &["bdevkit_error"],
        aliases: &["bdev_error"],
    }],
};

/// `bdev_error_create`: records the configuration and creates
/// `EE_<base_name>` now if the base exists, else when it appears. Call on
/// a bdevkit thread. `EEXIST` when the base already has one.
pub fn create(mgr: &BdevManager, params: ErrorCreateParams) -> Result<()> {
    bdev::create(&*ErrorModule::of(mgr)?, mgr, params)
}

/// `bdev_error_delete`: forgets the configuration, aborts held I/O and
/// unregisters the bdev; `done` gets the outcome on the calling thread
/// (`ENODEV` when `name` is not an error bdev).
pub fn delete(mgr: &BdevManager, name: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
    match ErrorModule::of(mgr) {
        Ok(m) => bdev::delete(&m, mgr, name, done),
        Err(e) => done(Err(e)),
    }
}

/// `bdev_error_inject_error`: arms (or with `io_type: clear`, disarms) an
/// injection on the error bdev `name`. `EINVAL` for inconsistent NVMe
/// status or a zero `corrupt_value`; `ENODEV` when `name` is not an error
/// bdev.
pub fn inject_error(mgr: &BdevManager, params: &ErrorInjectParams) -> Result<()> {
    rpc::validate_inject(params)?;
    bdev::inject(&*error_bdev(mgr, &params.name)?, params);
    Ok(())
}

/// `bdev_error_resume_pending`: disarms `pending` injections and sends
/// every held I/O of `name` down to the base.
pub fn resume_pending(mgr: &BdevManager, name: &str) -> Result<()> {
    bdev::resume_pending(&*error_bdev(mgr, name)?);
    Ok(())
}

fn error_bdev(mgr: &BdevManager, name: &str) -> Result<Arc<ErrorBdev>> {
    mgr.get(name)
        .filter(|b| !b.is_removing())
        .and_then(|b| b.ops_as::<ErrorBdev>())
        .ok_or_else(|| Error::NotFound(name.to_string()))
}
