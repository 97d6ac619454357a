//! Data pointers: SGL descriptors and the PRP entry rules.
//!
//! # SGL
//!
//! A Scatter Gather List descriptor is 16 bytes: an address (or offset),
//! a length and an identifier byte whose high nibble is the descriptor
//! type and low nibble the subtype ([`SglDescriptor`]). NVMe over
//! Fabrics always uses SGLs (PSDT = 01b or 10b): NVMe/TCP describes
//! in-capsule data with an offset data block (type 0, subtype 1,
//! identifier 0x01) and data moved by R2T/H2CData/C2HData with a
//! transport data block (type 5, subtype 0xA, identifier 0x5A); RDMA uses
//! keyed data blocks (type 4) carrying a remote key.
//!
//! # PRP
//!
//! A Physical Region Page entry is a 64-bit address; the rules, from NVMe
//! Base Specification 2.0 §4.1.1:
//!
//! - PRP1 may point anywhere in a memory page, at a dword-aligned address
//!   (bits 1:0 clear: [`PRP_ALIGN`]); its transfer runs to the end of that
//!   page.
//! - Every later entry points at the start of a page (offset 0 within
//!   the page size `CC.MPS` selects).
//! - If the transfer fits in PRP1's page, PRP2 is unused; if it ends in
//!   the next page, PRP2 is that page; otherwise PRP2 is the address of a
//!   PRP list: a page-aligned (or, for the first list, dword aligned
//!   with the list ending at a page boundary) array of 8-byte entries
//!   ([`PRP_ENTRY_BYTES`]), whose last entry, when more pages follow
//!   than the list page holds, points at the next list page.
//!
//! Building PRP lists is the PCIe driver's job; this crate only names the
//! rules.

use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Bytes of one PRP entry.
pub const PRP_ENTRY_BYTES: usize = 8;
/// Alignment of PRP1 (and of a PRP list): bits 1:0 of the address clear.
pub const PRP_ALIGN: u64 = 4;

/// PRP entries in one PRP list page of `page_size` bytes.
#[must_use]
pub const fn prp_entries_per_page(page_size: usize) -> usize {
    page_size / PRP_ENTRY_BYTES
}

/// SGL descriptor types (bits 7:4 of the identifier byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SglType {
    /// Data Block: one contiguous buffer.
    DataBlock,
    /// Bit Bucket: data the host discards (reads only).
    BitBucket,
    /// Segment: points at the next segment of descriptors.
    Segment,
    /// Last Segment: points at the final segment of descriptors.
    LastSegment,
    /// Keyed Data Block: a buffer with a remote key (RDMA).
    KeyedDataBlock,
    /// Transport Data Block: the data moves by transport means (TCP R2T, C2HData).
    TransportDataBlock,
    /// Vendor specific.
    VendorSpecific,
    /// A reserved type value (6..=14).
    Reserved(u8),
}

impl SglType {
    /// The 4-bit code.
    #[must_use]
    pub const fn code(self) -> u8 {
        match self {
            SglType::DataBlock => 0x0,
            SglType::BitBucket => 0x1,
            SglType::Segment => 0x2,
            SglType::LastSegment => 0x3,
            SglType::KeyedDataBlock => 0x4,
            SglType::TransportDataBlock => 0x5,
            SglType::VendorSpecific => 0xf,
            SglType::Reserved(v) => v & 0xf,
        }
    }

    /// The type of a 4-bit code.
    #[must_use]
    pub const fn from_code(v: u8) -> Self {
        match v & 0xf {
            0x0 => SglType::DataBlock,
            0x1 => SglType::BitBucket,
            0x2 => SglType::Segment,
            0x3 => SglType::LastSegment,
            0x4 => SglType::KeyedDataBlock,
            0x5 => SglType::TransportDataBlock,
            0xf => SglType::VendorSpecific,
            r => SglType::Reserved(r),
        }
    }
}

/// SGL subtype: the address field is a memory address.
pub const SGL_SUBTYPE_ADDRESS: u8 = 0x0;
/// SGL subtype: the address field is an offset (into in-capsule data).
pub const SGL_SUBTYPE_OFFSET: u8 = 0x1;
/// SGL subtype: transport specific (NVMe/TCP's transport data block uses it).
pub const SGL_SUBTYPE_TRANSPORT: u8 = 0xa;
/// SGL subtype of a keyed data block: invalidate the key after use (RDMA).
pub const SGL_SUBTYPE_INVALIDATE_KEY: u8 = 0xf;
/// Largest length of a keyed data block (24 bits).
pub const SGL_KEYED_MAX_LEN: u32 = (1 << 24) - 1;

/// An SGL descriptor (16 bytes; NVMe Base Specification 2.0 §4.1.2).
///
/// Bytes 8..15 depend on the type: an unkeyed descriptor has a 32-bit
/// length in 8..12; a keyed data block a 24-bit length in 8..11 and a
/// 32-bit key in 11..15. Byte 15 is the identifier.
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
pub struct SglDescriptor {
    /// Address (or offset, for subtype [`SGL_SUBTYPE_OFFSET`]).
    pub address: U64,
    /// Length, key and reserved bytes (see the type's doc).
    pub info: [u8; 7],
    /// Identifier: type in bits 7:4, subtype in bits 3:0.
    pub id: u8,
}

const _: () = {
    assert!(size_of::<SglDescriptor>() == 16);
    assert!(std::mem::offset_of!(SglDescriptor, info) == 8);
    assert!(std::mem::offset_of!(SglDescriptor, id) == 15);
};

impl SglDescriptor {
    /// A descriptor of `kind` and `subtype` with a 32-bit length.
    #[must_use]
    pub fn unkeyed(kind: SglType, subtype: u8, address: u64, length: u32) -> Self {
        let mut info = [0; 7];
        info[..4].copy_from_slice(&length.to_le_bytes());
        SglDescriptor {
            address: U64::new(address),
            info,
            id: (kind.code() << 4) | (subtype & 0xf),
        }
    }

    /// A data block at a memory address.
    #[must_use]
    pub fn data_block(address: u64, length: u32) -> Self {
        Self::unkeyed(SglType::DataBlock, SGL_SUBTYPE_ADDRESS, address, length)
    }

    /// A data block at an offset into the capsule's in-capsule data
    /// (NVMe/TCP in-capsule writes: identifier 0x01).
    #[must_use]
    pub fn offset_data_block(offset: u64, length: u32) -> Self {
        Self::unkeyed(SglType::DataBlock, SGL_SUBTYPE_OFFSET, offset, length)
    }

    /// A transport data block of `length` bytes (NVMe/TCP data moved by
    /// R2T/H2CData or C2HData: identifier 0x5A, address 0).
    #[must_use]
    pub fn transport_data_block(length: u32) -> Self {
        Self::unkeyed(
            SglType::TransportDataBlock,
            SGL_SUBTYPE_TRANSPORT,
            0,
            length,
        )
    }

    /// A bit bucket of `length` bytes.
    #[must_use]
    pub fn bit_bucket(length: u32) -> Self {
        Self::unkeyed(SglType::BitBucket, SGL_SUBTYPE_ADDRESS, 0, length)
    }

    /// A segment descriptor: `length` bytes of descriptors at `address`.
    #[must_use]
    pub fn segment(address: u64, length: u32) -> Self {
        Self::unkeyed(SglType::Segment, SGL_SUBTYPE_ADDRESS, address, length)
    }

    /// A last segment descriptor: the final `length` bytes of descriptors.
    #[must_use]
    pub fn last_segment(address: u64, length: u32) -> Self {
        Self::unkeyed(SglType::LastSegment, SGL_SUBTYPE_ADDRESS, address, length)
    }

    /// A keyed data block (RDMA): `length` is at most
    /// [`SGL_KEYED_MAX_LEN`]; a longer one is cut to 24 bits.
    #[must_use]
    pub fn keyed_data_block(address: u64, length: u32, key: u32, invalidate: bool) -> Self {
        let mut info = [0; 7];
        info[..3].copy_from_slice(&length.to_le_bytes()[..3]);
        info[3..].copy_from_slice(&key.to_le_bytes());
        let subtype = if invalidate {
            SGL_SUBTYPE_INVALIDATE_KEY
        } else {
            SGL_SUBTYPE_ADDRESS
        };
        SglDescriptor {
            address: U64::new(address),
            info,
            id: (SglType::KeyedDataBlock.code() << 4) | subtype,
        }
    }

    /// The descriptor type.
    #[must_use]
    pub fn kind(&self) -> SglType {
        SglType::from_code(self.id >> 4)
    }

    /// The subtype (low nibble of the identifier).
    #[must_use]
    pub fn subtype(&self) -> u8 {
        self.id & 0xf
    }

    /// The length in bytes: 24 bits for a keyed data block, 32 otherwise.
    #[must_use]
    pub fn length(&self) -> u32 {
        let i = self.info;
        if self.kind() == SglType::KeyedDataBlock {
            u32::from_le_bytes([i[0], i[1], i[2], 0])
        } else {
            u32::from_le_bytes([i[0], i[1], i[2], i[3]])
        }
    }

    /// The key of a keyed data block (`None` for other types).
    #[must_use]
    pub fn key(&self) -> Option<u32> {
        let i = self.info;
        (self.kind() == SglType::KeyedDataBlock)
            .then(|| u32::from_le_bytes([i[3], i[4], i[5], i[6]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_identifiers() {
        assert_eq!(SglDescriptor::offset_data_block(0, 4096).id, 0x01);
        assert_eq!(SglDescriptor::transport_data_block(8192).id, 0x5a);
        assert_eq!(SglDescriptor::data_block(0x1000, 512).id, 0x00);
        assert_eq!(SglDescriptor::segment(0x2000, 32).kind(), SglType::Segment);
        assert_eq!(SglDescriptor::last_segment(0x2000, 32).id, 0x30);
        assert_eq!(SglDescriptor::bit_bucket(8).kind(), SglType::BitBucket);
    }

    #[test]
    fn unkeyed_bytes() {
        let d = SglDescriptor::data_block(0x1122_3344_5566_7788, 0xaabb_ccdd);
        assert_eq!(
            d.as_bytes(),
            &[
                0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0xdd, 0xcc, 0xbb, 0xaa, 0, 0, 0,
                0x00
            ]
        );
        assert_eq!(d.length(), 0xaabb_ccdd);
        assert_eq!(d.key(), None);
    }

    #[test]
    fn keyed_layout() {
        let d = SglDescriptor::keyed_data_block(0x10, 0x00ab_cdef, 0x1234_5678, true);
        assert_eq!(
            &d.as_bytes()[8..],
            &[0xef, 0xcd, 0xab, 0x78, 0x56, 0x34, 0x12, 0x4f]
        );
        assert_eq!(d.length(), 0x00ab_cdef);
        assert_eq!(d.key(), Some(0x1234_5678));
        assert_eq!(d.kind(), SglType::KeyedDataBlock);
        assert_eq!(d.subtype(), SGL_SUBTYPE_INVALIDATE_KEY);
    }

    #[test]
    fn type_codes_round_trip() {
        for c in 0..16u8 {
            assert_eq!(SglType::from_code(c).code(), c);
        }
        assert_eq!(prp_entries_per_page(4096), 512);
    }
}
