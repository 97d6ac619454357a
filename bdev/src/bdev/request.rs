//! The consumer's side of a [`BdevIo`]: request builders, the completion
//! to run, and what a completed I/O reports and gives back.
//!
//! A completed I/O may be filled again and resubmitted on the same channel
//! instead of being dropped and a new one allocated: the fastest way for a
//! consumer that keeps a queue depth busy.

use std::rc::Rc;
use std::sync::Arc;

use super::io::{BdevIo, Bufs, Completion, IoCompletion, IoInner, IoState};
use super::segments::IoVec;
use super::slot::replace_field;
use super::types::{IoStatus, IoType, NvmeCmd};
use super::zone::ZoneAction;
use crate::dma::{DmaBuf, ExtMem};
use crate::error::Error;

impl BdevIo {
    #[inline(always)]
    fn set_request(
        &mut self,
        io_type: IoType,
        offset_blocks: u64,
        num_blocks: u64,
    ) -> &mut IoInner {
        let i = self.fresh_request();
        i.io_type = io_type;
        i.offset_blocks = offset_blocks;
        i.num_blocks = num_blocks;
        i
    }

    #[inline(always)]
    fn set_buf(i: &mut IoInner, mut buf: DmaBuf) {
        i.iovs.push(IoVec {
            base: buf.as_mut_ptr(),
            len: buf.len(),
        });
        replace_field(&mut i.bufs, Bufs::One(buf));
        release_ext(i);
    }

    fn set_bufs(i: &mut IoInner, mut bufs: Vec<DmaBuf>) {
        for b in &mut bufs {
            i.iovs.push(IoVec {
                base: b.as_mut_ptr(),
                len: b.len(),
            });
        }
        replace_field(&mut i.bufs, Bufs::Many(bufs));
        release_ext(i);
    }

    /// Read `num_blocks` at `offset_blocks` into `buf` (its first
    /// `num_blocks * block_size` bytes).
    #[inline(always)]
    pub fn read(&mut self, offset_blocks: u64, num_blocks: u64, buf: DmaBuf) -> &mut Self {
        let i = self.set_request(IoType::Read, offset_blocks, num_blocks);
        Self::set_buf(i, buf);
        self
    }

    /// Read into several buffers, in order.
    pub fn readv(&mut self, offset_blocks: u64, num_blocks: u64, bufs: Vec<DmaBuf>) -> &mut Self {
        let i = self.set_request(IoType::Read, offset_blocks, num_blocks);
        Self::set_bufs(i, bufs);
        self
    }

    /// Write `num_blocks` at `offset_blocks` from `buf`.
    #[inline(always)]
    pub fn write(&mut self, offset_blocks: u64, num_blocks: u64, buf: DmaBuf) -> &mut Self {
        let i = self.set_request(IoType::Write, offset_blocks, num_blocks);
        Self::set_buf(i, buf);
        self
    }

    /// Write from several buffers, in order.
    pub fn writev(&mut self, offset_blocks: u64, num_blocks: u64, bufs: Vec<DmaBuf>) -> &mut Self {
        let i = self.set_request(IoType::Write, offset_blocks, num_blocks);
        Self::set_bufs(i, bufs);
        self
    }

    /// Read `num_blocks` at `offset_blocks` into external memory (zero
    /// copy: a VM's guest memory): the data segments are added next with
    /// [`BdevIo::push_ext_segment`], in order. The I/O keeps `mem` alive
    /// until its segments are dropped.
    #[inline]
    pub fn read_ext(
        &mut self,
        offset_blocks: u64,
        num_blocks: u64,
        mem: &Arc<ExtMem>,
    ) -> &mut Self {
        self.set_ext(IoType::Read, offset_blocks, num_blocks, mem)
    }

    /// Write `num_blocks` at `offset_blocks` from external memory; the
    /// segments follow with [`BdevIo::push_ext_segment`].
    #[inline]
    pub fn write_ext(
        &mut self,
        offset_blocks: u64,
        num_blocks: u64,
        mem: &Arc<ExtMem>,
    ) -> &mut Self {
        self.set_ext(IoType::Write, offset_blocks, num_blocks, mem)
    }

    #[inline]
    fn set_ext(
        &mut self,
        io_type: IoType,
        offset_blocks: u64,
        num_blocks: u64,
        mem: &Arc<ExtMem>,
    ) -> &mut Self {
        let i = self.set_request(io_type, offset_blocks, num_blocks);
        replace_field(&mut i.bufs, Bufs::None);
        match &i.ext_mem {
            Some(m) if Arc::ptr_eq(m, mem) => {}
            _ => replace_field(&mut i.ext_mem, Some(Arc::clone(mem))),
        }
        i.ext_data = true;
        self
    }

    /// Appends the data segment `[addr, addr + len)` to a request built
    /// with [`BdevIo::read_ext`] or [`BdevIo::write_ext`]. Fails (and adds
    /// nothing) when the range is empty or not inside one region of that
    /// request's memory, or the I/O is not one such request being built.
    #[inline]
    pub fn push_ext_segment(&mut self, addr: usize, len: usize) -> Result<(), Error> {
        let i = self.inner_mut();
        match &i.ext_mem {
            Some(m) if i.state != IoState::Submitted && i.ext_data && m.contains(addr, len) => {
                i.iovs.push(IoVec {
                    base: addr as *mut u8,
                    len,
                });
                Ok(())
            }
            _ => Err(ext_segment_refused(addr, len)),
        }
    }

    /// Compare the blocks with `buf`; [`IoStatus::Miscompare`] on difference.
    pub fn compare(&mut self, offset_blocks: u64, num_blocks: u64, buf: DmaBuf) -> &mut Self {
        let i = self.set_request(IoType::Compare, offset_blocks, num_blocks);
        Self::set_buf(i, buf);
        self
    }

    /// Compare with `cmp`, and only if equal write `data`, atomically.
    pub fn compare_and_write(
        &mut self,
        offset_blocks: u64,
        num_blocks: u64,
        cmp: DmaBuf,
        mut data: DmaBuf,
    ) -> &mut Self {
        let i = self.set_request(IoType::CompareAndWrite, offset_blocks, num_blocks);
        Self::set_buf(i, cmp);
        i.aux_iovs.push(IoVec {
            base: data.as_mut_ptr(),
            len: data.len(),
        });
        replace_field(&mut i.aux_bufs, Bufs::One(data));
        self
    }

    /// Write zeroes over the range.
    pub fn write_zeroes(&mut self, offset_blocks: u64, num_blocks: u64) -> &mut Self {
        self.set_request(IoType::WriteZeroes, offset_blocks, num_blocks);
        self
    }

    /// Deallocate the range.
    pub fn unmap(&mut self, offset_blocks: u64, num_blocks: u64) -> &mut Self {
        self.set_request(IoType::Unmap, offset_blocks, num_blocks);
        self
    }

    /// Make completed writes in the range durable.
    pub fn flush(&mut self, offset_blocks: u64, num_blocks: u64) -> &mut Self {
        self.set_request(IoType::Flush, offset_blocks, num_blocks);
        self
    }

    /// Reset the bdev (see the bdev layer's reset semantics).
    pub fn reset(&mut self) -> &mut Self {
        self.set_request(IoType::Reset, 0, 0);
        self
    }

    /// Copy `num_blocks` from `src_offset_blocks` to `dst_offset_blocks`.
    pub fn copy(
        &mut self,
        dst_offset_blocks: u64,
        src_offset_blocks: u64,
        num_blocks: u64,
    ) -> &mut Self {
        let i = self.set_request(IoType::Copy, dst_offset_blocks, num_blocks);
        i.src_offset_blocks = src_offset_blocks;
        self
    }

    /// NVMe I/O command passthrough with an optional data buffer.
    pub fn nvme_io(&mut self, cmd: NvmeCmd, buf: Option<DmaBuf>) -> &mut Self {
        let i = self.set_request(IoType::NvmeIo, 0, 0);
        i.nvme_cmd = cmd;
        if let Some(b) = buf {
            Self::set_buf(i, b);
        }
        self
    }

    /// NVMe admin command passthrough with an optional data buffer.
    pub fn nvme_admin(&mut self, cmd: NvmeCmd, buf: Option<DmaBuf>) -> &mut Self {
        let i = self.set_request(IoType::NvmeAdmin, 0, 0);
        i.nvme_cmd = cmd;
        if let Some(b) = buf {
            Self::set_buf(i, b);
        }
        self
    }

    /// Abort the outstanding I/O with this tag on the same channel.
    pub fn abort(&mut self, target_tag: u64) -> &mut Self {
        let i = self.set_request(IoType::Abort, 0, 0);
        i.src_offset_blocks = target_tag;
        self
    }

    /// Zone report: the state of `num_zones` zones from the zone starting
    /// at block `zone_id`, written into `buf` as [`ZONE_INFO_SIZE`](super::zone::ZONE_INFO_SIZE)-byte
    /// records ([`ZoneInfo::decode_all`](super::zone::ZoneInfo::decode_all)
    /// reads them once the I/O completes). Zoned bdevs only.
    pub fn get_zone_info(&mut self, zone_id: u64, num_zones: u64, buf: DmaBuf) -> &mut Self {
        let i = self.set_request(IoType::GetZoneInfo, zone_id, num_zones);
        Self::set_buf(i, buf);
        self
    }

    /// Zone management: `action` on the zone starting at block `zone_id`.
    pub fn zone_management(&mut self, zone_id: u64, action: ZoneAction) -> &mut Self {
        let i = self.set_request(IoType::ZoneManagement, zone_id, 1);
        i.src_offset_blocks = action as u64;
        self
    }

    /// Zone append: `num_blocks` from `buf` into the zone starting at
    /// block `zone_id`, wherever its write pointer is; once completed,
    /// [`BdevIo::zone_append_lba`] says where the data went.
    pub fn zone_append(&mut self, zone_id: u64, num_blocks: u64, buf: DmaBuf) -> &mut Self {
        let i = self.set_request(IoType::ZoneAppend, zone_id, num_blocks);
        Self::set_buf(i, buf);
        self
    }

    /// Where a completed, successful zone append wrote its first block
    /// (`None` for any other I/O, or before it completed successfully).
    #[must_use]
    pub fn zone_append_lba(&self) -> Option<u64> {
        let i = self.inner();
        (i.io_type == IoType::ZoneAppend
            && i.state != IoState::Submitted
            && i.status == IoStatus::Success)
            .then_some(i.offset_blocks)
    }

    /// The action of a zone management I/O.
    #[must_use]
    pub fn zone_action(&self) -> Option<ZoneAction> {
        let i = self.inner();
        if i.io_type == IoType::ZoneManagement {
            ZoneAction::from_code(i.src_offset_blocks)
        } else {
            None
        }
    }

    /// Completion: a plain function.
    pub fn on_done_fn(&mut self, f: fn(BdevIo)) -> &mut Self {
        replace_field(&mut self.inner_mut().cb, Completion::Fn(f));
        self
    }

    /// Completion: a shared handler.
    #[inline]
    pub fn on_done(&mut self, h: Rc<dyn IoCompletion>) -> &mut Self {
        replace_field(&mut self.inner_mut().cb, Completion::Handler(h));
        self
    }

    /// Completion: a closure (allocates once per I/O).
    pub fn on_done_closure(&mut self, f: impl FnOnce(BdevIo) + 'static) -> &mut Self {
        replace_field(&mut self.inner_mut().cb, Completion::Closure(Box::new(f)));
        self
    }

    /// Sets the caller's tag (any value; returned with the completion).
    #[inline]
    pub fn set_tag(&mut self, tag: u64) -> &mut Self {
        self.inner_mut().tag = tag;
        self
    }

    /// The I/O type.
    #[must_use]
    pub fn io_type(&self) -> IoType {
        self.inner().io_type
    }

    /// First block.
    #[must_use]
    pub fn offset_blocks(&self) -> u64 {
        self.inner().offset_blocks
    }

    /// Number of blocks.
    #[must_use]
    pub fn num_blocks(&self) -> u64 {
        self.inner().num_blocks
    }

    /// Source block of a copy.
    #[must_use]
    pub fn src_offset_blocks(&self) -> u64 {
        self.inner().src_offset_blocks
    }

    /// The caller's tag.
    #[must_use]
    pub fn tag(&self) -> u64 {
        self.inner().tag
    }

    /// Completion status.
    #[must_use]
    pub fn status(&self) -> IoStatus {
        self.inner().status
    }

    /// NVMe command of a passthrough I/O.
    #[must_use]
    pub fn nvme_cmd(&self) -> &NvmeCmd {
        &self.inner().nvme_cmd
    }

    /// Completion dword 0 of an NVMe passthrough I/O.
    #[must_use]
    pub fn nvme_cdw0(&self) -> u32 {
        self.inner().nvme_cdw0
    }

    /// Ticks when the I/O was submitted.
    #[must_use]
    pub fn submit_tick(&self) -> u64 {
        self.inner().submit_tick
    }

    /// Ticks when the bdev layer completed the I/O to its consumer (the
    /// same reading its statistics use; valid inside the completion).
    #[must_use]
    pub fn complete_tick(&self) -> u64 {
        self.inner().complete_tick
    }

    /// Takes back the (single) data buffer: `None` while the I/O is
    /// submitted, or when it has none or several. The request's segments,
    /// which described the buffer, are cleared with it: the I/O must be
    /// filled again before it can be submitted.
    #[inline]
    pub fn take_buf(&mut self) -> Option<DmaBuf> {
        let i = self.inner_mut();
        if i.state == IoState::Submitted {
            return None;
        }
        match std::mem::take(&mut i.bufs) {
            Bufs::One(b) => {
                i.iovs.clear();
                Some(b)
            }
            Bufs::Many(mut v) if v.len() == 1 => {
                i.iovs.clear();
                v.pop()
            }
            other => {
                i.bufs = other;
                None
            }
        }
    }

    /// Takes back all data buffers (none while the I/O is submitted); the
    /// segments are cleared as with [`BdevIo::take_buf`].
    pub fn take_bufs(&mut self) -> Vec<DmaBuf> {
        let i = self.inner_mut();
        if i.state == IoState::Submitted {
            return Vec::new();
        }
        let taken = std::mem::take(&mut i.bufs);
        if !matches!(taken, Bufs::None) || i.ext_mem.is_some() {
            i.iovs.clear();
            release_ext(i);
        }
        match taken {
            Bufs::None => Vec::new(),
            Bufs::One(b) => vec![b],
            Bufs::Many(v) => v,
        }
    }

    /// Takes back the compare-and-write data buffer (none while the I/O is
    /// submitted); its segments are cleared.
    pub fn take_aux_buf(&mut self) -> Option<DmaBuf> {
        let i = self.inner_mut();
        if i.state == IoState::Submitted {
            return None;
        }
        match std::mem::take(&mut i.aux_bufs) {
            Bufs::One(b) => {
                i.aux_iovs.clear();
                Some(b)
            }
            other => {
                i.aux_bufs = other;
                None
            }
        }
    }
}

#[cold]
fn ext_segment_refused(addr: usize, len: usize) -> Error {
    Error::InvalidArg(format!(
        "segment {addr:#x}+{len} is not inside the request's external memory"
    ))
}

/// A request with buffers of its own describes no external memory: the
/// memory an earlier `ext` request kept alive is let go (a test and a
/// jump when there is none).
#[inline(always)]
fn release_ext(i: &mut IoInner) {
    if i.ext_mem.is_some() {
        replace_field(&mut i.ext_mem, None);
    }
}
