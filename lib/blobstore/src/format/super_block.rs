//! The super block: 4 KiB at the start of the device.

use super::{page_crc, rd_u32, rd_u64, wr_u32, wr_u64, CRC_OFFSET, PAGE_SIZE};
use crate::error::{Corruption, Error, Result};
use crate::BlobId;

/// "SPDKBLOB".
pub(crate) const SIGNATURE: &[u8; 8] = b"SPDKBLOB";
/// The version this library writes.
pub(crate) const VERSION: u32 = 3;
/// SPDK's "no blob" id, used for an unset super blob.
pub(crate) const BLOBID_INVALID: u64 = u64::MAX;

/// The decoded super block. Start/len fields count 4 KiB pages from the
/// start of the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SuperBlock {
    pub version: u32,
    pub length: u32,
    pub clean: bool,
    pub super_blob: BlobId,
    pub cluster_size: u32,
    pub used_page_mask_start: u32,
    pub used_page_mask_len: u32,
    pub used_cluster_mask_start: u32,
    pub used_cluster_mask_len: u32,
    pub md_start: u32,
    pub md_len: u32,
    pub bstype: [u8; 16],
    pub used_blobid_mask_start: u32,
    pub used_blobid_mask_len: u32,
    /// Bytes; 0 = the device's size.
    pub size: u64,
    /// Bytes; 0 = 4096.
    pub io_unit_size: u32,
    /// Bytes; 0 = 4096.
    pub md_page_size: u32,
}

impl SuperBlock {
    /// Encodes with the CRC filled in.
    pub(crate) fn encode(&self) -> [u8; PAGE_SIZE] {
        let mut b = [0u8; PAGE_SIZE];
        b[0..8].copy_from_slice(SIGNATURE);
        wr_u32(&mut b, 8, self.version);
        wr_u32(&mut b, 12, self.length);
        wr_u32(&mut b, 16, u32::from(self.clean));
        wr_u64(&mut b, 20, self.super_blob);
        wr_u32(&mut b, 28, self.cluster_size);
        wr_u32(&mut b, 32, self.used_page_mask_start);
        wr_u32(&mut b, 36, self.used_page_mask_len);
        wr_u32(&mut b, 40, self.used_cluster_mask_start);
        wr_u32(&mut b, 44, self.used_cluster_mask_len);
        wr_u32(&mut b, 48, self.md_start);
        wr_u32(&mut b, 52, self.md_len);
        b[56..72].copy_from_slice(&self.bstype);
        wr_u32(&mut b, 72, self.used_blobid_mask_start);
        wr_u32(&mut b, 76, self.used_blobid_mask_len);
        wr_u64(&mut b, 80, self.size);
        wr_u32(&mut b, 88, self.io_unit_size);
        wr_u32(&mut b, 92, self.md_page_size);
        let crc = page_crc(&b);
        wr_u32(&mut b, CRC_OFFSET, crc);
        b
    }

    /// Decodes and checks signature, CRC and version (1 to 3 load, as SPDK's
    /// `bs_super_validate`). The layout is checked against the device by the
    /// store.
    pub(crate) fn decode(b: &[u8; PAGE_SIZE]) -> Result<Self> {
        if &b[0..8] != SIGNATURE {
            return Err(Error::BadSuper(Corruption::BadSignature));
        }
        if page_crc(b) != rd_u32(b, CRC_OFFSET) {
            return Err(Error::BadSuper(Corruption::BadCrc));
        }
        let version = rd_u32(b, 8);
        if !(1..=VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion(version));
        }
        let clean = rd_u32(b, 16);
        let mut bstype = [0u8; 16];
        bstype.copy_from_slice(&b[56..72]);
        Ok(SuperBlock {
            version,
            length: rd_u32(b, 12),
            clean: clean == 1,
            super_blob: rd_u64(b, 20),
            cluster_size: rd_u32(b, 28),
            used_page_mask_start: rd_u32(b, 32),
            used_page_mask_len: rd_u32(b, 36),
            used_cluster_mask_start: rd_u32(b, 40),
            used_cluster_mask_len: rd_u32(b, 44),
            md_start: rd_u32(b, 48),
            md_len: rd_u32(b, 52),
            bstype,
            used_blobid_mask_start: rd_u32(b, 72),
            used_blobid_mask_len: rd_u32(b, 76),
            size: rd_u64(b, 80),
            io_unit_size: rd_u32(b, 88),
            md_page_size: rd_u32(b, 92),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> SuperBlock {
        SuperBlock {
            version: 3,
            length: 4096,
            clean: true,
            super_blob: 0x1_0000_0000,
            cluster_size: 1 << 20,
            used_page_mask_start: 1,
            used_page_mask_len: 1,
            used_cluster_mask_start: 2,
            used_cluster_mask_len: 1,
            md_start: 4,
            md_len: 64,
            bstype: *b"LVOLSTORE\0\0\0\0\0\0\0",
            used_blobid_mask_start: 3,
            used_blobid_mask_len: 1,
            size: 64 << 20,
            io_unit_size: 512,
            md_page_size: 4096,
        }
    }

    #[test]
    fn round_trip_and_offsets() {
        let s = sample();
        let b = s.encode();
        assert_eq!(&b[0..8], b"SPDKBLOB");
        assert_eq!(rd_u32(&b, 16), 1);
        assert_eq!(rd_u64(&b, 80), 64 << 20);
        assert_eq!(&b[56..65], b"LVOLSTORE");
        assert_eq!(SuperBlock::decode(&b).unwrap(), s);
    }

    #[test]
    fn rejects_bad_crc_signature_version() {
        let mut b = sample().encode();
        b[100] ^= 1;
        assert!(matches!(
            SuperBlock::decode(&b),
            Err(Error::BadSuper(Corruption::BadCrc))
        ));
        let mut b = sample().encode();
        b[0] = b'X';
        assert!(matches!(
            SuperBlock::decode(&b),
            Err(Error::BadSuper(Corruption::BadSignature))
        ));
        let mut s = sample();
        s.version = 4;
        assert!(matches!(
            SuperBlock::decode(&s.encode()),
            Err(Error::UnsupportedVersion(4))
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), PAGE_SIZE), sig in any::<bool>()) {
            if sig {
                bytes[0..8].copy_from_slice(SIGNATURE);
                let mut b = [0u8; PAGE_SIZE];
                b.copy_from_slice(&bytes);
                let crc = page_crc(&b);
                bytes[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
            }
            let mut b = [0u8; PAGE_SIZE];
            b.copy_from_slice(&bytes);
            let _ = SuperBlock::decode(&b);
        }
    }
}
