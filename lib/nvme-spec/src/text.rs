//! Fixed-size ASCII string fields: serial number, model, firmware revision
//! (space padded), NQNs (NUL padded), discovery log addresses (either).
//!
//! Reading trims both kinds of padding and never fails: a device that puts
//! garbage in a string field gets its bytes shown with U+FFFD for what is
//! not UTF-8. Writing checks the length and pads with the byte the field
//! uses.

use std::borrow::Cow;

use crate::error::{Error, Result};

/// Space (0x20), the padding of SN, MN and FR in Identify Controller.
pub const PAD_SPACE: u8 = b' ';
/// NUL, the padding of NQN fields.
pub const PAD_NUL: u8 = 0;

/// The text of a padded field: everything up to the first NUL, with
/// leading and trailing spaces removed.
#[must_use]
pub fn trim(field: &[u8]) -> Cow<'_, str> {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    let s = &field[..end];
    let start = s.iter().position(|&b| b != b' ').unwrap_or(s.len());
    let stop = s.iter().rposition(|&b| b != b' ').map_or(start, |i| i + 1);
    String::from_utf8_lossy(&s[start..stop])
}

/// Writes `s` into `field` and fills the rest with `pad`. `name` names the
/// field in the error when `s` does not fit. NUL-padded fields (NQNs)
/// keep room for a terminating NUL, so they hold at most `len - 1` bytes.
pub fn pad(field: &mut [u8], s: &str, pad: u8, name: &'static str) -> Result<()> {
    let max = if pad == PAD_NUL {
        field.len().saturating_sub(1)
    } else {
        field.len()
    };
    if s.len() > max {
        return Err(Error::FieldTooLong {
            field: name,
            len: s.len(),
            max,
        });
    }
    field[..s.len()].copy_from_slice(s.as_bytes());
    field[s.len()..].fill(pad);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_both_paddings() {
        assert_eq!(trim(b"QEMU NVMe Ctrl      "), "QEMU NVMe Ctrl");
        assert_eq!(trim(b"nqn.x:y\0\0\0\0"), "nqn.x:y");
        assert_eq!(trim(b"  1.0 \0junk"), "1.0");
        assert_eq!(trim(b"        "), "");
        assert_eq!(trim(b""), "");
        assert_eq!(trim(b"\xff\xfeab "), "\u{fffd}\u{fffd}ab");
    }

    #[test]
    fn pads_and_checks_length() {
        let mut f = [0xaa_u8; 8];
        pad(&mut f, "1.0", PAD_SPACE, "fr").unwrap();
        assert_eq!(&f, b"1.0     ");
        pad(&mut f, "12345678", PAD_SPACE, "fr").unwrap();
        assert_eq!(&f, b"12345678");
        let e = pad(&mut f, "123456789", PAD_SPACE, "fr").unwrap_err();
        assert_eq!(
            e,
            Error::FieldTooLong {
                field: "fr",
                len: 9,
                max: 8
            }
        );
        // NUL padding keeps a terminator.
        assert!(pad(&mut f, "12345678", PAD_NUL, "nqn").is_err());
        pad(&mut f, "1234567", PAD_NUL, "nqn").unwrap();
        assert_eq!(&f, b"1234567\0");
        assert_eq!(trim(&f), "1234567");
    }
}
