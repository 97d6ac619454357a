//! [`ModuleIo`]: the module's side of a [`BdevIo`] — reading and writing
//! the I/O's data, completing it, and (for a virtual bdev) building the
//! child it sends to its base from the I/O it serves.

use crate::bdev::io::{BdevIo, IoState, Role};
use crate::bdev::segments::{self, IoVec};
use crate::bdev::types::{IoStatus, IoType};
use crate::bdev::zone::ZoneInfo;
use crate::bdev::{complete, route};
use crate::dma::SharedMem;
use crate::thread::Thread;

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::bdev::BdevIo {}
}

/// What the module serving a [`BdevIo`] does with it. Implemented by
/// `BdevIo` only; bring it into scope with the module face
/// (`use bdevkit::bdev::module::ModuleIo`).
///
/// The data methods honour one rule: a module may write an I/O's data only
/// when no other I/O shares that memory (`data_writable`): not the bdev
/// layer's zero buffer, not a mirror's data shared with
/// [`ModuleIo::share_request_of`], and not while it is lent out that way.
/// Writing methods do nothing where that is not so, and say so.
///
/// A consumer, which uses only the consumer face, cannot complete an I/O
/// or reach its segments:
///
/// ```compile_fail
/// use bdevkit::bdev::{BdevIo, IoStatus};
///
/// fn consumer(io: BdevIo) {
///     // No method `complete`: the module face is not in scope.
///     io.complete(IoStatus::Success);
/// }
/// ```
///
/// A module, with this trait from the module face, can:
///
/// ```no_run
/// use bdevkit::bdev::module::{BdevIo, IoStatus, ModuleIo};
///
/// fn serve(io: BdevIo) {
///     io.complete_deferred(IoStatus::Success);
/// }
/// ```
pub trait ModuleIo: sealed::Sealed + Sized {
    /// Completes the I/O. Modules call this exactly once per submitted I/O,
    /// never from inside `submit` (defer with
    /// [`ModuleIo::complete_deferred`]).
    fn complete(self, status: IoStatus);

    /// Completes the I/O in a later iteration of the current thread (for
    /// failures detected inside `submit`).
    fn complete_deferred(self, status: IoStatus);

    /// Completes with the status (and NVMe cdw0) of a finished child I/O.
    fn complete_from(self, child: &BdevIo);

    /// Records where a zone append being served wrote its first block
    /// ([`BdevIo::zone_append_lba`] reports it once the I/O completes);
    /// nothing for any other I/O.
    fn set_zone_append_lba(&mut self, lba: u64);

    /// Makes a child built from a zone append (with
    /// [`ModuleIo::take_request_of`]) a write of the same blocks: for a
    /// zoned virtual bdev that places appends itself (it set the blocks
    /// with [`ModuleIo::set_zone_append_lba`] on the parent first).
    /// Nothing for any other I/O.
    fn zone_append_as_write(&mut self);

    /// Writes a zone report's records into the I/O's segments, in order
    /// (a `get_zone_info` I/O: the bdev layer checked they have room for
    /// the zones asked); false when the data is not writable or the
    /// segments are too short.
    fn copy_zone_infos(&mut self, infos: &[ZoneInfo]) -> bool;

    /// The data segments.
    fn iovs(&self) -> &[IoVec];

    /// The second data set (the write data of compare-and-write).
    fn aux_iovs(&self) -> &[IoVec];

    /// Total bytes in the data segments.
    fn iov_len(&self) -> usize;

    /// Whether the module may write the I/O's data (see the trait docs).
    fn data_writable(&self) -> bool;

    /// Copies the I/O's data (its segments, in order) into `dst`; returns
    /// the bytes copied (`min(dst.len(), iov_len())`).
    fn copy_from_iovs(&self, dst: &mut [u8]) -> usize;

    /// Copies the compare-and-write data into `dst`.
    fn copy_from_aux_iovs(&self, dst: &mut [u8]) -> usize;

    /// Copies `src` into the I/O's segments, in order; returns the bytes
    /// copied (0 when the data is not writable).
    fn copy_to_iovs(&mut self, src: &[u8]) -> usize;

    /// Zero-fills the I/O's segments; false when the data is not writable.
    fn zero_iovs(&mut self) -> bool;

    /// Whether the I/O's data equals `data` (compare I/O).
    fn iovs_equal(&self, data: &[u8]) -> bool;

    /// Calls `f` with each data segment, in order. The data of an I/O
    /// over external memory (a VM's guest memory, which another process
    /// writes at will) comes in pieces of at most 4 KiB copied through the
    /// stack instead: `f` sees the same bytes in the same order, in more
    /// calls.
    fn for_each_segment(&self, f: impl FnMut(&[u8]));

    /// Calls `f` with each data segment as a mutable slice, in order;
    /// false (and no call) when the data is not writable. External memory
    /// comes in pieces as with [`ModuleIo::for_each_segment`], each copied
    /// back after `f`.
    #[must_use]
    fn for_each_segment_mut(&mut self, f: impl FnMut(&mut [u8])) -> bool;

    /// Copies the I/O's data (its segments, in order) into `mem` at byte
    /// `off` (a RAM disk's write); false when that runs past `mem` (some
    /// bytes may have been copied). Racy copies on both sides: zero copy
    /// for external memory too.
    fn write_to_shared(&self, mem: &SharedMem, off: usize) -> bool;

    /// Copies the bytes of `mem` at `off` into the I/O's segments (a RAM
    /// disk's read); false when the data is not writable or the range
    /// runs past `mem`.
    #[must_use]
    fn read_from_shared(&mut self, mem: &SharedMem, off: usize) -> bool;

    /// For a bdev registered with
    /// [`BdevProps::module_checks_fit`](crate::bdev::BdevProps::module_checks_fit):
    /// a read or write the module's own test did not pass. One that breaks
    /// the bdev's limits is split, or bounced to aligned memory, and what
    /// results comes to the module's `submit` again (later, or from
    /// inside this call: hold no borrow the module's `submit` takes);
    /// then `None`. One that fits comes back, for the module to serve as
    /// it is. Other I/O types come back unchanged.
    fn fit_to_limits(self) -> Option<Self>;

    /// Four words of per-I/O scratch space for the module serving it.
    /// Their contents are unspecified when the module receives the I/O
    /// (what another module, or an earlier use of the same `BdevIo`, left
    /// there): set what you read.
    fn driver_ctx(&mut self) -> &mut [u64; 4];

    /// Sets completion dword 0 (NVMe passthrough).
    fn set_nvme_cdw0(&mut self, v: u32);

    /// Tag of the I/O an abort targets.
    fn abort_target_tag(&self) -> u64;

    /// Changes the first block (a virtual bdev translating a child's offset,
    /// e.g. split and raid).
    fn set_offset_blocks(&mut self, offset_blocks: u64);

    /// Changes the source block of a copy.
    fn set_src_offset_blocks(&mut self, src: u64);

    /// Makes this I/O (a child on the base, fresh or completed) the
    /// request of `parent` (the I/O the module serves): type, range, data
    /// segments, NVMe command and tag. The parent travels inside the child
    /// until [`ModuleIo::take_parent`], which also clears the child's
    /// segments: they describe the parent's memory.
    fn take_request_of(&mut self, parent: BdevIo) -> &mut Self;

    /// Makes this I/O the request of `parent` without taking it: for
    /// sending one request to several bases (a mirror's write). `parent`
    /// must be an I/O the module is serving (submitted). The child's data
    /// is read-only, and `parent` lends its memory: until every such child
    /// is dropped or rebuilt, `parent` is neither freed nor handed back to
    /// its consumer (completing it earlier delays its completion until
    /// then). Drop finished children before completing the parent.
    ///
    /// # Panics
    ///
    /// When `parent` is not submitted.
    fn share_request_of(&mut self, parent: &mut BdevIo) -> &mut Self;

    /// Takes back the parent given with [`ModuleIo::take_request_of`]:
    /// `None` while this I/O is submitted. Clears this I/O's segments.
    fn take_parent(&mut self) -> Option<BdevIo>;
}

impl ModuleIo for BdevIo {
    #[inline]
    fn complete(mut self, status: IoStatus) {
        debug_assert!(
            self.inner().state == IoState::Submitted,
            "complete on an I/O that is not submitted"
        );
        self.inner_mut().status = status;
        complete::complete(self);
    }

    fn complete_deferred(self, status: IoStatus) {
        match Thread::current() {
            Some(t) => t.defer(move || self.complete(status)),
            None => self.complete(status),
        }
    }

    fn fit_to_limits(self) -> Option<Self> {
        route::fit_to_limits(self)
    }

    fn complete_from(mut self, child: &BdevIo) {
        let c = child.inner();
        let (cdw0, status) = (c.nvme_cdw0, c.status);
        if c.io_type == IoType::ZoneAppend {
            // Where the base put the data (the same blocks here: a child
            // forwarded unchanged).
            let lba = c.offset_blocks;
            self.inner_mut().offset_blocks = lba;
        }
        self.inner_mut().nvme_cdw0 = cdw0;
        self.complete(status);
    }

    fn set_zone_append_lba(&mut self, lba: u64) {
        let i = self.inner_mut();
        if i.io_type == IoType::ZoneAppend {
            i.offset_blocks = lba;
        }
    }

    fn zone_append_as_write(&mut self) {
        let i = self.inner_mut();
        if i.io_type == IoType::ZoneAppend && i.state != IoState::Submitted {
            i.io_type = IoType::Write;
        }
    }

    fn copy_zone_infos(&mut self, infos: &[ZoneInfo]) -> bool {
        // (A zone report is no data-path I/O: one buffer for its records.)
        let bytes: Vec<u8> = infos.iter().flat_map(ZoneInfo::encode).collect();
        self.data_writable() && self.iov_len() >= bytes.len() && {
            self.copy_to_iovs(&bytes);
            true
        }
    }

    #[inline]
    fn iovs(&self) -> &[IoVec] {
        &self.inner().iovs
    }

    fn aux_iovs(&self) -> &[IoVec] {
        &self.inner().aux_iovs
    }

    fn iov_len(&self) -> usize {
        segments::total_len(&self.inner().iovs)
    }

    #[inline]
    fn data_writable(&self) -> bool {
        self.inner().data_writable()
    }

    fn copy_from_iovs(&self, dst: &mut [u8]) -> usize {
        let i = self.inner();
        // SAFETY: the segments of a live I/O (rules in io.rs; racy copies
        // where they may be external memory); `dst` is a `&mut` the
        // caller holds, so it is not memory they describe while `&self`
        // keeps the I/O alive and unchanged.
        unsafe { segments::copy_from(&i.iovs, dst, i.ext_data) }
    }

    fn copy_from_aux_iovs(&self, dst: &mut [u8]) -> usize {
        let i = self.inner();
        // SAFETY: as in `copy_from_iovs`.
        unsafe { segments::copy_from(&i.aux_iovs, dst, i.ext_data) }
    }

    fn copy_to_iovs(&mut self, src: &[u8]) -> usize {
        if !self.data_writable() {
            return 0;
        }
        let i = self.inner();
        // SAFETY: the data is writable (no other I/O shares it), `&mut
        // self` makes this the only access through this I/O, and `src` is
        // a shared slice the caller holds, which cannot be the writable
        // memory of this I/O (racy copies where it may be external).
        unsafe { segments::copy_to(&i.iovs, src, i.ext_data) }
    }

    fn zero_iovs(&mut self) -> bool {
        if !self.data_writable() {
            return false;
        }
        let i = self.inner();
        // SAFETY: as in `copy_to_iovs`.
        unsafe { segments::fill(&i.iovs, 0, i.ext_data) };
        true
    }

    fn iovs_equal(&self, data: &[u8]) -> bool {
        let mut off = 0;
        let mut equal = true;
        self.for_each_segment(|seg| {
            if off >= data.len() {
                return;
            }
            let n = seg.len().min(data.len() - off);
            equal &= seg[..n] == data[off..off + n];
            off += n;
        });
        equal
    }

    fn for_each_segment(&self, mut f: impl FnMut(&[u8])) {
        let i = self.inner();
        if i.ext_data {
            // SAFETY: as in `copy_from_iovs`; pieces copied through the
            // stack, no reference to external memory.
            unsafe { segments::for_each_piece(&i.iovs, &mut f) };
            return;
        }
        for v in &i.iovs {
            // SAFETY: as in `copy_from_iovs`; the slice lives for one call
            // of `f`, during which `&self` keeps the I/O borrowed, so no
            // writable access to it can happen.
            f(unsafe { segments::segment(v) });
        }
    }

    fn for_each_segment_mut(&mut self, mut f: impl FnMut(&mut [u8])) -> bool {
        if !self.data_writable() {
            return false;
        }
        let i = self.inner();
        if i.ext_data {
            // SAFETY: as in `copy_to_iovs`; pieces copied through the
            // stack and back.
            unsafe { segments::for_each_piece_mut(&i.iovs, &mut f) };
            return true;
        }
        for v in &i.iovs {
            // SAFETY: as in `copy_to_iovs`; the slice lives for one call of
            // `f`, and segments of one I/O do not overlap (they come from
            // distinct buffers or disjoint parts of a parent's).
            f(unsafe { segments::segment_mut(v) });
        }
        true
    }

    fn write_to_shared(&self, mem: &SharedMem, off: usize) -> bool {
        let mut pos = off;
        self.inner().iovs.iter().all(|v| {
            // SAFETY: the segments of a live I/O (rules in io.rs), read
            // with racy copies into `mem`, whose bytes are never
            // referenced; `&self` keeps the I/O alive.
            let ok = unsafe { mem.write_raw(pos, v.base, v.len) };
            pos = pos.wrapping_add(v.len);
            ok
        })
    }

    fn read_from_shared(&mut self, mem: &SharedMem, off: usize) -> bool {
        if !self.data_writable() {
            return false;
        }
        let mut pos = off;
        self.inner().iovs.iter().all(|v| {
            // SAFETY: as in `copy_to_iovs`: writable segments of a live
            // I/O, written with racy copies from `mem`.
            let ok = unsafe { mem.read_raw(pos, v.base, v.len) };
            pos = pos.wrapping_add(v.len);
            ok
        })
    }

    #[inline]
    fn driver_ctx(&mut self) -> &mut [u64; 4] {
        &mut self.inner_mut().driver_ctx
    }

    fn set_nvme_cdw0(&mut self, v: u32) {
        self.inner_mut().nvme_cdw0 = v;
    }

    fn abort_target_tag(&self) -> u64 {
        self.inner().src_offset_blocks
    }

    fn set_offset_blocks(&mut self, offset_blocks: u64) {
        self.inner_mut().offset_blocks = offset_blocks;
    }

    fn set_src_offset_blocks(&mut self, src: u64) {
        self.inner_mut().src_offset_blocks = src;
    }

    #[inline]
    fn take_request_of(&mut self, parent: BdevIo) -> &mut Self {
        let writable = parent.inner().data_writable();
        let child = self.fresh_request();
        let p = parent.inner();
        copy_request(child, p);
        child.ro_data = !writable;
        crate::bdev::io::replace_parent(child, parent);
        self
    }

    fn share_request_of(&mut self, parent: &mut BdevIo) -> &mut Self {
        let pi = parent.inner_mut();
        assert!(
            pi.state == IoState::Submitted,
            "share_request_of: only an I/O being served lends its data"
        );
        pi.role = match pi.role {
            Role::User => Role::UserLending { timed: false },
            Role::UserTimed => Role::UserLending { timed: true },
            other => other,
        };
        let lend = pi.lend();
        let child = self.fresh_request();
        copy_request(child, parent.inner());
        child.ro_data = true;
        child.lender = Some(lend);
        self
    }

    fn take_parent(&mut self) -> Option<BdevIo> {
        let i = self.inner_mut();
        if i.state == IoState::Submitted {
            return None;
        }
        let parent = i.parent.take()?;
        i.iovs.clear();
        i.aux_iovs.clear();
        i.ro_data = false;
        Some(parent)
    }
}

/// The request fields a child takes from its parent.
#[inline]
fn copy_request(child: &mut crate::bdev::io::IoInner, p: &crate::bdev::io::IoInner) {
    child.io_type = p.io_type;
    child.offset_blocks = p.offset_blocks;
    child.num_blocks = p.num_blocks;
    child.src_offset_blocks = p.src_offset_blocks;
    child.iovs.extend_from_slice(&p.iovs);
    child.aux_iovs.extend_from_slice(&p.aux_iovs);
    child.nvme_cmd = p.nvme_cmd;
    child.tag = p.tag;
    child.ext_data = p.ext_data;
}
