//! Bit-field helpers for the dword layouts (crate internal).
//!
//! Every narrowing cast of the crate lives here: each keeps the low bits
//! of a value on purpose.

/// Bits `lo..lo+len` of `v` (`len` < 32).
pub(crate) const fn bits(v: u32, lo: u32, len: u32) -> u32 {
    (v >> lo) & ((1u32 << len) - 1)
}

/// Bit `n` of `v`.
pub(crate) const fn bit(v: u32, n: u32) -> bool {
    (v >> n) & 1 != 0
}

/// `1 << n` if `b`, else 0.
pub(crate) const fn flag(b: bool, n: u32) -> u32 {
    (b as u32) << n
}

/// The byte at bit `lo` of `v`.
#[expect(clippy::cast_possible_truncation, reason = "takes 8 bits on purpose")]
pub(crate) const fn u8_at(v: u32, lo: u32) -> u8 {
    (v >> lo) as u8
}

/// The 16-bit half at bit `lo` of `v`.
#[expect(clippy::cast_possible_truncation, reason = "takes 16 bits on purpose")]
pub(crate) const fn u16_at(v: u32, lo: u32) -> u16 {
    (v >> lo) as u16
}

/// Bits `lo..lo+len` of a 64-bit `v` (`len` <= 32).
#[expect(
    clippy::cast_possible_truncation,
    reason = "the result is masked to 32 bits"
)]
pub(crate) const fn bits64(v: u64, lo: u32, len: u32) -> u32 {
    ((v >> lo) & ((1u64 << len) - 1)) as u32
}

/// The low 32 bits of `v`.
#[expect(clippy::cast_possible_truncation, reason = "takes 32 bits on purpose")]
pub(crate) const fn lo32(v: u64) -> u32 {
    v as u32
}

/// The high 32 bits of `v`.
pub(crate) const fn hi32(v: u64) -> u32 {
    lo32(v >> 32)
}

/// The 64-bit value of two dwords.
pub(crate) const fn u64_of(lo: u32, hi: u32) -> u64 {
    (lo as u64) | ((hi as u64) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(bits(0xabcd_1234, 8, 8), 0x12);
        assert_eq!(bits(0xffff_ffff, 0, 31), 0x7fff_ffff);
        assert!(bit(4, 2) && !bit(4, 1));
        assert_eq!(flag(true, 31), 0x8000_0000);
        assert_eq!(u8_at(0xabcd_1234, 24), 0xab);
        assert_eq!(u16_at(0xabcd_1234, 16), 0xabcd);
        assert_eq!(bits64(0x0040_0820_0f01_07ff, 48, 4), 0);
        assert_eq!(bits64(0x0040_0820_0f01_07ff, 32, 32), 0x0040_0820);
        assert_eq!(
            u64_of(lo32(0x1122_3344_5566_7788), hi32(0x1122_3344_5566_7788)),
            0x1122_3344_5566_7788
        );
    }
}
