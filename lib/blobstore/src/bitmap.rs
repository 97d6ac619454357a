//! A fixed-length bit vector: the used-page, used-cluster and used-blobid
//! masks, in memory and in their on-disk byte order (LSB first).

/// A bit vector of `len` bits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct BitVec {
    words: Vec<u64>,
    len: u64,
    ones: u64,
    /// No clear bit below this index (a search hint).
    first_clear_hint: u64,
}

fn word_count(len: u64) -> usize {
    usize::try_from(len.div_ceil(64)).unwrap_or(usize::MAX)
}

impl BitVec {
    pub(crate) fn new(len: u64) -> Self {
        BitVec {
            words: vec![0; word_count(len)],
            len,
            ones: 0,
            first_clear_hint: 0,
        }
    }

    /// From mask bytes (bit i in byte i / 8, bit i % 8); bits past `len` are
    /// ignored.
    pub(crate) fn from_bytes(bytes: &[u8], len: u64) -> Self {
        let mut v = BitVec::new(len);
        for (w, word) in v.words.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            let start = w * 8;
            if start < bytes.len() {
                let end = (start + 8).min(bytes.len());
                b[..end - start].copy_from_slice(&bytes[start..end]);
            }
            *word = u64::from_le_bytes(b);
        }
        v.mask_tail();
        v.ones = v.words.iter().map(|w| u64::from(w.count_ones())).sum();
        v
    }

    /// The mask bytes: `len.div_ceil(8)` of them.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let n = usize::try_from(self.len.div_ceil(8)).unwrap_or(0);
        let mut out = Vec::with_capacity(self.words.len() * 8);
        for w in &self.words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.truncate(n);
        out
    }

    fn mask_tail(&mut self) {
        let rem = self.len % 64;
        if rem != 0 {
            if let Some(last) = self.words.last_mut() {
                *last &= (1u64 << rem) - 1;
            }
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    pub(crate) fn count_ones(&self) -> u64 {
        self.ones
    }

    pub(crate) fn count_zeros(&self) -> u64 {
        self.len - self.ones
    }

    fn split(i: u64) -> (usize, u64) {
        (usize::try_from(i / 64).unwrap_or(usize::MAX), i % 64)
    }

    pub(crate) fn get(&self, i: u64) -> bool {
        if i >= self.len {
            return false;
        }
        let (w, b) = Self::split(i);
        self.words[w] >> b & 1 == 1
    }

    /// Sets bit `i`; returns whether it was clear. Out of range: false.
    pub(crate) fn set(&mut self, i: u64) -> bool {
        if i >= self.len {
            return false;
        }
        let (w, b) = Self::split(i);
        let was_clear = self.words[w] >> b & 1 == 0;
        if was_clear {
            self.words[w] |= 1 << b;
            self.ones += 1;
        }
        was_clear
    }

    /// Clears bit `i`; returns whether it was set.
    pub(crate) fn clear(&mut self, i: u64) -> bool {
        if i >= self.len {
            return false;
        }
        let (w, b) = Self::split(i);
        let was_set = self.words[w] >> b & 1 == 1;
        if was_set {
            self.words[w] &= !(1 << b);
            self.ones -= 1;
            if i < self.first_clear_hint {
                self.first_clear_hint = i;
            }
        }
        was_set
    }

    /// The first clear bit at or after `from`.
    pub(crate) fn find_first_clear(&mut self, from: u64) -> Option<u64> {
        let start = if from <= self.first_clear_hint {
            self.first_clear_hint
        } else {
            from
        };
        let found = self.scan_clear(start);
        if from <= self.first_clear_hint {
            self.first_clear_hint = found.unwrap_or(self.len);
        }
        found
    }

    fn scan_clear(&self, from: u64) -> Option<u64> {
        if from >= self.len {
            return None;
        }
        let (mut w, b) = Self::split(from);
        let mut word = !self.words[w] & (u64::MAX << b);
        loop {
            if word != 0 {
                let i = (w as u64) * 64 + u64::from(word.trailing_zeros());
                return (i < self.len).then_some(i);
            }
            w += 1;
            if w >= self.words.len() {
                return None;
            }
            word = !self.words[w];
        }
    }

    /// Indices of the set bits.
    pub(crate) fn iter_ones(&self) -> impl Iterator<Item = u64> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let b = rest.trailing_zeros();
                rest &= rest - 1;
                Some(w as u64 * 64 + u64::from(b))
            })
        })
    }

    /// Grows to `len` bits (new bits clear); never shrinks.
    pub(crate) fn grow(&mut self, len: u64) {
        if len > self.len {
            self.words.resize(word_count(len), 0);
            self.len = len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn set_clear_find() {
        let mut v = BitVec::new(130);
        assert_eq!(v.find_first_clear(0), Some(0));
        for i in 0..129 {
            assert!(v.set(i));
        }
        assert!(!v.set(5));
        assert_eq!(v.find_first_clear(0), Some(129));
        assert!(v.set(129));
        assert_eq!(v.find_first_clear(0), None);
        assert!(v.clear(64));
        assert_eq!(v.find_first_clear(0), Some(64));
        assert_eq!(v.find_first_clear(65), None);
        assert_eq!(v.count_ones(), 129);
        assert!(!v.set(130));
    }

    proptest! {
        #[test]
        fn bytes_round_trip(bits in proptest::collection::vec(any::<bool>(), 0..300)) {
            let mut v = BitVec::new(bits.len() as u64);
            for (i, &b) in bits.iter().enumerate() {
                if b { v.set(i as u64); }
            }
            let w = BitVec::from_bytes(&v.to_bytes(), bits.len() as u64);
            prop_assert_eq!(&w, &BitVec { first_clear_hint: w.first_clear_hint, ..v.clone() });
            let ones: Vec<u64> = w.iter_ones().collect();
            let want: Vec<u64> = bits.iter().enumerate().filter(|(_, &b)| b).map(|(i, _)| i as u64).collect();
            prop_assert_eq!(ones, want);
        }
    }
}
