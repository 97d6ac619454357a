//! Aligned I/O buffers and the memory registration hook.
//!
//! [`DmaBuf`] is an owned, zero-initialised, aligned heap buffer: what the
//! I/O path moves into a [`crate::bdev::BdevIo`] and gets back on
//! completion. Drivers that must map memory for a device (the VFIO NVMe
//! driver) install a [`MemoryRegistrar`] with [`add_registrar`]; it is told
//! about every live buffer, those allocated before it was added included.

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

/// An owned, aligned, zero-initialised buffer for I/O data.
pub struct DmaBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
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
        if len == 0 {
            return Err(DmaError::Layout { len, align });
        }
        // SAFETY: the layout has a non-zero size (checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(DmaError::NoMem(len))?;
        let addr = ptr.as_ptr() as usize;
        {
            let mut reg = REGISTRY.lock();
            reg.live.insert(addr, len);
            for (_, r) in &reg.registrars {
                r.register(addr, len);
            }
        }
        Ok(DmaBuf { ptr, len, layout })
    }

    /// Allocates with [`DEFAULT_ALIGN`].
    pub fn new(len: usize) -> Result<DmaBuf, DmaError> {
        Self::alloc(len, DEFAULT_ALIGN)
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (zero-length buffers cannot be allocated).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Alignment the buffer was allocated with.
    #[must_use]
    pub fn align(&self) -> usize {
        self.layout.align()
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
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, writable.
    #[must_use]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice; &mut self makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
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
            .field("len", &self.len)
            .field("align", &self.layout.align())
            .finish()
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        let addr = self.ptr.as_ptr() as usize;
        {
            let mut reg = REGISTRY.lock();
            for (_, r) in &reg.registrars {
                r.unregister(addr, self.len);
            }
            reg.live.remove(&addr);
        }
        // SAFETY: ptr was allocated by alloc_zeroed with exactly this layout
        // and is freed once, here.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// Memory shared by every thread of a RAM-backed bdev (the malloc module).
///
/// It is only ever accessed by raw byte copies between it and I/O buffers,
/// never through references, so that channels on different threads can
/// serve I/O to it at once, like a device. As on a device, the contents of
/// a range written by two overlapping I/Os in flight at the same time are
/// unspecified; consumers must not issue those.
pub struct SharedMem {
    buf: DmaBuf,
}

// SAFETY: see the type docs: all access goes through bounds-checked raw
// copies below; concurrent access to disjoint ranges is independent, and
// concurrent overlapping I/O is excluded by the block device contract.
unsafe impl Sync for SharedMem {}

impl fmt::Debug for SharedMem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedMem")
            .field("len", &self.buf.len())
            .finish()
    }
}

impl SharedMem {
    /// Allocates `len` zeroed bytes and touches every page, so that no page
    /// fault happens on the I/O path.
    pub fn new(len: usize) -> Result<SharedMem, DmaError> {
        let mut buf = DmaBuf::alloc(len, DEFAULT_ALIGN)?;
        let s = buf.as_mut_slice();
        let mut off = 0;
        while off < s.len() {
            s[off] = 0;
            off += 4096;
        }
        Ok(SharedMem { buf })
    }

    /// Size in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Never true.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    fn check(&self, off: usize, len: usize) -> bool {
        off.checked_add(len).is_some_and(|e| e <= self.buf.len())
    }

    /// Copies `dst.len()` bytes at `off` into `dst`. False if out of range.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        if !self.check(off, dst.len()) {
            return false;
        }
        // SAFETY: the range is inside the allocation (checked); `dst` is a
        // distinct exclusive slice; see the type docs on concurrency.
        unsafe {
            std::ptr::copy_nonoverlapping(self.buf.as_ptr().add(off), dst.as_mut_ptr(), dst.len());
        }
        true
    }

    /// Copies `src` to `off`. False if out of range.
    pub fn write(&self, off: usize, src: &[u8]) -> bool {
        if !self.check(off, src.len()) {
            return false;
        }
        // SAFETY: as in `read`; the destination is inside our allocation.
        let dst = unsafe { self.buf.as_ptr().cast_mut().add(off) };
        if !stream_copy(dst, src) {
            // SAFETY: as in `read`; the destination is inside our allocation.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        }
        true
    }

    /// Asks the CPU to start loading `[off, off + len)` into its caches
    /// (a hint: no effect on contents, nothing if out of range). A module
    /// that copies the range a little later finds it in cache.
    pub fn prefetch(&self, off: usize, len: usize) {
        if !self.check(off, len) {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
            let base = self.buf.as_ptr();
            let mut i = 0;
            while i < len {
                // SAFETY: a prefetch is only a hint and cannot fault; the
                // address is inside our allocation (checked above).
                unsafe { _mm_prefetch::<_MM_HINT_T1>(base.add(off + i).cast::<i8>()) };
                i += 64;
            }
        }
    }

    /// Fills `len` bytes at `off` with `byte`. False if out of range.
    pub fn fill(&self, off: usize, len: usize, byte: u8) -> bool {
        if !self.check(off, len) {
            return false;
        }
        // SAFETY: the range is inside the allocation (checked).
        unsafe { std::ptr::write_bytes(self.buf.as_ptr().cast_mut().add(off), byte, len) };
        true
    }

    /// Copies `len` bytes from `src` to `dst` inside the memory (ranges may
    /// overlap). False if out of range.
    pub fn copy_within(&self, src: usize, dst: usize, len: usize) -> bool {
        if !self.check(src, len) || !self.check(dst, len) {
            return false;
        }
        // SAFETY: both ranges are inside the allocation (checked); `copy`
        // handles overlap.
        unsafe {
            std::ptr::copy(
                self.buf.as_ptr().add(src),
                self.buf.as_ptr().cast_mut().add(dst),
                len,
            );
        }
        true
    }

    /// Whether the `data.len()` bytes at `off` equal `data`.
    #[must_use]
    pub fn equals(&self, off: usize, data: &[u8]) -> bool {
        if !self.check(off, data.len()) {
            return false;
        }
        // SAFETY: the range is inside the allocation (checked); the slice
        // lives only for this comparison.
        let mem = unsafe { std::slice::from_raw_parts(self.buf.as_ptr().add(off), data.len()) };
        mem == data
    }
}

/// Copies `src` to `dst` with non-temporal stores when both suit them
/// (AVX2, `dst` 32-byte aligned, length a multiple of 32 and at least a
/// page): data written to a RAM disk is rarely read back at once, and
/// streaming it past the cache halves the memory traffic of a random write
/// (no read-for-ownership of the destination). Returns false when it did
/// nothing.
#[cfg(target_arch = "x86_64")]
fn stream_copy(dst: *mut u8, src: &[u8]) -> bool {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_stream_si256, _mm_sfence};
    static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let len = src.len();
    if len < 4096 || !len.is_multiple_of(32) || !(dst as usize).is_multiple_of(32) {
        return false;
    }
    if !*AVX2.get_or_init(|| std::arch::is_x86_feature_detected!("avx2")) {
        return false;
    }
    #[target_feature(enable = "avx2")]
    // SAFETY (caller): AVX2 is available; `dst` is valid for `src.len()`
    // bytes, 32-byte aligned, and does not overlap `src`.
    unsafe fn copy(dst: *mut u8, src: &[u8]) {
        let mut i = 0;
        while i < src.len() {
            // SAFETY: `i + 32 <= len` (len is a multiple of 32); the load is
            // unaligned-tolerant, the store target is 32-byte aligned.
            unsafe {
                let v = _mm256_loadu_si256(src.as_ptr().add(i).cast::<__m256i>());
                _mm256_stream_si256(dst.add(i).cast::<__m256i>(), v);
            }
            i += 32;
        }
        // Order the streaming stores before anything that follows (the
        // completion that tells a reader the data is there).
        _mm_sfence();
    }
    // SAFETY: AVX2 was detected; the caller (SharedMem::write) checked the
    // destination range lies in its allocation, apart from `src`, and the
    // alignment and length were checked above.
    unsafe { copy(dst, src) };
    true
}

#[cfg(not(target_arch = "x86_64"))]
fn stream_copy(_dst: *mut u8, _src: &[u8]) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    #[test]
    fn shared_mem_streaming_and_plain_writes_read_back() {
        let m = SharedMem::new(1 << 20).unwrap();
        // Page-sized, aligned: the streaming path.
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        assert!(m.write(4096, &data));
        // Unaligned and short: the plain copy.
        assert!(m.write(100_001, &data[..777]));
        let mut back = vec![0u8; 8192];
        assert!(m.read(4096, &mut back));
        assert_eq!(back, data);
        let mut back = vec![0u8; 777];
        assert!(m.read(100_001, &mut back));
        assert_eq!(back[..], data[..777]);
        m.prefetch(0, 4096);
        m.prefetch(usize::MAX - 10, 100);
        assert!(!m.write((1 << 20) - 10, &data[..20]), "out of range");
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
