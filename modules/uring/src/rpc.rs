//! The uring module's RPCs: parameters (SPDK names and types) and handlers.
//! Handlers run on the thread that polls the RPC server (the app thread).
//!
//! * `bdev_uring_create {filename, name, block_size?, uuid?}` → the name;
//!   every failure answers SPDK's code and sentence, -32603 "Unable to
//!   create URING bdev.", followed by the cause as the `strerror` text of
//!   its errno, the way `bdev_aio_create` answers it (SPDK sends the
//!   sentence alone): e.g. "Unable to create URING bdev. Permission
//!   denied" ([`create_failed`]). The whole cause chain is logged.
//! * `bdev_uring_delete {name}` → `true` once the bdev is gone; `-19` if
//!   there is no such uring bdev.
//! * `bdev_uring_rescan {name}` → `true`; `-19` if there is no such bdev.
//! * `bdev_uring_set_options {sq_entries?, sqpoll?, sqpoll_idle_ms?,
//!   iopoll?, idle_yield?}` → `true` (bdevkit extension, see [`crate::UringOptions`]);
//!   `-22` for invalid values. Absent keys keep their value. The options
//!   are the module instance's: they apply to this manager only.

use bdevkit::bdev::module::BdevManager;
use bdevkit_jsonrpc::{self as jsonrpc, ErrorChain, MethodRegistry, RpcError, RUNTIME, STARTUP};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use crate::{Error, UringOptions};

/// SPDK's answer to every `bdev_uring_create` failure; ours adds the
/// cause ([`create_failed`]).
pub const CREATE_FAILED: &str = "Unable to create URING bdev.";

/// The answer to a `bdev_uring_create` that failed with `e`: SPDK's code
/// (-32603) and sentence ([`CREATE_FAILED`], unchanged, so clients that
/// match its start keep working), then the `strerror` text of `e`'s errno
/// (what `bdev_aio_create` answers): `Unable to create URING bdev.
/// Permission denied`.
#[must_use]
pub fn create_failed(e: &Error) -> RpcError {
    RpcError::internal_with_cause(CREATE_FAILED, e.errno())
}

/// `bdev_uring_create` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UringCreateParams {
    /// Bdev name.
    pub name: String,
    /// File or block device path.
    pub filename: String,
    /// Block size in bytes; absent or 0 = the device's (512 for files).
    /// Must be a power of two, >= 512 and >= the device's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    /// UUID (generated when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
}

impl UringCreateParams {
    /// Params with the required fields and defaults elsewhere.
    #[must_use]
    pub fn new(name: impl Into<String>, filename: impl Into<String>) -> Self {
        UringCreateParams {
            name: name.into(),
            filename: filename.into(),
            block_size: None,
            uuid: None,
        }
    }
}

/// `bdev_uring_set_options` params: every key optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UringSetOptionsParams {
    /// See [`crate::UringOptions::sq_entries`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sq_entries: Option<u32>,
    /// See [`crate::UringOptions::sqpoll`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqpoll: Option<bool>,
    /// See [`crate::UringOptions::sqpoll_idle_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqpoll_idle_ms: Option<u32>,
    /// See [`crate::UringOptions::iopoll`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iopoll: Option<bool>,
    /// See [`crate::UringOptions::idle_yield`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_yield: Option<bool>,
}

impl UringSetOptionsParams {
    /// `o` with the keys given here replaced.
    #[must_use]
    pub fn apply(&self, o: UringOptions) -> UringOptions {
        UringOptions {
            sq_entries: self.sq_entries.unwrap_or(o.sq_entries),
            sqpoll: self.sqpoll.unwrap_or(o.sqpoll),
            sqpoll_idle_ms: self.sqpoll_idle_ms.unwrap_or(o.sqpoll_idle_ms),
            iopoll: self.iopoll.unwrap_or(o.iopoll),
            idle_yield: self.idle_yield.unwrap_or(o.idle_yield),
        }
    }
}

/// Registers `bdev_uring_create`, `bdev_uring_delete`, `bdev_uring_rescan`
/// and `bdev_uring_set_options`.
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_uring_create",
        RUNTIME,
        move |p: UringCreateParams, resp| {
            let filename = p.filename.clone();
            match crate::create(&m, p) {
                Ok(b) => resp.ok(json!(b.name())),
                Err(e) => {
                    tracing::error!(filename, error = %ErrorChain(&e), "bdev_uring_create failed");
                    resp.err(create_failed(&e));
                }
            }
        },
    )?;
    bdevkit_kfile::rpc::register_delete_rescan::<crate::UringBdev>(reg, mgr, crate::MODULE)?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_uring_set_options",
        STARTUP | RUNTIME,
        move |p: UringSetOptionsParams, resp| {
            let r = crate::options(&m).and_then(|o| crate::set_options(&m, p.apply(o)));
            if let Err(e) = &r {
                tracing::error!(error = %ErrorChain(e), "bdev_uring_set_options failed");
            }
            resp.respond_errno(r.map(|()| true), Error::errno);
        },
    )?;
    Ok(())
}
