//! NVMe Qualified Names: validation and the UUID form.
//!
//! An NQN is at most 223 bytes of UTF-8 (NVMe Base Specification 2.0
//! §4.5) in one of three forms:
//!
//! - the discovery NQN, `nqn.2014-08.org.nvmexpress.discovery`;
//! - the UUID form, `nqn.2014-08.org.nvmexpress:uuid:` followed by a
//!   36-character UUID (`8-4-4-4-12` hex digits);
//! - `nqn.YYYY-MM.reverse.domain:user-string`: a date code, a reverse
//!   domain name whose labels start with a letter, hold letters, digits
//!   and hyphens, end with a letter or digit and are at most 63 bytes,
//!   then `:` and a non-empty user string.
//!
//! The rules follow SPDK's checks, so a name SPDK's RPCs accept is
//! accepted here, with two stricter points: the domain may not be empty
//! nor end with a dot.

/// The well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// The prefix of the UUID form.
pub const UUID_NQN_PREFIX: &str = "nqn.2014-08.org.nvmexpress:uuid:";
/// The longest NQN, in bytes.
pub const NQN_MAX_LEN: usize = 223;
/// The shortest NQN, in bytes (`nqn.` and a date code).
pub const NQN_MIN_LEN: usize = 11;
/// The longest domain label, in bytes.
const LABEL_MAX_LEN: usize = 63;

/// Which NQN rule a name breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NqnError {
    /// Longer than 223 bytes.
    #[error("nqn is {len} bytes, at most 223 allowed")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// Shorter than the `nqn.yyyy-mm` prefix.
    #[error("nqn is {len} bytes, at least 11 needed")]
    TooShort {
        /// Its length.
        len: usize,
    },
    /// Does not start with `nqn.`.
    #[error("nqn must start with \"nqn.\"")]
    Prefix,
    /// The date code is not `yyyy-mm.`.
    #[error("nqn date code must be yyyy-mm followed by '.'")]
    Date,
    /// No `:` with a user string after the domain.
    #[error("nqn needs ':' and a user string after the domain")]
    MissingUserString,
    /// The reverse domain name is malformed at byte `at`.
    #[error("invalid reverse domain name in nqn at byte {at}")]
    Domain {
        /// Byte offset of the offending character.
        at: usize,
    },
    /// A domain label is longer than 63 bytes.
    #[error("domain label longer than 63 bytes in nqn")]
    LabelTooLong,
    /// The UUID form's UUID is malformed.
    #[error("invalid uuid in nqn")]
    Uuid,
}

/// Checks `nqn` against the NQN rules (see the module doc).
pub fn validate_nqn(nqn: &str) -> Result<(), NqnError> {
    let b = nqn.as_bytes();
    if b.len() > NQN_MAX_LEN {
        return Err(NqnError::TooLong { len: b.len() });
    }
    if b.len() < NQN_MIN_LEN {
        return Err(NqnError::TooShort { len: b.len() });
    }
    if nqn == DISCOVERY_NQN {
        return Ok(());
    }
    if let Some(uuid) = nqn.strip_prefix(UUID_NQN_PREFIX) {
        return if is_uuid(uuid) {
            Ok(())
        } else {
            Err(NqnError::Uuid)
        };
    }
    if !nqn.starts_with("nqn.") {
        return Err(NqnError::Prefix);
    }
    let date_ok = b.len() > 11
        && b[4..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'-'
        && b[9..11].iter().all(u8::is_ascii_digit)
        && b[11] == b'.';
    if !date_ok {
        return Err(NqnError::Date);
    }
    let colon = match nqn.find(':') {
        Some(c) if c + 1 < b.len() => c,
        _ => return Err(NqnError::MissingUserString),
    };
    check_domain(&b[12..colon], 12)
}

/// Checks a reverse domain name whose first byte is at offset `base`.
fn check_domain(d: &[u8], base: usize) -> Result<(), NqnError> {
    if d.is_empty() {
        return Err(NqnError::Domain { at: base });
    }
    let mut start = 0;
    for label in d.split(|&c| c == b'.') {
        let at = base + start;
        let (first, last) = match (label.first(), label.last()) {
            (Some(f), Some(l)) => (*f, *l),
            _ => return Err(NqnError::Domain { at }),
        };
        if label.len() > LABEL_MAX_LEN {
            return Err(NqnError::LabelTooLong);
        }
        if !first.is_ascii_alphabetic() {
            return Err(NqnError::Domain { at });
        }
        if let Some(i) = label
            .iter()
            .position(|c| !(c.is_ascii_alphanumeric() || *c == b'-'))
        {
            return Err(NqnError::Domain { at: at + i });
        }
        if !last.is_ascii_alphanumeric() {
            return Err(NqnError::Domain {
                at: at + label.len() - 1,
            });
        }
        start += label.len() + 1;
    }
    Ok(())
}

/// Whether `s` is a UUID in `8-4-4-4-12` hex form.
fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// The UUID-form NQN of `uuid` (a host NQN made from its host id).
#[must_use]
pub fn uuid_nqn(uuid: &[u8; 16]) -> String {
    let mut s = String::with_capacity(UUID_NQN_PREFIX.len() + 36);
    s.push_str(UUID_NQN_PREFIX);
    for (i, byte) in uuid.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{byte:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts() {
        for n in [
            DISCOVERY_NQN,
            "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555",
            "nqn.2014-08.org.nvmexpress:uuid:ABCDEF01-2222-3333-4444-555555555555",
            "nqn.2016-06.io.spdk:cnode1",
            "nqn.2024-01.io.bdevkit:spec",
            "nqn.2019-08.org.qemu:deadbeef",
            "nqn.2014-08.com.ex-ample:nvme:host.sys.xyz",
            "nqn.2014-08.a:x",
            "nqn.2014-08.org.x:\u{00e9}t\u{00e9}",
        ] {
            assert_eq!(validate_nqn(n), Ok(()), "{n}");
        }
        let label = "a".repeat(63);
        assert_eq!(validate_nqn(&format!("nqn.2014-08.{label}.com:x")), Ok(()));
    }

    #[test]
    fn rejects() {
        let long = format!("nqn.2014-08.org.x:{}", "y".repeat(210));
        assert_eq!(validate_nqn(&long), Err(NqnError::TooLong { len: 228 }));
        assert_eq!(validate_nqn("nqn.2014"), Err(NqnError::TooShort { len: 8 }));
        assert_eq!(validate_nqn("iqn.2014-08.org.x:y"), Err(NqnError::Prefix));
        assert_eq!(validate_nqn("nqn.14-08-01.org:y"), Err(NqnError::Date));
        assert_eq!(validate_nqn("nqn.2014-08"), Err(NqnError::Date));
        assert_eq!(
            validate_nqn("nqn.2014-08.org.x"),
            Err(NqnError::MissingUserString)
        );
        assert_eq!(
            validate_nqn("nqn.2014-08.org.x:"),
            Err(NqnError::MissingUserString)
        );
        assert_eq!(
            validate_nqn("nqn.2014-08.1org:x"),
            Err(NqnError::Domain { at: 12 })
        );
        assert_eq!(
            validate_nqn("nqn.2014-08.org-:x"),
            Err(NqnError::Domain { at: 15 })
        );
        assert_eq!(
            validate_nqn("nqn.2014-08.o_g:x"),
            Err(NqnError::Domain { at: 13 })
        );
        assert_eq!(
            validate_nqn("nqn.2014-08.org..x:x"),
            Err(NqnError::Domain { at: 16 })
        );
        assert_eq!(
            validate_nqn("nqn.2014-08.:x"),
            Err(NqnError::Domain { at: 12 })
        );
        assert_eq!(
            validate_nqn("nqn.2014-08.org.:x"),
            Err(NqnError::Domain { at: 16 })
        );
        let label = "a".repeat(64);
        assert_eq!(
            validate_nqn(&format!("nqn.2014-08.{label}:x")),
            Err(NqnError::LabelTooLong)
        );
        assert_eq!(
            validate_nqn("nqn.2014-08.org.nvmexpress:uuid:1111111-2222-3333-4444-555555555555"),
            Err(NqnError::Uuid)
        );
        assert_eq!(
            validate_nqn("nqn.2014-08.org.nvmexpress:uuid:1111111g-2222-3333-4444-555555555555"),
            Err(NqnError::Uuid)
        );
    }

    #[test]
    fn uuid_form() {
        let id = [
            0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, 0x55, 0x55, 0x55, 0x55,
            0x55, 0x55,
        ];
        let n = uuid_nqn(&id);
        assert_eq!(
            n,
            "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
        );
        assert_eq!(validate_nqn(&n), Ok(()));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,240}") {
            let _ = validate_nqn(&s);
        }

        #[test]
        fn prefixed_never_panics(tail in "[a-z0-9.:\\-]{0,40}") {
            let _ = validate_nqn(&format!("nqn.2014-08.{tail}"));
        }
    }
}
