//! SPDK's vhost-blk RPCs: names, parameters, results and error codes as
//! SPDK v26.05's `lib/vhost/vhost_rpc.c` answers them. Failures are
//! -32602 with the `strerror` text of the errno (`vhost_get_controllers`:
//! -32603); the create decodes relaxed (unknown keys are ignored, as
//! SPDK's transport-specific decoding leaves them for the transport).
//! Handlers decode, call [`VhostTarget`], encode.

use bdevkit_jsonrpc::{self as jsonrpc, decode_params, MethodRegistry, RpcError, RUNTIME};
use serde::Deserialize;
use serde_json::json;

use crate::error::Error;
use crate::queue::Coalescing;
use crate::target::{BlkControllerOpts, VhostTarget};

/// The methods [`register_rpcs`] adds.
pub const METHODS: [&str; 4] = [
    "vhost_create_blk_controller",
    "vhost_get_controllers",
    "vhost_delete_controller",
    "vhost_controller_set_coalescing",
];

/// `vhost_create_blk_controller` params.
#[derive(Debug, Deserialize)]
pub struct CreateBlkParams {
    /// Controller name (the socket's file name).
    pub ctrlr: String,
    /// The bdev to serve.
    pub dev_name: String,
    /// Cores of the controller's queues (default: the app's).
    #[serde(default)]
    pub cpumask: Option<String>,
    /// Virtio-blk transport (`vhost_user_blk`, the default).
    #[serde(default)]
    pub transport: Option<String>,
    /// Read-only to the guest.
    #[serde(default)]
    pub readonly: bool,
    /// Packed virtqueues (refused: split rings only).
    #[serde(default)]
    pub packed_ring: bool,
}

/// `vhost_get_controllers` params.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetControllersParams {
    /// One controller (default: all).
    #[serde(default)]
    pub name: Option<String>,
}

/// `vhost_delete_controller` params.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CtrlrParams {
    /// Controller name.
    pub ctrlr: String,
}

/// `vhost_controller_set_coalescing` params.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoalescingParams {
    /// Controller name.
    pub ctrlr: String,
    /// Base delay of an interrupt, µs (0: no coalescing).
    pub delay_base_us: u32,
    /// IOPS above which interrupts are delayed.
    pub iops_threshold: u32,
}

fn invalid(errno: i32) -> RpcError {
    RpcError::invalid_params(bdevkit_jsonrpc::strerror(errno))
}

fn failed(method: &str, e: &Error) -> RpcError {
    tracing::error!(method, error = %bdevkit_jsonrpc::ErrorChain(e), "vhost rpc failed");
    if let Error::NotSupported(what) = e {
        // SPDK has no such refusal: say what is not served.
        return RpcError::invalid_params(format!("{what} is not supported"));
    }
    invalid(e.errno())
}

/// Registers the vhost methods ([`METHODS`]) on `reg` for `t`.
pub fn register_rpcs(reg: &MethodRegistry, t: &VhostTarget) -> Result<(), jsonrpc::Error> {
    let tt = t.clone();
    reg.register(
        "vhost_create_blk_controller",
        RUNTIME,
        move |params, resp| {
            let Ok(p) = decode_params::<CreateBlkParams>(params) else {
                return resp.err(invalid(libc::EINVAL));
            };
            let o = BlkControllerOpts {
                ctrlr: p.ctrlr,
                dev_name: p.dev_name,
                cpumask: p.cpumask,
                transport: p.transport,
                readonly: p.readonly,
                packed_ring: p.packed_ring,
            };
            match tt.create_blk(&o) {
                Ok(()) => resp.ok(json!(true)),
                Err(e) => resp.err(failed("vhost_create_blk_controller", &e)),
            }
        },
    )?;
    let tt = t.clone();
    reg.register("vhost_get_controllers", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<GetControllersParams>(params) else {
            return resp.err(RpcError::internal_error(bdevkit_jsonrpc::strerror(
                libc::EINVAL,
            )));
        };
        match tt.get_controllers(p.name.as_deref()) {
            Ok(v) => resp.ok(v),
            Err(e) => resp.err(RpcError::internal_error(bdevkit_jsonrpc::strerror(
                e.errno(),
            ))),
        }
    })?;
    let tt = t.clone();
    reg.register("vhost_delete_controller", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<CtrlrParams>(params) else {
            return resp.err(invalid(libc::EINVAL));
        };
        tt.delete(&p.ctrlr, move |r| match r {
            Ok(()) => resp.ok(json!(true)),
            Err(e) => resp.err(failed("vhost_delete_controller", &e)),
        });
    })?;
    let tt = t.clone();
    reg.register(
        "vhost_controller_set_coalescing",
        RUNTIME,
        move |params, resp| {
            let Ok(p) = decode_params::<CoalescingParams>(params) else {
                return resp.err(invalid(libc::EINVAL));
            };
            let c = Coalescing {
                delay_base_us: p.delay_base_us,
                iops_threshold: p.iops_threshold,
            };
            match tt.set_coalescing(&p.ctrlr, c) {
                Ok(()) => resp.ok(json!(true)),
                Err(e) => resp.err(failed("vhost_controller_set_coalescing", &e)),
            }
        },
    )?;
    Ok(())
}
