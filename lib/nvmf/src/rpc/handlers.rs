//! The handlers: decode (failure: -32602 "Invalid parameters", as SPDK's
//! nvmf handlers answer), call the target, answer with SPDK's result or
//! error.

use bdevkit_jsonrpc::{
    self as jsonrpc, decode_params, MethodRegistry, Responder, RpcError, RUNTIME, STARTUP,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::error::Error;
use crate::opts::{CreateTransportParams, SetConfigParams};
use crate::params::{
    AddNsParams, AllowAnyHostParams, CrdtParams, CreateSubsystemParams, GetReferralsParams,
    GetSubsystemsParams, GetTransportsParams, HostParams, ListenerParams, MaxSubsystemsParams,
    NqnParams, ReferralParams, RemoveNsParams, SetKeysParams, TARGET_NAME,
};
use crate::service::Target;

fn invalid() -> RpcError {
    RpcError::invalid_params("Invalid parameters")
}

fn internal(msg: impl Into<String>) -> RpcError {
    RpcError::internal_error(msg)
}

/// Registers `name` with params `P` decoded the nvmf way.
fn reg<P: DeserializeOwned>(
    r: &MethodRegistry,
    name: &str,
    mask: u32,
    t: &Target,
    f: impl Fn(&Target, P, Responder) + Send + Sync + 'static,
) -> Result<(), jsonrpc::Error> {
    let t = t.clone();
    r.register(name, mask, move |params, resp| {
        match decode_params::<P>(params) {
            Ok(p) => f(&t, p, resp),
            Err(e) => {
                tracing::debug!(error = %e, "nvmf rpc params do not decode");
                resp.err(invalid());
            }
        }
    })
}

/// Whether `tgt_name` names the target; answers SPDK's error if not.
fn tgt_ok(name: Option<&str>, resp: Responder, msg: &str) -> Option<Responder> {
    match name {
        Some(n) if n != TARGET_NAME => {
            resp.err(internal(msg));
            None
        }
        _ => Some(resp),
    }
}

fn log_err(method: &str, e: &Error) {
    tracing::error!(method, error = %e, "nvmf rpc failed");
}

pub(super) fn register(r: &MethodRegistry, t: &Target) -> Result<(), jsonrpc::Error> {
    reg(
        r,
        "nvmf_set_config",
        STARTUP,
        t,
        |t, p: SetConfigParams, resp| match t.set_config(&p) {
            Ok(()) => resp.ok(json!(true)),
            Err(e) => {
                log_err("nvmf_set_config", &e);
                resp.err(invalid());
            }
        },
    )?;
    reg(
        r,
        "nvmf_set_max_subsystems",
        STARTUP,
        t,
        |t, p: MaxSubsystemsParams, resp| match t.set_max_subsystems(p.max_subsystems) {
            Ok(()) => resp.ok(json!(true)),
            Err(_) => resp.err(internal("Must not call more than once")),
        },
    )?;
    reg(r, "nvmf_set_crdt", STARTUP, t, |t, p: CrdtParams, resp| {
        t.set_crdt([p.crdt1, p.crdt2, p.crdt3]);
        resp.ok(json!(true));
    })?;
    reg(
        r,
        "nvmf_create_transport",
        RUNTIME,
        t,
        |t, p: CreateTransportParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            match t.create_transport(&p) {
                Ok(()) => resp.ok(json!(true)),
                Err(Error::InvalidTransport(tt)) => resp.err(RpcError::invalid_params(format!(
                    "Invalid transport type '{tt}'"
                ))),
                Err(Error::TransportExists(tt)) => {
                    resp.err(internal(format!("Transport type '{tt}' already exists")));
                }
                Err(e) => {
                    log_err("nvmf_create_transport", &e);
                    resp.err(internal("Failed to create transport."));
                }
            }
        },
    )?;
    reg(
        r,
        "nvmf_get_transports",
        RUNTIME,
        t,
        |t, p: GetTransportsParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            match t.transports_json(p.trtype.as_deref()) {
                Ok(v) => resp.ok(Value::Array(v)),
                Err(_) => resp.err(RpcError::from_errno(libc::ENODEV)),
            }
        },
    )?;
    reg(
        r,
        "nvmf_create_subsystem",
        RUNTIME,
        t,
        |t, p: CreateSubsystemParams, resp| {
            if let Some(n) = p.tgt_name.as_deref().filter(|n| *n != TARGET_NAME) {
                return resp.err(internal(format!("Unable to find target {n}")));
            }
            match t.create_subsystem(&p) {
                Ok(()) => resp.ok(json!(true)),
                Err(Error::SubsystemParam {
                    param: "cntlid", ..
                }) => {
                    resp.err(RpcError::invalid_params(format!(
                        "Invalid cntlid range [{}-{}]",
                        p.min_cntlid.unwrap_or(crate::subsystem::MIN_CNTLID),
                        p.max_cntlid.unwrap_or(crate::subsystem::MAX_CNTLID)
                    )));
                }
                Err(Error::SubsystemParam {
                    param: "max_write_zeroes_size_kib",
                    ..
                }) => resp.err(RpcError::invalid_params(format!(
                    "Invalid max_write_zeroes_size_kib {}",
                    p.max_write_zeroes_size_kib.unwrap_or(0)
                ))),
                Err(e) => {
                    log_err("nvmf_create_subsystem", &e);
                    resp.err(internal(format!("Unable to create subsystem {}", p.nqn)));
                }
            }
        },
    )?;
    reg(
        r,
        "nvmf_delete_subsystem",
        RUNTIME,
        t,
        |t, p: NqnParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            t.delete_subsystem(&p.nqn, move |r| match r {
                Ok(()) => resp.ok(json!(true)),
                Err(e) => {
                    log_err("nvmf_delete_subsystem", &e);
                    resp.err(invalid());
                }
            });
        },
    )?;
    reg(
        r,
        "nvmf_subsystem_add_ns",
        RUNTIME,
        t,
        |t, p: AddNsParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            t.add_ns(&p.nqn, &p.namespace, move |r| match r {
                Ok(nsid) => resp.ok(json!(nsid)),
                Err(e) => {
                    log_err("nvmf_subsystem_add_ns", &e);
                    resp.err(invalid());
                }
            });
        },
    )?;
    reg(
        r,
        "nvmf_subsystem_remove_ns",
        RUNTIME,
        t,
        |t, p: RemoveNsParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            t.remove_ns(&p.nqn, p.nsid, move |r| match r {
                Ok(()) => resp.ok(json!(true)),
                Err(e) => {
                    log_err("nvmf_subsystem_remove_ns", &e);
                    resp.err(invalid());
                }
            });
        },
    )?;
    reg(
        r,
        "nvmf_subsystem_add_listener",
        RUNTIME,
        t,
        |t, p: ListenerParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            match t.add_listener(&p) {
                Ok(()) => resp.ok(json!(true)),
                Err(Error::NotRunning) => resp.err(internal("Internal error")),
                Err(e @ Error::SecureAnyHost) => {
                    log_err("nvmf_subsystem_add_listener", &e);
                    resp.err(internal(e.to_string()));
                }
                Err(e) => {
                    log_err("nvmf_subsystem_add_listener", &e);
                    resp.err(invalid());
                }
            }
        },
    )?;
    reg(
        r,
        "nvmf_subsystem_remove_listener",
        RUNTIME,
        t,
        |t, p: ListenerParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            t.remove_listener(&p, move |r| match r {
                Ok(()) => resp.ok(json!(true)),
                Err(e) => {
                    log_err("nvmf_subsystem_remove_listener", &e);
                    resp.err(invalid());
                }
            });
        },
    )?;
    reg(
        r,
        "nvmf_subsystem_add_host",
        RUNTIME,
        t,
        |t, p: HostParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            match t.add_host_ext(
                &p.nqn,
                &p.host,
                p.psk.as_deref(),
                p.dhchap_key.as_deref(),
                p.dhchap_ctrlr_key.as_deref(),
            ) {
                Ok(()) => resp.ok(json!(true)),
                Err(e @ (Error::NoSubsystem(_) | Error::NoKey(_))) => {
                    log_err("nvmf_subsystem_add_host", &e);
                    resp.err(invalid());
                }
                Err(e) => {
                    log_err("nvmf_subsystem_add_host", &e);
                    resp.err(internal("Internal error"));
                }
            }
        },
    )?;
    reg(
        r,
        "nvmf_subsystem_remove_host",
        RUNTIME,
        t,
        |t, p: HostParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            match t.remove_host(&p.nqn, &p.host) {
                Ok(()) => resp.ok(json!(true)),
                Err(e @ Error::NoSubsystem(_)) => {
                    log_err("nvmf_subsystem_remove_host", &e);
                    resp.err(invalid());
                }
                Err(e) => {
                    log_err("nvmf_subsystem_remove_host", &e);
                    resp.err(internal("Internal error"));
                }
            }
        },
    )?;
    reg(
        r,
        "nvmf_subsystem_set_keys",
        RUNTIME,
        t,
        |t, p: SetKeysParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Invalid parameters") else {
                return;
            };
            match t.set_keys(
                &p.nqn,
                &p.host,
                p.dhchap_key.as_deref(),
                p.dhchap_ctrlr_key.as_deref(),
            ) {
                Ok(()) => resp.ok(json!(true)),
                Err(e @ (Error::NoSubsystem(_) | Error::NoKey(_))) => {
                    log_err("nvmf_subsystem_set_keys", &e);
                    resp.err(invalid());
                }
                Err(e) => {
                    // SPDK answers the errno (-EINVAL: no such host, a
                    // controller key without a host key).
                    log_err("nvmf_subsystem_set_keys", &e);
                    resp.err(RpcError::from_errno(libc::EINVAL));
                }
            }
        },
    )?;
    reg(
        r,
        "nvmf_subsystem_allow_any_host",
        RUNTIME,
        t,
        |t, p: AllowAnyHostParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            match t.allow_any_host(&p.nqn, p.allow_any_host) {
                Ok(()) => resp.ok(json!(true)),
                Err(e @ Error::NoSubsystem(_)) => {
                    log_err("nvmf_subsystem_allow_any_host", &e);
                    resp.err(invalid());
                }
                Err(e) => {
                    log_err("nvmf_subsystem_allow_any_host", &e);
                    resp.err(internal("Internal error"));
                }
            }
        },
    )?;
    reg(
        r,
        "nvmf_get_subsystems",
        RUNTIME,
        t,
        |t, p: GetSubsystemsParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            match t.subsystems_json(p.nqn.as_deref()) {
                Ok(v) => resp.ok(Value::Array(v)),
                Err(_) => resp.err(RpcError::from_errno(libc::ENODEV)),
            }
        },
    )?;
    reg(
        r,
        "nvmf_subsystem_get_controllers",
        RUNTIME,
        t,
        |t, p: NqnParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target") else {
                return;
            };
            match t.controllers_json(&p.nqn) {
                Ok(v) => resp.ok(Value::Array(v)),
                Err(_) => resp.err(invalid()),
            }
        },
    )?;
    reg(
        r,
        "nvmf_subsystem_get_qpairs",
        RUNTIME,
        t,
        |t, p: NqnParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target") else {
                return;
            };
            t.qpairs_json(&p.nqn, move |r| match r {
                Ok(v) => resp.ok(Value::Array(v)),
                Err(_) => resp.err(invalid()),
            });
        },
    )?;
    reg(
        r,
        "nvmf_subsystem_get_listeners",
        RUNTIME,
        t,
        |t, p: NqnParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target") else {
                return;
            };
            match t.listeners_json(&p.nqn) {
                Ok(v) => resp.ok(Value::Array(v)),
                Err(_) => resp.err(invalid()),
            }
        },
    )?;
    register_referrals(r, t)
}

/// The discovery referral methods (SPDK's answers: -32602 for params,
/// -32603 with SPDK's texts otherwise).
fn register_referrals(r: &MethodRegistry, t: &Target) -> Result<(), jsonrpc::Error> {
    reg(
        r,
        "nvmf_discovery_add_referral",
        RUNTIME,
        t,
        |t, p: ReferralParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            if p.address.trsvcid.as_deref().is_none_or(str::is_empty) {
                return resp.err(internal("Service ID is required."));
            }
            match t.add_referral(&p) {
                Ok(()) => resp.ok(json!(true)),
                Err(e @ (Error::ListenAddress(_) | Error::InvalidTransport(_))) => {
                    log_err("nvmf_discovery_add_referral", &e);
                    resp.err(invalid());
                }
                Err(e) => {
                    log_err("nvmf_discovery_add_referral", &e);
                    resp.err(internal("Internal error"));
                }
            }
        },
    )?;
    reg(
        r,
        "nvmf_discovery_remove_referral",
        RUNTIME,
        t,
        |t, p: ReferralParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            // SPDK's remove decoder has no `secure_channel`.
            if p.secure_channel.is_some() {
                return resp.err(invalid());
            }
            match t.remove_referral(&p) {
                Ok(()) => resp.ok(json!(true)),
                Err(e @ (Error::ListenAddress(_) | Error::InvalidTransport(_))) => {
                    log_err("nvmf_discovery_remove_referral", &e);
                    resp.err(invalid());
                }
                Err(e) => {
                    log_err("nvmf_discovery_remove_referral", &e);
                    resp.err(internal("Unable to remove a referral."));
                }
            }
        },
    )?;
    reg(
        r,
        "nvmf_discovery_get_referrals",
        RUNTIME,
        t,
        |t, p: GetReferralsParams, resp| {
            let Some(resp) = tgt_ok(p.tgt_name.as_deref(), resp, "Unable to find a target.") else {
                return;
            };
            resp.ok(Value::Array(t.referrals_json()));
        },
    )
}
