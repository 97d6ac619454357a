//! Walking a split virtqueue's descriptor chain: the guest's list of
//! buffers for one request, read from guest memory with vm-memory's
//! checked accessors into a fixed scratch array (no allocation).
//!
//! Everything here is guest input. A chain is *broken* (the queue stops:
//! the device needs a reset, virtio 1.2 §2.1.2) when it cannot be walked:
//! a head or `next` index past the table, a descriptor table outside
//! guest memory, a nested or malformed indirect table, or a loop (more
//! descriptors than the table has). A chain that walks but is longer than
//! the device takes is *too long*: the request fails with a status, which
//! goes to its last descriptor.

use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::split::Descriptor;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemory};

/// Descriptors of one request the device takes: header, 127 data buffers
/// and status, as SPDK's 129 iovecs.
pub(crate) const MAX_DESCS: usize = 129;

/// Entries of an indirect table at most (the largest split queue).
const MAX_INDIRECT: u32 = 32768;

/// One buffer of a chain, as the device sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Desc {
    /// Guest physical address.
    pub gpa: u64,
    /// Length in bytes.
    pub len: u32,
    /// Device-writable (the guest reads it back).
    pub write: bool,
}

/// A walked chain: its buffers in order.
#[derive(Debug)]
pub(crate) struct Chain {
    descs: [Desc; MAX_DESCS],
    n: usize,
}

impl Default for Chain {
    fn default() -> Self {
        Chain {
            descs: [Desc::default(); MAX_DESCS],
            n: 0,
        }
    }
}

/// Why a chain is not a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WalkError {
    /// It cannot be walked: the queue is broken.
    Broken(&'static str),
    /// More than [`MAX_DESCS`] buffers; its last one (for the status).
    TooLong(Desc),
}

impl Chain {
    /// The buffers.
    pub(crate) fn descs(&self) -> &[Desc] {
        &self.descs[..self.n]
    }

    /// The buffers, to trim in place.
    pub(crate) fn descs_mut(&mut self) -> &mut [Desc] {
        &mut self.descs[..self.n]
    }

    /// Reads the chain whose head is `head` from the descriptor table at
    /// `table` (`queue_size` entries) into `self`.
    pub(crate) fn walk<M: GuestMemory>(
        &mut self,
        mem: &M,
        table: u64,
        queue_size: u16,
        head: u16,
    ) -> Result<(), WalkError> {
        self.n = 0;
        if head >= queue_size {
            return Err(WalkError::Broken("head index past the queue"));
        }
        let mut table = table;
        let mut size = u32::from(queue_size);
        let mut idx = u32::from(head);
        let mut indirect = false;
        // Descriptors visited in the current table: a chain without loop
        // visits each entry at most once.
        let mut visited = 0u32;
        let mut too_long = false;
        let last = loop {
            if idx >= size {
                return Err(WalkError::Broken("descriptor index past the table"));
            }
            let at = GuestAddress(table)
                .checked_add(u64::from(idx) * 16)
                .ok_or(WalkError::Broken("descriptor address overflows"))?;
            let d: Descriptor = mem
                .read_obj(at)
                .map_err(|_| WalkError::Broken("descriptor table outside guest memory"))?;
            let flags = u32::from(d.flags());
            visited += 1;
            if visited > size {
                return Err(WalkError::Broken("descriptor chain loops"));
            }
            if flags & VRING_DESC_F_INDIRECT != 0 {
                // One level, and an indirect descriptor ends the chain of
                // the main table (virtio 1.2 §2.7.5.3.1).
                if indirect || flags & VRING_DESC_F_NEXT != 0 {
                    return Err(WalkError::Broken("nested or chained indirect table"));
                }
                let n = d.len() / 16;
                if !d.len().is_multiple_of(16) || n == 0 || n > MAX_INDIRECT {
                    return Err(WalkError::Broken("malformed indirect table"));
                }
                table = d.addr().0;
                size = n;
                idx = 0;
                visited = 0;
                indirect = true;
                continue;
            }
            let desc = Desc {
                gpa: d.addr().0,
                len: d.len(),
                write: flags & VRING_DESC_F_WRITE != 0,
            };
            if self.n < MAX_DESCS {
                self.descs[self.n] = desc;
                self.n += 1;
            } else {
                too_long = true;
            }
            if flags & VRING_DESC_F_NEXT == 0 {
                break desc;
            }
            idx = u32::from(d.next());
        };
        if too_long {
            return Err(WalkError::TooLong(last));
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use vm_memory::GuestMemoryMmap;

    /// Guest memory of 1 MiB at 0 (anonymous).
    pub(crate) fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap()
    }

    /// Writes descriptor `i` of the table at `table`.
    pub(crate) fn put(
        m: &GuestMemoryMmap,
        table: u64,
        i: u16,
        addr: u64,
        len: u32,
        flags: u16,
        next: u16,
    ) {
        let d = Descriptor::new(addr, len, flags, next);
        m.write_obj(d, GuestAddress(table + u64::from(i) * 16))
            .unwrap();
    }

    const N: u16 = 1;
    const W: u16 = 2;
    const I: u16 = 4;

    #[test]
    fn direct_and_indirect_chains_walk() {
        let m = mem();
        put(&m, 0, 0, 0x1000, 16, N, 3);
        put(&m, 0, 3, 0x2000, 4096, N | W, 1);
        put(&m, 0, 1, 0x3000, 1, W, 0);
        let mut c = Chain::default();
        c.walk(&m, 0, 8, 0).unwrap();
        assert_eq!(c.descs().len(), 3);
        assert_eq!(
            c.descs()[1],
            Desc {
                gpa: 0x2000,
                len: 4096,
                write: true
            }
        );
        // An indirect table of three at 0x8000.
        put(&m, 0, 5, 0x8000, 48, I, 0);
        put(&m, 0x8000, 0, 0x1000, 16, N, 1);
        put(&m, 0x8000, 1, 0x2000, 512, N, 2);
        put(&m, 0x8000, 2, 0x3000, 1, W, 0);
        c.walk(&m, 0, 8, 5).unwrap();
        assert_eq!(c.descs().len(), 3);
        assert!(c.descs()[2].write);
    }

    #[test]
    fn broken_chains_are_reported() {
        let m = mem();
        let mut c = Chain::default();
        let broken = |r: Result<(), WalkError>| matches!(r, Err(WalkError::Broken(_)));
        assert!(broken(c.walk(&m, 0, 8, 8)), "head past the queue");
        put(&m, 0, 0, 0x1000, 16, N, 9);
        assert!(broken(c.walk(&m, 0, 8, 0)), "next past the table");
        put(&m, 0, 0, 0x1000, 16, N, 1);
        put(&m, 0, 1, 0x1000, 16, N, 0);
        assert!(broken(c.walk(&m, 0, 8, 0)), "loop");
        assert!(broken(c.walk(&m, 1 << 20, 8, 0)), "table outside memory");
        put(&m, 0, 2, 0x8000, 40, I, 0);
        assert!(
            broken(c.walk(&m, 0, 8, 2)),
            "indirect length not a multiple of 16"
        );
        put(&m, 0, 2, 0x8000, 32, I | N, 0);
        assert!(broken(c.walk(&m, 0, 8, 2)), "indirect with next");
        put(&m, 0, 2, 0x8000, 32, I, 0);
        put(&m, 0x8000, 0, 0x9000, 32, I, 0);
        assert!(broken(c.walk(&m, 0, 8, 2)), "nested indirect");
        put(&m, 0, 2, (1 << 20) + 4096, 32, I, 0);
        assert!(broken(c.walk(&m, 0, 8, 2)), "indirect table outside memory");
    }

    #[test]
    fn too_long_chain_reports_its_last_buffer() {
        let m = mem();
        // 140 descriptors in an indirect table, the last writable.
        put(&m, 0, 0, 0x10000, 140 * 16, I, 0);
        for i in 0..140u16 {
            let last = i == 139;
            let flags = if last { W } else { N };
            put(
                &m,
                0x10000,
                i,
                0x20000 + u64::from(i) * 512,
                512,
                flags,
                i + 1,
            );
        }
        let mut c = Chain::default();
        let r = c.walk(&m, 0, 8, 0);
        assert_eq!(
            r,
            Err(WalkError::TooLong(Desc {
                gpa: 0x20000 + 139 * 512,
                len: 512,
                write: true
            }))
        );
    }

    /// A second walker written the obvious way (a set of visited
    /// entries per table), to hold the real one against.
    fn model(m: &GuestMemoryMmap, table: u64, size: u16, head: u16) -> Result<Vec<Desc>, bool> {
        // Err(true): broken; Err(false): too long.
        if head >= size {
            return Err(true);
        }
        let (mut table, mut size, mut idx) = (table, u32::from(size), u32::from(head));
        let mut seen = std::collections::HashSet::new();
        let mut indirect = false;
        let mut out = Vec::new();
        loop {
            if idx >= size || !seen.insert((table, idx)) {
                return Err(true);
            }
            let Some(at) = table.checked_add(u64::from(idx) * 16) else {
                return Err(true);
            };
            let Ok(d) = m.read_obj::<Descriptor>(GuestAddress(at)) else {
                return Err(true);
            };
            let f = u32::from(d.flags());
            if f & VRING_DESC_F_INDIRECT != 0 {
                if indirect
                    || f & VRING_DESC_F_NEXT != 0
                    || d.len() % 16 != 0
                    || d.len() == 0
                    || d.len() / 16 > MAX_INDIRECT
                {
                    return Err(true);
                }
                (table, size, idx, indirect) = (d.addr().0, d.len() / 16, 0, true);
                continue;
            }
            out.push(Desc {
                gpa: d.addr().0,
                len: d.len(),
                write: f & VRING_DESC_F_WRITE != 0,
            });
            if f & VRING_DESC_F_NEXT == 0 {
                return if out.len() > MAX_DESCS {
                    Err(false)
                } else {
                    Ok(out)
                };
            }
            idx = u32::from(d.next());
        }
    }

    /// One generated descriptor: (address choice, length, flags, next).
    fn desc_strategy(size: u16) -> impl proptest::strategy::Strategy<Value = (u8, u32, u16, u16)> {
        use proptest::prelude::*;
        (
            0u8..6,
            prop_oneof![Just(16u32), Just(32), Just(48), Just(512), 0u32..=u32::MAX],
            0u16..8,
            0u16..size + 3,
        )
    }

    fn addr_of(choice: u8, i: u16) -> u64 {
        match choice {
            // Data in memory, the indirect table, its end, past the end,
            // one that overflows with any offset.
            0 | 1 => 0x2_0000 + u64::from(i) * 512,
            2 => 0x8000,
            3 => (1 << 20) - 16,
            4 => 1 << 20,
            _ => u64::MAX - 8,
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(1000))]
        /// Random descriptor tables (a main one of 16 and an indirect one
        /// of up to 160 at 0x8000, with loops, bad indexes, addresses
        /// outside memory, nested and chained indirects): the walk ends,
        /// never panics, and agrees with the model.
        #[test]
        fn random_chains_walk_as_the_model_says(
            main in proptest::collection::vec(desc_strategy(16), 16),
            ind in proptest::collection::vec(desc_strategy(160), 0..160),
            head in 0u16..18,
        ) {
            let m = mem();
            for (i, &(a, l, f, n)) in main.iter().enumerate() {
                let i = u16::try_from(i).unwrap();
                put(&m, 0, i, addr_of(a, i), l, f, n);
            }
            for (i, &(a, l, f, n)) in ind.iter().enumerate() {
                let i = u16::try_from(i).unwrap();
                // Mostly plain descriptors chained onwards, so that long
                // chains happen.
                let f = if a < 2 { (f & !I) | N } else { f };
                put(&m, 0x8000, i, addr_of(a, i), l, f, if a < 2 { i + 1 } else { n });
            }
            let mut c = Chain::default();
            let got = c.walk(&m, 0, 16, head);
            match (got, model(&m, 0, 16, head)) {
                (Ok(()), Ok(v)) => proptest::prop_assert_eq!(c.descs(), &v[..]),
                (Err(WalkError::Broken(_)), Err(true)) => {}
                (Err(WalkError::TooLong(last)), Err(false)) => {
                    proptest::prop_assert!(c.descs().len() == MAX_DESCS);
                    let _ = last;
                }
                (g, w) => proptest::prop_assert!(false, "walk {:?}, model {:?}", g, w),
            }
        }
    }
}
