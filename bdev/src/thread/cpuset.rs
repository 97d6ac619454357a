//! CPU sets in SPDK's core-mask formats: a hex mask (`0x3`, `3`, `0xF0`) or
//! a bracketed list with ranges (`[0,1]`, `[0-3]`, `[0-3,8]`).

use std::fmt;
use std::str::FromStr;

/// Highest CPU number we accept, exclusive (as SPDK's `SPDK_CPUSET_SIZE`).
pub const MAX_CPUS: u32 = 1024;
const WORDS: usize = (MAX_CPUS / 64) as usize;

/// A set of CPU numbers.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct CpuSet {
    bits: [u64; WORDS],
}

/// Why a core mask string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid core mask {mask:?}: {reason}")]
pub struct CpuSetParseError {
    /// The rejected input.
    pub mask: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl CpuSet {
    /// The empty set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A set holding one CPU.
    #[must_use]
    pub fn single(cpu: u32) -> Self {
        let mut s = Self::new();
        s.insert(cpu);
        s
    }

    /// Adds `cpu` (ignored if `cpu >= MAX_CPUS`).
    pub fn insert(&mut self, cpu: u32) {
        if cpu < MAX_CPUS {
            self.bits[(cpu / 64) as usize] |= 1 << (cpu % 64);
        }
    }

    /// Whether `cpu` is in the set.
    #[must_use]
    pub fn contains(&self, cpu: u32) -> bool {
        cpu < MAX_CPUS && self.bits[(cpu / 64) as usize] & (1 << (cpu % 64)) != 0
    }

    /// Number of CPUs in the set.
    #[must_use]
    pub fn len(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.bits.iter().all(|w| *w == 0)
    }

    /// The CPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..MAX_CPUS).filter(|c| self.contains(*c))
    }

    /// The lowest CPU in the set.
    #[must_use]
    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    /// Intersection.
    #[must_use]
    pub fn and(&self, other: &CpuSet) -> CpuSet {
        let mut out = CpuSet::new();
        for (i, w) in out.bits.iter_mut().enumerate() {
            *w = self.bits[i] & other.bits[i];
        }
        out
    }

    /// Hex digits without a `0x` prefix, as `framework_get_reactors` prints.
    #[must_use]
    pub fn to_hex(&self) -> String {
        let mut s = String::new();
        for w in self.bits.iter().rev() {
            if s.is_empty() {
                if *w != 0 {
                    s = format!("{w:x}");
                }
            } else {
                s.push_str(&format!("{w:016x}"));
            }
        }
        if s.is_empty() {
            s.push('0');
        }
        s
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet(0x{})", self.to_hex())
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{}", self.to_hex())
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut s = CpuSet::new();
        for c in iter {
            s.insert(c);
        }
        s
    }
}

impl FromStr for CpuSet {
    type Err = CpuSetParseError;

    fn from_str(mask: &str) -> Result<Self, Self::Err> {
        let err = |reason| CpuSetParseError {
            mask: mask.to_string(),
            reason,
        };
        let s = mask.trim();
        if s.is_empty() {
            return Err(err("empty"));
        }
        let mut set = CpuSet::new();
        if let Some(list) = s.strip_prefix('[') {
            let list = list.strip_suffix(']').ok_or_else(|| err("missing ']'"))?;
            for part in list.split(',') {
                let part = part.trim();
                let (lo, hi) = match part.split_once('-') {
                    Some((a, b)) => (a.trim(), b.trim()),
                    None => (part, part),
                };
                let lo: u32 = lo.parse().map_err(|_| err("bad cpu number in list"))?;
                let hi: u32 = hi.parse().map_err(|_| err("bad cpu number in list"))?;
                if lo > hi {
                    return Err(err("range start above its end"));
                }
                if hi >= MAX_CPUS {
                    return Err(err("cpu number too large"));
                }
                for c in lo..=hi {
                    set.insert(c);
                }
            }
        } else {
            let hex = s
                .strip_prefix("0x")
                .or_else(|| s.strip_prefix("0X"))
                .unwrap_or(s);
            if hex.is_empty() {
                return Err(err("no hex digits"));
            }
            if hex.len() > (MAX_CPUS / 4) as usize {
                return Err(err("mask too long"));
            }
            for (i, ch) in hex.chars().rev().enumerate() {
                let v = ch.to_digit(16).ok_or_else(|| err("not a hex digit"))?;
                for b in 0..4u32 {
                    if v & (1 << b) != 0 {
                        let cpu = u32::try_from(i).map_err(|_| err("mask too long"))? * 4 + b;
                        set.insert(cpu);
                    }
                }
            }
        }
        if set.is_empty() {
            return Err(err("no cpu selected"));
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_spdk_formats() {
        let s: CpuSet = "0x3".parse().unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 1]);
        let s: CpuSet = "F0".parse().unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![4, 5, 6, 7]);
        let s: CpuSet = "[0,1]".parse().unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 1]);
        let s: CpuSet = "[0-3, 8]".parse().unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 8]);
        assert_eq!(s.to_hex(), "10f");
        assert_eq!(s.to_string(), "0x10f");
        let big: CpuSet = "[70]".parse().unwrap();
        assert_eq!(big.to_hex(), "400000000000000000");
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "0x", "0", "zz", "[1-0]", "[a]", "[0,1", "[2000]"] {
            assert!(bad.parse::<CpuSet>().is_err(), "{bad}");
        }
    }
}
