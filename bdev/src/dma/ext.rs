//! [`ExtMem`]: memory the bdev layer did not allocate — a virtual
//! machine's guest memory, shared with the process that runs it — that
//! I/O buffers may describe (zero copy).
//!
//! The same rules hold as for the pool's buffers ([`super::DmaBuf`]): the
//! memory is registered with the DMA registration hook for as long as it
//! lives (so a VFIO-backed NVMe driver maps it), and an I/O that describes
//! it keeps it alive (`Arc`) until the I/O lets go of its segments. What
//! differs is who else touches the bytes: another process may write them
//! at any time, so no Rust reference to them is ever made. The bdev layer
//! copies such data only with the racy copies of [`super::racy`] (opaque
//! to the compiler, whole bytes), hands it to the kernel or a device as
//! raw segments, and gives modules that want slices pieces copied through
//! the stack.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::{DmaError, REGISTRY};

/// Registered external memory: one or more regions `[addr, addr + len)`,
/// kept mapped by an owner value that is dropped after the regions are
/// unregistered.
pub struct ExtMem {
    /// `(start, len)`, sorted by start, disjoint.
    regions: Box<[(usize, usize)]>,
    /// Keeps the mapping alive; dropped after `Drop::drop` unregistered
    /// the regions (fields drop after the `Drop` impl runs).
    _owner: Box<dyn Any + Send + Sync>,
}

impl fmt::Debug for ExtMem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtMem")
            .field("regions", &self.regions.len())
            .field("bytes", &self.regions.iter().map(|r| r.1).sum::<usize>())
            .finish()
    }
}

impl ExtMem {
    /// Registers `regions` (`(start, len)` each) as memory I/O buffers may
    /// describe, and tells every DMA registrar about them. `owner` keeps
    /// them mapped; it is dropped after the regions are unregistered,
    /// when the last `Arc` (the caller's and those of I/Os describing the
    /// memory) goes.
    ///
    /// Fails (`Layout`) for no region, an empty one, one whose end
    /// overflows, or two that overlap.
    ///
    /// # Safety
    ///
    /// For as long as `owner` lives, every region is mapped, readable and
    /// writable memory over its whole length, and it is not memory of
    /// Rust objects: nobody holds or creates a Rust reference (`&`,
    /// `&mut`) to any of its bytes. Others (the kernel, a device, another
    /// process, other threads) may read and write it at any time through
    /// raw accesses; the bdev layer does only that too.
    pub unsafe fn new(
        regions: &[(*mut u8, usize)],
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<Arc<ExtMem>, DmaError> {
        let mut r: Vec<(usize, usize)> = regions.iter().map(|(p, l)| (*p as usize, *l)).collect();
        r.sort_unstable();
        let bad = |len: usize| DmaError::Layout { len, align: 1 };
        if r.is_empty() {
            return Err(bad(0));
        }
        for (i, &(start, len)) in r.iter().enumerate() {
            let end = start.checked_add(len).ok_or(bad(len))?;
            if len == 0 || start == 0 || r.get(i + 1).is_some_and(|n| n.0 < end) {
                return Err(bad(len));
            }
        }
        {
            let mut reg = REGISTRY.lock();
            for &(start, len) in &r {
                reg.live.insert(start, len);
                for (_, g) in &reg.registrars {
                    g.register(start, len);
                }
            }
        }
        Ok(Arc::new(ExtMem {
            regions: r.into_boxed_slice(),
            _owner: owner,
        }))
    }

    /// Whether `[addr, addr + len)` (`len > 0`) lies inside one region.
    #[inline]
    #[must_use]
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        len != 0 && self.regions.iter().any(|&(s, l)| addr >= s && end <= s + l)
    }

    /// The regions, `(start, len)`, sorted by start.
    #[must_use]
    pub fn regions(&self) -> &[(usize, usize)] {
        &self.regions
    }
}

impl Drop for ExtMem {
    fn drop(&mut self) {
        let mut reg = REGISTRY.lock();
        for &(start, len) in self.regions.iter() {
            for (_, g) in &reg.registrars {
                g.unregister(start, len);
            }
            reg.live.remove(&start);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{add_registrar, remove_registrar, MemoryRegistrar};
    use super::*;
    use parking_lot::Mutex;

    #[derive(Default)]
    struct Log(Mutex<Vec<(bool, usize, usize)>>);
    impl MemoryRegistrar for Log {
        fn register(&self, a: usize, l: usize) {
            self.0.lock().push((true, a, l));
        }
        fn unregister(&self, a: usize, l: usize) {
            self.0.lock().push((false, a, l));
        }
    }

    /// Anonymous memory, mapped for the test (the owner unmaps it).
    struct Map(*mut u8, usize);
    // SAFETY: the mapping is process memory; the pointer is only an
    // address to unmap.
    unsafe impl Send for Map {}
    // SAFETY: as above; nothing is accessed through `&Map`.
    unsafe impl Sync for Map {}
    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: mapped by `map` below with this length.
            unsafe { libc::munmap(self.0.cast(), self.1) };
        }
    }
    fn map(len: usize) -> Map {
        // SAFETY: a fresh anonymous mapping; checked for failure.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Map(p.cast(), len)
    }

    #[test]
    fn registered_while_alive_and_checked() {
        let log = Arc::new(Log::default());
        let id = add_registrar(log.clone());
        let m = map(1 << 16);
        let (p, l) = (m.0, m.1);
        // SAFETY: `m` keeps the mapping; no references to it exist.
        let ext = unsafe { ExtMem::new(&[(p, l)], Box::new(m)) }.unwrap();
        let a = p as usize;
        assert!(log.lock_has(true, a, l));
        assert!(ext.contains(a, l) && ext.contains(a + 100, 512));
        assert!(!ext.contains(a + l - 1, 2), "crosses the end");
        assert!(!ext.contains(a - 1, 2), "starts before");
        assert!(!ext.contains(a, 0) && !ext.contains(usize::MAX, 2));
        drop(ext);
        assert!(log.lock_has(false, a, l));
        remove_registrar(&id);
    }

    #[test]
    fn bad_regions_fail() {
        let m = map(8192);
        let p = m.0;
        // SAFETY: the mapping outlives the calls, which all fail before
        // registering anything.
        unsafe {
            assert!(ExtMem::new(&[], Box::new(())).is_err());
            assert!(ExtMem::new(&[(p, 0)], Box::new(())).is_err());
            assert!(ExtMem::new(&[(p, 8192), (p.wrapping_add(4096), 4096)], Box::new(())).is_err());
            assert!(ExtMem::new(&[(usize::MAX as *mut u8, 2)], Box::new(())).is_err());
        }
        drop(m);
    }

    impl Log {
        fn lock_has(&self, reg: bool, a: usize, l: usize) -> bool {
            self.0.lock().contains(&(reg, a, l))
        }
    }
}
