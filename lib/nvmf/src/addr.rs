//! Transport addresses (SPDK's `listen_address` object: `trtype`,
//! `adrfam`, `traddr`, `trsvcid`) and their socket addresses. Which
//! `trtype`s exist is the transport registry's to say:
//! `ListenAddr::from_params` is in `transport/registry.rs`, and checks
//! the address with [`ListenAddr::parse`] here.

use std::net::{IpAddr, SocketAddr};

use bdevkit_nvme_spec::discovery::DiscoveryLogEntry;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::{Error, Result};

/// A transport's discovery log entry for a listener (SPDK's
/// `listener_discover`): subtype, subsystem NQN, the listener, its port
/// id; `None` when the entry cannot be made (a field too long).
pub(crate) type DiscoverFn = fn(u8, &str, &ListenAddr, u16) -> Option<DiscoveryLogEntry>;

/// Address families of IP listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AdrFam {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
}

impl AdrFam {
    /// SPDK's name (`IPv4`, `IPv6`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            AdrFam::Ipv4 => "IPv4",
            AdrFam::Ipv6 => "IPv6",
        }
    }

    /// The discovery log's ADRFAM value.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            AdrFam::Ipv4 => bdevkit_nvme_spec::discovery::adrfam::IPV4,
            AdrFam::Ipv6 => bdevkit_nvme_spec::discovery::adrfam::IPV6,
        }
    }
}

/// `listen_address` as an RPC carries it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ListenAddressParams {
    /// Transport type (`tcp`, any case: a registered transport).
    pub trtype: String,
    /// Address family (`ipv4`, `ipv6`, any case; IPv4 when absent, as SPDK).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adrfam: Option<String>,
    /// IP address.
    pub traddr: String,
    /// Port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trsvcid: Option<String>,
}

/// A validated transport address (an IP address and port).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListenAddr {
    /// Transport type, the registry's spelling (`TCP`).
    pub trtype: &'static str,
    /// Address family.
    pub adrfam: AdrFam,
    /// The address as given (SPDK reports it as given).
    pub traddr: String,
    /// The port as given.
    pub trsvcid: String,
    /// The socket address.
    pub sock: SocketAddr,
    /// A listener that takes TLS connections only (`secure_channel`);
    /// not part of the address (`same` ignores it).
    pub secure_channel: bool,
}

impl ListenAddr {
    /// Checks `p` as an address of transport `trtype` (SPDK's
    /// `rpc_listen_address_to_trid` rules, for IP transports): a known
    /// address family matching the address, a numeric port. The trtype
    /// was checked already (`from_params`).
    pub(crate) fn parse(trtype: &'static str, p: &ListenAddressParams) -> Result<ListenAddr> {
        let bad = |why: &str| Error::ListenAddress(format!("{why} ({p:?})"));
        let adrfam = match p.adrfam.as_deref() {
            None => AdrFam::Ipv4,
            Some(a) if a.eq_ignore_ascii_case("ipv4") => AdrFam::Ipv4,
            Some(a) if a.eq_ignore_ascii_case("ipv6") => AdrFam::Ipv6,
            Some(_) => return Err(bad("unsupported adrfam")),
        };
        let ip: IpAddr = p
            .traddr
            .parse()
            .map_err(|_| bad("traddr is not an IP address"))?;
        if matches!(
            (adrfam, ip),
            (AdrFam::Ipv4, IpAddr::V6(_)) | (AdrFam::Ipv6, IpAddr::V4(_))
        ) {
            return Err(bad("traddr does not match adrfam"));
        }
        let trsvcid = p.trsvcid.clone().unwrap_or_default();
        let port: u16 = trsvcid.parse().map_err(|_| bad("trsvcid is not a port"))?;
        if port == 0 {
            return Err(bad("trsvcid is not a port"));
        }
        Ok(ListenAddr {
            trtype,
            adrfam,
            traddr: p.traddr.clone(),
            trsvcid,
            sock: SocketAddr::new(ip, port),
            secure_channel: false,
        })
    }

    /// The address of an IP socket of transport `trtype` (the registry's
    /// spelling): a connected peer, or a listener.
    #[must_use]
    pub fn of_socket(trtype: &'static str, sock: SocketAddr) -> ListenAddr {
        ListenAddr {
            trtype,
            adrfam: if sock.is_ipv4() {
                AdrFam::Ipv4
            } else {
                AdrFam::Ipv6
            },
            traddr: sock.ip().to_string(),
            trsvcid: sock.port().to_string(),
            sock,
            secure_channel: false,
        }
    }

    /// SPDK's trid object: `{trtype, adrfam, traddr, trsvcid}`.
    #[must_use]
    pub fn to_json(&self) -> Value {
        json!({
            "trtype": self.trtype,
            "adrfam": self.adrfam.name(),
            "traddr": self.traddr,
            "trsvcid": self.trsvcid,
        })
    }

    /// Whether `other` names the same listener (same transport, same
    /// socket address).
    #[must_use]
    pub fn same(&self, other: &ListenAddr) -> bool {
        self.sock == other.sock && self.trtype == other.trtype
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}:{}", self.trtype, self.traddr, self.trsvcid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(
        trtype: &str,
        adrfam: Option<&str>,
        traddr: &str,
        trsvcid: Option<&str>,
    ) -> ListenAddressParams {
        ListenAddressParams {
            trtype: trtype.into(),
            adrfam: adrfam.map(Into::into),
            traddr: traddr.into(),
            trsvcid: trsvcid.map(Into::into),
        }
    }

    #[test]
    fn parse_rules() {
        let a = ListenAddr::from_params(&p("tcp", None, "127.0.0.1", Some("4420"))).unwrap();
        assert_eq!(a.adrfam, AdrFam::Ipv4);
        assert_eq!(
            a.to_json(),
            json!({"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "4420"})
        );
        assert!(ListenAddr::from_params(&p("rdma", None, "127.0.0.1", Some("4420"))).is_err());
        assert!(ListenAddr::from_params(&p("TCP", Some("ib"), "127.0.0.1", Some("1"))).is_err());
        assert!(ListenAddr::from_params(&p("TCP", Some("IPv6"), "127.0.0.1", Some("1"))).is_err());
        assert!(ListenAddr::from_params(&p("TCP", Some("ipv6"), "::1", Some("4420"))).is_ok());
        assert!(ListenAddr::from_params(&p("TCP", None, "host", Some("4420"))).is_err());
        assert!(ListenAddr::from_params(&p("TCP", None, "127.0.0.1", None)).is_err());
        assert!(ListenAddr::from_params(&p("TCP", None, "127.0.0.1", Some("x"))).is_err());
    }
}
