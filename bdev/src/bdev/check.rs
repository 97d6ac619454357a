//! The first stage: what a submission must satisfy before the bdev layer
//! or any module sees it — the channel's thread, an I/O type the channel
//! may submit (served or emulated, and writable where it writes), a block
//! range inside the bdev, buffers that hold the data, and whole write units
//! where the bdev requires them.

use super::io::{ChannelCore, IoInner, IoState};
use super::segments::IoVec;
use super::types::{IoType, DATA_TYPES, RANGE_TYPES, ZONE_TYPES};
use super::zone::{ZoneAction, ZONE_INFO_SIZE};
use crate::error::{Error, Result};
use crate::thread::current_thread_id;

/// I/O types a channel may submit, as one mask: served (or emulated) by
/// the bdev and allowed by the descriptor's mode. Writes that must cover
/// whole write units stay out of it (`check_slow` takes them).
pub(crate) fn allowed_types(core: &ChannelCore, writable: bool) -> u32 {
    let mut allowed = 0u32;
    for t in IoType::ALL {
        let unit_write = t == IoType::Write && core.write_unit != 0;
        if core.bdev.supports(t) && (writable || !t.is_write()) && !unit_write {
            allowed |= t.bit();
        }
    }
    allowed
}

/// Checks a submission on `core` by a channel that may submit `allowed`.
#[inline]
pub(crate) fn check(
    core: &ChannelCore,
    allowed: u32,
    writable: bool,
    i: &mut IoInner,
) -> Result<()> {
    if core.thread_id != current_thread_id() {
        return Err(Error::WrongThread);
    }
    let bit = i.io_type.bit();
    if allowed & bit == 0 || i.state != IoState::Building {
        // Its own copy of the rest, so that the common case never comes
        // back here from a call.
        return check_slow(core, writable, i);
    }
    check_rest(core, i)
}

/// Range and buffer checks.
#[inline(always)]
fn check_rest(core: &ChannelCore, i: &mut IoInner) -> Result<()> {
    let t = i.io_type;
    let bit = t.bit();
    if RANGE_TYPES & bit != 0 {
        let num_blocks = core.bdev.num_blocks();
        let in_range = |off: u64, n: u64| off.checked_add(n).is_some_and(|e| e <= num_blocks);
        if !in_range(i.offset_blocks, i.num_blocks)
            || (t == IoType::Copy && !in_range(i.src_offset_blocks, i.num_blocks))
        {
            return Err(Error::OutOfRange {
                offset_blocks: i.offset_blocks,
                num_blocks: i.num_blocks,
                bdev_blocks: num_blocks,
            });
        }
        if i.num_blocks == 0 && t != IoType::Flush {
            return Err(Error::InvalidArg("zero-length I/O".into()));
        }
    } else if ZONE_TYPES & bit != 0 {
        return check_zone(core, i);
    }
    if DATA_TYPES & bit != 0 {
        let need = i
            .num_blocks
            .checked_mul(core.block_size)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| Error::InvalidArg("I/O too large".into()))?;
        trim_iovs(&mut i.iovs, need)?;
        if t == IoType::CompareAndWrite {
            trim_iovs(&mut i.aux_iovs, need)?;
        }
    }
    Ok(())
}

/// Zone I/O (only a zoned bdev gets it: the registry keeps the zone types
/// out of every other bdev's mask): it names a zone by its first block, a
/// zone report has room for its records, a zone management I/O a known
/// action, and a zone append stays in its zone and under the bdev's limit.
#[cold]
fn check_zone(core: &ChannelCore, i: &mut IoInner) -> Result<()> {
    let Some(geo) = core.bdev.props.zoned else {
        return Err(Error::NotSupported(i.io_type));
    };
    let num_blocks = core.bdev.num_blocks();
    let zone_id = i.offset_blocks;
    if !zone_id.is_multiple_of(geo.zone_size) || zone_id >= num_blocks {
        return Err(Error::InvalidArg(format!(
            "block {zone_id} is not the start of a zone (zones of {} blocks, {} zones)",
            geo.zone_size,
            geo.num_zones(num_blocks)
        )));
    }
    let n = i.num_blocks;
    match i.io_type {
        IoType::GetZoneInfo => {
            let zones_left = (num_blocks - zone_id) / geo.zone_size;
            if n == 0 || n > zones_left {
                return Err(Error::InvalidArg(format!(
                    "a report of {n} zones from zone {zone_id}: {zones_left} zones there"
                )));
            }
            let need = usize::try_from(n)
                .ok()
                .and_then(|n| n.checked_mul(ZONE_INFO_SIZE))
                .ok_or_else(|| Error::InvalidArg("zone report too large".into()))?;
            trim_iovs(&mut i.iovs, need)
        }
        IoType::ZoneManagement => match ZoneAction::from_code(i.src_offset_blocks) {
            Some(_) => Ok(()),
            None => Err(Error::InvalidArg(format!(
                "unknown zone action {}",
                i.src_offset_blocks
            ))),
        },
        _ => {
            let max = u64::from(geo.max_zone_append_size);
            if n == 0 || n > geo.zone_size || (max != 0 && n > max) {
                return Err(Error::InvalidArg(format!(
                    "a zone append of {n} blocks (zones of {} blocks, appends of at most {})",
                    geo.zone_size,
                    if max == 0 { geo.zone_size } else { max }
                )));
            }
            let need = n
                .checked_mul(core.block_size)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| Error::InvalidArg("I/O too large".into()))?;
            trim_iovs(&mut i.iovs, need)
        }
    }
}

/// What the bit test in `check` does not pass: rejections, and writes on a
/// bdev with a mandatory write unit (their bit stays clear in the mask, so
/// that other I/O pays nothing for this check).
#[cold]
fn check_slow(core: &ChannelCore, writable: bool, i: &mut IoInner) -> Result<()> {
    let (t, state) = (i.io_type, i.state);
    let unit = core.write_unit;
    if t == IoType::Write
        && unit != 0
        && state == IoState::Building
        && writable
        && core.bdev.supports(t)
    {
        let (off, n) = (i.offset_blocks, i.num_blocks);
        if off.is_multiple_of(unit) && n.is_multiple_of(unit) {
            return check_rest(core, i);
        }
        return Err(partial_write_unit(unit, off, n));
    }
    Err(rejection(core, t, state))
}

#[cold]
fn rejection(core: &ChannelCore, t: IoType, state: IoState) -> Error {
    if state != IoState::Building {
        Error::InvalidArg("I/O has no new request (submitted or completed already)".into())
    } else if !core.bdev.supports(t) {
        Error::NotSupported(t)
    } else {
        Error::ReadOnly(core.bdev.name.clone())
    }
}

/// A write on a bdev with a mandatory write unit must cover whole units.
#[cold]
fn partial_write_unit(unit: u64, offset_blocks: u64, num_blocks: u64) -> Error {
    Error::InvalidArg(format!(
        "write of {num_blocks} blocks at block {offset_blocks} does not cover whole \
         write units of {unit} blocks"
    ))
}

/// Cuts `iovs` to exactly `need` bytes; errors if they hold fewer.
#[inline]
fn trim_iovs(iovs: &mut Vec<IoVec>, need: usize) -> Result<()> {
    if iovs.len() == 1 && iovs[0].len == need {
        return Ok(());
    }
    let mut have = 0usize;
    for (n, v) in iovs.iter_mut().enumerate() {
        if have + v.len >= need {
            v.len = need - have;
            iovs.truncate(n + 1);
            if let Some(last) = iovs.last() {
                if last.len == 0 {
                    iovs.pop();
                }
            }
            return Ok(());
        }
        have += v.len;
    }
    Err(Error::BufferTooSmall { need, have })
}
