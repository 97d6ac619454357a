//! The completion queue entry (16 bytes).
//!
//! Dword 0 is command specific (the Set Features result, the Connect
//! response's controller id, a Property Get value ...), dword 1 too
//! (reserved for most commands; the high half of an 8-byte Property Get
//! value). Dword 2 carries the SQ head pointer and SQ id, dword 3 the
//! command identifier, the phase tag (bit 16) and the status (bits 31:17,
//! see [`Status`]). NVMe/TCP carries the same 16 bytes in a response
//! capsule.

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::status::Status;

/// A completion queue entry (NVMe Base Specification 2.0, figure 89).
#[repr(C)]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
pub struct Cqe {
    /// Dword 0: command specific.
    pub dw0: U32,
    /// Dword 1: command specific.
    pub dw1: U32,
    /// SQ head pointer.
    pub sqhd: U16,
    /// SQ identifier.
    pub sqid: U16,
    /// Command identifier.
    pub cid: U16,
    /// Phase tag (bit 0) and status field (bits 15:1).
    pub status: U16,
}

const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<Cqe>() == 16);
    assert!(offset_of!(Cqe, dw1) == 4);
    assert!(offset_of!(Cqe, sqhd) == 8);
    assert!(offset_of!(Cqe, sqid) == 10);
    assert!(offset_of!(Cqe, cid) == 12);
    assert!(offset_of!(Cqe, status) == 14);
};

impl Cqe {
    /// A completion of command `cid` with `status` and dword 0 `dw0`
    /// (phase 0, SQ head and id 0: the queue fills those in).
    #[must_use]
    pub fn new(cid: u16, status: Status, dw0: u32) -> Self {
        Cqe {
            dw0: U32::new(dw0),
            cid: U16::new(cid),
            status: U16::new(status.to_cqe_word(false)),
            ..Cqe::default()
        }
    }

    /// The status (phase tag excluded).
    #[must_use]
    pub fn status(&self) -> Status {
        Status::from_cqe_word(self.status.get()).0
    }

    /// Sets the status, keeping the phase tag.
    pub fn set_status(&mut self, status: Status) {
        let phase = self.phase();
        self.status.set(status.to_cqe_word(phase));
    }

    /// The phase tag.
    #[must_use]
    pub fn phase(&self) -> bool {
        self.status.get() & 1 != 0
    }

    /// Sets the phase tag, keeping the status.
    pub fn set_phase(&mut self, phase: bool) {
        self.status.set((self.status.get() & !1) | u16::from(phase));
    }

    /// Dword 3 as one value (CID in bits 15:0).
    #[must_use]
    pub fn dw3(&self) -> u32 {
        (u32::from(self.status.get()) << 16) | u32::from(self.cid.get())
    }

    /// Dwords 0 and 1 as one 64-bit value (an 8-byte Property Get result).
    #[must_use]
    pub fn dw01(&self) -> u64 {
        (u64::from(self.dw1.get()) << 32) | u64::from(self.dw0.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_bytes() {
        let mut c = Cqe::new(0x1234, Status::INVALID_FIELD.with_dnr(), 0xdead_beef);
        c.sqhd.set(5);
        c.sqid.set(1);
        c.set_phase(true);
        assert!(c.phase());
        assert_eq!(c.status(), Status::INVALID_FIELD.with_dnr());
        assert_eq!(
            c.as_bytes(),
            &[0xef, 0xbe, 0xad, 0xde, 0, 0, 0, 0, 5, 0, 1, 0, 0x34, 0x12, 0x05, 0x80]
        );
        assert_eq!(c.dw3(), 0x8005_1234);
        assert_eq!(Status::from_dw3(c.dw3()), (c.status(), true));
        c.set_status(Status::SUCCESS);
        assert!(c.phase());
        assert!(c.status().is_success());
        c.set_phase(false);
        assert_eq!(c.status.get(), 0);
        c.dw1.set(7);
        assert_eq!(c.dw01(), 0x0000_0007_dead_beef);
    }
}
