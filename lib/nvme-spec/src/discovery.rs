//! The discovery log page (LID 0x70): a 1024-byte header followed by
//! 1024-byte entries, one per subsystem port a discovery controller
//! reports.
//!
//! A target builds the page with [`build_discovery_log`] and serves the
//! part a Get Log Page asks for with [`crate::log::copy_log_page`]. An
//! initiator reads the header first (NUMREC says how many entries follow),
//! then the whole page, parses it with [`parse_discovery_log`], and starts
//! over when GENCTR changed between the reads.

use std::borrow::Cow;

use zerocopy::little_endian::{U16, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::{Error, Result};
use crate::text::{self, PAD_NUL};

/// Transport types (TRTYPE).
pub mod trtype {
    /// RDMA.
    pub const RDMA: u8 = 1;
    /// Fibre Channel.
    pub const FC: u8 = 2;
    /// TCP.
    pub const TCP: u8 = 3;
    /// Intra-host (loopback).
    pub const LOOP: u8 = 0xfe;
}

/// Address families (ADRFAM).
pub mod adrfam {
    /// IPv4.
    pub const IPV4: u8 = 1;
    /// IPv6.
    pub const IPV6: u8 = 2;
    /// InfiniBand.
    pub const IB: u8 = 3;
    /// Fibre Channel.
    pub const FC: u8 = 4;
    /// Intra-host.
    pub const LOOP: u8 = 0xfe;
}

/// Subsystem types (SUBTYPE).
pub mod subtype {
    /// A referral to another discovery service.
    pub const DISCOVERY_REFERRAL: u8 = 1;
    /// An NVM subsystem.
    pub const NVME: u8 = 2;
    /// The discovery subsystem the host is talking to.
    pub const CURRENT_DISCOVERY: u8 = 3;
}

/// Transport requirements (TREQ).
pub mod treq {
    /// Secure channel: not specified (bits 1:0).
    pub const SECURE_CHANNEL_NOT_SPECIFIED: u8 = 0;
    /// Secure channel: required.
    pub const SECURE_CHANNEL_REQUIRED: u8 = 1;
    /// Secure channel: not required.
    pub const SECURE_CHANNEL_NOT_REQUIRED: u8 = 2;
    /// SQ flow control may be disabled (bit 2).
    pub const DISABLE_SQ_FLOW_CONTROL: u8 = 1 << 2;
}

/// Entry flags (EFLAGS).
pub mod eflags {
    /// Duplicate returned information.
    pub const DUPLICATE_INFO: u16 = 1 << 0;
    /// Explicit persistent connection supported for discovery.
    pub const PERSISTENT_CONNECTION: u16 = 1 << 1;
    /// No CDC connectivity.
    pub const NO_CDC_CONNECTIVITY: u16 = 1 << 2;
}

/// NVMe/TCP security types (TSAS byte 0, SECTYPE).
pub mod sectype {
    /// No security.
    pub const NONE: u8 = 0;
    /// TLS 1.2.
    pub const TLS12: u8 = 1;
    /// TLS 1.3.
    pub const TLS13: u8 = 2;
}

/// The discovery log page header (1024 bytes).
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct DiscoveryLogHeader {
    /// Generation counter: changes whenever the page changes.
    pub genctr: U64,
    /// Number of records (entries) in the page.
    pub numrec: U64,
    /// Record format (0).
    pub recfmt: U16,
    /// Reserved.
    pub rsvd18: [u8; 1006],
}

/// One discovery log page entry (1024 bytes).
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct DiscoveryLogEntry {
    /// Transport type ([`trtype`]).
    pub trtype: u8,
    /// Address family ([`adrfam`]).
    pub adrfam: u8,
    /// Subsystem type ([`subtype`]).
    pub subtype: u8,
    /// Transport requirements ([`treq`]).
    pub treq: u8,
    /// Port id.
    pub portid: U16,
    /// Controller id (0xffff: dynamic controller model).
    pub cntlid: U16,
    /// Admin max SQ size.
    pub asqsz: U16,
    /// Entry flags ([`eflags`]).
    pub eflags: U16,
    /// Reserved.
    pub rsvd12: [u8; 20],
    /// Transport service id (the TCP port, as text).
    pub trsvcid: [u8; 32],
    /// Reserved.
    pub rsvd64: [u8; 192],
    /// Subsystem NQN.
    pub subnqn: [u8; 256],
    /// Transport address (the IP address, as text).
    pub traddr: [u8; 256],
    /// Transport specific address subtype (TCP: byte 0 is [`sectype`]).
    pub tsas: [u8; 256],
}

const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<DiscoveryLogHeader>() == 1024);
    assert!(offset_of!(DiscoveryLogHeader, numrec) == 8);
    assert!(offset_of!(DiscoveryLogHeader, recfmt) == 16);
    type E = DiscoveryLogEntry;
    assert!(size_of::<E>() == 1024);
    assert!(offset_of!(E, portid) == 4);
    assert!(offset_of!(E, cntlid) == 6);
    assert!(offset_of!(E, asqsz) == 8);
    assert!(offset_of!(E, eflags) == 10);
    assert!(offset_of!(E, trsvcid) == 32);
    assert!(offset_of!(E, subnqn) == 256);
    assert!(offset_of!(E, traddr) == 512);
    assert!(offset_of!(E, tsas) == 768);
};

impl Default for DiscoveryLogEntry {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

impl DiscoveryLogEntry {
    /// An NVMe/TCP entry: subsystem `subnqn` of type `subtype` reachable at
    /// `traddr`:`trsvcid` (address family `adrfam`) through port `portid`;
    /// dynamic controller (cntlid 0xffff), admin SQ size 32, no security.
    pub fn tcp(
        subtype: u8,
        subnqn: &str,
        adrfam: u8,
        traddr: &str,
        trsvcid: &str,
        portid: u16,
    ) -> Result<Self> {
        let mut e = DiscoveryLogEntry {
            trtype: trtype::TCP,
            adrfam,
            subtype,
            portid: U16::new(portid),
            cntlid: U16::new(0xffff),
            asqsz: U16::new(32),
            ..DiscoveryLogEntry::default()
        };
        e.set_subnqn(subnqn)?;
        e.set_traddr(traddr)?;
        e.set_trsvcid(trsvcid)?;
        Ok(e)
    }

    /// Transport service id, trimmed.
    #[must_use]
    pub fn trsvcid(&self) -> Cow<'_, str> {
        text::trim(&self.trsvcid)
    }

    /// Subsystem NQN, trimmed.
    #[must_use]
    pub fn subnqn(&self) -> Cow<'_, str> {
        text::trim(&self.subnqn)
    }

    /// Transport address, trimmed.
    #[must_use]
    pub fn traddr(&self) -> Cow<'_, str> {
        text::trim(&self.traddr)
    }

    /// Sets the transport service id (at most 31 bytes, NUL padded).
    pub fn set_trsvcid(&mut self, s: &str) -> Result<()> {
        text::pad(&mut self.trsvcid, s, PAD_NUL, "trsvcid")
    }

    /// Sets the subsystem NQN (at most 255 bytes, NUL padded).
    pub fn set_subnqn(&mut self, s: &str) -> Result<()> {
        text::pad(&mut self.subnqn, s, PAD_NUL, "subnqn")
    }

    /// Sets the transport address (at most 255 bytes, NUL padded).
    pub fn set_traddr(&mut self, s: &str) -> Result<()> {
        text::pad(&mut self.traddr, s, PAD_NUL, "traddr")
    }
}

/// The bytes of a discovery log page with generation counter `genctr`
/// and `entries`.
#[must_use]
pub fn build_discovery_log(genctr: u64, entries: &[DiscoveryLogEntry]) -> Vec<u8> {
    let header = DiscoveryLogHeader {
        genctr: U64::new(genctr),
        numrec: U64::new(entries.len() as u64),
        recfmt: U16::ZERO,
        rsvd18: [0; 1006],
    };
    let mut page = Vec::with_capacity(1024 * (entries.len() + 1));
    page.extend_from_slice(header.as_bytes());
    page.extend_from_slice(entries.as_bytes());
    page
}

/// A parsed discovery log page, viewing the caller's buffer.
#[derive(Debug, Clone, Copy)]
pub struct DiscoveryLog<'a> {
    /// The header.
    pub header: &'a DiscoveryLogHeader,
    /// The entries present in the buffer (at most NUMREC of them).
    pub entries: &'a [DiscoveryLogEntry],
}

impl DiscoveryLog<'_> {
    /// Whether the buffer held all NUMREC entries (otherwise read the
    /// page again with a length of `(numrec + 1) * 1024`).
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.entries.len() as u64 == self.header.numrec.get()
    }
}

/// Parses a discovery log page: the header, then as many whole entries
/// as both NUMREC and `buf` allow. Fails only when `buf` is shorter than
/// the header.
pub fn parse_discovery_log(buf: &[u8]) -> Result<DiscoveryLog<'_>> {
    let too_small = |need| Error::BufferTooSmall {
        need,
        have: buf.len(),
    };
    let (header, rest) = DiscoveryLogHeader::ref_from_prefix(buf).map_err(|_| too_small(1024))?;
    let avail = rest.len() / size_of::<DiscoveryLogEntry>();
    let n = usize::try_from(header.numrec.get()).map_or(avail, |n| n.min(avail));
    // Cannot fail: `rest` holds `avail >= n` entries.
    let (entries, _) = <[DiscoveryLogEntry]>::ref_from_prefix_with_elems(rest, n)
        .map_err(|_| too_small(1024 * (n + 1)))?;
    Ok(DiscoveryLog { header, entries })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabrics::DISCOVERY_NQN;
    use proptest::prelude::*;

    #[test]
    fn build_then_parse() {
        let e1 = DiscoveryLogEntry::tcp(
            subtype::CURRENT_DISCOVERY,
            DISCOVERY_NQN,
            adrfam::IPV4,
            "127.0.0.1",
            "4420",
            1,
        )
        .unwrap();
        let e2 = DiscoveryLogEntry::tcp(
            subtype::NVME,
            "nqn.2016-06.io.spdk:cnode1",
            adrfam::IPV4,
            "10.0.0.1",
            "4421",
            2,
        )
        .unwrap();
        let page = build_discovery_log(7, &[e1.clone(), e2.clone()]);
        assert_eq!(page.len(), 3072);
        let log = parse_discovery_log(&page).unwrap();
        assert!(log.is_complete());
        assert_eq!(log.header.genctr.get(), 7);
        assert_eq!(log.entries, &[e1, e2]);
        assert_eq!(log.entries[1].subnqn(), "nqn.2016-06.io.spdk:cnode1");
        assert_eq!(log.entries[1].traddr(), "10.0.0.1");
        assert_eq!(log.entries[1].trsvcid(), "4421");
        assert_eq!(log.entries[1].cntlid.get(), 0xffff);
        // Only the header was read: no entries yet, not complete.
        let head = parse_discovery_log(&page[..1024]).unwrap();
        assert_eq!((head.entries.len(), head.is_complete()), (0, false));
        assert_eq!(head.header.numrec.get(), 2);
        assert!(parse_discovery_log(&page[..1000]).is_err());
        assert!(DiscoveryLogEntry::tcp(2, "x", 1, &"a".repeat(256), "1", 1).is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..4200), numrec: u64) {
            let mut buf = buf;
            if buf.len() >= 16 {
                buf[8..16].copy_from_slice(&numrec.to_le_bytes());
            }
            if let Ok(log) = parse_discovery_log(&buf) {
                prop_assert!(log.entries.len() as u64 <= numrec);
                prop_assert!((log.entries.len() + 1) * 1024 <= buf.len());
            }
        }
    }
}
