//! The in-flight table of a kernel context (an AIO context, an io_uring
//! ring): preallocated slots whose index is the request's `aio_data` /
//! `user_data` (never a pointer), each owning the [`BdevIo`] of one request.
//!
//! # Ownership rule
//!
//! A slot owns its I/O (so the data buffers and the iovec array a kernel
//! request points at) and the segments left after a short transfer
//! ([`Slot::segments`]) from [`Slots::prep`] until [`Slots::take`] (or
//! [`Slots::cancel`], before the kernel saw it) hands the I/O back. Neither
//! hands back a slot in [`SlotState::InKernel`], and the
//! segments of a slot change only in [`Slots::requeue_rest`], which wants a
//! reaped slot. A module's `sys` code builds kernel requests from
//! [`Slot::segments`], marks the slot with [`Slots::mark_in_kernel`] when it
//! hands the request to the kernel, and with [`Slots::complete`] only when
//! the kernel reported the completion: between the two the memory neither
//! moves nor goes away. The table never calls the kernel itself.
//!
//! Nothing here allocates after [`Slots::new`]: the slots, the free list
//! and each slot's `rest` vector keep their capacity.

use bdevkit::bdev::module::{BdevIo, IoStatus, IoType, IoVec, ModuleIo};

/// What a module's group needs per I/O about its bdev, copied into each
/// request (no reference counting per I/O): the bdev channel holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<F, X = ()> {
    /// How the module names the file (a descriptor, a registered index).
    pub file: F,
    /// log2 of the block size.
    pub block_shift: u32,
    /// `RWF_*` flags of reads and writes (`RWF_NOWAIT`).
    pub rw_flags: i32,
    /// Device-backed file: hand each request to the kernel in a system
    /// call of its own.
    pub solo: bool,
    /// What else the module needs (which ring, ...).
    pub extra: X,
}

/// What a slot is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// Unused.
    Free,
    /// Prepared, not yet given to the kernel: the owner may still take it.
    Queued,
    /// Given to the kernel: it may use the buffers (with SQPOLL even
    /// before the next system call).
    InKernel,
    /// The kernel reported completion (or refused the request): the
    /// buffers are the owner's again.
    Reaped,
}

/// The operation of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read into the I/O's segments.
    Read,
    /// Write from the I/O's segments.
    Write,
    /// `fdatasync` of the file (the module picks the kernel command).
    Flush,
}

/// What a completion of some bytes means for a request
/// ([`Slots::transferred`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// The request is done (every byte, or a flush).
    Complete,
    /// Nothing was transferred before the end: end of file inside the bdev
    /// (the file shrank). More attempts would never progress.
    EndOfFile,
    /// A short transfer: the rest must be requeued
    /// ([`Slots::requeue_rest`]).
    Partial,
}

/// One request. The public fields are what the owner (the module's
/// group) reads back on completion; they are set by [`Slots::prep`].
#[derive(Debug)]
pub struct Slot<F> {
    io: Option<BdevIo>,
    /// The rest of the data after a short transfer (kernel-visible while
    /// the resubmission is in flight).
    rest: Vec<IoVec>,
    state: SlotState,
    /// Operation.
    pub op: Op,
    /// How the module names the file (a descriptor, a registered index).
    pub file: F,
    /// Byte offset of the whole request.
    pub offset: u64,
    /// Bytes of the whole request (0 for a flush).
    pub len: u64,
    /// Bytes transferred so far (short transfers).
    pub done: u64,
    /// `RWF_*` flags of the request.
    pub rw_flags: i32,
    /// Hand to the kernel in a system call of its own (device-backed file).
    pub solo: bool,
}

impl<F> Slot<F> {
    /// What the slot is doing.
    #[inline]
    #[must_use]
    pub fn state(&self) -> SlotState {
        self.state
    }

    /// The segments of the request: the I/O's own iovec array, or with
    /// `rest` the part left after a short transfer
    /// ([`Slots::requeue_rest`]).
    ///
    /// # Panics
    /// On a free slot (no I/O): a bug of the caller.
    #[inline]
    #[must_use]
    pub fn segments(&self, rest: bool) -> &[IoVec] {
        if rest {
            return &self.rest;
        }
        self.io
            .as_ref()
            .expect("invariant: a prepared slot holds its I/O")
            .iovs()
    }

    /// Offset in bytes of the next transfer: the request's offset plus
    /// what is done.
    #[inline]
    #[must_use]
    pub fn next_offset(&self) -> u64 {
        self.offset + self.done
    }
}

/// The table: `n` slots and a free list.
#[derive(Debug)]
pub struct Slots<F> {
    slots: Box<[Slot<F>]>,
    free: Vec<u32>,
}

impl<F: Copy> Slots<F> {
    /// `n` free slots; `file` is a placeholder until a slot is prepared.
    #[must_use]
    pub fn new(n: u32, file: F) -> Slots<F> {
        Slots {
            slots: (0..n)
                .map(|_| Slot {
                    io: None,
                    rest: Vec::new(),
                    state: SlotState::Free,
                    op: Op::Read,
                    file,
                    offset: 0,
                    len: 0,
                    done: 0,
                    rw_flags: 0,
                    solo: false,
                })
                .collect(),
            free: (0..n).rev().collect(),
        }
    }

    /// Whether a slot is free.
    #[inline]
    #[must_use]
    pub fn has_free(&self) -> bool {
        !self.free.is_empty()
    }

    /// The slot `idx`.
    ///
    /// # Panics
    /// When `idx` is not a slot index (a bug of the caller).
    #[inline]
    #[must_use]
    pub fn get(&self, idx: u32) -> &Slot<F> {
        &self.slots[idx as usize]
    }

    /// The state of slot `idx`; `None` when there is no such slot.
    #[inline]
    #[must_use]
    pub fn state(&self, idx: u32) -> Option<SlotState> {
        self.slots.get(idx as usize).map(|s| s.state)
    }

    /// Takes a free slot for `io` and records its request on the bdev
    /// described by `t`: a read or write at the I/O's byte offset over its
    /// segments with `t`'s flags, anything else (a module prepares only
    /// flushes besides them) as a flush. The slot is
    /// [`SlotState::Queued`]. Gives the I/O back when no slot is free.
    ///
    /// # Errors
    /// The I/O, when every slot is in use.
    #[inline]
    pub fn prep<X>(&mut self, io: BdevIo, t: &Target<F, X>) -> Result<u32, BdevIo> {
        let (op, rw_flags) = match io.io_type() {
            IoType::Read => (Op::Read, t.rw_flags),
            IoType::Write => (Op::Write, t.rw_flags),
            _ => (Op::Flush, 0),
        };
        let offset = io.offset_blocks() << t.block_shift;
        let Some(idx) = self.free.pop() else {
            return Err(io);
        };
        let len = if op == Op::Flush {
            0
        } else {
            io.iovs().iter().map(|v| v.len as u64).sum()
        };
        let s = &mut self.slots[idx as usize];
        s.io = Some(io);
        s.state = SlotState::Queued;
        s.op = op;
        s.file = t.file;
        s.offset = offset;
        s.len = len;
        s.done = 0;
        s.rw_flags = rw_flags;
        s.solo = t.solo;
        Ok(idx)
    }

    /// Slot `idx`'s request was handed to the kernel.
    #[inline]
    pub fn mark_in_kernel(&mut self, idx: u32) {
        let s = &mut self.slots[idx as usize];
        debug_assert_eq!(s.state, SlotState::Queued);
        s.state = SlotState::InKernel;
    }

    /// The kernel refused slot `idx`'s request (it never saw it): the slot
    /// is the owner's again.
    #[inline]
    pub fn refuse(&mut self, idx: u32) {
        let s = &mut self.slots[idx as usize];
        debug_assert_eq!(s.state, SlotState::Queued);
        s.state = SlotState::Reaped;
    }

    /// The kernel reported the completion of slot `idx`. Returns whether
    /// the slot was in the kernel; a stale or unknown index is ignored.
    #[inline]
    pub fn complete(&mut self, idx: u32) -> bool {
        match self.slots.get_mut(idx as usize) {
            Some(s) if s.state == SlotState::InKernel => {
                s.state = SlotState::Reaped;
                true
            }
            _ => false,
        }
    }

    /// Slot `idx` (reaped) transferred `n` more bytes: what that means,
    /// with the bytes counted for a [`Transfer::Partial`].
    #[inline]
    pub fn transferred(&mut self, idx: u32, n: u64) -> Transfer {
        let s = &mut self.slots[idx as usize];
        if s.op == Op::Flush {
            return Transfer::Complete;
        }
        let done = s.done + n;
        if done >= s.len {
            return Transfer::Complete;
        }
        if n == 0 {
            return Transfer::EndOfFile;
        }
        s.done = done;
        Transfer::Partial
    }

    /// Queues slot `idx` again, with `rw_flags`, for what is left after its
    /// `done` bytes: [`Slot::segments`] with `rest` then names that part.
    /// The slot must be reaped; it is [`SlotState::Queued`] after.
    #[inline]
    pub fn requeue_rest(&mut self, idx: u32, rw_flags: i32) {
        let s = &mut self.slots[idx as usize];
        debug_assert_eq!(s.state, SlotState::Reaped);
        s.rw_flags = rw_flags;
        let io =
            s.io.as_ref()
                .expect("invariant: a reaped slot holds its I/O");
        let done = usize::try_from(s.done).unwrap_or(usize::MAX);
        advance_iovs(io.iovs(), done, &mut s.rest);
        s.state = SlotState::Queued;
    }

    /// Takes the I/O back from a slot whose completion was reaped (or whose
    /// request the kernel refused) and frees the slot. `None` for any
    /// other state (the kernel may use it, it was never handed over, it is
    /// free) and for an unknown index.
    #[inline]
    pub fn take(&mut self, idx: u32) -> Option<BdevIo> {
        let s = self.slots.get_mut(idx as usize)?;
        if s.state != SlotState::Reaped {
            return None;
        }
        release(s, &mut self.free, idx)
    }

    /// Takes the I/O back from a slot that was prepared but never handed
    /// to the kernel ([`SlotState::Queued`]) and frees the slot; `None` for
    /// any other state. The owner drops the request from its own queue.
    pub fn cancel(&mut self, idx: u32) -> Option<BdevIo> {
        let s = self.slots.get_mut(idx as usize)?;
        if s.state != SlotState::Queued {
            return None;
        }
        release(s, &mut self.free, idx)
    }

    /// Forgets (leaks) every I/O the table still holds, whatever its state:
    /// for a context torn down while the kernel may still use some buffers,
    /// or whose I/Os nobody can complete any more. Leaking is the safe
    /// choice for memory the kernel may write.
    pub fn forget_ios(&mut self) {
        for s in self.slots.iter_mut() {
            if let Some(io) = s.io.take() {
                std::mem::forget(io);
            }
        }
    }
}

/// What a failed completion means, as the module's kernel interface
/// decides it ([`finish_all`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The I/O is done with this status.
    Done(IoStatus),
    /// Queue the rest of the request again, with these `RWF_*` flags.
    Again(i32),
}

/// Decides what each reaped completion `(slot, result)` means and drains
/// `reaped`: the I/Os that are done are taken from their slots into
/// `batch` with their status; the others are queued again
/// ([`Slots::requeue_rest`]) and their indexes pushed to `again`, for the
/// module to build their kernel requests. A result is the bytes
/// transferred or `-errno`; `on_error(errno, rw_flags)` decides an error.
/// A request is done when every byte is transferred (or for a flush); a
/// short transfer is queued again for the rest, and end of file inside
/// the bdev (the file shrank: nothing transferred) fails with `EIO` rather
/// than resubmitting forever. Every slot in `reaped` must be reaped
/// ([`Slots::complete`]).
#[inline]
pub fn finish_all<F: Copy>(
    slots: &mut Slots<F>,
    reaped: &mut Vec<(u32, i64)>,
    batch: &mut Vec<(BdevIo, IoStatus)>,
    again: &mut Vec<u32>,
    on_error: impl Fn(i32, i32) -> Next,
) {
    for (idx, res) in reaped.drain(..) {
        let flags = slots.get(idx).rw_flags;
        let next = match u64::try_from(res) {
            Err(_) => on_error(i32::try_from(-res).unwrap_or(libc::EIO), flags),
            Ok(n) => match slots.transferred(idx, n) {
                Transfer::Complete => Next::Done(IoStatus::Success),
                Transfer::EndOfFile => Next::Done(IoStatus::Errno(libc::EIO)),
                Transfer::Partial => Next::Again(flags),
            },
        };
        match next {
            Next::Done(status) => {
                if let Some(io) = slots.take(idx) {
                    batch.push((io, status));
                }
            }
            Next::Again(flags) => {
                slots.requeue_rest(idx, flags);
                again.push(idx);
            }
        }
    }
}

/// Frees slot `s` (index `idx`, onto `free`) and hands back its I/O.
#[inline]
fn release<F>(s: &mut Slot<F>, free: &mut Vec<u32>, idx: u32) -> Option<BdevIo> {
    s.state = SlotState::Free;
    s.rest.clear();
    free.push(idx);
    s.io.take()
}

/// The segments of `iovs` after the first `skip` bytes, into `out`.
fn advance_iovs(iovs: &[IoVec], skip: usize, out: &mut Vec<IoVec>) {
    out.clear();
    let mut skip = skip;
    for v in iovs {
        if skip >= v.len {
            skip -= v.len;
            continue;
        }
        out.push(IoVec {
            base: v.base.wrapping_add(skip),
            len: v.len - skip,
        });
        skip = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(base: usize, len: usize) -> IoVec {
        IoVec {
            base: base as *mut u8,
            len,
        }
    }

    #[test]
    fn advance_skips_whole_and_partial_segments() {
        let iovs = [v(0x1000, 512), v(0x4000, 1024), v(0x9000, 512)];
        let mut out = Vec::new();
        advance_iovs(&iovs, 0, &mut out);
        assert_eq!(out, iovs);
        advance_iovs(&iovs, 100, &mut out);
        assert_eq!(out, [v(0x1000 + 100, 412), v(0x4000, 1024), v(0x9000, 512)]);
        advance_iovs(&iovs, 512, &mut out);
        assert_eq!(out, [v(0x4000, 1024), v(0x9000, 512)]);
        advance_iovs(&iovs, 700, &mut out);
        assert_eq!(out, [v(0x4000 + 188, 836), v(0x9000, 512)]);
        advance_iovs(&iovs, 2047, &mut out);
        assert_eq!(out, [v(0x9000 + 511, 1)]);
        advance_iovs(&iovs, 2048, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn free_slots_only_and_no_io_to_take() {
        let mut t: Slots<i32> = Slots::new(2, -1);
        assert!(t.has_free());
        assert_eq!(t.state(0), Some(SlotState::Free));
        assert_eq!(t.state(2), None);
        assert!(t.take(0).is_none());
        assert!(t.take(7).is_none());
        assert!(t.cancel(0).is_none());
        assert!(t.cancel(7).is_none());
        assert!(!t.complete(0));
        assert!(!t.complete(u32::MAX));
    }
}
