//! A blob's cluster map: blob cluster index -> device cluster (0 = not
//! allocated), in chunks of 512 entries, one per extent page, so a large
//! thin blob with few allocations stays small.

use super::EXTENTS_PER_EP;

const CHUNK: usize = 512;
const _: () = assert!(CHUNK as u64 == EXTENTS_PER_EP);

type Chunk = Box<[u32; CHUNK]>;

/// See the [module docs](self).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ClusterMap {
    len: u64,
    chunks: Vec<Option<Chunk>>,
    allocated: u64,
}

fn split(idx: u64) -> (usize, usize) {
    (
        usize::try_from(idx / EXTENTS_PER_EP).unwrap_or(usize::MAX),
        usize::try_from(idx % EXTENTS_PER_EP).unwrap_or(0),
    )
}

impl ClusterMap {
    /// `len` unallocated clusters.
    pub(crate) fn new(len: u64) -> Self {
        let n = usize::try_from(len.div_ceil(EXTENTS_PER_EP)).unwrap_or(0);
        let mut chunks = Vec::new();
        chunks.resize_with(n, || None);
        ClusterMap {
            len,
            chunks,
            allocated: 0,
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    pub(crate) fn allocated(&self) -> u64 {
        self.allocated
    }

    /// Extent-page ranges: `len / 512` rounded up.
    pub(crate) fn num_chunks(&self) -> u64 {
        self.chunks.len() as u64
    }

    /// The device cluster of blob cluster `idx` (0: not allocated).
    pub(crate) fn get(&self, idx: u64) -> u32 {
        if idx >= self.len {
            return 0;
        }
        let (c, i) = split(idx);
        self.chunks
            .get(c)
            .and_then(|ch| ch.as_ref())
            .map_or(0, |ch| ch[i])
    }

    /// Sets blob cluster `idx` (< len) to `cluster`; returns the old value.
    pub(crate) fn set(&mut self, idx: u64, cluster: u32) -> u32 {
        if idx >= self.len {
            return 0;
        }
        let (c, i) = split(idx);
        let Some(slot) = self.chunks.get_mut(c) else {
            return 0;
        };
        if slot.is_none() {
            if cluster == 0 {
                return 0;
            }
            *slot = Some(Box::new([0; CHUNK]));
        }
        let Some(ch) = slot.as_mut() else { return 0 };
        let old = std::mem::replace(&mut ch[i], cluster);
        match (old != 0, cluster != 0) {
            (false, true) => self.allocated += 1,
            (true, false) => self.allocated -= 1,
            _ => {}
        }
        old
    }

    /// Grows with unallocated clusters or truncates.
    pub(crate) fn resize(&mut self, len: u64) {
        if len < self.len {
            for idx in len..self.len.min(len.div_ceil(EXTENTS_PER_EP) * EXTENTS_PER_EP) {
                self.set(idx, 0);
            }
            let keep = usize::try_from(len.div_ceil(EXTENTS_PER_EP)).unwrap_or(0);
            for ch in self.chunks.drain(keep..).flatten() {
                self.allocated -= ch.iter().filter(|&&c| c != 0).count() as u64;
            }
        } else {
            let n = usize::try_from(len.div_ceil(EXTENTS_PER_EP)).unwrap_or(0);
            self.chunks.resize_with(n, || None);
        }
        self.len = len;
    }

    /// Entries of chunk `k` that are inside the blob: `min(512, len - 512k)`.
    pub(crate) fn chunk_len(&self, k: u64) -> usize {
        let start = k * EXTENTS_PER_EP;
        usize::try_from(self.len.saturating_sub(start).min(EXTENTS_PER_EP)).unwrap_or(0)
    }

    /// The entries of chunk `k` (zeros where nothing is allocated).
    pub(crate) fn chunk_entries(&self, k: u64) -> Vec<u32> {
        let n = self.chunk_len(k);
        match usize::try_from(k)
            .ok()
            .and_then(|k| self.chunks.get(k))
            .and_then(|c| c.as_ref())
        {
            Some(ch) => ch[..n].to_vec(),
            None => vec![0; n],
        }
    }

    /// Whether chunk `k` has any allocated cluster.
    pub(crate) fn chunk_is_allocated(&self, k: u64) -> bool {
        usize::try_from(k)
            .ok()
            .and_then(|k| self.chunks.get(k))
            .and_then(|c| c.as_ref())
            .is_some_and(|ch| ch.iter().any(|&c| c != 0))
    }

    /// (blob cluster index, device cluster) of every allocated cluster.
    pub(crate) fn iter_allocated(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.chunks.iter().enumerate().flat_map(|(k, ch)| {
            ch.iter().flat_map(move |ch| {
                ch.iter()
                    .enumerate()
                    .filter(|(_, &c)| c != 0)
                    .map(move |(i, &c)| (k as u64 * EXTENTS_PER_EP + i as u64, c))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_resize_count() {
        let mut m = ClusterMap::new(1000);
        assert_eq!(m.num_chunks(), 2);
        m.set(3, 10);
        m.set(700, 11);
        assert_eq!(m.allocated(), 2);
        assert_eq!(m.chunk_len(1), 488);
        m.resize(600);
        assert_eq!(m.allocated(), 1);
        assert_eq!(m.get(3), 10);
        m.resize(2);
        assert_eq!(m.allocated(), 0);
        assert_eq!(m.num_chunks(), 1);
        m.resize(1024);
        assert_eq!(m.get(3), 0);
        assert_eq!(m.chunk_entries(1).len(), 512);
        assert!(!m.chunk_is_allocated(0));
    }
}
