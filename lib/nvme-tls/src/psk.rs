//! PSK identities and the key derivations of NVMe/TCP TLS (NVMe/TCP
//! Transport Specification, section 3.6.1, as SPDK implements them):
//!
//! * the cipher suite follows from the configured PSK's size: 32 bytes
//!   `TLS_AES_128_GCM_SHA256`, 48 bytes `TLS_AES_256_GCM_SHA384`;
//! * the PSK identity is `NVMe0R<hh> <hostnqn> <subnqn>`, `hh` `01` for
//!   the SHA-256 suite and `02` for the SHA-384 one;
//! * the retained PSK is the configured PSK itself when its interchange
//!   hash is `00`, else HKDF-Expand-Label(HKDF-Extract(empty salt,
//!   configured PSK), "HostNQN", hostnqn, length) with that hash;
//! * the TLS PSK, what TLS 1.3 uses as the external PSK, is
//!   HKDF-Expand-Label(HKDF-Extract(empty salt, retained PSK),
//!   "nvme-tls-psk", identity, length) with the suite's hash.
//!
//! Above `suite.rs` and [`crate::error`]; no I/O, no
//! OpenSSL (the derivations are RustCrypto's HKDF, checked against
//! OpenSSL's in the tests).

use std::fmt;

use bdevkit_nvme_auth::{HashFn, TlsPsk};
use hkdf::Hkdf;
use sha2::{Sha256, Sha384};
use zeroize::Zeroizing;

use crate::error::Error;
use crate::suite::Suite;

/// The longest NQN (NVMe Base Specification: 223 bytes).
pub const NQN_MAX_LEN: usize = 223;

/// Key material (a retained or a TLS PSK): wiped when dropped, never
/// printed.
#[derive(Clone)]
pub struct Key(Zeroizing<Vec<u8>>);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({} bytes)", self.0.len())
    }
}

impl Key {
    /// The key bytes (for the TLS layer and the tests; never log them).
    #[must_use]
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// Its length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it is empty (never, for a derived key).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A PSK identity, `NVMe0R<hh> <hostnqn> <subnqn>` (version 0, the one
/// SPDK sends and accepts). Not secret: it travels in clear in the
/// ClientHello.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PskIdentity {
    suite: Suite,
    text: String,
    /// Where the host NQN ends (and the space before the subsystem NQN
    /// is) in `text`.
    host_end: usize,
}

impl fmt::Debug for PskIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PskIdentity({:?})", self.text)
    }
}

impl fmt::Display for PskIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The identity's prefix up to the hash specifier: format "NVMe", TLS
/// protocol version indicator 0, PSK type R (retained).
const PREFIX: &str = "NVMe0R";

/// The suite a configured PSK selects (by its size, as SPDK does).
///
/// # Errors
/// [`Error::Key`] for a PSK of another size (`TlsPsk::parse` only makes
/// 32- and 48-byte ones).
pub fn suite_of(psk: &TlsPsk) -> Result<Suite, Error> {
    Suite::for_len(psk.bytes().len()).ok_or(Error::Key("a TLS PSK is 32 or 48 bytes"))
}

fn check_nqn(nqn: &str) -> Result<(), Error> {
    if nqn.is_empty() || nqn.len() > NQN_MAX_LEN || nqn.bytes().any(|b| b <= b' ') {
        return Err(Error::Identity(
            "an NQN is 1 to 223 printable bytes without spaces",
        ));
    }
    Ok(())
}

impl PskIdentity {
    /// The identity of `hostnqn` for `subnqn` with `suite`.
    ///
    /// # Errors
    /// [`Error::Identity`] for an empty, over-long or space-holding NQN,
    /// or an identity over 255 bytes (the derivation's length byte).
    pub fn new(suite: Suite, hostnqn: &str, subnqn: &str) -> Result<PskIdentity, Error> {
        check_nqn(hostnqn)?;
        check_nqn(subnqn)?;
        let text = format!("{PREFIX}{:02} {hostnqn} {subnqn}", suite.id());
        if text.len() > usize::from(u8::MAX) {
            return Err(Error::Identity("the PSK identity is over 255 bytes"));
        }
        let host_end = PREFIX.len() + 3 + hostnqn.len();
        Ok(PskIdentity {
            suite,
            text,
            host_end,
        })
    }

    /// Parses an identity as a client sent it.
    ///
    /// # Errors
    /// [`Error::Identity`] when it is not `NVMe0R01 <hostnqn> <subnqn>`
    /// or `NVMe0R02 ...` (version 1 identities, `NVMe1R..` with a PSK
    /// digest, are not supported: SPDK has none either).
    pub fn parse(text: &str) -> Result<PskIdentity, Error> {
        if text.starts_with("NVMe1R") {
            return Err(Error::Identity(
                "a version 1 identity (NVMe1R.., with a PSK digest) is not supported \
                 (nor by SPDK): give the host a version 0 one",
            ));
        }
        let rest = text
            .strip_prefix(PREFIX)
            .ok_or(Error::Identity("not an NVMe0R PSK identity"))?;
        let (hh, rest) = rest.split_once(' ').ok_or(Error::Identity("no host NQN"))?;
        let suite = match hh {
            "01" => Suite::Aes128GcmSha256,
            "02" => Suite::Aes256GcmSha384,
            _ => return Err(Error::Identity("unknown hash specifier")),
        };
        let (host, sub) = rest
            .split_once(' ')
            .ok_or(Error::Identity("no subsystem NQN"))?;
        PskIdentity::new(suite, host, sub)
    }

    /// The suite the identity names.
    #[must_use]
    pub fn suite(&self) -> Suite {
        self.suite
    }

    /// The host NQN.
    #[must_use]
    pub fn hostnqn(&self) -> &str {
        &self.text[PREFIX.len() + 3..self.host_end]
    }

    /// The subsystem NQN.
    #[must_use]
    pub fn subnqn(&self) -> &str {
        &self.text[self.host_end + 1..]
    }

    /// The identity as sent.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// HKDF-Extract (empty salt) then HKDF-Expand with the info of TLS 1.3's
/// HKDF-Expand-Label as NVMe/TCP (and SPDK) fill it: the 16-bit length is
/// the input key's length, then `label` and `context` each after a length
/// byte. The output is the hash's length.
fn expand_label(hash: HashFn, ikm: &[u8], label: &str, context: &[u8]) -> Result<Key, Error> {
    let label_len = u8::try_from(label.len()).map_err(|_| Error::Key("label too long"))?;
    let context_len = u8::try_from(context.len()).map_err(|_| Error::Key("context too long"))?;
    let ikm_len = u16::try_from(ikm.len()).map_err(|_| Error::Key("key too long"))?;
    let mut info = Vec::with_capacity(4 + label.len() + context.len());
    info.extend_from_slice(&ikm_len.to_be_bytes());
    info.push(label_len);
    info.extend_from_slice(label.as_bytes());
    info.push(context_len);
    info.extend_from_slice(context);
    let mut out = Zeroizing::new(vec![0u8; hash.len()]);
    let ok = match hash {
        HashFn::Sha256 => Hkdf::<Sha256>::new(Some(&[]), ikm).expand(&info, &mut out),
        HashFn::Sha384 => Hkdf::<Sha384>::new(Some(&[]), ikm).expand(&info, &mut out),
        HashFn::Sha512 => return Err(Error::Key("no NVMe/TCP suite uses SHA-512")),
    };
    ok.map_err(|_| Error::Key("HKDF output too long"))?;
    Ok(Key(out))
}

/// A retained PSK: what a side keeps for a host (derived from the
/// configured PSK and the host NQN), with the suite it selects.
#[derive(Clone)]
pub struct RetainedPsk {
    suite: Suite,
    key: Key,
}

impl fmt::Debug for RetainedPsk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetainedPsk")
            .field("suite", &self.suite)
            .finish_non_exhaustive()
    }
}

impl RetainedPsk {
    /// Derives the retained PSK of `hostnqn` from a configured PSK.
    ///
    /// # Errors
    /// [`Error::Key`] for a PSK of a size no suite takes,
    /// [`Error::Identity`] for a bad host NQN.
    pub fn derive(psk: &TlsPsk, hostnqn: &str) -> Result<RetainedPsk, Error> {
        let suite = suite_of(psk)?;
        check_nqn(hostnqn)?;
        let key = match psk.hash() {
            None => Key(Zeroizing::new(psk.bytes().to_vec())),
            Some(h) => expand_label(h, psk.bytes(), "tls13 HostNQN", hostnqn.as_bytes())?,
        };
        Ok(RetainedPsk { suite, key })
    }

    /// The suite it selects.
    #[must_use]
    pub fn suite(&self) -> Suite {
        self.suite
    }

    /// The key.
    #[must_use]
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The TLS PSK for `identity` (whose suite must be this key's).
    ///
    /// # Errors
    /// [`Error::SuiteMismatch`] when the identity names another suite.
    pub fn tls_psk(&self, identity: &PskIdentity) -> Result<Key, Error> {
        if identity.suite() != self.suite {
            return Err(Error::SuiteMismatch {
                identity: identity.as_str().to_owned(),
                asked: identity.suite(),
                configured: self.suite,
            });
        }
        expand_label(
            self.suite.hash(),
            self.key.expose(),
            "tls13 nvme-tls-psk",
            identity.as_str().as_bytes(),
        )
    }
}

#[cfg(test)]
mod tests;
