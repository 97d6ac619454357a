//! SPDK blobstore on-disk format, version 3: pure encode and decode
//! functions with strict validation. Nothing here does I/O.
//!
//! All structures are little endian and packed; "pages" are 4 KiB metadata
//! pages, numbered from the start of the device (super block, masks) or of
//! the metadata region (blob pages). See `blobstore.h` in SPDK for the C
//! definitions this mirrors.

pub(crate) mod blob_md;
pub(crate) mod clusters;
pub(crate) mod mask;
pub(crate) mod page;
pub(crate) mod super_block;

use crate::BlobId;

/// Metadata page size: the only one this library writes or reads.
pub const PAGE_SIZE: usize = 4096;
pub(crate) const PAGE_SIZE_U32: u32 = 4096;
pub(crate) const PAGE_SIZE_U64: u64 = 4096;
/// Bytes of descriptors in a metadata page (offsets 16..4088).
pub(crate) const DESC_AREA: usize = 4072;
pub(crate) const DESC_START: usize = 16;
pub(crate) const NEXT_OFFSET: usize = 4088;
pub(crate) const CRC_OFFSET: usize = 4092;
/// `next` of the last page of a chain.
pub(crate) const INVALID_PAGE: u32 = u32::MAX;
/// Clusters one extent page maps.
pub const EXTENTS_PER_EP: u64 = 512;
/// Most clusters a blob may have (SPDK keeps cluster indices in 32 bits).
pub(crate) const MAX_BLOB_CLUSTERS: u64 = u32::MAX as u64;

pub(crate) const DESC_PADDING: u8 = 0;
pub(crate) const DESC_EXTENT_RLE: u8 = 1;
pub(crate) const DESC_XATTR: u8 = 2;
pub(crate) const DESC_FLAGS: u8 = 3;
pub(crate) const DESC_XATTR_INTERNAL: u8 = 4;
pub(crate) const DESC_EXTENT_TABLE: u8 = 5;
pub(crate) const DESC_EXTENT_PAGE: u8 = 6;
/// Descriptor header: u8 type, u32 length.
pub(crate) const DESC_HEADER: usize = 5;

/// Invalid flag: thin provisioned.
pub const FLAG_THIN_PROV: u64 = 1 << 0;
/// Invalid flag: the blob has internal xattrs.
pub const FLAG_INTERNAL_XATTR: u64 = 1 << 1;
/// Invalid flag: extents in an extent table and extent pages.
pub const FLAG_EXTENT_TABLE: u64 = 1 << 2;
/// Invalid flag: a clone of an external snapshot.
pub const FLAG_EXTERNAL_SNAPSHOT: u64 = 1 << 3;
/// The invalid flags this library knows; others make a blob unopenable.
pub const INVALID_FLAGS_MASK: u64 =
    FLAG_THIN_PROV | FLAG_INTERNAL_XATTR | FLAG_EXTENT_TABLE | FLAG_EXTERNAL_SNAPSHOT;
/// Data read-only flag.
pub const FLAG_READ_ONLY: u64 = 1 << 0;
/// The data-ro flags known; others open the blob read-only.
pub const DATA_RO_FLAGS_MASK: u64 = FLAG_READ_ONLY;
/// md-ro bits 0-1: the blob's clear method.
pub const MD_RO_CLEAR_METHOD: u64 = 3;
/// The md-ro flags known; others open the blob with read-only metadata.
pub const MD_RO_FLAGS_MASK: u64 = MD_RO_CLEAR_METHOD;

/// Internal xattr of a clone: its parent snapshot's blob id (u64, LE).
pub const XATTR_SNAP: &str = "SNAP";
/// Internal xattr of a snapshot being created: the origin's blob id.
pub const XATTR_SNAPTMP: &str = "SNAPTMP";
/// Internal xattr of a snapshot being merged into its clone and deleted: the
/// clone's blob id.
pub const XATTR_SNAPRM: &str = "SNAPRM";
/// Internal xattr of an external-snapshot clone: the parent bdev's UUID
/// string (NUL-terminated).
pub const XATTR_EXTSNAP: &str = "EXTSNAP";

/// The high bit of every blob id (SPDK sets bit 32 to catch code that takes
/// a blob id for a page index).
pub const BLOBID_HIGH_BIT: u64 = 1 << 32;

/// The id of the blob whose first page is metadata page `page`.
#[must_use]
pub fn blob_id(page: u32) -> BlobId {
    BLOBID_HIGH_BIT | u64::from(page)
}

/// The first metadata page of blob `id`, if `id` is a well-formed blob id.
#[must_use]
pub fn blob_page(id: BlobId) -> Option<u32> {
    if id >> 32 == 1 {
        u32::try_from(id & 0xFFFF_FFFF).ok()
    } else {
        None
    }
}

/// CRC-32C (Castagnoli, initial value and final xor 0xFFFFFFFF: the standard
/// one) of the first 4092 bytes of a page, as SPDK's
/// `blob_md_page_calc_crc`: `spdk_crc32c_update` is the raw update, called
/// with 0xFFFFFFFF and xored with it after.
#[must_use]
pub(crate) fn page_crc(page: &[u8; PAGE_SIZE]) -> u32 {
    crc32c::crc32c(&page[..CRC_OFFSET])
}

pub(crate) fn rd_u16(b: &[u8], off: usize) -> u16 {
    let mut x = [0u8; 2];
    x.copy_from_slice(&b[off..off + 2]);
    u16::from_le_bytes(x)
}

pub(crate) fn rd_u32(b: &[u8], off: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(x)
}

pub(crate) fn rd_u64(b: &[u8], off: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(x)
}

pub(crate) fn wr_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn wr_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Pages of a mask of `bits` bits: a 5-byte header plus the bitmap.
#[must_use]
pub(crate) fn mask_pages(bits: u64) -> u64 {
    (5 + bits.div_ceil(8)).div_ceil(PAGE_SIZE as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_is_standard_crc32c() {
        // The check value of CRC-32C ("123456789" -> 0xE3069283).
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        let page = [0u8; PAGE_SIZE];
        assert_eq!(page_crc(&page), crc32c::crc32c(&[0u8; 4092]));
    }

    #[test]
    fn blob_ids() {
        assert_eq!(blob_id(0), 0x1_0000_0000);
        assert_eq!(blob_page(0x1_0000_0007), Some(7));
        assert_eq!(blob_page(7), None);
        assert_eq!(blob_page(0x2_0000_0007), None);
    }

    #[test]
    fn extents_per_extent_page_is_spdks() {
        // SPDK: (4072 - 9) / 4 = 1015 -> align64pow2(1016) >> 1 = 512.
        let max = (DESC_AREA - 9) / 4;
        assert_eq!(((max + 1).next_power_of_two() >> 1) as u64, EXTENTS_PER_EP);
    }
}
