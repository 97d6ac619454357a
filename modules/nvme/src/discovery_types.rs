//! What a discovery service is started with, and a discovery log entry
//! as the service sees it: which entries are the same path, and SPDK's
//! trid JSON of one.

use bdevkit_nvme_driver::TcpOptions;
use bdevkit_nvme_spec::discovery::{adrfam, trtype, DiscoveryLogEntry};
use serde_json::{json, Value};

use crate::reconnect::Reconnect;

/// What a discovery service is started with.
#[derive(Debug, Clone)]
pub struct DiscoveryArgs {
    /// Service name, prefix of the controllers it attaches.
    pub name: String,
    /// The discovery controller's address (`subnqn` is the discovery NQN),
    /// host NQN and connect timeout; the attached controllers use the
    /// same host NQN.
    pub tcp: TcpOptions,
    /// Whether `hostnqn` was given (saved configs repeat it only then).
    pub hostnqn_given: bool,
    /// Answer the start once the subsystems of the first log are attached.
    pub wait_for_attach: bool,
    /// Give up a start not done in this long (0: no limit; implies
    /// `wait_for_attach`).
    pub attach_timeout_ms: u64,
    /// Reconnect knobs of the attached controllers (`None`: the module's).
    pub reconnect: Option<Reconnect>,
}

/// The same subsystem path (transport, address, service id, NQN).
pub(crate) fn same_path(a: &DiscoveryLogEntry, b: &DiscoveryLogEntry) -> bool {
    a.trtype == b.trtype
        && a.adrfam == b.adrfam
        && a.traddr() == b.traddr()
        && a.trsvcid() == b.trsvcid()
        && a.subnqn() == b.subnqn()
}

/// SPDK's trid JSON of a log entry (known transport and family names only).
pub(crate) fn entry_trid(e: &DiscoveryLogEntry) -> Value {
    let mut m = serde_json::Map::new();
    let tr = match e.trtype {
        trtype::TCP => Some("TCP"),
        trtype::RDMA => Some("RDMA"),
        trtype::FC => Some("FC"),
        _ => None,
    };
    if let Some(t) = tr {
        m.insert("trtype".into(), json!(t));
    }
    let af = match e.adrfam {
        adrfam::IPV4 => Some("IPv4"),
        adrfam::IPV6 => Some("IPv6"),
        adrfam::IB => Some("IB"),
        adrfam::FC => Some("FC"),
        _ => None,
    };
    if let Some(a) = af {
        m.insert("adrfam".into(), json!(a));
    }
    m.insert("traddr".into(), json!(e.traddr()));
    m.insert("trsvcid".into(), json!(e.trsvcid()));
    m.insert("subnqn".into(), json!(e.subnqn()));
    Value::Object(m)
}
