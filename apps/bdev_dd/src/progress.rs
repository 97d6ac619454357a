//! spdk_dd's progress line: `Copying: 12/64 [MB] (30 MBps)` while it
//! runs, `Copying: 64/64 [MB] (average 31 MBps)` at the end. Sizes and
//! rates take the largest binary unit (k, M, G, T) that leaves more than
//! 10 240 of the smaller one, as spdk_dd picks them; the size unit follows
//! the total, so it stays the same on every line.

const UNITS: [&str; 5] = ["", "k", "M", "G", "T"];

/// The unit index and divisor for `v`.
fn unit(v: u64) -> (usize, u64) {
    let (mut i, mut div, mut rest) = (0usize, 1u64, v);
    while rest > 1024 * 10 && i < UNITS.len() - 1 {
        rest >>= 10;
        div <<= 10;
        i += 1;
    }
    (i, div)
}

/// One progress line (no line ending): `done` of `total` bytes at
/// `rate` bytes per second; `average` marks the final line.
#[must_use]
pub fn line(done: u64, total: u64, rate: u64, average: bool) -> String {
    let (si, sdiv) = unit(total);
    let (ri, rdiv) = unit(rate);
    format!(
        "Copying: {}/{} [{}B] ({}{} {}Bps)",
        done / sdiv,
        total / sdiv,
        UNITS[si],
        if average { "average " } else { "" },
        rate / rdiv,
        UNITS[ri]
    )
}

/// Bytes per second of `bytes` in `secs` (1 ms at least, as spdk_dd).
#[must_use]
pub fn rate(bytes: u64, secs: f64) -> u64 {
    let ms = (secs * 1000.0).max(1.0);
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "display arithmetic on a positive rate"
    )]
    let r = (bytes as f64 * 1000.0 / ms) as u64;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_as_spdk_dd_prints_them() {
        assert_eq!(line(0, 0, 0, true), "Copying: 0/0 [B] (average 0 Bps)");
        assert_eq!(
            line(10 << 20, 64 << 20, 30 << 20, false),
            "Copying: 10/64 [MB] (30 MBps)"
        );
        assert_eq!(
            line(64 << 20, 64 << 20, 31 << 20, true),
            "Copying: 64/64 [MB] (average 31 MBps)"
        );
        // 10 240 of a unit is still shown in it; one more moves up.
        assert_eq!(
            line(10_240, 10_240, 10_241, false),
            "Copying: 10240/10240 [B] (10 kBps)"
        );
        assert_eq!(
            line(1 << 30, 20 << 30, 3 << 40, true),
            "Copying: 1/20 [GB] (average 3072 GBps)"
        );
        // T is the largest unit.
        assert_eq!(unit(u64::MAX).0, 4);
    }

    #[test]
    fn rates() {
        assert_eq!(rate(1 << 20, 1.0), 1 << 20);
        assert_eq!(rate(1000, 0.0), 1_000_000, "1 ms at least");
        assert_eq!(rate(0, 5.0), 0);
    }
}
