//! The submission queue entry (64 bytes) and the [`Command`] trait the
//! typed commands implement.
//!
//! [`Sqe`] is the wire and DMA layout: the same 64 bytes go into a PCIe
//! submission queue, an NVMe/TCP command capsule or (field by field) a
//! Linux passthrough command. Its fields are little-endian byte-order
//! types with alignment 1, so an `Sqe` can be viewed in place at any
//! offset of a received buffer (`Sqe::ref_from_bytes(&buf[8..72])`).
//!
//! Dword 0 holds the opcode, the flags byte (FUSE in bits 1:0, PSDT in
//! bits 7:6) and the command identifier. Dwords 6..9 are the data
//! pointer: PRP1 and PRP2 when PSDT = PRP, or SGL1 (one 16-byte
//! [`SglDescriptor`]) otherwise. Dwords 10..15 are command specific; the
//! typed commands ([`crate::admin`], [`crate::io`], [`crate::fabrics`])
//! encode and decode them.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::sgl::SglDescriptor;

/// Fused operation (bits 1:0 of the flags byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Fuse {
    /// Normal operation.
    #[default]
    Normal,
    /// First command of a fused pair (Compare of Compare and Write).
    First,
    /// Second command of a fused pair (Write of Compare and Write).
    Second,
    /// Reserved value 11b.
    Reserved,
}

impl Fuse {
    /// The 2-bit code.
    #[must_use]
    pub const fn code(self) -> u8 {
        match self {
            Fuse::Normal => 0,
            Fuse::First => 1,
            Fuse::Second => 2,
            Fuse::Reserved => 3,
        }
    }

    /// The value of a 2-bit code.
    #[must_use]
    pub const fn from_code(v: u8) -> Self {
        match v & 3 {
            0 => Fuse::Normal,
            1 => Fuse::First,
            2 => Fuse::Second,
            _ => Fuse::Reserved,
        }
    }
}

/// PRP or SGL for Data Transfer (bits 7:6 of the flags byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Psdt {
    /// PRPs (PCIe only).
    #[default]
    Prp,
    /// SGLs; the metadata pointer is the address of one contiguous buffer.
    SglContiguousMetadata,
    /// SGLs; the metadata pointer is the address of an SGL segment.
    SglMetadataSgl,
    /// Reserved value 11b.
    Reserved,
}

impl Psdt {
    /// The 2-bit code.
    #[must_use]
    pub const fn code(self) -> u8 {
        match self {
            Psdt::Prp => 0,
            Psdt::SglContiguousMetadata => 1,
            Psdt::SglMetadataSgl => 2,
            Psdt::Reserved => 3,
        }
    }

    /// The value of a 2-bit code.
    #[must_use]
    pub const fn from_code(v: u8) -> Self {
        match v & 3 {
            0 => Psdt::Prp,
            1 => Psdt::SglContiguousMetadata,
            2 => Psdt::SglMetadataSgl,
            _ => Psdt::Reserved,
        }
    }

    /// Whether the data pointer is an SGL.
    #[must_use]
    pub const fn is_sgl(self) -> bool {
        matches!(self, Psdt::SglContiguousMetadata | Psdt::SglMetadataSgl)
    }
}

/// Namespace id meaning "all namespaces" (global log pages, features).
pub const NSID_ALL: u32 = 0xffff_ffff;

/// A submission queue entry (NVMe Base Specification 2.0, figure 88).
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
pub struct Sqe {
    /// Opcode.
    pub opcode: u8,
    /// FUSE (bits 1:0) and PSDT (bits 7:6); see [`Sqe::fuse`], [`Sqe::psdt`].
    pub flags: u8,
    /// Command identifier.
    pub cid: U16,
    /// Namespace id (byte 0 is the command type of a fabrics command).
    pub nsid: U32,
    /// Command dword 2.
    pub cdw2: U32,
    /// Command dword 3.
    pub cdw3: U32,
    /// Metadata pointer.
    pub mptr: U64,
    /// PRP entry 1 (first half of SGL1).
    pub prp1: U64,
    /// PRP entry 2 (second half of SGL1).
    pub prp2: U64,
    /// Command dword 10.
    pub cdw10: U32,
    /// Command dword 11.
    pub cdw11: U32,
    /// Command dword 12.
    pub cdw12: U32,
    /// Command dword 13.
    pub cdw13: U32,
    /// Command dword 14.
    pub cdw14: U32,
    /// Command dword 15.
    pub cdw15: U32,
}

const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<Sqe>() == 64);
    assert!(offset_of!(Sqe, cid) == 2);
    assert!(offset_of!(Sqe, nsid) == 4);
    assert!(offset_of!(Sqe, cdw2) == 8);
    assert!(offset_of!(Sqe, mptr) == 16);
    assert!(offset_of!(Sqe, prp1) == 24);
    assert!(offset_of!(Sqe, prp2) == 32);
    assert!(offset_of!(Sqe, cdw10) == 40);
    assert!(offset_of!(Sqe, cdw15) == 60);
};

impl Sqe {
    /// An entry with `opcode`, `cid` and `nsid`; everything else zero.
    #[must_use]
    pub fn new(opcode: u8, cid: u16, nsid: u32) -> Self {
        Sqe {
            opcode,
            cid: U16::new(cid),
            nsid: U32::new(nsid),
            ..Sqe::default()
        }
    }

    /// The entry whose dwords are `dw` (dword 0 first), as the bdev
    /// layer's `NvmeCmd` carries a passthrough command.
    #[must_use]
    pub fn from_dwords(dw: [u32; 16]) -> Self {
        let mut s = Sqe::default();
        for (chunk, d) in s.as_mut_bytes().chunks_exact_mut(4).zip(dw) {
            chunk.copy_from_slice(&d.to_le_bytes());
        }
        s
    }

    /// The sixteen dwords of the entry (dword 0 first).
    #[must_use]
    pub fn to_dwords(&self) -> [u32; 16] {
        let mut dw = [0u32; 16];
        for (d, chunk) in dw.iter_mut().zip(self.as_bytes().chunks_exact(4)) {
            *d = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
        dw
    }

    /// The fused operation bits.
    #[must_use]
    pub fn fuse(&self) -> Fuse {
        Fuse::from_code(self.flags)
    }

    /// Sets the fused operation bits.
    pub fn set_fuse(&mut self, fuse: Fuse) {
        self.flags = (self.flags & !0x03) | fuse.code();
    }

    /// PRP or SGL.
    #[must_use]
    pub fn psdt(&self) -> Psdt {
        Psdt::from_code(self.flags >> 6)
    }

    /// Sets PRP or SGL.
    pub fn set_psdt(&mut self, psdt: Psdt) {
        self.flags = (self.flags & 0x3f) | (psdt.code() << 6);
    }

    /// Points the data at `prp1`/`prp2` and selects PRPs.
    pub fn set_prps(&mut self, prp1: u64, prp2: u64) {
        self.prp1.set(prp1);
        self.prp2.set(prp2);
        self.set_psdt(Psdt::Prp);
    }

    /// SGL1: the data pointer read as an SGL descriptor.
    #[must_use]
    pub fn sgl1(&self) -> SglDescriptor {
        let mut d = SglDescriptor::default();
        d.as_mut_bytes()[..8].copy_from_slice(self.prp1.as_bytes());
        d.as_mut_bytes()[8..].copy_from_slice(self.prp2.as_bytes());
        d
    }

    /// Points the data at `sgl` and selects SGLs (PSDT 01b: a contiguous
    /// metadata buffer), unless PSDT already says SGL.
    pub fn set_sgl1(&mut self, sgl: &SglDescriptor) {
        let b = sgl.as_bytes();
        self.prp1.as_mut_bytes().copy_from_slice(&b[..8]);
        self.prp2.as_mut_bytes().copy_from_slice(&b[8..]);
        if !self.psdt().is_sgl() {
            self.set_psdt(Psdt::SglContiguousMetadata);
        }
    }

    /// The fabrics command type (byte 4) of a fabrics command (opcode 0x7f).
    #[must_use]
    pub fn fctype(&self) -> u8 {
        self.nsid.as_bytes()[0]
    }

    /// The command's name, for logs: admin names on the admin queue
    /// (`admin` true), NVM I/O names otherwise; `None` if unknown.
    #[must_use]
    pub fn name(&self, admin: bool) -> Option<&'static str> {
        use crate::opcode::{AdminOpcode, FabricsType, NvmOpcode, FABRICS_OPCODE};
        if self.opcode == FABRICS_OPCODE {
            return FabricsType::from_u8(self.fctype()).map(FabricsType::name);
        }
        if admin {
            AdminOpcode::from_u8(self.opcode).map(AdminOpcode::name)
        } else {
            NvmOpcode::from_u8(self.opcode).map(NvmOpcode::name)
        }
    }
}

/// A typed command: encodes into and decodes from a submission entry.
///
/// `encode` writes the fields the command owns (namespace id, command
/// dwords); it leaves the opcode, identifier, flags and data pointer to
/// [`Command::to_sqe`] and the caller. `decode` reads them back from any
/// entry without checking the opcode (the caller dispatched on it), so
/// `decode(&c.to_sqe(cid)) == c` for every value `c`.
pub trait Command: Sized {
    /// The opcode.
    const OPCODE: u8;

    /// Writes the command's fields into `sqe`.
    fn encode(&self, sqe: &mut Sqe);

    /// Reads the command's fields from `sqe`.
    fn decode(sqe: &Sqe) -> Self;

    /// A submission entry for this command with identifier `cid` (data
    /// pointer zero: set it with [`Sqe::set_prps`] or [`Sqe::set_sgl1`]).
    fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(Self::OPCODE, cid, 0);
        self.encode(&mut s);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sgl::SglType;
    use proptest::prelude::*;

    #[test]
    fn flags_bits() {
        let mut s = Sqe::new(0x02, 7, 1);
        s.set_fuse(Fuse::First);
        s.set_psdt(Psdt::SglContiguousMetadata);
        assert_eq!(s.flags, 0x41);
        assert_eq!(s.fuse(), Fuse::First);
        assert_eq!(s.psdt(), Psdt::SglContiguousMetadata);
        s.set_fuse(Fuse::Second);
        assert_eq!(s.flags, 0x42);
        s.set_prps(0x1000, 0x2000);
        assert_eq!(s.flags, 0x02);
        assert_eq!(s.psdt(), Psdt::Prp);
    }

    #[test]
    fn sgl1_overlays_prps() {
        let mut s = Sqe::new(0x01, 1, 1);
        let d = SglDescriptor::transport_data_block(8192);
        s.set_sgl1(&d);
        assert_eq!(s.psdt(), Psdt::SglContiguousMetadata);
        assert_eq!(s.sgl1(), d);
        assert_eq!(s.sgl1().kind(), SglType::TransportDataBlock);
        assert_eq!(s.as_bytes()[39], 0x5a);
        assert_eq!(&s.as_bytes()[32..36], &8192u32.to_le_bytes());
    }

    #[test]
    fn byte_layout() {
        let mut s = Sqe::new(0x02, 0xabcd, 0x0102_0304);
        s.cdw10.set(0x1111_2222);
        s.cdw15.set(0xdead_beef);
        let b = s.as_bytes();
        assert_eq!(&b[..8], &[0x02, 0, 0xcd, 0xab, 0x04, 0x03, 0x02, 0x01]);
        assert_eq!(&b[40..44], &[0x22, 0x22, 0x11, 0x11]);
        assert_eq!(&b[60..], &[0xef, 0xbe, 0xad, 0xde]);
        let back = Sqe::ref_from_bytes(b).unwrap();
        assert_eq!(back, &s);
        assert_eq!(s.name(false), Some("Read"));
        assert_eq!(s.name(true), Some("Get Log Page"));
    }

    proptest! {
        #[test]
        fn dwords_round_trip(dw in proptest::array::uniform16(any::<u32>())) {
            let s = Sqe::from_dwords(dw);
            prop_assert_eq!(s.to_dwords(), dw);
            prop_assert_eq!(u32::from(s.cid) << 16 | u32::from(s.flags) << 8 | u32::from(s.opcode), dw[0]);
            prop_assert_eq!(s.nsid.get(), dw[1]);
            prop_assert_eq!(s.cdw10.get(), dw[10]);
            prop_assert_eq!(s.prp1.get(), u64::from(dw[7]) << 32 | u64::from(dw[6]));
        }
    }
}
