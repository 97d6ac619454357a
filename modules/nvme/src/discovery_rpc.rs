//! The discovery RPCs (SPDK's names, params, results and errors):
//! `bdev_nvme_start_discovery` (result `true`; -17 for a name or a
//! discovery address in use, -110 when `attach_timeout_ms` passes),
//! `bdev_nvme_stop_discovery` (`true`; -2 for an unknown name) and
//! `bdev_nvme_get_discovery_info` (`[{name, trid, referrals: [{trid}]}]`),
//! and the public surface they call ([`start_discovery`],
//! [`stop_discovery`], [`discovery_info`]). The service itself is in
//! `discovery.rs`.

use std::time::Duration;

use bdevkit::bdev::BdevManager;
use bdevkit_jsonrpc::{self as jsonrpc, MethodRegistry, RpcError, RUNTIME};
use bdevkit_nvme_driver::TcpOptions;
use bdevkit_nvme_spec::fabrics::DISCOVERY_NQN;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::discovery::{DiscoveryArgs, Done, Ops};
use crate::module::{attach, detach_paths, module};
use crate::reconnect::{Reconnect, ReconnectParams};
use crate::trid::TridParams;
use crate::{Error, Result};

/// The discovery controllers' TCP port when `trsvcid` is not given (the
/// IANA NVMe-oF discovery port, nvme-cli's default).
pub const DISCOVERY_PORT: &str = "8009";

/// `bdev_nvme_start_discovery` params.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct StartDiscoveryParams {
    pub name: String,
    #[serde(flatten)]
    pub trid: TridParams,
    #[serde(default)]
    pub hostnqn: Option<String>,
    #[serde(default)]
    pub wait_for_attach: bool,
    #[serde(default)]
    pub attach_timeout_ms: Option<u64>,
    #[serde(flatten)]
    pub reconnect: ReconnectParams,
}

/// `bdev_nvme_stop_discovery` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopDiscoveryParams {
    /// Service name.
    pub name: String,
}

/// `bdev_nvme_get_discovery_info` params (none).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoveryInfoParams {}

/// The reconnect knobs of an RPC: `None` when none is given, else the
/// given ones over the module's, checked (SPDK's rules).
///
/// # Errors
/// -22 with the rule broken.
pub fn reconnect_params(
    mgr: &BdevManager,
    p: &ReconnectParams,
) -> Result<Option<Reconnect>, RpcError> {
    let d = crate::options(mgr)
        .map(|o| o.reconnect())
        .unwrap_or_default();
    p.over(d).map_err(|e| RpcError::new(-22, e))
}

/// The service arguments of `p` (SPDK's checks and messages).
///
/// # Errors
/// -22 for a bad field, -95 for a transport other than TCP.
pub fn discovery_args(
    mgr: &BdevManager,
    p: &StartDiscoveryParams,
) -> Result<DiscoveryArgs, RpcError> {
    let t = &p.trid;
    let known = ["tcp", "rdma", "pcie", "fc", "vfiouser"];
    if !known.iter().any(|k| t.is(k)) {
        return Err(RpcError::new(
            -22,
            format!("Failed to parse trtype: {}", t.trtype),
        ));
    }
    if !t.is("tcp") {
        return Err(RpcError::from_errno(libc::ENOTSUP));
    }
    if t.traddr.len() >= 256 {
        return Err(RpcError::new(-22, format!("traddr too long: {}", t.traddr)));
    }
    let svcid = t.tcp_port(DISCOVERY_PORT)?;
    if let Some(n) = &p.hostnqn {
        if let Err(e) = bdevkit_nvme_spec::fabrics::validate_nqn(n) {
            return Err(RpcError::new(-22, format!("Invalid hostnqn {n}: {e}")));
        }
    }
    let reconnect = reconnect_params(mgr, &p.reconnect)?;
    let mut tcp = TcpOptions::new(&t.traddr, svcid, DISCOVERY_NQN);
    tcp.hostnqn.clone_from(&p.hostnqn);
    let timeout_ms = p.attach_timeout_ms.unwrap_or(0);
    if timeout_ms > 0 {
        tcp.connect_timeout = tcp.connect_timeout.min(Duration::from_millis(timeout_ms));
    }
    Ok(DiscoveryArgs {
        name: p.name.clone(),
        tcp,
        hostnqn_given: p.hostnqn.is_some(),
        wait_for_attach: p.wait_for_attach,
        attach_timeout_ms: timeout_ms,
        reconnect,
    })
}

/// Starts discovery service `args` on this (app) thread; `done` gets its
/// outcome here (see `bdev_nvme_start_discovery`).
pub fn start_discovery(mgr: &BdevManager, args: DiscoveryArgs, done: Done) {
    let m = match module(mgr) {
        Ok(m) => m,
        Err(e) => return done(Err(e)),
    };
    if let Some(r) = args.reconnect {
        if let Err(e) = r.validate() {
            return done(Err(Error::InvalidArg(e)));
        }
    }
    let ops = Ops {
        attach,
        detach: detach_paths,
        exists: |mgr, name| crate::controller(mgr, name).is_some(),
        applied: m.applied(),
    };
    m.discoveries().start(mgr, args, ops, done);
}

/// Stops discovery service `name`: every controller it attached is
/// detached; `done` runs on this (app) thread.
pub fn stop_discovery(mgr: &BdevManager, name: &str, done: Done) {
    match module(mgr) {
        Ok(m) => m.discoveries().stop(name, done),
        Err(e) => done(Err(e)),
    }
}

/// `bdev_nvme_get_discovery_info`: the services, their discovery
/// controller and referrals.
#[must_use]
pub fn discovery_info(mgr: &BdevManager) -> Value {
    module(mgr).map_or_else(|_| json!([]), |m| m.discoveries().info_json())
}

/// SPDK's answer for `e`: -17 for a name or address in use, `-errno`
/// otherwise.
fn rpc_error(e: &Error) -> RpcError {
    match e {
        Error::Exists(_) => RpcError::from_errno(libc::EEXIST),
        Error::NotFound(_) => RpcError::from_errno(libc::ENOENT),
        e => RpcError::from_errno(e.errno()),
    }
}

/// Registers the discovery RPCs. Handlers run on the app thread.
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_start_discovery",
        RUNTIME,
        move |p: StartDiscoveryParams, resp| {
            let args = match discovery_args(&m, &p) {
                Ok(a) => a,
                Err(e) => return resp.err(e),
            };
            start_discovery(
                &m,
                args,
                Box::new(move |r| match r {
                    Ok(()) => resp.ok(json!(true)),
                    Err(e) => {
                        tracing::error!(error = %e, "start discovery failed");
                        resp.err(rpc_error(&e));
                    }
                }),
            );
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_stop_discovery",
        RUNTIME,
        move |p: StopDiscoveryParams, resp| {
            stop_discovery(
                &m,
                &p.name,
                Box::new(move |r| match r {
                    Ok(()) => resp.ok(json!(true)),
                    Err(e) => resp.err(rpc_error(&e)),
                }),
            );
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_get_discovery_info",
        RUNTIME,
        move |_: DiscoveryInfoParams, resp| resp.ok(discovery_info(&m)),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: Value) -> StartDiscoveryParams {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn params_are_checked_as_spdk_does() {
        let mgr = BdevManager::default();
        let ok = json!({"name": "nvme", "trtype": "tcp", "traddr": "127.0.0.1"});
        let a = discovery_args(&mgr, &p(ok.clone())).unwrap();
        assert_eq!(a.tcp.trsvcid, DISCOVERY_PORT);
        assert_eq!(a.tcp.subnqn, DISCOVERY_NQN);
        assert!(!a.wait_for_attach && a.reconnect.is_none());
        let mut bad = ok.clone();
        bad["adrfam"] = json!("ipx");
        let e = discovery_args(&mgr, &p(bad)).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (-22, "Failed to parse adrfam: ipx")
        );
        let mut bad = ok.clone();
        bad["trtype"] = json!("carrier-pigeon");
        assert_eq!(discovery_args(&mgr, &p(bad)).unwrap_err().code, -22);
        let mut rdma = ok.clone();
        rdma["trtype"] = json!("RDMA");
        assert_eq!(
            discovery_args(&mgr, &p(rdma)).unwrap_err().code,
            -libc::ENOTSUP
        );
        let mut bad = ok.clone();
        bad["trsvcid"] = json!("x".repeat(40));
        assert!(discovery_args(&mgr, &p(bad))
            .unwrap_err()
            .message
            .starts_with("trsvcid too long"));
        let mut bad = ok.clone();
        bad["hostnqn"] = json!("not-an-nqn");
        assert_eq!(discovery_args(&mgr, &p(bad)).unwrap_err().code, -22);
        let mut bad = ok.clone();
        bad["ctrlr_loss_timeout_sec"] = json!(5);
        // reconnect_delay_sec 0 with a loss timeout: refused.
        assert_eq!(discovery_args(&mgr, &p(bad)).unwrap_err().code, -22);
        let mut good = ok;
        good["ctrlr_loss_timeout_sec"] = json!(-1);
        good["reconnect_delay_sec"] = json!(1);
        good["attach_timeout_ms"] = json!(500);
        let a = discovery_args(&mgr, &p(good)).unwrap();
        assert_eq!(a.reconnect.unwrap().ctrlr_loss_timeout_sec, -1);
        assert_eq!(a.tcp.connect_timeout, Duration::from_millis(500));
        assert_eq!(a.attach_timeout_ms, 500);
    }

    #[test]
    fn unknown_params_are_refused() {
        let v = json!({"name": "n", "trtype": "tcp", "traddr": "1.2.3.4", "bogus": 1});
        assert!(serde_json::from_value::<StartDiscoveryParams>(v).is_err());
    }
}
