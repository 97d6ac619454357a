//! The emulated controller's DMA: it reads and writes host memory at the
//! IOVAs the driver gives it, which are virtual addresses of this process
//! (IOVA = virtual address, as the VFIO transport maps memory too).
//!
//! Like a hardware device, the emulated controller trusts the addresses in
//! the commands it fetches: the driver under test hands out only memory it
//! keeps alive until the command's completion (queue rings, PRP pages and
//! bounce buffers it owns, I/O buffers its requests hold). A driver bug
//! here corrupts memory exactly as it would with a real device; that is
//! the point of testing the driver against it.

/// The host address of an IOVA (IOVA = virtual address).
fn host(iova: u64) -> usize {
    usize::try_from(iova).expect("invariant: IOVAs are addresses of this 64-bit process")
}

/// Copies `dst.len()` bytes of host memory at `iova` into `dst`.
pub(super) fn dma_read(iova: u64, dst: &mut [u8]) {
    if dst.is_empty() {
        return;
    }
    // SAFETY: see the module docs: `iova` is a live host address the driver
    // handed to the device for this command, valid for `dst.len()` bytes
    // until the command completes (after this copy); `dst` is the device's
    // own memory and cannot overlap it.
    unsafe {
        std::ptr::copy_nonoverlapping(host(iova) as *const u8, dst.as_mut_ptr(), dst.len());
    }
}

/// Copies `src` into host memory at `iova`.
pub(super) fn dma_write(iova: u64, src: &[u8]) {
    if src.is_empty() {
        return;
    }
    // SAFETY: as in `dma_read`, for memory the command lets the device
    // write (a read's buffer, a completion queue entry).
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), host(iova) as *mut u8, src.len());
    }
}

/// Writes the 16-bit word at `iova` after a release fence (a completion
/// entry's status word, which must land after the rest of the entry).
pub(super) fn dma_write_u16_release(iova: u64, v: u16) {
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    // SAFETY: as in `dma_write`; a completion entry's status word is
    // 2-byte aligned inside the driver's completion queue.
    unsafe { std::ptr::write_volatile(host(iova) as *mut u16, v.to_le()) };
}
