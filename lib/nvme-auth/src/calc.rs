//! The DH-HMAC-CHAP responses:
//!
//! ```text
//! Ca = C                                  without Diffie-Hellman
//! Ca = HMAC_H(H(g^xy mod p), C)           with it (the augmented challenge)
//! R  = HMAC_H(K', Ca || S || T || SC || kind || NQN1 || 0x00 || NQN2)
//! ```
//!
//! `K'` is the key transformed for `NQN1` ([`Secret::transformed`]), `S`
//! the sequence number (4 bytes), `T` the transaction id (2 bytes), both
//! little-endian, `SC` the secure-channel byte (0), `kind` `"HostHost"`
//! for the host's response (NQN1 the host's, NQN2 the subsystem's) and
//! `"Controller"` for the controller's (the other way round).

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::ids::HashFn;
use crate::key::Secret;

/// Whose response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The host's (R1): `"HostHost"`, keyed for the host NQN.
    Host,
    /// The controller's (R2): `"Controller"`, keyed for the subsystem NQN.
    Controller,
}

/// What a response is computed over.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The negotiated hash.
    pub hash: HashFn,
    /// Sequence number.
    pub seqnum: u32,
    /// Transaction id.
    pub tid: u16,
    /// Host NQN.
    pub hostnqn: &'a str,
    /// Subsystem NQN.
    pub subnqn: &'a str,
    /// The Diffie-Hellman shared secret, if the group is not null.
    pub dh_secret: Option<&'a [u8]>,
}

/// The response of `kind` to challenge `cval` under `key`.
#[must_use]
pub fn response(kind: Kind, key: &Secret, cval: &[u8], i: &Inputs<'_>) -> Zeroizing<Vec<u8>> {
    let (label, nqn1, nqn2): (&[u8], &str, &str) = match kind {
        Kind::Host => (b"HostHost", i.hostnqn, i.subnqn),
        Kind::Controller => (b"Controller", i.subnqn, i.hostnqn),
    };
    let ca = match i.dh_secret {
        None => Zeroizing::new(cval.to_vec()),
        Some(s) => i.hash.hmac(&i.hash.digest(s), &[cval]),
    };
    let k = key.transformed(nqn1);
    i.hash.hmac(
        &k,
        &[
            &ca,
            &i.seqnum.to_le_bytes(),
            &i.tid.to_le_bytes(),
            &[0u8],
            label,
            nqn1.as_bytes(),
            &[0u8],
            nqn2.as_bytes(),
        ],
    )
}

/// Whether `got` equals `want`, in constant time.
#[must_use]
pub fn same(got: &[u8], want: &[u8]) -> bool {
    got.len() == want.len() && bool::from(got.ct_eq(want))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_depend_on_every_input() {
        let key = Secret::generate(32, Some(HashFn::Sha256)).unwrap();
        let base = Inputs {
            hash: HashFn::Sha256,
            seqnum: 1,
            tid: 2,
            hostnqn: "nqn.h",
            subnqn: "nqn.s",
            dh_secret: None,
        };
        let c = [5u8; 32];
        let r = response(Kind::Host, &key, &c, &base);
        assert_eq!(r.len(), 32);
        assert!(same(&r, &response(Kind::Host, &key, &c, &base)));
        let variants = [
            Inputs { seqnum: 2, ..base },
            Inputs { tid: 3, ..base },
            Inputs {
                hostnqn: "nqn.x",
                ..base
            },
            Inputs {
                dh_secret: Some(&[1, 2, 3]),
                ..base
            },
        ];
        for v in variants {
            assert!(!same(&r, &response(Kind::Host, &key, &c, &v)));
        }
        assert!(!same(&r, &response(Kind::Controller, &key, &c, &base)));
        assert!(!same(&r, &r[..31]));
    }
}
