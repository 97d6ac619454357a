//! Mask regions: u8 type, u32 length in bits, then the bitmap (LSB first).

use super::{rd_u32, wr_u32, PAGE_SIZE};
use crate::bitmap::BitVec;
use crate::error::Corruption;

pub(crate) const MASK_USED_PAGES: u8 = 0;
pub(crate) const MASK_USED_CLUSTERS: u8 = 1;
pub(crate) const MASK_USED_BLOBIDS: u8 = 2;

/// Encodes `bits` as a mask region of `region_pages` pages.
pub(crate) fn encode(kind: u8, bits: &BitVec, region_pages: u32) -> Vec<u8> {
    let mut out = vec![0u8; region_pages as usize * PAGE_SIZE];
    out[0] = kind;
    wr_u32(&mut out, 1, u32::try_from(bits.len()).unwrap_or(u32::MAX));
    let bytes = bits.to_bytes();
    let n = bytes.len().min(out.len().saturating_sub(5));
    out[5..5 + n].copy_from_slice(&bytes[..n]);
    out
}

/// Decodes a mask region: its length in bits and the bits.
pub(crate) fn decode(kind: u8, region: &[u8]) -> Result<(u64, BitVec), Corruption> {
    if region.len() < 5 {
        return Err(Corruption::Mask("region too small"));
    }
    if region[0] != kind {
        return Err(Corruption::Mask("wrong type"));
    }
    let len = u64::from(rd_u32(region, 1));
    if len > (region.len() as u64 - 5) * 8 {
        return Err(Corruption::Mask("length beyond its region"));
    }
    Ok((len, BitVec::from_bytes(&region[5..], len)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout() {
        let mut b = BitVec::new(20);
        b.set(0);
        b.set(9);
        let r = encode(MASK_USED_CLUSTERS, &b, 1);
        assert_eq!(r.len(), 4096);
        assert_eq!(&r[..8], &[1, 20, 0, 0, 0, 0b1, 0b10, 0]);
        let (len, d) = decode(MASK_USED_CLUSTERS, &r).unwrap();
        assert_eq!(len, 20);
        assert!(d.get(0) && d.get(9) && !d.get(1));
        assert!(decode(MASK_USED_PAGES, &r).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..9000)) {
            let _ = decode(bytes.first().copied().unwrap_or(0), &bytes);
        }
    }
}
