//! The xnvme module's RPCs (SPDK's names, parameters and answers).
//! Handlers run on the thread that polls the RPC server (the app thread);
//! they decode, call [`crate::create`] / [`crate::delete`] and encode.
//!
//! * `bdev_xnvme_create {name, filename, io_mechanism, conserve_cpu?}` →
//!   the name. Every failure answers SPDK's code and sentence, -32603
//!   "Unable to create xNVMe bdev.", followed by the cause as the
//!   `strerror` text of its errno, the way `bdev_aio_create` answers (SPDK
//!   sends the sentence alone): e.g. "Unable to create xNVMe bdev. Invalid
//!   argument" for an unknown mechanism or a block device given to
//!   `io_uring_cmd` ([`create_failed`]). The whole cause chain is logged.
//!   What `spdk-rpc bdev_xnvme_create [-c] filename name io_mechanism`
//!   sends (it always sends `conserve_cpu`).
//! * `bdev_xnvme_delete {name}` → `true` once the bdev is gone; `-19` "No
//!   such device" when there is no such xnvme bdev (SPDK's answer).

use bdevkit::bdev::module::BdevManager;
use bdevkit_jsonrpc::{self as jsonrpc, ErrorChain, MethodRegistry, RpcError, RUNTIME};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::Error;

/// SPDK's answer to every `bdev_xnvme_create` failure; ours adds the
/// cause ([`create_failed`]).
pub const CREATE_FAILED: &str = "Unable to create xNVMe bdev.";

/// The answer to a `bdev_xnvme_create` that failed with `e`: SPDK's code
/// (-32603) and sentence ([`CREATE_FAILED`], unchanged, so clients that
/// match its start keep working), then the `strerror` text of `e`'s
/// errno: `Unable to create xNVMe bdev. No such file or directory`.
#[must_use]
pub fn create_failed(e: &Error) -> RpcError {
    RpcError::internal_with_cause(CREATE_FAILED, e.errno())
}

/// `bdev_xnvme_create` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct XnvmeCreateParams {
    /// Bdev name.
    pub name: String,
    /// The device: `/dev/ngXnY` for `io_uring_cmd`; a block device (e.g.
    /// `/dev/nvmeXnY`) or a file for `io_uring` and `libaio`.
    pub filename: String,
    /// `io_uring_cmd`, `io_uring` or `libaio` (a free string on the wire,
    /// as SPDK's: anything else fails the create).
    pub io_mechanism: String,
    /// Conserve CPU: complete I/O by interrupts, so that an interrupt-mode
    /// reactor sleeps; false (the default) polls (`IOPOLL` for
    /// `io_uring_cmd` where the namespace has poll queues).
    #[serde(default)]
    pub conserve_cpu: bool,
}

impl XnvmeCreateParams {
    /// Params with the required fields, `conserve_cpu` false.
    #[must_use]
    pub fn new(
        name: impl Into<String>,
        filename: impl Into<String>,
        io_mechanism: impl Into<String>,
    ) -> Self {
        XnvmeCreateParams {
            name: name.into(),
            filename: filename.into(),
            io_mechanism: io_mechanism.into(),
            conserve_cpu: false,
        }
    }
}

/// `bdev_xnvme_delete` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct XnvmeDeleteParams {
    /// Bdev name.
    pub name: String,
}

/// Registers `bdev_xnvme_create` and `bdev_xnvme_delete`.
///
/// # Errors
/// When a method of that name is already registered.
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_xnvme_create",
        RUNTIME,
        move |p: XnvmeCreateParams, resp| {
            let (filename, mechanism) = (p.filename.clone(), p.io_mechanism.clone());
            match crate::create(&m, p) {
                Ok(b) => resp.ok(json!(b.name())),
                Err(e) => {
                    tracing::error!(filename, io_mechanism = mechanism, error = %ErrorChain(&e), "bdev_xnvme_create failed");
                    resp.err(create_failed(&e));
                }
            }
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_xnvme_delete",
        RUNTIME,
        move |p: XnvmeDeleteParams, resp| {
            crate::delete(&m, &p.name, move |r| {
                resp.respond_errno(r.map(|()| true), Error::errno);
            });
        },
    )?;
    Ok(())
}
