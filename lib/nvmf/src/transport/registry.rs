//! The transport registry: every transport type the target implements,
//! one line each. `nvmf_create_transport -t NAME` and listen addresses
//! (`trtype`) find their type here, so the option and address parsers
//! that need to know which types exist live here too.

use super::TransportDef;
use crate::addr::{ListenAddr, ListenAddressParams};
use crate::error::{Error, Result};
use crate::opts::{CreateTransportParams, TransportOpts};

/// The transport types (a new transport adds its definition here).
pub(crate) static TRANSPORTS: &[&TransportDef] = &[
    &crate::tcp::TRANSPORT,
    // The seam's proof: a loopback transport, for tests only.
    #[cfg(test)]
    &super::loopback::TRANSPORT,
];

/// The type `trtype` names (any case).
pub(crate) fn find(trtype: &str) -> Option<&'static TransportDef> {
    TRANSPORTS
        .iter()
        .copied()
        .find(|d| d.name.eq_ignore_ascii_case(trtype))
}

impl TransportOpts {
    /// The options `p` asks for: the defaults of its transport type, then
    /// what `p` sets, validated. An unknown type is
    /// [`Error::InvalidTransport`].
    pub fn from_params(p: &CreateTransportParams) -> Result<TransportOpts> {
        let def = find(&p.trtype).ok_or_else(|| Error::InvalidTransport(p.trtype.clone()))?;
        (def.opts_init)().apply(p)
    }
}

impl ListenAddr {
    /// Parses and checks `p` (SPDK's `rpc_listen_address_to_trid` rules):
    /// a registered trtype, then the address (`ListenAddr::parse`).
    pub fn from_params(p: &ListenAddressParams) -> Result<ListenAddr> {
        let def = find(&p.trtype).ok_or_else(|| Error::InvalidTransport(p.trtype.clone()))?;
        ListenAddr::parse(def.name, p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_found_in_any_case() {
        assert_eq!(find("tcp").map(|d| d.name), Some("TCP"));
        assert_eq!(find("TcP").map(|d| (d.opts_init)().trtype), Some("TCP"));
        assert!(find("RDMA").is_none());
        let names: Vec<&str> = TRANSPORTS.iter().map(|d| d.name).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
        assert_eq!(unique.len(), names.len(), "two types of one name");
    }
}
