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
//!
//! Safe code cannot make it touch anything else: the only addresses in
//! the commands come from the driver's own memory, from requests whose
//! `unsafe impl Request` vouches for them, and nothing else (the driver
//! clears the data pointer of a command without data and every metadata
//! pointer, and refuses commands with host addresses in other fields);
//! requests are handed back only once the engine is stopped (controller
//! disabled, bus mastering off) or their queue deleted.

use bdevkit_nvme_spec::zerocopy::FromBytes;
use bdevkit_nvme_spec::Sqe;

// `read_sqe` relies on this: any 64 bytes are a valid `Sqe`.
const _: fn() = || {
    fn from_bytes<T: FromBytes>() {}
    from_bytes::<Sqe>();
};

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

/// The submission queue entry at `iova`: one 64-byte copy, no
/// intermediate buffer.
#[inline]
pub(super) fn read_sqe(iova: u64) -> Sqe {
    // SAFETY: as in `dma_read`: `iova` is the slot of a submission queue
    // the driver created, 64 bytes, which it leaves alone from its tail
    // doorbell write until the head reported back passes the slot (after
    // this copy). `Sqe` is 64 plain bytes (zerocopy `FromBytes`: every
    // bit pattern is a valid value) with alignment 1, so an unaligned
    // read of it from any address is sound.
    unsafe { std::ptr::read_unaligned(host(iova) as *const Sqe) }
}

/// The fields of a submission entry that the I/O fast path decides on:
/// dword 0 (opcode, flags, command id), the namespace id, the starting
/// LBA (dwords 10-11) and dword 12 (NLB in bits 15:0).
#[derive(Debug, Clone, Copy)]
pub(super) struct SqeHead {
    pub dw0: u32,
    pub nsid: u32,
    pub slba: u64,
    pub cdw12: u32,
}

impl SqeHead {
    pub(super) fn opcode(self) -> u8 {
        self.dw0.to_le_bytes()[0]
    }
    pub(super) fn flags(self) -> u8 {
        self.dw0.to_le_bytes()[1]
    }
    pub(super) fn cid(self) -> u16 {
        (self.dw0 >> 16) as u16
    }
}

/// The [`SqeHead`] of the submission entry at `iova`, read straight from
/// the queue (four loads, no copy of the entry).
#[inline]
pub(super) fn read_sqe_head(iova: u64) -> SqeHead {
    let p = host(iova) as *const u8;
    // SAFETY: as in `read_sqe`: bytes 0..8 and 40..52 of a live 64-byte
    // submission entry; unaligned reads of plain integers.
    let (dw0, nsid, slba, cdw12) = unsafe {
        (
            std::ptr::read_unaligned(p.cast::<u32>()),
            std::ptr::read_unaligned(p.add(4).cast::<u32>()),
            std::ptr::read_unaligned(p.add(40).cast::<u64>()),
            std::ptr::read_unaligned(p.add(48).cast::<u32>()),
        )
    };
    SqeHead {
        dw0: u32::from_le(dw0),
        nsid: u32::from_le(nsid),
        slba: u64::from_le(slba),
        cdw12: u32::from_le(cdw12),
    }
}

/// Writes the completion queue entry at `iova` (16-byte aligned) as two
/// 8-byte stores: `lo` (bytes 0..8, dwords 0 and 1) and then, after a
/// release fence, `hi` (bytes 8..16: SQ head, SQ id, command id and the
/// status word with its phase tag). A driver that reads the status word
/// and sees the new phase sees the whole entry, as with a device that
/// writes the status word last.
#[inline]
pub(super) fn write_cqe(iova: u64, lo: u64, hi: u64) {
    let p = host(iova) as *mut u64;
    debug_assert!(p.is_aligned(), "completion entries are 16-byte aligned");
    // SAFETY: as in `dma_write`, for the slot of a completion queue the
    // driver created: 16 bytes it lets the device write. The engine only
    // accepts 16-byte aligned completion queues (`super::engine::cq_base_ok`),
    // so both 8-byte stores are aligned.
    unsafe {
        std::ptr::write_volatile(p, lo.to_le());
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        std::ptr::write_volatile(p.add(1), hi.to_le());
    }
}
