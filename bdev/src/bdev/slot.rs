//! Replacing a field of an I/O on the hot path: the old value's drop glue
//! runs only when there is something to drop, out of line.

/// Stores `new` in `slot`; the old value is dropped out of line, and only
/// when it holds something (on the fast path the slot is empty, and a plain
/// assignment would still call the enum's drop glue).
#[inline(always)]
pub(crate) fn replace_field<T: Default + IsEmpty>(slot: &mut T, new: T) {
    let old = std::mem::replace(slot, new);
    if old.is_empty() {
        // Nothing to release; skip the drop glue.
        std::mem::forget(old);
    } else {
        drop_cold(old);
    }
}

/// Drops `v` out of line (the drop glue stays off the hot path).
#[cold]
pub(crate) fn drop_cold<T>(v: T) {
    drop(v);
}

/// A value that may hold nothing to release.
pub(crate) trait IsEmpty {
    fn is_empty(&self) -> bool;
}

impl<T> IsEmpty for Option<T> {
    #[inline]
    fn is_empty(&self) -> bool {
        self.is_none()
    }
}
