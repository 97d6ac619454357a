//! Routing a checked consumer I/O: the reset sequence, write-zeroes
//! emulation, the split stage, or straight to the module.

use super::bounce;
use super::dispatch;
use super::io::{BdevIo, ChannelCore, Role, SplitKind};
use super::reset;
use super::splitting;
use super::types::IoType;

/// Routes `io` (checked, counted outstanding, not frozen, within QoS).
#[inline]
pub(crate) fn route(core: &ChannelCore, io: BdevIo) {
    let i = io.inner();
    if matches!(i.io_type, IoType::Read | IoType::Write)
        && (core.direct_rw || core.fit_rw && core.fit.fits(i.num_blocks, &i.iovs))
    {
        core.module.submit(io);
        return;
    }
    route_slow(core, io);
}

/// [`crate::bdev::module::ModuleIo::fit_to_limits`]: a read or write that
/// breaks the bdev's limits is split, or bounced to aligned memory, and
/// the result goes to the module again (`None`); one that fits comes back.
/// A module that calls this from its submission path cannot loop: an I/O
/// is split only if it is not a split's child (children are cut to the
/// limits) and bounced only once, as on the bdev layer's own path.
pub(crate) fn fit_to_limits(mut io: BdevIo) -> Option<BdevIo> {
    let Some(ch) = io.inner().ch.clone() else {
        return Some(io);
    };
    let core: &ChannelCore = &ch;
    let i = io.inner();
    if !matches!(i.io_type, IoType::Read | IoType::Write) || i.bounce.is_some() {
        return Some(io);
    }
    let child = matches!(i.role, Role::Child { .. });
    if core.split_rw && !child {
        io = split_data(core, io)?;
    }
    if core.align_mask != 0 && bounce::misaligned(core, &io) {
        // Bounced (or queued until a bounce buffer is free): aligned when
        // the module sees it again.
        dispatch::to_module(core, io);
        return None;
    }
    Some(io)
}

/// A read, write or compare that breaks the bdev's split limits (writes:
/// on the write unit where it is mandatory) is split (`None`); one that
/// does not comes back.
fn split_data(core: &ChannelCore, io: BdevIo) -> Option<BdevIo> {
    let i = io.inner();
    let limits = if i.io_type == IoType::Write {
        core.write_limits
    } else {
        core.limits
    };
    if limits.needs_split(i.offset_blocks, i.num_blocks, &i.iovs) {
        splitting::start(core, io, SplitKind::Data, limits);
        return None;
    }
    Some(io)
}

fn route_slow(core: &ChannelCore, io: BdevIo) {
    let i = io.inner();
    match i.io_type {
        IoType::Reset => reset::start(core, io),
        IoType::WriteZeroes if !core.zeroes_native => splitting::emulate_write_zeroes(core, io),
        IoType::Read | IoType::Write | IoType::Compare if core.split_rw => {
            if let Some(io) = split_data(core, io) {
                dispatch::to_module(core, io);
            }
        }
        IoType::Unmap | IoType::WriteZeroes | IoType::Copy => {
            let p = &core.bdev.props;
            let max = u64::from(match i.io_type {
                IoType::Unmap => p.max_unmap,
                IoType::WriteZeroes => p.max_write_zeroes,
                _ => p.max_copy,
            });
            let mut limits = core.limits;
            limits.max_blocks = max;
            if max != 0 && i.num_blocks > max
                || limits.boundary != 0 && limits.needs_split(i.offset_blocks, i.num_blocks, &[])
            {
                splitting::start(core, io, SplitKind::Range, limits);
            } else {
                dispatch::to_module(core, io);
            }
        }
        _ => dispatch::to_module(core, io),
    }
}
