//! The passthru module's RPCs: parameters (SPDK's names and types) and
//! handlers. Handlers only decode, call [`crate::create`] /
//! [`crate::delete`] and encode; they run on the thread that polls the RPC
//! server (the app thread).
//!
//! | Method | Result | Errors |
//! |---|---|---|
//! | `bdev_passthru_create` | the name | decode: -32603 "spdk_json_decode_object failed"; `-errno` + `strerror` (-17 duplicate, -1 base claimed) |
//! | `bdev_passthru_delete` | `true` | decode: -32603; -19 "No such device" |

use bdevkit::bdev::module::{BdevManager, Error};
use bdevkit_jsonrpc::{self as jsonrpc, MethodRegistry, RUNTIME};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// `bdev_passthru_create` params (also what `save_config` emits).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PassthruCreateParams {
    /// The base bdev (name or alias); it may not exist yet.
    pub base_bdev_name: String,
    /// Name of the passthru bdev.
    pub name: String,
    /// UUID; when absent, derived from the base bdev's UUID (v5, SHA-1,
    /// namespace [`crate::NAMESPACE_UUID`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
}

impl PassthruCreateParams {
    /// Params for a passthru `name` on `base_bdev_name` with a derived UUID.
    #[must_use]
    pub fn new(base_bdev_name: impl Into<String>, name: impl Into<String>) -> Self {
        PassthruCreateParams {
            base_bdev_name: base_bdev_name.into(),
            name: name.into(),
            uuid: None,
        }
    }
}

/// `bdev_passthru_delete` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PassthruDeleteParams {
    /// Name of the passthru bdev.
    pub name: String,
}

/// Registers `bdev_passthru_create` and `bdev_passthru_delete`.
///
/// `register_decoded` decodes the params into the method's struct, or
/// answers SPDK's -32603 "spdk_json_decode_object failed";
/// `respond_errno` answers the result, or a failure as `-errno` with its
/// `strerror` text. A method with other answers (see `modules/raid`)
/// decodes and answers by hand with `register`.
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_passthru_create",
        RUNTIME,
        move |p: PassthruCreateParams, resp| {
            resp.respond_errno(crate::create(&m, p), Error::errno);
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_passthru_delete",
        RUNTIME,
        move |p: PassthruDeleteParams, resp| {
            // Answers once the bdev is gone.
            crate::delete(&m, &p.name, move |r| {
                resp.respond_errno(r.map(|()| true), Error::errno);
            });
        },
    )?;
    Ok(())
}
