//! Keys in the NVMe interchange formats:
//!
//! * a DH-HMAC-CHAP secret, `DHHC-1:<hh>:<base64 of key || CRC-32>:` —
//!   `hh` is the hash that transforms the key before use (`00` none, `01`
//!   SHA-256, `02` SHA-384, `03` SHA-512), the key 32, 48 or 64 bytes, the
//!   CRC-32 (the IEEE one, little-endian) over the key;
//! * a TLS pre-shared key, `NVMeTLSkey-1:<hh>:<base64 of PSK || CRC-32>:`
//!   — `hh` `00` (the configured PSK used as is), `01` SHA-256 (32 bytes),
//!   `02` SHA-384 (48 bytes).
//!
//! Both keep their bytes in memory that is wiped when dropped, and their
//! `Debug` prints no key material.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use zeroize::Zeroizing;

use crate::ids::HashFn;
use crate::Error;

/// What [`HashFn`] transforms a secret before it keys an HMAC (or none).
fn transform_of(hh: &str) -> Result<Option<HashFn>, Error> {
    match hh {
        "00" => Ok(None),
        "01" => Ok(Some(HashFn::Sha256)),
        "02" => Ok(Some(HashFn::Sha384)),
        "03" => Ok(Some(HashFn::Sha512)),
        _ => Err(Error::Key("unknown key hash")),
    }
}

/// Splits `<prefix>:<hh>:<base64>:` and checks the base64 and CRC.
fn parse_interchange<'a>(s: &'a str, prefix: &str) -> Result<(&'a str, Zeroizing<Vec<u8>>), Error> {
    let rest = s
        .trim_end_matches(['\n', '\r'])
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix(':'))
        .ok_or(Error::Key("not in the interchange format"))?;
    let (hh, rest) = rest.split_once(':').ok_or(Error::Key("no hash field"))?;
    let b64 = rest.strip_suffix(':').ok_or(Error::Key("no closing ':'"))?;
    if hh.len() != 2 || b64.contains(':') {
        return Err(Error::Key("malformed fields"));
    }
    let raw = Zeroizing::new(STANDARD.decode(b64).map_err(|_| Error::Key("bad base64"))?);
    if raw.len() < 5 {
        return Err(Error::Key("key too short"));
    }
    let (key, crc) = raw.split_at(raw.len() - 4);
    let want = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32fast::hash(key) != want {
        return Err(Error::Key("bad CRC"));
    }
    Ok((hh, Zeroizing::new(key.to_vec())))
}

fn to_interchange(prefix: &str, hh: &str, key: &[u8]) -> String {
    let mut raw = Zeroizing::new(key.to_vec());
    raw.extend_from_slice(&crc32fast::hash(key).to_le_bytes());
    format!("{prefix}:{hh}:{}:", STANDARD.encode(&*raw))
}

/// A DH-HMAC-CHAP secret (host or controller key).
#[derive(Clone)]
pub struct Secret {
    transform: Option<HashFn>,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("transform", &self.transform)
            .field("len", &self.key.len())
            .finish_non_exhaustive()
    }
}

impl Secret {
    /// Parses `DHHC-1:<hh>:<base64>:` (a trailing newline is allowed).
    ///
    /// # Errors
    /// [`Error::Key`] with what is wrong (never the key).
    pub fn parse(s: &str) -> Result<Secret, Error> {
        let (hh, key) = parse_interchange(s, "DHHC-1")?;
        if !matches!(key.len(), 32 | 48 | 64) {
            return Err(Error::Key("a DH-HMAC-CHAP key is 32, 48 or 64 bytes"));
        }
        Ok(Secret {
            transform: transform_of(hh)?,
            key,
        })
    }

    /// A new random secret of `len` bytes (32, 48 or 64) transformed by
    /// `transform` (what `nvme gen-dhchap-key` makes).
    ///
    /// # Errors
    /// [`Error::Key`] for another length, [`Error::Random`] when the OS
    /// has no randomness.
    pub fn generate(len: usize, transform: Option<HashFn>) -> Result<Secret, Error> {
        if !matches!(len, 32 | 48 | 64) {
            return Err(Error::Key("a DH-HMAC-CHAP key is 32, 48 or 64 bytes"));
        }
        let mut key = Zeroizing::new(vec![0u8; len]);
        crate::random(&mut key)?;
        Ok(Secret { transform, key })
    }

    /// The interchange form (`DHHC-1:..:..:`).
    #[must_use]
    pub fn to_interchange(&self) -> String {
        let hh = format!("{:02x}", self.transform.map_or(0, HashFn::id));
        to_interchange("DHHC-1", &hh, &self.key)
    }

    /// The hash that transforms the key, if any.
    #[must_use]
    pub fn transform(&self) -> Option<HashFn> {
        self.transform
    }

    /// The key as used for `nqn`'s responses: HMAC with the transform
    /// hash of `nqn || "NVMe-over-Fabrics"` under the key, or the key as
    /// is when it has no transform.
    #[must_use]
    pub fn transformed(&self, nqn: &str) -> Zeroizing<Vec<u8>> {
        match self.transform {
            None => self.key.clone(),
            Some(h) => h.hmac(&self.key, &[nqn.as_bytes(), b"NVMe-over-Fabrics"]),
        }
    }
}

/// A TLS pre-shared key for NVMe/TCP, as configured.
#[derive(Clone)]
pub struct TlsPsk {
    hash: Option<HashFn>,
    psk: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for TlsPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsPsk")
            .field("hash", &self.hash)
            .field("len", &self.psk.len())
            .finish_non_exhaustive()
    }
}

impl TlsPsk {
    /// Parses `NVMeTLSkey-1:<hh>:<base64>:`.
    ///
    /// # Errors
    /// [`Error::Key`] with what is wrong (never the key).
    pub fn parse(s: &str) -> Result<TlsPsk, Error> {
        let (hh, psk) = parse_interchange(s, "NVMeTLSkey-1")?;
        let hash = match hh {
            "00" => None,
            "01" => Some(HashFn::Sha256),
            "02" => Some(HashFn::Sha384),
            _ => return Err(Error::Key("unknown PSK hash")),
        };
        let ok = match hash {
            None => matches!(psk.len(), 32 | 48),
            Some(h) => psk.len() == h.len(),
        };
        if !ok {
            return Err(Error::Key("PSK length does not match its hash"));
        }
        Ok(TlsPsk { hash, psk })
    }

    /// The PSK hash (`None`: configured PSK used as is).
    #[must_use]
    pub fn hash(&self) -> Option<HashFn> {
        self.hash
    }

    /// The configured PSK bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.psk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_round_trip_and_are_checked() {
        for (len, t) in [
            (32, None),
            (48, Some(HashFn::Sha384)),
            (64, Some(HashFn::Sha512)),
        ] {
            let s = Secret::generate(len, t).unwrap();
            let text = s.to_interchange();
            let back = Secret::parse(&text).unwrap();
            assert_eq!(back.transform(), t);
            assert_eq!(*back.key, *s.key);
            assert!(
                !format!("{back:?}").contains(&text[10..20]),
                "no key in Debug"
            );
            // One flipped character breaks the CRC (or the base64).
            let mut bad = text.clone().into_bytes();
            bad[12] = if bad[12] == b'A' { b'B' } else { b'A' };
            assert!(Secret::parse(std::str::from_utf8(&bad).unwrap()).is_err());
        }
        assert!(Secret::generate(16, None).is_err());
        for bad in [
            "",
            "DHHC-1:00:",
            "DHHC-1:05:AAAA:",
            "DHHC-2:00:AAAAAAAAAAAA:",
            "DHHC-1:00:not base64!:",
            "DHHC-1:00:AAAAAAAA",
        ] {
            assert!(Secret::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn transformed_key_is_an_hmac_over_the_nqn() {
        let s = Secret::generate(32, Some(HashFn::Sha256)).unwrap();
        let k = s.transformed("nqn.2014-08.org.nvmexpress:uuid:1");
        assert_eq!(k.len(), 32);
        assert_ne!(*k, *s.transformed("nqn.other"));
        let plain = Secret::generate(48, None).unwrap();
        assert_eq!(*plain.transformed("x"), *plain.key);
    }

    #[test]
    fn tls_psks_parse() {
        let psk = [7u8; 32];
        let text = to_interchange("NVMeTLSkey-1", "01", &psk);
        let p = TlsPsk::parse(&text).unwrap();
        assert_eq!(p.hash(), Some(HashFn::Sha256));
        assert_eq!(p.bytes(), &psk);
        let bad = to_interchange("NVMeTLSkey-1", "02", &psk);
        assert!(TlsPsk::parse(&bad).is_err(), "SHA-384 PSK of 32 bytes");
    }
}
