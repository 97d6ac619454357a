//! NVMe/TCP PDU headers (NVMe/TCP Transport Specification 1.0, §3.6):
//! the 8-byte common header and the header of each PDU type.

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::cmd::Sqe;
use crate::cpl::Cqe;

/// Bytes of a header or data digest (CRC32C).
pub const DIGEST_LEN: usize = 4;
/// PDU format version 1.0 (ICReq/ICResp PFV).
pub const PFV_1_0: u16 = 0;
/// Largest HPDA/CPDA (0's based dwords: 128-byte alignment).
pub const MAX_PDA: u8 = 31;
/// Smallest MAXH2CDATA a controller may announce.
pub const MIN_MAXH2CDATA: u32 = 4096;
/// Most bytes of error data (the offending PDU header) in a TermReq.
pub const TERM_REQ_MAX_DATA: usize = 128;
/// Largest TermReq PDU (header + error data).
pub const TERM_REQ_MAX_PLEN: u32 = 24 + 128;
/// The IANA port of NVMe/TCP I/O controllers.
pub const DEFAULT_PORT: u16 = 4420;
/// The IANA port of NVMe/TCP discovery controllers.
pub const DISCOVERY_PORT: u16 = 8009;

/// Common header flags.
pub mod flags {
    /// A header digest follows the PDU header.
    pub const HDGSTF: u8 = 1 << 0;
    /// A data digest follows the PDU data.
    pub const DDGSTF: u8 = 1 << 1;
    /// H2CData/C2HData: the last data PDU of the command.
    pub const LAST_PDU: u8 = 1 << 2;
    /// C2HData: the command succeeded; no response capsule follows.
    pub const SUCCESS: u8 = 1 << 3;
}

/// ICReq/ICResp digest field bits.
pub mod digest_bits {
    /// Header digests enabled.
    pub const HEADER: u8 = 1 << 0;
    /// Data digests enabled.
    pub const DATA: u8 = 1 << 1;
}

/// PDU types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PduType {
    /// Initialize Connection Request (host to controller).
    IcReq = 0x00,
    /// Initialize Connection Response (controller to host).
    IcResp = 0x01,
    /// Terminate Connection Request, host to controller.
    H2CTermReq = 0x02,
    /// Terminate Connection Request, controller to host.
    C2HTermReq = 0x03,
    /// Command capsule (host to controller).
    CapsuleCmd = 0x04,
    /// Response capsule (controller to host).
    CapsuleResp = 0x05,
    /// Host to controller data.
    H2CData = 0x06,
    /// Controller to host data.
    C2HData = 0x07,
    /// Ready to transfer (controller to host).
    R2T = 0x09,
}

impl PduType {
    /// The type of a PDU-type byte.
    #[must_use]
    pub const fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0x00 => PduType::IcReq,
            0x01 => PduType::IcResp,
            0x02 => PduType::H2CTermReq,
            0x03 => PduType::C2HTermReq,
            0x04 => PduType::CapsuleCmd,
            0x05 => PduType::CapsuleResp,
            0x06 => PduType::H2CData,
            0x07 => PduType::C2HData,
            0x09 => PduType::R2T,
            _ => return None,
        })
    }

    /// The header length (HLEN) of the type.
    #[must_use]
    pub const fn hlen(self) -> u8 {
        match self {
            PduType::IcReq | PduType::IcResp => 128,
            PduType::CapsuleCmd => 72,
            PduType::H2CTermReq
            | PduType::C2HTermReq
            | PduType::CapsuleResp
            | PduType::H2CData
            | PduType::C2HData
            | PduType::R2T => 24,
        }
    }

    /// Whether the host sends this type (otherwise the controller does).
    #[must_use]
    pub const fn from_host(self) -> bool {
        matches!(
            self,
            PduType::IcReq | PduType::H2CTermReq | PduType::CapsuleCmd | PduType::H2CData
        )
    }

    /// Whether header and data digests apply (not to ICReq, ICResp and
    /// TermReq PDUs).
    #[must_use]
    pub const fn digests_apply(self) -> bool {
        !matches!(
            self,
            PduType::IcReq | PduType::IcResp | PduType::H2CTermReq | PduType::C2HTermReq
        )
    }

    /// Whether the type can carry PDU data placed at PDO (CapsuleCmd,
    /// H2CData, C2HData; TermReq error data follows its header directly).
    #[must_use]
    pub const fn carries_data(self) -> bool {
        matches!(
            self,
            PduType::CapsuleCmd | PduType::H2CData | PduType::C2HData
        )
    }
}

/// The common header of every PDU (8 bytes).
#[repr(C)]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
pub struct CommonHeader {
    /// PDU type ([`PduType`]).
    pub pdu_type: u8,
    /// Flags ([`flags`]).
    pub flags: u8,
    /// Header length, without the header digest.
    pub hlen: u8,
    /// PDU data offset from the start of the PDU (0 without data).
    pub pdo: u8,
    /// PDU length: header, digests, padding and data.
    pub plen: U32,
}

/// Initialize Connection Request (128 bytes).
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct IcReq {
    /// Common header.
    pub ch: CommonHeader,
    /// PDU format version ([`PFV_1_0`]).
    pub pfv: U16,
    /// Host PDU data alignment (0's based dwords) for C2H data.
    pub hpda: u8,
    /// Digests the host asks for ([`digest_bits`]).
    pub dgst: u8,
    /// Maximum outstanding R2Ts per command (0's based).
    pub maxr2t: U32,
    /// Reserved.
    pub rsvd: [u8; 112],
}

/// Initialize Connection Response (128 bytes).
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct IcResp {
    /// Common header.
    pub ch: CommonHeader,
    /// PDU format version ([`PFV_1_0`]).
    pub pfv: U16,
    /// Controller PDU data alignment (0's based dwords) for H2C data.
    pub cpda: u8,
    /// Digests enabled ([`digest_bits`]).
    pub dgst: u8,
    /// Maximum bytes of data in one H2CData PDU.
    pub maxh2cdata: U32,
    /// Reserved.
    pub rsvd: [u8; 112],
}

/// H2CTermReq / C2HTermReq header (24 bytes; up to 128 bytes of error
/// data, the offending PDU header, follow it).
#[repr(C)]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
pub struct TermReq {
    /// Common header.
    pub ch: CommonHeader,
    /// Fatal error status ([`super::Fes`]).
    pub fes: U16,
    /// Fatal error information (the offending field's byte offset).
    pub fei: U32,
    /// Reserved.
    pub rsvd: [u8; 10],
}

/// Command capsule header (72 bytes: the common header and the command).
#[repr(C)]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
pub struct CapsuleCmd {
    /// Common header.
    pub ch: CommonHeader,
    /// The submission queue entry.
    pub sqe: Sqe,
}

/// Response capsule (24 bytes: the common header and the completion).
#[repr(C)]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
pub struct CapsuleResp {
    /// Common header.
    pub ch: CommonHeader,
    /// The completion queue entry.
    pub cqe: Cqe,
}

/// Host to controller data header (24 bytes).
#[repr(C)]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
pub struct H2CData {
    /// Common header.
    pub ch: CommonHeader,
    /// Command capsule CID the data belongs to.
    pub cccid: U16,
    /// Transfer tag from the R2T.
    pub ttag: U16,
    /// Offset of the data in the command's data.
    pub datao: U32,
    /// Bytes of data in this PDU.
    pub datal: U32,
    /// Reserved.
    pub rsvd: [u8; 4],
}

/// Controller to host data header (24 bytes).
#[repr(C)]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
pub struct C2HData {
    /// Common header.
    pub ch: CommonHeader,
    /// Command capsule CID the data belongs to.
    pub cccid: U16,
    /// Reserved.
    pub rsvd10: [u8; 2],
    /// Offset of the data in the command's data.
    pub datao: U32,
    /// Bytes of data in this PDU.
    pub datal: U32,
    /// Reserved.
    pub rsvd: [u8; 4],
}

/// Ready to transfer header (24 bytes).
#[repr(C)]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
pub struct R2T {
    /// Common header.
    pub ch: CommonHeader,
    /// Command capsule CID.
    pub cccid: U16,
    /// Transfer tag the host echoes in its H2CData PDUs.
    pub ttag: U16,
    /// Offset of the requested data.
    pub r2to: U32,
    /// Bytes requested.
    pub r2tl: U32,
    /// Reserved.
    pub rsvd: [u8; 4],
}

const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<CommonHeader>() == 8);
    assert!(offset_of!(CommonHeader, hlen) == 2);
    assert!(offset_of!(CommonHeader, pdo) == 3);
    assert!(offset_of!(CommonHeader, plen) == 4);
    assert!(size_of::<IcReq>() == 128);
    assert!(offset_of!(IcReq, pfv) == 8);
    assert!(offset_of!(IcReq, hpda) == 10);
    assert!(offset_of!(IcReq, dgst) == 11);
    assert!(offset_of!(IcReq, maxr2t) == 12);
    assert!(size_of::<IcResp>() == 128);
    assert!(offset_of!(IcResp, cpda) == 10);
    assert!(offset_of!(IcResp, maxh2cdata) == 12);
    assert!(size_of::<TermReq>() == 24);
    assert!(offset_of!(TermReq, fes) == 8);
    assert!(offset_of!(TermReq, fei) == 10);
    assert!(size_of::<CapsuleCmd>() == 72);
    assert!(offset_of!(CapsuleCmd, sqe) == 8);
    assert!(size_of::<CapsuleResp>() == 24);
    assert!(offset_of!(CapsuleResp, cqe) == 8);
    assert!(size_of::<H2CData>() == 24);
    assert!(offset_of!(H2CData, cccid) == 8);
    assert!(offset_of!(H2CData, ttag) == 10);
    assert!(offset_of!(H2CData, datao) == 12);
    assert!(offset_of!(H2CData, datal) == 16);
    assert!(size_of::<C2HData>() == 24);
    assert!(offset_of!(C2HData, datao) == 12);
    assert!(offset_of!(C2HData, datal) == 16);
    assert!(size_of::<R2T>() == 24);
    assert!(offset_of!(R2T, cccid) == 8);
    assert!(offset_of!(R2T, ttag) == 10);
    assert!(offset_of!(R2T, r2to) == 12);
    assert!(offset_of!(R2T, r2tl) == 16);
};
