//! Header and data digests: CRC32C (Castagnoli, as iSCSI) over the PDU
//! header (HLEN bytes) or the PDU data, sent little-endian right after
//! what it covers.
//!
//! A bad header digest is fatal (a TermReq with FES 3); a bad data digest
//! is not: the command completes with Transient Transport Error
//! ([`DataDigestError::status`]).

use crate::status::Status;

/// The header digest of `header` (its first HLEN bytes).
#[must_use]
pub fn header_digest(header: &[u8]) -> u32 {
    crc32c::crc32c(header)
}

/// The data digest of `data`.
#[must_use]
pub fn data_digest(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// A data digest over data in several pieces (an iovec): feed the pieces
/// in order, then [`finish`](DataDigest::finish).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataDigest(u32);

impl DataDigest {
    /// An empty digest.
    #[must_use]
    pub fn new() -> Self {
        DataDigest(0)
    }

    /// Adds the next piece of data.
    pub fn update(&mut self, piece: &[u8]) {
        self.0 = crc32c::crc32c_append(self.0, piece);
    }

    /// The digest of everything added.
    #[must_use]
    pub fn finish(self) -> u32 {
        self.0
    }
}

/// A received data digest did not match the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("data digest mismatch: computed {expected:#010x}, received {received:#010x}")]
pub struct DataDigestError {
    /// The digest of the data received.
    pub expected: u32,
    /// The digest that came with it.
    pub received: u32,
}

impl DataDigestError {
    /// The status a controller completes the command with.
    #[must_use]
    pub fn status(&self) -> Status {
        Status::TRANSIENT_TRANSPORT_ERROR
    }
}

/// Checks `received` (the 4 digest bytes as sent) against `data`.
pub fn verify_data_digest(data: &[u8], received: [u8; 4]) -> Result<(), DataDigestError> {
    let expected = data_digest(data);
    let received = u32::from_le_bytes(received);
    if expected == received {
        Ok(())
    } else {
        Err(DataDigestError { expected, received })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_vectors() {
        // The CRC32C check value, and RFC 3720 B.4's 32 zero bytes.
        assert_eq!(data_digest(b"123456789"), 0xe306_9283);
        assert_eq!(data_digest(&[0; 32]), 0x8a91_36aa);
        assert_eq!(data_digest(&[0xff; 32]), 0x62a8_ab43);
        assert_eq!(header_digest(b""), 0);
    }

    #[test]
    fn verify_and_status() {
        let d = data_digest(b"abc").to_le_bytes();
        assert_eq!(verify_data_digest(b"abc", d), Ok(()));
        let e = verify_data_digest(b"abd", d).unwrap_err();
        assert_eq!(e.received, u32::from_le_bytes(d));
        assert!(e.status().is(Status::TRANSIENT_TRANSPORT_ERROR));
    }

    proptest! {
        #[test]
        fn flipped_bit_detected(data in proptest::collection::vec(any::<u8>(), 1..512), bit in any::<usize>()) {
            let digest = data_digest(&data).to_le_bytes();
            let mut bad = data.clone();
            let bit = bit % (bad.len() * 8);
            bad[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(verify_data_digest(&bad, digest).is_err());
            // A flipped bit in the digest itself is caught too.
            let mut d2 = digest;
            d2[bit % 4] ^= 1 << (bit % 8);
            prop_assert!(verify_data_digest(&data, d2).is_err());
        }

        #[test]
        fn pieces_equal_whole(data in proptest::collection::vec(any::<u8>(), 0..512), cut in any::<usize>()) {
            let cut = if data.is_empty() { 0 } else { cut % data.len() };
            let mut d = DataDigest::new();
            d.update(&data[..cut]);
            d.update(&data[cut..]);
            prop_assert_eq!(d.finish(), data_digest(&data));
        }
    }
}
