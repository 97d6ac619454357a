//! The transport address an RPC names a controller by (SPDK's transport
//! ID fields), as `bdev_nvme_attach_controller` and
//! `bdev_nvme_start_discovery` take it: flattened into their params.

use bdevkit_jsonrpc::RpcError;
use serde::{Deserialize, Serialize};

/// `trtype`, `traddr`, `adrfam` and `trsvcid` of an RPC.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TridParams {
    /// Transport (`tcp`, `pcie`, ...; any case).
    pub trtype: String,
    /// Address (an IP address for TCP, a PCI address or `emu:NAME`).
    pub traddr: String,
    /// Address family (`ipv4` or `ipv6`; any case).
    #[serde(default)]
    pub adrfam: Option<String>,
    /// Service id (a TCP port).
    #[serde(default)]
    pub trsvcid: Option<String>,
}

impl TridParams {
    /// Whether the transport is `t` (SPDK's names match in any case).
    #[must_use]
    pub fn is(&self, t: &str) -> bool {
        self.trtype.eq_ignore_ascii_case(t)
    }

    /// The TCP port, `default` when `trsvcid` is not given, with the
    /// address family checked.
    ///
    /// # Errors
    /// -22 with SPDK's message for an unknown `adrfam` or a `trsvcid`
    /// that is not a port.
    pub fn tcp_port<'a>(&'a self, default: &'a str) -> Result<&'a str, RpcError> {
        if let Some(a) = &self.adrfam {
            if !a.eq_ignore_ascii_case("ipv4") && !a.eq_ignore_ascii_case("ipv6") {
                return Err(RpcError::new(-22, format!("Failed to parse adrfam: {a}")));
            }
        }
        let svcid = self.trsvcid.as_deref().unwrap_or(default);
        if svcid.len() >= 32 {
            return Err(RpcError::new(-22, format!("trsvcid too long: {svcid}")));
        }
        if svcid.parse::<u16>().is_err() {
            return Err(RpcError::new(-22, format!("Invalid trsvcid {svcid}")));
        }
        Ok(svcid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_families_are_checked() {
        let t = |adrfam: Option<&str>, svcid: Option<&str>| TridParams {
            trtype: "TCP".into(),
            traddr: "127.0.0.1".into(),
            adrfam: adrfam.map(String::from),
            trsvcid: svcid.map(String::from),
        };
        assert!(t(None, None).is("tcp"));
        assert_eq!(t(None, None).tcp_port("4420").unwrap(), "4420");
        assert_eq!(t(Some("IPv6"), Some("1")).tcp_port("4420").unwrap(), "1");
        let e = t(Some("ipx"), None).tcp_port("4420").unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (-22, "Failed to parse adrfam: ipx")
        );
        let e = t(None, Some("x")).tcp_port("4420").unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (-22, "Invalid trsvcid x"));
        let long = "1".repeat(40);
        assert!(t(None, Some(&long))
            .tcp_port("4420")
            .unwrap_err()
            .message
            .starts_with("trsvcid too long"));
    }
}
