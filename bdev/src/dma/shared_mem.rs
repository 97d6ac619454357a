//! [`SharedMem`]: the memory of a RAM disk, read and written by every
//! thread at once.

use std::fmt;

use super::racy;
use super::{DmaBuf, DmaError, DEFAULT_ALIGN};

/// Memory shared by every thread of a RAM-backed bdev (the malloc module).
///
/// Channels on different threads serve I/O to it at once, like a device,
/// so nothing ever makes a Rust reference to its bytes: every access is a
/// copy in this module's racy-copy layer (inline assembly), which cannot
/// race in the language's sense. As on a device, a range written by two overlapping I/Os at the same time holds a
/// mix of both afterwards, and a read overlapping a write sees old bytes,
/// new bytes or a mix — never undefined behaviour, whatever safe callers
/// do.
pub struct SharedMem {
    buf: DmaBuf,
}

// SAFETY: the bytes are only accessed through `racy`'s copies (see its
// docs: opaque assembly, or atomic bytes), bounds-checked below, so shared
// references from several threads cannot race; `buf` itself is never
// exposed.
unsafe impl Sync for SharedMem {}

impl fmt::Debug for SharedMem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedMem")
            .field("len", &self.buf.len())
            .finish()
    }
}

/// A transparent huge page (x86_64, aarch64 with 4 KiB pages).
const HUGE_PAGE: usize = 2 << 20;

/// Bytes compared per step of [`SharedMem::equals`].
const COMPARE_CHUNK: usize = 512;

impl SharedMem {
    /// Allocates `len` zeroed bytes and touches every page, so that no page
    /// fault happens on the I/O path.
    ///
    /// Memory of 2 MiB or more comes from `DmaBuf::alloc_huge`: 2 MiB
    /// aligned, in transparent huge pages where the kernel offers them.
    pub fn new(len: usize) -> Result<SharedMem, DmaError> {
        if len >= HUGE_PAGE {
            // Zeroed, hence touched, by the allocator.
            return Ok(SharedMem {
                buf: DmaBuf::alloc_huge(len)?,
            });
        }
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

    /// The address of byte `off` (checked by the caller).
    fn at(&self, off: usize) -> *mut u8 {
        self.buf.as_ptr().cast_mut().wrapping_add(off)
    }

    /// Copies `dst.len()` bytes at `off` into `dst`. False if out of range.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        if !self.check(off, dst.len()) {
            return false;
        }
        // SAFETY: the source lies inside the allocation (checked), which
        // lives as long as `self`; `dst` is an exclusive slice of other
        // memory.
        unsafe { racy::copy(dst.as_mut_ptr(), self.at(off), dst.len()) };
        true
    }

    /// Copies `src` to `off`. False if out of range.
    pub fn write(&self, off: usize, src: &[u8]) -> bool {
        if !self.check(off, src.len()) {
            return false;
        }
        let dst = self.at(off);
        // SAFETY: the destination lies inside the allocation (checked);
        // `src` is a shared slice of other memory.
        unsafe {
            if !racy::stream(dst, src.as_ptr(), src.len()) {
                racy::copy(dst, src.as_ptr(), src.len());
            }
        }
        true
    }

    /// Copies `len` bytes at `off` to `dst`. False if out of range.
    ///
    /// # Safety
    ///
    /// `dst` is valid for writes of `len` bytes for the call and is not
    /// this memory; others access it meanwhile only through raw accesses
    /// (an I/O's segments: see `bdev::segments`).
    pub(crate) unsafe fn read_raw(&self, off: usize, dst: *mut u8, len: usize) -> bool {
        if !self.check(off, len) {
            return false;
        }
        // SAFETY: the source lies inside the allocation (checked); the
        // destination is the caller's promise.
        unsafe { racy::copy(dst, self.at(off), len) };
        true
    }

    /// Copies `len` bytes at `src` to `off` (streamed past the cache where
    /// that suits, as [`SharedMem::write`]). False if out of range.
    ///
    /// # Safety
    ///
    /// `src` is valid for reads of `len` bytes for the call and is not
    /// this memory; others access it meanwhile only through raw accesses.
    pub(crate) unsafe fn write_raw(&self, off: usize, src: *const u8, len: usize) -> bool {
        if !self.check(off, len) {
            return false;
        }
        let dst = self.at(off);
        // SAFETY: the destination lies inside the allocation (checked);
        // the source is the caller's promise.
        unsafe {
            if !racy::stream(dst, src, len) {
                racy::copy(dst, src, len);
            }
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
            let at = |i: usize| self.at(off + i).cast::<i8>().cast_const();
            // Four cache lines a step (a 4 KiB block: 16 steps, about half
            // the instructions of a line a step), then line by line.
            let mut i = 0;
            while i + 256 <= len {
                // SAFETY: a prefetch is only a hint and cannot fault; the
                // addresses are inside our allocation (checked above).
                unsafe {
                    _mm_prefetch::<_MM_HINT_T1>(at(i));
                    _mm_prefetch::<_MM_HINT_T1>(at(i + 64));
                    _mm_prefetch::<_MM_HINT_T1>(at(i + 128));
                    _mm_prefetch::<_MM_HINT_T1>(at(i + 192));
                }
                i += 256;
            }
            while i < len {
                // SAFETY: as above.
                unsafe { _mm_prefetch::<_MM_HINT_T1>(at(i)) };
                i += 64;
            }
        }
    }

    /// Fills `len` bytes at `off` with `byte`. False if out of range.
    pub fn fill(&self, off: usize, len: usize, byte: u8) -> bool {
        if !self.check(off, len) {
            return false;
        }
        // SAFETY: the range lies inside the allocation (checked).
        unsafe { racy::fill(self.at(off), byte, len) };
        true
    }

    /// Copies `len` bytes from `src` to `dst` inside the memory (the ranges
    /// may overlap, as `memmove`). False if out of range.
    pub fn copy_within(&self, src: usize, dst: usize, len: usize) -> bool {
        if !self.check(src, len) || !self.check(dst, len) {
            return false;
        }
        if dst == src || len == 0 {
            return true;
        }
        if dst < src || dst >= src + len {
            // Forward is safe: no byte is overwritten before it is read.
            let mut done = 0;
            let step = if dst < src { src - dst } else { len }.max(1);
            while done < len {
                let n = step.min(len - done);
                // SAFETY: both ranges lie inside the allocation (checked);
                // each step copies at most `src - dst` bytes, so its
                // source and destination do not overlap. Streamed past the
                // cache where it can be (a copy-on-write's cluster is not
                // read back soon): no read-for-ownership of the destination.
                unsafe {
                    let (d, s) = (self.at(dst + done), self.at(src + done));
                    if !racy::stream(d, s, n) {
                        racy::copy(d, s, n);
                    }
                }
                done += n;
            }
        } else {
            // Overlapping with the destination after the source: backward,
            // in steps no longer than the distance.
            let step = dst - src;
            let mut left = len;
            while left > 0 {
                let n = step.min(left);
                left -= n;
                // SAFETY: as above; each step's ranges are `dst - src`
                // apart and at most that long, so they do not overlap.
                unsafe { racy::copy(self.at(dst + left), self.at(src + left), n) };
            }
        }
        true
    }

    /// Whether the `data.len()` bytes at `off` equal `data`. The bytes are
    /// copied out in small steps, never looked at in place.
    #[must_use]
    pub fn equals(&self, off: usize, data: &[u8]) -> bool {
        if !self.check(off, data.len()) {
            return false;
        }
        let mut chunk = [0u8; COMPARE_CHUNK];
        data.chunks(COMPARE_CHUNK).enumerate().all(|(k, want)| {
            let got = &mut chunk[..want.len()];
            // SAFETY: inside the allocation (checked: the chunks tile
            // `data.len()` bytes from `off`); `chunk` is our own stack.
            unsafe {
                racy::copy(
                    got.as_mut_ptr(),
                    self.at(off + k * COMPARE_CHUNK),
                    got.len(),
                )
            };
            got == want
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn copy_within_streamed_apart_and_overlapping_both_ways() {
        let len = 64 << 10;
        let m = SharedMem::new(1 << 20).unwrap();
        let pattern: Vec<u8> = (0..len).map(|i| u8::try_from(i % 253).unwrap()).collect();
        let check = |off: usize| {
            let mut got = vec![0u8; len];
            assert!(m.read(off, &mut got));
            assert!(got == pattern, "copy at {off} differs");
        };
        assert!(m.write(0, &pattern));
        // Apart, aligned: streamed.
        assert!(m.copy_within(0, 512 << 10, len));
        check(512 << 10);
        // Overlapping forward (destination below the source) and backward.
        assert!(m.copy_within(512 << 10, (512 << 10) - 8192, len));
        check((512 << 10) - 8192);
        assert!(m.copy_within((512 << 10) - 8192, (512 << 10) + 4096, len));
        check((512 << 10) + 4096);
        // Unaligned: the plain copy.
        assert!(m.copy_within(0, 700_001, len));
        check(700_001);
        assert!(!m.copy_within(0, (1 << 20) - 100, len));
    }

    #[test]
    fn streaming_and_plain_writes_read_back() {
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
        assert!(m.equals(4096, &data) && m.equals(100_001, &data[..777]));
        assert!(!m.equals(4097, &data));
        m.prefetch(0, 4096);
        m.prefetch(usize::MAX - 10, 100);
        assert!(!m.write((1 << 20) - 10, &data[..20]), "out of range");
        assert!(!m.read(usize::MAX, &mut back), "offset overflow");
        assert!(!m.equals((1 << 20) - 10, &data[..20]));
        assert!(m.fill(4096, 100, 7));
        let mut back = [0u8; 101];
        assert!(m.read(4096, &mut back));
        assert!(back[..100].iter().all(|b| *b == 7) && back[100] == data[100]);
    }

    #[test]
    fn copy_within_moves_like_memmove() {
        let m = SharedMem::new(8192).unwrap();
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 253) as u8).collect();
        for (src, dst) in [(0usize, 3000usize), (3000, 3001), (3001, 2990), (100, 100)] {
            assert!(m.write(src, &data));
            let mut want = vec![0u8; 8192];
            assert!(m.read(0, &mut want));
            want.copy_within(src..src + data.len(), dst);
            assert!(m.copy_within(src, dst, data.len()));
            assert!(m.equals(0, &want), "src {src} dst {dst}");
        }
        assert!(!m.copy_within(8000, 0, 1000));
    }

    /// Threads writing and reading the same bytes at once get a mix of old
    /// and new bytes (each byte whole), and no undefined behaviour: the
    /// type is `Sync` for safe callers, overlaps included.
    #[test]
    fn overlapping_access_from_threads_sees_whole_bytes() {
        let m = Arc::new(SharedMem::new(64 * 1024).unwrap());
        let writers: Vec<_> = [0x11u8, 0x22]
            .into_iter()
            .map(|b| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    let data = vec![b; 16384];
                    for _ in 0..200 {
                        assert!(m.write(4096, &data));
                    }
                })
            })
            .collect();
        let mut seen = vec![0u8; 16384];
        for _ in 0..200 {
            assert!(m.read(4096, &mut seen));
            assert!(seen.iter().all(|b| [0, 0x11, 0x22].contains(b)));
        }
        for w in writers {
            w.join().unwrap();
        }
        assert!(m.read(4096, &mut seen));
        assert!(seen.iter().all(|b| [0x11, 0x22].contains(b)));
    }
}
