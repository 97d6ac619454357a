//! SPDK's nvmf RPCs: names, params, result shapes, error codes and
//! messages as SPDK v26.05's `lib/nvmf/nvmf_rpc.c` and the nvmf event
//! subsystem answer them (most failures are -32602 "Invalid parameters";
//! the creates and the host calls have their own -32603 messages).
//! Handlers decode, call [`Target`], encode. `nvmf_set_config`,
//! `nvmf_set_max_subsystems` and `nvmf_set_crdt` are STARTUP-only, as in
//! SPDK; the rest RUNTIME.

mod handlers;

use bdevkit_jsonrpc::{self as jsonrpc, MethodRegistry};

use crate::service::Target;

/// The methods [`register_rpcs`] adds, in registration order.
pub const METHODS: [&str; 21] = [
    "nvmf_set_config",
    "nvmf_set_max_subsystems",
    "nvmf_set_crdt",
    "nvmf_create_transport",
    "nvmf_get_transports",
    "nvmf_create_subsystem",
    "nvmf_delete_subsystem",
    "nvmf_subsystem_add_ns",
    "nvmf_subsystem_remove_ns",
    "nvmf_subsystem_add_listener",
    "nvmf_subsystem_remove_listener",
    "nvmf_subsystem_add_host",
    "nvmf_subsystem_remove_host",
    "nvmf_subsystem_allow_any_host",
    "nvmf_get_subsystems",
    "nvmf_subsystem_get_controllers",
    "nvmf_subsystem_get_qpairs",
    "nvmf_subsystem_get_listeners",
    "nvmf_discovery_add_referral",
    "nvmf_discovery_remove_referral",
    "nvmf_discovery_get_referrals",
];

/// Registers the nvmf methods ([`METHODS`]) on `reg` for `target`. Handlers run on the thread that polls
/// the RPC server (the app thread).
pub fn register_rpcs(reg: &MethodRegistry, target: &Target) -> Result<(), jsonrpc::Error> {
    handlers::register(reg, target)
}
