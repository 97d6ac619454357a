//! Multipath RPCs (SPDK's names and params): `bdev_nvme_set_multipath_policy`
//! and `bdev_nvme_get_io_paths` (`multipath_opts` is in `options.rs`).

use bdevkit::bdev::BdevManager;
use bdevkit_jsonrpc::{self as jsonrpc, MethodRegistry, RpcError, RUNTIME};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// `bdev_nvme_set_multipath_policy` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetPolicyParams {
    /// The NVMe bdev.
    pub name: String,
    /// `active_passive` or `active_active`.
    pub policy: String,
    /// `round_robin` (default) or `queue_depth`.
    #[serde(default)]
    pub selector: Option<String>,
    /// I/Os per path in turn (round_robin), at least 1.
    #[serde(default)]
    pub rr_min_io: Option<u32>,
}

/// `bdev_nvme_get_io_paths` params.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetIoPathsParams {
    /// Only this NVMe bdev.
    #[serde(default)]
    pub name: Option<String>,
}

/// Registers the multipath RPCs. Handlers run on the app thread.
pub(crate) fn register(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_set_multipath_policy",
        RUNTIME,
        move |p: SetPolicyParams, resp| {
            let Some(cur) = crate::multipath_policy(&m, &p.name) else {
                return resp.err(RpcError::from_errno(libc::ENODEV));
            };
            let pol = match cur.parse(&p.policy, p.selector.as_deref(), p.rr_min_io) {
                Ok(x) => x,
                Err(e) => return resp.err(RpcError::new(-22, e)),
            };
            if let Err(e) = crate::set_multipath_policy(&m, &p.name, pol, move || {
                resp.ok(json!(true));
            }) {
                tracing::warn!(error = %e, "set_multipath_policy");
            }
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_get_io_paths",
        RUNTIME,
        move |p: GetIoPathsParams, resp| {
            if let Some(n) = &p.name {
                if crate::multipath_policy(&m, n).is_none() {
                    return resp.err(RpcError::from_errno(libc::ENODEV));
                }
            }
            let r = crate::io_paths_json(&m, p.name.as_deref(), move |v| resp.ok(v));
            if let Err(e) = r {
                tracing::debug!(error = %e, "get_io_paths");
            }
        },
    )?;
    Ok(())
}
