//! The zone_block module, its bdev and its I/O path: a zoned bdev over a
//! conventional base, block for block (zone *n* is the base's blocks
//! `n * zone_size ..`, of which the first `zone_capacity` are writable).
//!
//! Zone state lives in [`Zones`] (one atomic word per zone, shared by every
//! thread's channel); reads, writes and appends go to the base as child
//! I/Os on this thread's channel to it, zone reports and management are
//! served here (a reset also unmaps the zone on the base where the base
//! can). A write or append takes its child from the pool *before* it moves
//! the write pointer, so that an I/O retried for want of a child never
//! reserves its blocks twice.

use std::sync::Arc;

use bdevkit::bdev::module::vbdev::{self, BaseBdev, BaseEvents, Stacked, VbdevModule};
use bdevkit::bdev::module::{
    Bdev, BdevChannel, BdevIo, BdevManager, BdevOps, BoxError, Done, Error, IoStatus, IoType,
    ModuleIo, Result, ZoneGeometry, ZoneInfo,
};
use serde_json::{json, Value};

use crate::rpc::ZoneBlockCreateParams;
use crate::zones::{Managed, Zones};
use crate::{MODULE, NAMESPACE_UUID, PRODUCT_NAME};

vbdev::stacked_config!(
    ZoneBlockCreateParams,
    MODULE,
    "bdev_zone_block_create",
    attach
);

/// The zone_block module: its configurations (`bdev_zone_block_create`
/// calls in force), attached when their base exists (examine attaches a
/// configuration made before its base).
pub type ZoneBlockModule = VbdevModule<ZoneBlockCreateParams>;

/// `bdev_zone_block_create`: checks the params, records the
/// configuration, attaches at once if the base exists.
pub(crate) fn create(mgr: &BdevManager, params: ZoneBlockCreateParams) -> Result<String> {
    if params.name.is_empty() || params.base_bdev_name.is_empty() {
        return Err(Error::InvalidArg("names must not be empty".into()));
    }
    if params.zone_capacity == 0 {
        return Err(Error::InvalidArg("zone capacity can't be 0".into()));
    }
    if params.optimal_open_zones == 0 {
        return Err(Error::InvalidArg("optimal open zones can't be 0".into()));
    }
    let name = params.name.clone();
    ZoneBlockModule::of(mgr)?.configure(mgr, params)?;
    Ok(name)
}

/// The zone size of a capacity: the next power of two (SPDK's).
fn zone_size_of(capacity: u64) -> Option<u64> {
    capacity.checked_next_power_of_two()
}

fn attach(mgr: &BdevManager, cfg: &ZoneBlockCreateParams, base: &Bdev) -> Result<Bdev> {
    if base.props().zoned.is_some() {
        return Err(Error::InvalidArg(format!(
            "base bdev {} is already a zoned bdev",
            base.name()
        )));
    }
    let zone_size = zone_size_of(cfg.zone_capacity)
        .ok_or_else(|| Error::InvalidArg("zone capacity too large".into()))?;
    let num_zones = base.num_blocks() / zone_size;
    if num_zones == 0 {
        return Err(Error::InvalidArg(format!(
            "base bdev {} ({} blocks) is smaller than one zone of {zone_size} blocks",
            base.name(),
            base.num_blocks()
        )));
    }
    let optimal = u32::try_from(cfg.optimal_open_zones)
        .map_err(|_| Error::InvalidArg("optimal open zones too large".into()))?;
    let mut props = vbdev::props_over(base, &cfg.name, PRODUCT_NAME, num_zones * zone_size);
    props.uuid = Some(
        cfg.uuid
            .unwrap_or_else(|| uuid::Uuid::new_v5(&NAMESPACE_UUID, base.uuid().as_bytes())),
    );
    props.optimal_io_boundary = base.props().optimal_io_boundary;
    props.write_unit_size = base.props().write_unit_size;
    props.zoned = Some(ZoneGeometry {
        optimal_open_zones: optimal,
        ..ZoneGeometry::new(zone_size)
    });
    let zones = Zones::new(zone_size, cfg.zone_capacity, num_zones);
    let bdev = Stacked::register(mgr, base, MODULE, props, |stacked| {
        Arc::new(ZoneBlockBdev {
            stacked,
            zones,
            optimal_open_zones: optimal,
        })
    })?;
    tracing::info!(bdev = %cfg.name, base = %base.name(), zone_size, num_zones,
        capacity = cfg.zone_capacity, "zone_block bdev created");
    Ok(bdev)
}

/// One zone_block bdev.
#[derive(Debug)]
pub struct ZoneBlockBdev {
    stacked: Stacked,
    zones: Zones,
    optimal_open_zones: u32,
}

/// A removal of the base unregisters the bdev; a resize of the base
/// changes nothing (the zones were laid out at creation).
impl BaseEvents for ZoneBlockBdev {
    fn base_bdev(&self) -> &BaseBdev {
        self.stacked.base()
    }

    fn base_removed(&self) {
        let s = &self.stacked;
        tracing::info!(bdev = %s.name(), base = %s.base_bdev().name(),
            "base bdev removed; unregistering");
        vbdev::unregister_own(s.manager(), s.name(), self);
    }

    fn base_resized(&self) {}
}

/// Per-thread state: this thread's channel to the base.
#[derive(Debug)]
pub struct ZoneBlockChannel {
    base: BdevChannel,
}

impl ZoneBlockBdev {
    /// A read, write or append as a child on the base: the child first,
    /// then (for a write or append) the blocks reserved, then the child
    /// submitted.
    fn forward_data(&self, ch: &ZoneBlockChannel, mut io: BdevIo) {
        let Some(mut child) = ch.base.alloc_io() else {
            return io.complete_deferred(IoStatus::NoMem);
        };
        let (t, lba, n) = (io.io_type(), io.offset_blocks(), io.num_blocks());
        let checked = match t {
            IoType::Read => self.zones.check_read(lba, n).map(|()| lba),
            _ => self.zones.reserve(lba, n, t == IoType::ZoneAppend),
        };
        let at = match checked {
            Ok(at) => at,
            Err(e) => return io.complete_deferred(e.status()),
        };
        // An append's blocks are known now: the parent reports them once
        // the write of them succeeds.
        io.set_zone_append_lba(at);
        child.take_request_of(io);
        child.zone_append_as_write();
        child.on_done_fn(vbdev::complete_parent);
        if let Err(e) = ch.base.submit(child) {
            let mut child = e.io;
            if let Some(parent) = child.take_parent() {
                parent.complete_deferred(IoStatus::Errno(e.error.errno()));
            }
        }
    }

    fn zone_report(&self, mut io: BdevIo) {
        let (start, n) = (io.offset_blocks(), io.num_blocks());
        let size = self.zones.zone_size();
        // The bdev layer checked the range: every zone asked exists.
        let infos: Vec<ZoneInfo> = (0..n)
            .filter_map(|k| self.zones.info(start + k * size))
            .collect();
        let ok = u64::try_from(infos.len()).is_ok_and(|got| got == n) && io.copy_zone_infos(&infos);
        io.complete_deferred(if ok {
            IoStatus::Success
        } else {
            IoStatus::Failed
        });
    }

    fn zone_management(&self, ch: &ZoneBlockChannel, io: BdevIo) {
        let Some(action) = io.zone_action() else {
            return io.complete_deferred(IoStatus::Failed);
        };
        let zone_id = io.offset_blocks();
        match self.zones.manage(zone_id, action) {
            Err(e) => io.complete_deferred(e.status()),
            Ok(Managed::Emptied) if ch.base.bdev().supports(IoType::Unmap) => {
                // Unmapping is not needed for correctness (the blocks
                // past the write pointer are no data): the reset succeeds
                // whatever the unmap's outcome.
                let Some(mut unmap) = ch.base.alloc_io() else {
                    return io.complete_deferred(IoStatus::Success);
                };
                unmap.take_request_of(io);
                unmap
                    .unmap(zone_id, self.zones.capacity())
                    .on_done_fn(reset_done);
                if let Err(e) = ch.base.submit(unmap) {
                    let mut unmap = e.io;
                    if let Some(parent) = unmap.take_parent() {
                        parent.complete_deferred(IoStatus::Success);
                    }
                }
            }
            Ok(_) => io.complete_deferred(IoStatus::Success),
        }
    }
}

/// The unmap of a reset zone is done: the reset succeeded.
fn reset_done(mut unmap: BdevIo) {
    if let Some(parent) = unmap.take_parent() {
        parent.complete(IoStatus::Success);
    }
}

impl BdevOps for ZoneBlockBdev {
    type Channel = ZoneBlockChannel;

    fn create_channel(&self) -> std::result::Result<ZoneBlockChannel, BoxError> {
        Ok(ZoneBlockChannel {
            base: self.stacked.base().channel()?,
        })
    }

    fn submit(&self, ch: &ZoneBlockChannel, io: BdevIo) {
        if self.stacked.base().is_removing() {
            return io.complete_deferred(IoStatus::Aborted);
        }
        match io.io_type() {
            IoType::Read | IoType::Write | IoType::ZoneAppend => self.forward_data(ch, io),
            IoType::GetZoneInfo => self.zone_report(io),
            IoType::ZoneManagement => self.zone_management(ch, io),
            _ => io.complete_deferred(IoStatus::Failed),
        }
    }

    /// SPDK's set: reads, writes, zone appends, zone reports and zone
    /// management.
    fn io_type_supported(&self, io_type: IoType) -> bool {
        match io_type {
            IoType::Read => self.stacked.supports(IoType::Read),
            IoType::Write | IoType::ZoneAppend => self.stacked.supports(IoType::Write),
            IoType::GetZoneInfo | IoType::ZoneManagement => true,
            _ => false,
        }
    }

    fn destruct(&self, done: Done) {
        self.stacked.close(done);
    }

    fn dump_info_json(&self) -> Value {
        let s = &self.stacked;
        json!({"zoned_block": {
            "name": s.name(),
            "base_bdev": s.base_bdev().name(),
            "zone_capacity": self.zones.capacity(),
            "optimal_open_zones": self.optimal_open_zones,
        }})
    }
}

#[cfg(test)]
mod tests {
    use super::zone_size_of;

    #[test]
    fn zone_size_is_the_next_power_of_two() {
        assert_eq!(zone_size_of(1), Some(1));
        assert_eq!(zone_size_of(1000), Some(1024));
        assert_eq!(zone_size_of(4096), Some(4096));
        assert_eq!(zone_size_of(u64::MAX), None);
    }
}
