//! The raid module's RPCs, with SPDK's quirks: decode failures answer
//! **-32700** "spdk_json_decode_object failed", failures of
//! `bdev_raid_create` answer `{"code": -errno, "message": "Failed to
//! create RAID bdev <name>: <strerror>"}`.
//!
//! | Method | Result | Errors |
//! |---|---|---|
//! | `bdev_raid_create` | `true` | -32700; -22 "The base bdev name cannot be empty: Invalid argument"; `-errno` "Failed to create RAID bdev N: ..." |
//! | `bdev_raid_delete` | `true` | -32700; -19 "raid bdev N not found" |
//! | `bdev_raid_get_bdevs` | array of raid objects | -32700; -22 "Invalid argument" for an unknown category |
//! | `bdev_raid_add_base_bdev` | `true` once the member is in (a raid1 rebuild goes on in the background) | -32700; -19 "raid bdev R is not found in config"; `-errno` "Failed to add base bdev B to RAID bdev R: strerror" |
//! | `bdev_raid_remove_base_bdev` | `true` | -32700; -19 "Failed to remove base bdev from raid bdev" (no raid holds it) |
//! | `bdev_raid_set_options` | `true` | -32700; -22 for a zero window |

use bdevkit::bdev::module::BdevManager;
use bdevkit_jsonrpc::{self as jsonrpc, decode_params, MethodRegistry, RpcError, RUNTIME, STARTUP};
use serde_json::json;

use crate::config::MAX_MEMBERS;
// The params are defined with the other configuration types, at the bottom
// of the crate (the raid state stores some of them); they keep their paths
// here.
pub use crate::config::{
    RaidAddBaseBdevParams, RaidCreateParams, RaidDeleteParams, RaidGetBdevsParams,
    RaidRemoveBaseBdevParams, RaidSetOptionsParams,
};

/// Runs a handler's asynchronous part on the current bdevkit thread (the
/// RPC thread).
fn spawn(fut: impl std::future::Future<Output = ()> + 'static) {
    match bdevkit::thread::Thread::current() {
        Some(t) => t.spawn_local(fut),
        None => tracing::error!("raid RPC outside a bdevkit thread"),
    }
}

fn decode_failed() -> RpcError {
    RpcError::new(RpcError::PARSE_ERROR, "spdk_json_decode_object failed")
}

/// Registers the raid module's methods.
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register("bdev_raid_create", RUNTIME, move |params, resp| {
        let p = match decode_params::<RaidCreateParams>(params) {
            Ok(p) if p.base_bdevs.len() <= MAX_MEMBERS => p,
            _ => return resp.err(decode_failed()),
        };
        if p.base_bdevs.iter().any(String::is_empty) {
            return resp.err(RpcError::new(
                -libc::EINVAL,
                "The base bdev name cannot be empty: Invalid argument",
            ));
        }
        let name = p.name.clone();
        let m = m.clone();
        spawn(async move {
            match crate::create(&m, p).await {
                Ok(()) => resp.ok(json!(true)),
                Err(e) => {
                    let e = RpcError::from_errno(e.errno());
                    resp.err(RpcError::new(
                        e.code,
                        format!("Failed to create RAID bdev {name}: {}", e.message),
                    ));
                }
            }
        });
    })?;
    let m = mgr.clone();
    reg.register("bdev_raid_delete", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<RaidDeleteParams>(params) else {
            return resp.err(decode_failed());
        };
        let name = p.name.clone();
        crate::delete_with(&m, &p.name, p.clear_sb.unwrap_or(false), move |r| match r {
            Ok(()) => resp.ok(json!(true)),
            Err(bdevkit::Error::NotFound(_)) => resp.err(RpcError::new(
                -libc::ENODEV,
                format!("raid bdev {name} not found"),
            )),
            Err(e) => resp.err(RpcError::internal_error(bdevkit_jsonrpc::strerror(
                e.errno(),
            ))),
        });
    })?;
    let m = mgr.clone();
    reg.register("bdev_raid_add_base_bdev", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<RaidAddBaseBdevParams>(params) else {
            return resp.err(decode_failed());
        };
        if crate::raid(&m, &p.raid_bdev).is_none() {
            return resp.err(RpcError::new(
                -libc::ENODEV,
                format!("raid bdev {} is not found in config", p.raid_bdev),
            ));
        }
        let m = m.clone();
        spawn(async move {
            match crate::add_base_bdev(&m, &p.raid_bdev, &p.base_bdev).await {
                Ok(()) => resp.ok(json!(true)),
                Err(e) => {
                    let e = RpcError::from_errno(e.errno());
                    resp.err(RpcError::new(
                        e.code,
                        format!(
                            "Failed to add base bdev {} to RAID bdev {}: {}",
                            p.base_bdev, p.raid_bdev, e.message
                        ),
                    ));
                }
            }
        });
    })?;
    let m = mgr.clone();
    reg.register(
        "bdev_raid_remove_base_bdev",
        RUNTIME,
        move |params, resp| {
            let Ok(p) = decode_params::<RaidRemoveBaseBdevParams>(params) else {
                return resp.err(decode_failed());
            };
            crate::remove_base_bdev(&m, &p.name, move |r| match r {
                Ok(()) => resp.ok(json!(true)),
                Err(e) => resp.err(RpcError::new(
                    -e.errno(),
                    "Failed to remove base bdev from raid bdev",
                )),
            });
        },
    )?;
    let m = mgr.clone();
    reg.register("bdev_raid_get_bdevs", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<RaidGetBdevsParams>(params) else {
            return resp.err(decode_failed());
        };
        resp.respond_errno(crate::get_bdevs(&m, &p.category), bdevkit::Error::errno);
    })?;
    let m = mgr.clone();
    reg.register(
        "bdev_raid_set_options",
        STARTUP | RUNTIME,
        move |params, resp| {
            let Ok(p) = decode_params::<RaidSetOptionsParams>(params) else {
                return resp.err(decode_failed());
            };
            let r = crate::set_options(&m, p);
            resp.respond_errno(r.map(|()| true), bdevkit::Error::errno);
        },
    )?;
    Ok(())
}
