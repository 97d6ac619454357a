//! The hash functions and Diffie-Hellman groups of DH-HMAC-CHAP, with the
//! identifiers the messages carry and the names SPDK's RPCs use
//! (`sha256`, `ffdhe2048`, ...). The bottom layer of the crate.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};
use zeroize::Zeroizing;

/// A DH-HMAC-CHAP hash function (identifier as in the messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HashFn {
    /// SHA-256 (1).
    Sha256,
    /// SHA-384 (2).
    Sha384,
    /// SHA-512 (3).
    Sha512,
}

impl HashFn {
    /// Every hash, weakest first.
    pub const ALL: [HashFn; 3] = [HashFn::Sha256, HashFn::Sha384, HashFn::Sha512];

    /// The identifier in the messages.
    #[must_use]
    pub fn id(self) -> u8 {
        match self {
            HashFn::Sha256 => 1,
            HashFn::Sha384 => 2,
            HashFn::Sha512 => 3,
        }
    }

    /// From a message's identifier.
    #[must_use]
    pub fn from_id(id: u8) -> Option<HashFn> {
        HashFn::ALL.into_iter().find(|h| h.id() == id)
    }

    /// SPDK's name (`sha256`, `sha384`, `sha512`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            HashFn::Sha256 => "sha256",
            HashFn::Sha384 => "sha384",
            HashFn::Sha512 => "sha512",
        }
    }

    /// From SPDK's name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<HashFn> {
        HashFn::ALL.into_iter().find(|h| h.name() == name)
    }

    /// Digest length in bytes (the messages' `hl`).
    #[must_use]
    pub fn len(self) -> usize {
        match self {
            HashFn::Sha256 => 32,
            HashFn::Sha384 => 48,
            HashFn::Sha512 => 64,
        }
    }

    /// Whether the digest is empty (never).
    #[must_use]
    pub fn is_empty(self) -> bool {
        false
    }

    /// The digest of `data`.
    #[must_use]
    pub fn digest(self, data: &[u8]) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(match self {
            HashFn::Sha256 => Sha256::digest(data).to_vec(),
            HashFn::Sha384 => Sha384::digest(data).to_vec(),
            HashFn::Sha512 => Sha512::digest(data).to_vec(),
        })
    }

    /// HMAC of the concatenation of `parts` under `key`.
    #[must_use]
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            let mut m = <M as hmac::digest::KeyInit>::new_from_slice(key)
                .expect("invariant: HMAC takes keys of any length");
            for p in parts {
                m.update(p);
            }
            m.finalize().into_bytes().to_vec()
        }
        Zeroizing::new(match self {
            HashFn::Sha256 => run::<Hmac<Sha256>>(key, parts),
            HashFn::Sha384 => run::<Hmac<Sha384>>(key, parts),
            HashFn::Sha512 => run::<Hmac<Sha512>>(key, parts),
        })
    }
}

/// A Diffie-Hellman group of DH-HMAC-CHAP (identifier as in the
/// messages): none, or an RFC 7919 finite-field group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DhGroup {
    /// No Diffie-Hellman exchange (0).
    Null,
    /// ffdhe2048 (1).
    Ffdhe2048,
    /// ffdhe3072 (2).
    Ffdhe3072,
    /// ffdhe4096 (3).
    Ffdhe4096,
    /// ffdhe6144 (4).
    Ffdhe6144,
    /// ffdhe8192 (5).
    Ffdhe8192,
}

impl DhGroup {
    /// Every group, weakest first.
    pub const ALL: [DhGroup; 6] = [
        DhGroup::Null,
        DhGroup::Ffdhe2048,
        DhGroup::Ffdhe3072,
        DhGroup::Ffdhe4096,
        DhGroup::Ffdhe6144,
        DhGroup::Ffdhe8192,
    ];

    /// The identifier in the messages.
    #[must_use]
    pub fn id(self) -> u8 {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 1,
            DhGroup::Ffdhe3072 => 2,
            DhGroup::Ffdhe4096 => 3,
            DhGroup::Ffdhe6144 => 4,
            DhGroup::Ffdhe8192 => 5,
        }
    }

    /// From a message's identifier.
    #[must_use]
    pub fn from_id(id: u8) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.id() == id)
    }

    /// SPDK's name (`null`, `ffdhe2048`, ...).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            DhGroup::Null => "null",
            DhGroup::Ffdhe2048 => "ffdhe2048",
            DhGroup::Ffdhe3072 => "ffdhe3072",
            DhGroup::Ffdhe4096 => "ffdhe4096",
            DhGroup::Ffdhe6144 => "ffdhe6144",
            DhGroup::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// From SPDK's name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.name() == name)
    }

    /// The group's prime in bits (0 for `Null`).
    #[must_use]
    pub fn bits(self) -> u32 {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 2048,
            DhGroup::Ffdhe3072 => 3072,
            DhGroup::Ffdhe4096 => 4096,
            DhGroup::Ffdhe6144 => 6144,
            DhGroup::Ffdhe8192 => 8192,
        }
    }

    /// Bytes of a public value (the messages' `dhvlen`; 0 for `Null`).
    #[must_use]
    pub fn value_len(self) -> usize {
        usize::try_from(self.bits() / 8).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        for h in HashFn::ALL {
            assert_eq!(HashFn::from_id(h.id()), Some(h));
            assert_eq!(HashFn::from_name(h.name()), Some(h));
            assert_eq!(h.digest(b"").len(), h.len());
            assert_eq!(h.hmac(b"k", &[b"a", b"b"]).len(), h.len());
        }
        for g in DhGroup::ALL {
            assert_eq!(DhGroup::from_id(g.id()), Some(g));
            assert_eq!(DhGroup::from_name(g.name()), Some(g));
        }
        assert_eq!(HashFn::from_id(0), None);
        assert_eq!(DhGroup::from_id(6), None);
        // RFC 4231 test case 2.
        assert_eq!(
            HashFn::Sha256.hmac(b"Jefe", &[b"what do ya want ", b"for nothing?"])[..4],
            [0x5b, 0xdc, 0xc1, 0x46]
        );
    }
}
