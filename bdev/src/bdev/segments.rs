//! Data segments ([`IoVec`]) and the only code that reads or writes the
//! memory they describe.
//!
//! An I/O's segments describe memory that stays valid while they exist
//! (see [`super::io`] for the rules that guarantee it); this file turns
//! them into byte slices for the copy helpers that modules and the bdev
//! layer use. Nothing else dereferences a segment. Segments of an I/O over
//! external memory (`IoInner::ext_data`: guest memory another process
//! writes) never become slices: they are copied with racy copies, and
//! handed to a module's slice callbacks in pieces copied through the stack.

/// One data segment: the same layout as `struct iovec`, so a module can
/// pass `io.iovs()` to the kernel as an iovec array.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoVec {
    /// Start address.
    pub base: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

/// The bytes of a segment of a live I/O.
///
/// # Safety
///
/// `v` must be a segment of an I/O that is alive for `'a`, built by the bdev
/// layer (so it describes memory that outlives the I/O's segments, see the
/// rules in `io.rs`), and no `&mut` to that memory may exist for `'a`.
pub(crate) unsafe fn segment<'a>(v: &IoVec) -> &'a [u8] {
    // SAFETY: the caller guarantees the memory is valid and not mutably
    // borrowed for 'a.
    unsafe { std::slice::from_raw_parts(v.base, v.len) }
}

/// The bytes of a segment of a live I/O, writable.
///
/// # Safety
///
/// As [`segment`], and no other reference to that memory may exist for
/// `'a`: the I/O's data is writable (`IoInner::data_writable`), so no other
/// I/O shares it (no lender, no borrower, not the read-only zero buffer).
pub(crate) unsafe fn segment_mut<'a>(v: &IoVec) -> &'a mut [u8] {
    // SAFETY: the caller guarantees validity and exclusivity for 'a.
    unsafe { std::slice::from_raw_parts_mut(v.base, v.len) }
}

/// Bytes of the stack buffer through which slices of external memory are
/// handed out (see [`for_each_piece`]).
const PIECE: usize = 4096;

/// Copies `len` bytes from `src` to `dst`, with a racy copy when either
/// side may be external memory (`racy`).
///
/// # Safety
///
/// `src` is valid for reads and `dst` for writes of `len` bytes, they do
/// not overlap, and unless `racy` no one else accesses either meanwhile.
#[inline]
unsafe fn copy_bytes(dst: *mut u8, src: *const u8, len: usize, racy: bool) {
    if racy {
        // SAFETY: the caller's promise; racy copies are sound on memory
        // others write at the same time.
        unsafe { crate::dma::racy::copy(dst, src, len) };
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
    }
}

/// Copies the bytes of `iovs`, in order, into `dst`; returns the bytes
/// copied (`min(dst.len(), total)`).
///
/// # Safety
///
/// `iovs` are the segments of a live I/O, as for [`segment`] (or, with
/// `racy`, segments that may describe external memory, which is only
/// read with racy copies), and `dst` is not memory they describe.
pub(crate) unsafe fn copy_from(iovs: &[IoVec], dst: &mut [u8], racy: bool) -> usize {
    let mut off = 0;
    for v in iovs {
        if off >= dst.len() {
            break;
        }
        let n = v.len.min(dst.len() - off);
        // SAFETY: the caller's promise, passed on; `n` bytes fit both.
        unsafe { copy_bytes(dst[off..].as_mut_ptr(), v.base, n, racy) };
        off += n;
    }
    off
}

/// Copies `src` into the memory of `iovs`, in order; returns the bytes
/// copied.
///
/// # Safety
///
/// As [`segment_mut`] for every segment (or, with `racy`, segments that
/// may describe external memory, written only with racy copies), and
/// `src` is not memory they describe.
pub(crate) unsafe fn copy_to(iovs: &[IoVec], src: &[u8], racy: bool) -> usize {
    let mut off = 0;
    for v in iovs {
        if off >= src.len() {
            break;
        }
        let n = v.len.min(src.len() - off);
        // SAFETY: the caller's promise, passed on; `n` bytes fit both.
        unsafe { copy_bytes(v.base, src[off..].as_ptr(), n, racy) };
        off += n;
    }
    off
}

/// Fills the memory of `iovs` with `byte`.
///
/// # Safety
///
/// As [`copy_to`].
pub(crate) unsafe fn fill(iovs: &[IoVec], byte: u8, racy: bool) {
    for v in iovs {
        if racy {
            // SAFETY: the caller's promise; a racy fill.
            unsafe { crate::dma::racy::fill(v.base, byte, v.len) };
        } else {
            // SAFETY: the caller's promise.
            unsafe { segment_mut(v) }.fill(byte);
        }
    }
}

/// Calls `f` with the bytes of `iovs` (which may describe external
/// memory) copied, in order, in pieces of at most 4 KiB through the
/// stack: no reference to the memory itself is made.
///
/// # Safety
///
/// As [`copy_from`] with `racy`.
pub(crate) unsafe fn for_each_piece(iovs: &[IoVec], f: &mut dyn FnMut(&[u8])) {
    let mut buf = [0u8; PIECE];
    for v in iovs {
        let mut done = 0;
        while done < v.len {
            let n = (v.len - done).min(PIECE);
            // SAFETY: the caller's promise; the piece lies inside the
            // segment, the buffer is our stack.
            unsafe { crate::dma::racy::copy(buf.as_mut_ptr(), v.base.wrapping_add(done), n) };
            f(&buf[..n]);
            done += n;
        }
    }
}

/// As [`for_each_piece`], and each piece is copied back after `f` changed
/// it.
///
/// # Safety
///
/// As [`copy_to`] with `racy`.
pub(crate) unsafe fn for_each_piece_mut(iovs: &[IoVec], f: &mut dyn FnMut(&mut [u8])) {
    let mut buf = [0u8; PIECE];
    for v in iovs {
        let mut done = 0;
        while done < v.len {
            let n = (v.len - done).min(PIECE);
            let at = v.base.wrapping_add(done);
            // SAFETY: the caller's promise; the piece lies inside the
            // segment, the buffer is our stack.
            unsafe { crate::dma::racy::copy(buf.as_mut_ptr(), at, n) };
            f(&mut buf[..n]);
            // SAFETY: as above, back.
            unsafe { crate::dma::racy::copy(at, buf.as_ptr(), n) };
            done += n;
        }
    }
}

/// Total bytes of `iovs`.
#[inline]
pub(crate) fn total_len(iovs: &[IoVec]) -> usize {
    iovs.iter().map(|v| v.len).sum()
}
