//! Aligned I/O buffers and the memory registration hook.
//!
//! [`DmaBuf`] is an owned, zero-initialised, aligned heap buffer: what the
//! I/O path moves into a [`crate::bdev::BdevIo`] and gets back on
//! completion. An embedder whose data lives in memory of its own (fio's
//! I/O buffers) lends it for one I/O with [`DmaBuf::from_raw_parts`]: a
//! borrowed buffer, never freed by bdevkit. Drivers that must map memory for a device (the VFIO NVMe
//! driver) install a [`MemoryRegistrar`] with [`add_registrar`]; it is told
//! about every live buffer, those allocated before it was added included.
//! [`SharedMem`] is the memory of a RAM disk, which every thread reads and
//! writes at once. [`ExtMem`] is memory the bdev layer did not allocate (a
//! VM's guest memory) registered for I/O buffers to describe.

mod ext;
pub(crate) mod racy;
mod shared_mem;

pub use ext::ExtMem;
pub use shared_mem::SharedMem;

use std::alloc::{self, Layout};
use std::collections::BTreeMap;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::Mutex;

/// Default alignment: one 4 KiB page, enough for `O_DIRECT` on any device.
pub const DEFAULT_ALIGN: usize = 4096;

/// Told about every buffer's memory, to map it for DMA.
pub trait MemoryRegistrar: Send + Sync {
    /// `[addr, addr + len)` became live. Called on the allocating thread.
    fn register(&self, addr: usize, len: usize);
    /// `[addr, addr + len)` is about to be freed.
    fn unregister(&self, addr: usize, len: usize);
}

struct Registry {
    registrars: Vec<(u64, Arc<dyn MemoryRegistrar>)>,
    live: BTreeMap<usize, usize>,
    next_id: u64,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    registrars: Vec::new(),
    live: BTreeMap::new(),
    next_id: 1,
});

/// Handle for removing a registrar again.
#[derive(Debug)]
pub struct RegistrarId(u64);

/// Installs a registrar and tells it about every live buffer.
pub fn add_registrar(r: Arc<dyn MemoryRegistrar>) -> RegistrarId {
    let mut reg = REGISTRY.lock();
    for (addr, len) in &reg.live {
        r.register(*addr, *len);
    }
    let id = reg.next_id;
    reg.next_id += 1;
    reg.registrars.push((id, r));
    RegistrarId(id)
}

/// Removes a registrar (it is not told about live buffers going away).
pub fn remove_registrar(id: &RegistrarId) {
    REGISTRY.lock().registrars.retain(|(i, _)| *i != id.0);
}

/// An owned, aligned, zero-initialised buffer for I/O data, or a borrowed
/// view of an embedder's memory ([`DmaBuf::from_raw_parts`]).
pub struct DmaBuf {
    ptr: NonNull<u8>,
    /// The length, whether the buffer is borrowed and the alignment, in
    /// one word (see [`Meta`]): two words in all, so that a buffer moves
    /// in registers (returned from `take_buf`, passed to a request
    /// builder) rather than through memory. An allocation's layout is its
    /// length and its alignment.
    meta: Meta,
}

/// The length (bits 0–55), the borrowed bit (56) and the base-2 logarithm
/// of the alignment (bits 57–62) of a [`DmaBuf`].
/// (A 64-bit word: bdevkit runs on 64-bit targets.)
#[derive(Clone, Copy)]
struct Meta(usize);

const _: () = assert!(usize::BITS == 64, "Meta packs a DmaBuf into a 64-bit word");

impl Meta {
    const LEN_BITS: u32 = 56;
    /// The largest length a buffer may have (64 PiB).
    const MAX_LEN: usize = (1 << Self::LEN_BITS) - 1;
    const BORROWED: usize = 1 << Self::LEN_BITS;
    const ALIGN_SHIFT: u32 = Self::LEN_BITS + 1;

    /// `len` at most [`Meta::MAX_LEN`], `align` a power of two.
    fn new(len: usize, align: usize, borrowed: bool) -> Meta {
        debug_assert!(len <= Self::MAX_LEN && align.is_power_of_two());
        Meta(
            len | if borrowed { Self::BORROWED } else { 0 }
                | ((align.trailing_zeros() as usize) << Self::ALIGN_SHIFT),
        )
    }

    #[inline(always)]
    fn len(self) -> usize {
        self.0 & Self::MAX_LEN
    }

    #[inline(always)]
    fn borrowed(self) -> bool {
        self.0 & Self::BORROWED != 0
    }

    #[inline(always)]
    fn align(self) -> usize {
        1 << (self.0 >> Self::ALIGN_SHIFT)
    }
}

// SAFETY: DmaBuf owns its allocation exclusively (like Box<[u8]>); moving it
// to another thread moves that ownership.
unsafe impl Send for DmaBuf {}
// SAFETY: shared references only give `&[u8]` access, like Box<[u8]>.
unsafe impl Sync for DmaBuf {}

/// Allocation failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DmaError {
    /// Zero length, or alignment not a power of two.
    #[error("invalid buffer layout (len {len}, align {align})")]
    Layout {
        /// Requested length.
        len: usize,
        /// Requested alignment.
        align: usize,
    },
    /// Out of memory.
    #[error("out of memory allocating {0} bytes")]
    NoMem(usize),
}

impl DmaBuf {
    /// Allocates `len` zeroed bytes aligned to `align` (a power of two).
    pub fn alloc(len: usize, align: usize) -> Result<DmaBuf, DmaError> {
        let layout = Layout::from_size_align(len, align.max(1))
            .map_err(|_| DmaError::Layout { len, align })?;
        if len == 0 || len > Meta::MAX_LEN {
            return Err(DmaError::Layout { len, align });
        }
        // SAFETY: the layout has a non-zero size (checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(DmaError::NoMem(len))?;
        Ok(Self::registered(ptr, layout))
    }

    /// Allocates `len` zeroed bytes (at least 2 MiB) aligned to 2 MiB and
    /// backed by transparent huge pages where the kernel offers them
    /// (`madvise`): the advice comes before the first touch, so the pages
    /// fault in 2 MiB at a time. For large RAM bdevs, as SPDK's hugepage
    /// memory: random I/O over them misses the TLB far less.
    pub(crate) fn alloc_huge(len: usize) -> Result<DmaBuf, DmaError> {
        const HUGE: usize = 2 << 20;
        let layout = Layout::from_size_align(len, HUGE)
            .map_err(|_| DmaError::Layout { len, align: HUGE })?;
        if !(HUGE..=Meta::MAX_LEN).contains(&len) {
            return Err(DmaError::Layout { len, align: HUGE });
        }
        // SAFETY: the layout has a non-zero size (checked above).
        let raw = unsafe { alloc::alloc(layout) };
        let ptr = NonNull::new(raw).ok_or(DmaError::NoMem(len))?;
        // SAFETY: `ptr..ptr + len` is the allocation just made, not yet
        // shared. The advice changes only how the kernel backs it (a kernel
        // without THP says EINVAL: ignored); then every byte is zeroed,
        // which faults the pages in.
        unsafe {
            libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE);
            std::ptr::write_bytes(ptr.as_ptr(), 0, len);
        }
        Ok(Self::registered(ptr, layout))
    }

    /// The buffer over a fresh allocation of `layout` at `ptr`, made known
    /// to the registry and every memory registrar.
    fn registered(ptr: NonNull<u8>, layout: Layout) -> DmaBuf {
        let (addr, len) = (ptr.as_ptr() as usize, layout.size());
        {
            let mut reg = REGISTRY.lock();
            reg.live.insert(addr, len);
            for (_, r) in &reg.registrars {
                r.register(addr, len);
            }
        }
        DmaBuf {
            ptr,
            meta: Meta::new(len, layout.align(), false),
        }
    }

    /// Allocates with [`DEFAULT_ALIGN`].
    pub fn new(len: usize) -> Result<DmaBuf, DmaError> {
        Self::alloc(len, DEFAULT_ALIGN)
    }

    /// A buffer over `len` bytes at `ptr` that the caller owns: an
    /// embedder lends memory of its own (fio's I/O buffers) to one I/O
    /// without copying. Dropping it frees nothing; memory registrars are
    /// not told about it, so on a bdev that maps memory for DMA it must lie
    /// inside a live `DmaBuf` allocation (carve the views out of one).
    /// [`DmaBuf::align`] reports the largest power of two (at most
    /// [`DEFAULT_ALIGN`]) that divides the address.
    ///
    /// # Safety
    ///
    /// `len` is below 2^56 (64 PiB; checked: a longer one panics). Until
    /// the returned buffer is dropped, `[ptr, ptr + len)` must be
    /// valid for reads and writes, initialised, and accessed through
    /// nothing else (the bdev layer and modules read and write it through
    /// the buffer, from the thread the I/O runs on).
    #[must_use]
    pub unsafe fn from_raw_parts(ptr: NonNull<u8>, len: usize) -> DmaBuf {
        let addr = ptr.as_ptr() as usize;
        let align = 1usize << addr.trailing_zeros().min(DEFAULT_ALIGN.trailing_zeros());
        assert!(len <= Meta::MAX_LEN, "a DmaBuf view of {len} bytes");
        DmaBuf {
            ptr,
            meta: Meta::new(len, align, true),
        }
    }

    /// Whether this is a borrowed view ([`DmaBuf::from_raw_parts`]).
    #[inline]
    #[must_use]
    pub fn is_borrowed(&self) -> bool {
        self.meta.borrowed()
    }

    /// Length in bytes.
    #[inline]
    #[must_use]
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// Never true for an allocation (zero-length buffers cannot be
    /// allocated); a borrowed view may be empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Alignment the buffer was allocated with.
    #[must_use]
    pub fn align(&self) -> usize {
        self.meta.align()
    }

    /// Start address.
    #[must_use]
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Start address, writable.
    #[must_use]
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes.
    #[must_use]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised (zeroed at allocation)
        // bytes for as long as self lives; &self forbids concurrent writes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len()) }
    }

    /// The bytes, writable.
    #[must_use]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice; &mut self makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }
}

impl std::ops::Deref for DmaBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::ops::DerefMut for DmaBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl fmt::Debug for DmaBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaBuf")
            .field("addr", &self.ptr)
            .field("len", &self.len())
            .field("align", &self.align())
            .field("borrowed", &self.is_borrowed())
            .finish()
    }
}

impl Drop for DmaBuf {
    #[inline]
    fn drop(&mut self) {
        if self.is_borrowed() {
            return;
        }
        self.free();
    }
}

impl DmaBuf {
    #[inline(never)]
    fn free(&mut self) {
        let addr = self.ptr.as_ptr() as usize;
        {
            let mut reg = REGISTRY.lock();
            for (_, r) in &reg.registrars {
                r.unregister(addr, self.len());
            }
            reg.live.remove(&addr);
        }
        // SAFETY: `alloc` took this length and alignment from a valid
        // Layout (a power-of-two alignment, a size that fits), unchanged.
        let layout = unsafe { Layout::from_size_align_unchecked(self.len(), self.align()) };
        // SAFETY: not borrowed (checked by the caller, `drop`): ptr was
        // allocated (alloc_zeroed, or alloc in alloc_huge) with exactly
        // this layout and is freed once, here.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn huge_buffers_are_aligned_zeroed_and_refuse_small_sizes() {
        let mut b = DmaBuf::alloc_huge(4 << 20).unwrap();
        assert_eq!(b.as_ptr() as usize % (2 << 20), 0);
        assert!(b.iter().all(|x| *x == 0));
        b[(4 << 20) - 1] = 9;
        assert_eq!(b.as_slice()[(4 << 20) - 1], 9);
        assert!(DmaBuf::alloc_huge(1 << 20).is_err());
    }

    #[test]
    fn aligned_and_zeroed() {
        let mut b = DmaBuf::alloc(8192, 4096).unwrap();
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert!(b.iter().all(|x| *x == 0));
        b[10] = 7;
        assert_eq!(b.as_slice()[10], 7);
        assert!(DmaBuf::alloc(0, 512).is_err());
        assert!(DmaBuf::alloc(10, 3).is_err());
    }

    struct Count(AtomicUsize, AtomicUsize);
    impl MemoryRegistrar for Count {
        fn register(&self, _a: usize, _l: usize) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn unregister(&self, _a: usize, _l: usize) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn two_words_that_keep_length_alignment_and_ownership() {
        // Two words, with or without `Option`: moved in registers.
        assert_eq!(
            std::mem::size_of::<DmaBuf>(),
            2 * std::mem::size_of::<usize>()
        );
        assert_eq!(
            std::mem::size_of::<Option<DmaBuf>>(),
            2 * std::mem::size_of::<usize>()
        );
        for (len, align) in [(1, 1), (4096, 4096), (12345, 64), (1 << 21, 1 << 21)] {
            let b = DmaBuf::alloc(len, align).unwrap();
            assert_eq!((b.len(), b.align(), b.is_borrowed()), (len, align, false));
            assert_eq!(b.as_ptr() as usize % align, 0);
        }
        assert_eq!(
            DmaBuf::alloc(Meta::MAX_LEN + 1, 4096).unwrap_err(),
            DmaError::Layout {
                len: Meta::MAX_LEN + 1,
                align: 4096
            }
        );
    }

    #[test]
    fn borrowed_view_frees_nothing() {
        let mut owner = DmaBuf::new(8192).unwrap();
        owner[4096] = 9;
        let base = NonNull::new(owner.as_mut_ptr()).unwrap();
        // SAFETY: the second page of `owner`, which outlives the view and
        // is not touched while the view lives.
        let mut view = unsafe { DmaBuf::from_raw_parts(base.add(4096), 4096) };
        assert!(view.is_borrowed() && !owner.is_borrowed());
        assert_eq!(view.len(), 4096);
        assert_eq!(view.align(), 4096);
        assert_eq!(view[0], 9);
        view[1] = 5;
        drop(view);
        assert_eq!(owner[4097], 5);
        // SAFETY: as above, one byte in: the address is odd.
        let odd = unsafe { DmaBuf::from_raw_parts(base.add(4097), 16) };
        assert_eq!(odd.align(), 1);
    }

    #[test]
    fn registrar_sees_existing_and_new_buffers() {
        let before = DmaBuf::new(4096).unwrap();
        let c = Arc::new(Count(AtomicUsize::new(0), AtomicUsize::new(0)));
        let id = add_registrar(c.clone());
        let reg_existing = c.0.load(Ordering::SeqCst);
        assert!(reg_existing >= 1);
        let after = DmaBuf::new(4096).unwrap();
        assert!(c.0.load(Ordering::SeqCst) > reg_existing);
        drop(after);
        drop(before);
        assert!(c.1.load(Ordering::SeqCst) >= 2);
        remove_registrar(&id);
    }
}
