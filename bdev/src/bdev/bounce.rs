//! Bounce buffers: an I/O whose segments break the bdev's alignment need
//! (`required_alignment`) is served from one aligned buffer of this
//! thread's pool, copied in before a write and out after a read.

use super::io::{BdevIo, ChannelCore};
use super::segments::{self, IoVec};
use super::types::{IoStatus, IoType};

/// Whether `io`'s segments break the channel's alignment need.
#[inline]
pub(crate) fn misaligned(core: &ChannelCore, io: &BdevIo) -> bool {
    let mask = core.align_mask;
    mask != 0
        && io
            .inner()
            .iovs
            .iter()
            .any(|v| (v.base as usize | v.len) & mask != 0)
}

/// Moves `io` onto a bounce buffer; false when none could be had (the
/// caller retries it later, as for `NoMem`).
pub(crate) fn bounce(core: &ChannelCore, io: &mut BdevIo) -> bool {
    let align = core.align_mask + 1;
    let i = io.inner_mut();
    let len = segments::total_len(&i.iovs);
    let Some(mut buf) = core.pool().bounce_buf(len, align) else {
        return false;
    };
    if matches!(
        i.io_type,
        IoType::Write | IoType::Compare | IoType::CompareAndWrite | IoType::NvmeIo
    ) {
        // SAFETY: the segments belong to the live `io` (the rules in
        // io.rs) and the bounce buffer is a different allocation.
        unsafe { segments::copy_from(&i.iovs, &mut buf.as_mut_slice()[..len], i.ext_data) };
    }
    i.saved_iovs.clear();
    i.saved_iovs.extend_from_slice(&i.iovs);
    i.iovs.clear();
    i.iovs.push(IoVec {
        base: buf.as_mut_ptr(),
        len,
    });
    i.bounce = Some(buf);
    true
}

/// Back from the module: a read's data goes to the I/O's own segments,
/// which are restored; the bounce buffer goes back to the pool.
pub(crate) fn unbounce(core: &ChannelCore, io: &mut BdevIo) {
    let i = io.inner_mut();
    let Some(buf) = i.bounce.take() else { return };
    let len = segments::total_len(&i.iovs);
    if matches!(i.io_type, IoType::Read | IoType::NvmeIo | IoType::NvmeAdmin)
        && i.status == IoStatus::Success
        && !i.ro_data
    {
        // SAFETY: the saved segments are the I/O's own (live, see io.rs);
        // a read's data is never read-only memory (checked), and nothing
        // else borrows it while the bdev layer holds the I/O.
        unsafe { segments::copy_to(&i.saved_iovs, &buf.as_slice()[..len], i.ext_data) };
    }
    i.iovs.clear();
    i.iovs.extend_from_slice(&i.saved_iovs);
    i.saved_iovs.clear();
    core.pool().return_bounce(buf);
}
