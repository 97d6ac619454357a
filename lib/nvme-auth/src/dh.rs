//! Finite-field Diffie-Hellman over the RFC 7919 groups (generator 2),
//! in constant time (crypto-bigint's Montgomery arithmetic). Public
//! values and shared secrets are big-endian, padded to the prime's
//! length, as DH-HMAC-CHAP carries and hashes them.

use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Odd};
use zeroize::Zeroizing;

use crate::ids::DhGroup;
use crate::Error;

/// Bytes of a private exponent: 512 bits, above twice the security
/// strength of every group (RFC 7919 section 5.2).
const PRIVATE_BYTES: usize = 64;

fn prime_hex(g: DhGroup) -> Option<&'static str> {
    Some(match g {
        DhGroup::Null => return None,
        DhGroup::Ffdhe2048 => include_str!("ffdhe/ffdhe2048.hex"),
        DhGroup::Ffdhe3072 => include_str!("ffdhe/ffdhe3072.hex"),
        DhGroup::Ffdhe4096 => include_str!("ffdhe/ffdhe4096.hex"),
        DhGroup::Ffdhe6144 => include_str!("ffdhe/ffdhe6144.hex"),
        DhGroup::Ffdhe8192 => include_str!("ffdhe/ffdhe8192.hex"),
    })
}

fn decode_hex(s: &str) -> Vec<u8> {
    let s = s.trim();
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0))
        .collect()
}

/// A group's arithmetic: its prime in Montgomery form.
struct Field {
    bits: u32,
    len: usize,
    prime: BoxedUint,
    params: BoxedMontyParams,
}

impl Field {
    fn of(g: DhGroup) -> Result<Field, Error> {
        let hex = prime_hex(g).ok_or(Error::Dh("the null group has no arithmetic"))?;
        let bytes = decode_hex(hex);
        let bits = g.bits();
        let prime = BoxedUint::from_be_slice(&bytes, bits).map_err(|_| Error::Dh("bad prime"))?;
        let odd = Option::<Odd<BoxedUint>>::from(Odd::new(prime.clone()))
            .ok_or(Error::Dh("even prime"))?;
        Ok(Field {
            bits,
            len: bytes.len(),
            prime,
            params: BoxedMontyParams::new(odd),
        })
    }

    fn uint(&self, be: &[u8]) -> Result<BoxedUint, Error> {
        BoxedUint::from_be_slice(be, self.bits).map_err(|_| Error::Dh("value of the wrong size"))
    }

    /// `base ^ exp mod p`, padded big-endian, for a private exponent of
    /// [`PRIVATE_BYTES`]: the ladder runs over those bits only (a public
    /// bound, so still constant time in the exponent's value), not the
    /// prime's whole width (16 times fewer squarings in ffdhe8192).
    fn pow(&self, base: &BoxedUint, exp: &BoxedUint) -> Zeroizing<Vec<u8>> {
        let b = BoxedMontyForm::new(base.clone(), self.params.clone());
        let bits = u32::try_from(PRIVATE_BYTES * 8).unwrap_or(u32::MAX);
        let r = b.pow_bounded_exp(exp, bits).retrieve();
        Zeroizing::new(r.to_be_bytes().to_vec())
    }
}

/// One side's key pair for one exchange.
pub struct DhKey {
    group: DhGroup,
    field: Field,
    private: Zeroizing<Vec<u8>>,
    public: Vec<u8>,
}

impl std::fmt::Debug for DhKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DhKey")
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl DhKey {
    /// A fresh key pair in `group` (not `Null`).
    ///
    /// # Errors
    /// [`Error::Dh`] for `Null`, [`Error::Random`] without randomness.
    pub fn generate(group: DhGroup) -> Result<DhKey, Error> {
        let field = Field::of(group)?;
        let mut x = Zeroizing::new(vec![0u8; field.len]);
        let start = field.len - PRIVATE_BYTES;
        crate::random(&mut x[start..])?;
        // Never 0 or 1.
        x[field.len - 1] |= 2;
        let exp = field.uint(&x)?;
        let g = field.uint(&{
            let mut two = vec![0u8; field.len];
            two[field.len - 1] = 2;
            two
        })?;
        let public = field.pow(&g, &exp).to_vec();
        Ok(DhKey {
            group,
            field,
            private: x,
            public,
        })
    }

    /// The group.
    #[must_use]
    pub fn group(&self) -> DhGroup {
        self.group
    }

    /// The public value `g^x mod p`, padded to the prime's length.
    #[must_use]
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret `peer^x mod p`, padded to the prime's length.
    /// The peer's value must be the prime's length and lie in `2..p-1`
    /// (RFC 7919 section 5.1), else [`Error::Dh`].
    ///
    /// # Errors
    /// [`Error::Dh`] for a public value that is not one.
    pub fn shared(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, Error> {
        if peer.len() != self.field.len {
            return Err(Error::Dh("peer public value of the wrong length"));
        }
        let y = self.field.uint(peer)?;
        let one = BoxedUint::one_with_precision(self.field.bits);
        let p_minus_1 = self.field.prime.wrapping_sub(&one);
        if y <= one || y >= p_minus_1 {
            return Err(Error::Dh("peer public value out of range"));
        }
        let exp = self.field.uint(&self.private)?;
        Ok(self.field.pow(&y, &exp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_agree_in_every_group() {
        for g in DhGroup::ALL.into_iter().skip(1) {
            let a = DhKey::generate(g).unwrap();
            let b = DhKey::generate(g).unwrap();
            assert_eq!(a.public().len(), g.value_len());
            assert_ne!(a.public(), b.public());
            let s1 = a.shared(b.public()).unwrap();
            let s2 = b.shared(a.public()).unwrap();
            assert_eq!(*s1, *s2, "{g:?}");
            assert_eq!(s1.len(), g.value_len());
        }
        assert!(DhKey::generate(DhGroup::Null).is_err());
    }

    #[test]
    fn bad_public_values_are_refused() {
        let a = DhKey::generate(DhGroup::Ffdhe2048).unwrap();
        let n = DhGroup::Ffdhe2048.value_len();
        let mut one = vec![0u8; n];
        one[n - 1] = 1;
        assert!(a.shared(&one).is_err(), "1");
        assert!(a.shared(&vec![0u8; n]).is_err(), "0");
        assert!(a.shared(&vec![0xffu8; n]).is_err(), "above p");
        assert!(a.shared(&[2u8; 10]).is_err(), "short");
        // p - 1 itself.
        let mut pm1 = decode_hex(prime_hex(DhGroup::Ffdhe2048).unwrap());
        pm1[n - 1] -= 1;
        assert!(a.shared(&pm1).is_err(), "p - 1");
    }
}
