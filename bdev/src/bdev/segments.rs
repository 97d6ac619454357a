//! Data segments ([`IoVec`]) and the only code that reads or writes the
//! memory they describe.
//!
//! An I/O's segments describe memory that stays valid while they exist
//! (see [`super::io`] for the rules that guarantee it); this file turns
//! them into byte slices for the copy helpers that modules and the bdev
//! layer use. Nothing else dereferences a segment.

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

/// Copies the bytes of `iovs`, in order, into `dst`; returns the bytes
/// copied (`min(dst.len(), total)`).
///
/// # Safety
///
/// `iovs` are the segments of a live I/O, as for [`segment`], and `dst` is
/// not memory they describe.
pub(crate) unsafe fn copy_from(iovs: &[IoVec], dst: &mut [u8]) -> usize {
    let mut off = 0;
    for v in iovs {
        if off >= dst.len() {
            break;
        }
        // SAFETY: the caller's promise, passed on.
        let seg = unsafe { segment(v) };
        let n = seg.len().min(dst.len() - off);
        dst[off..off + n].copy_from_slice(&seg[..n]);
        off += n;
    }
    off
}

/// Copies `src` into the memory of `iovs`, in order; returns the bytes
/// copied.
///
/// # Safety
///
/// As [`segment_mut`] for every segment, and `src` is not memory they
/// describe.
pub(crate) unsafe fn copy_to(iovs: &[IoVec], src: &[u8]) -> usize {
    let mut off = 0;
    for v in iovs {
        if off >= src.len() {
            break;
        }
        // SAFETY: the caller's promise, passed on.
        let seg = unsafe { segment_mut(v) };
        let n = seg.len().min(src.len() - off);
        seg[..n].copy_from_slice(&src[off..off + n]);
        off += n;
    }
    off
}

/// Total bytes of `iovs`.
#[inline]
pub(crate) fn total_len(iovs: &[IoVec]) -> usize {
    iovs.iter().map(|v| v.len).sum()
}
