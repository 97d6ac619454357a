//! Plain types shared by the consumer and module sides of the bdev API.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// I/O types, in SPDK's order (`enum spdk_bdev_io_type`, 1..=22).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum IoType {
    /// Read blocks.
    Read = 1,
    /// Write blocks.
    Write,
    /// Deallocate blocks.
    Unmap,
    /// Make previous writes durable.
    Flush,
    /// Abort outstanding I/O and reset the device.
    Reset,
    /// NVMe admin passthrough.
    NvmeAdmin,
    /// NVMe I/O passthrough.
    NvmeIo,
    /// NVMe I/O passthrough with metadata.
    NvmeIoMd,
    /// Write zeroes (emulated with writes where the module lacks it).
    WriteZeroes,
    /// Zero-copy (not used by bdevkit modules yet).
    Zcopy,
    /// Zoned: get zone info.
    GetZoneInfo,
    /// Zoned: zone management.
    ZoneManagement,
    /// Zoned: zone append.
    ZoneAppend,
    /// Compare blocks with a buffer.
    Compare,
    /// Atomic compare then write.
    CompareAndWrite,
    /// Abort one outstanding I/O.
    Abort,
    /// Seek to the next hole.
    SeekHole,
    /// Seek to the next data.
    SeekData,
    /// Copy blocks inside the bdev.
    Copy,
    /// NVMe I/O passthrough with separate metadata iovecs.
    NvmeIovMd,
    /// NVM subsystem reset.
    NvmeNssr,
    /// Write uncorrectable.
    WriteUncorrectable,
}

impl IoType {
    /// Every type, in SPDK's order (the order of `supported_io_types`).
    pub const ALL: [IoType; 22] = [
        IoType::Read,
        IoType::Write,
        IoType::Unmap,
        IoType::Flush,
        IoType::Reset,
        IoType::NvmeAdmin,
        IoType::NvmeIo,
        IoType::NvmeIoMd,
        IoType::WriteZeroes,
        IoType::Zcopy,
        IoType::GetZoneInfo,
        IoType::ZoneManagement,
        IoType::ZoneAppend,
        IoType::Compare,
        IoType::CompareAndWrite,
        IoType::Abort,
        IoType::SeekHole,
        IoType::SeekData,
        IoType::Copy,
        IoType::NvmeIovMd,
        IoType::NvmeNssr,
        IoType::WriteUncorrectable,
    ];

    /// SPDK's name (`supported_io_types` keys).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            IoType::Read => "read",
            IoType::Write => "write",
            IoType::Unmap => "unmap",
            IoType::Flush => "flush",
            IoType::Reset => "reset",
            IoType::NvmeAdmin => "nvme_admin",
            IoType::NvmeIo => "nvme_io",
            IoType::NvmeIoMd => "nvme_io_md",
            IoType::WriteZeroes => "write_zeroes",
            IoType::Zcopy => "zcopy",
            IoType::GetZoneInfo => "get_zone_info",
            IoType::ZoneManagement => "zone_management",
            IoType::ZoneAppend => "zone_append",
            IoType::Compare => "compare",
            IoType::CompareAndWrite => "compare_and_write",
            IoType::Abort => "abort",
            IoType::SeekHole => "seek_hole",
            IoType::SeekData => "seek_data",
            IoType::Copy => "copy",
            IoType::NvmeIovMd => "nvme_iov_md",
            IoType::NvmeNssr => "nvme_nssr",
            IoType::WriteUncorrectable => "write_uncorrectable",
        }
    }

    /// Bit in a supported-types mask.
    #[inline]
    #[must_use]
    pub fn bit(self) -> u32 {
        1 << (self as u8)
    }

    /// Whether the type modifies data (needs a writable descriptor).
    #[inline]
    #[must_use]
    pub fn is_write(self) -> bool {
        WRITE_TYPES & self.bit() != 0
    }

    /// Whether the I/O addresses a block range that must lie inside the bdev.
    #[inline]
    #[must_use]
    pub fn has_range(self) -> bool {
        RANGE_TYPES & self.bit() != 0
    }

    /// Whether the type is one a plain block device serves (RAM, a part of
    /// another bdev): read, write, write zeroes, unmap, flush, reset,
    /// compare, compare-and-write, copy and abort.
    #[inline]
    #[must_use]
    pub fn is_block_io(self) -> bool {
        BLOCK_TYPES & self.bit() != 0
    }

    /// Whether the I/O carries a data buffer of `num_blocks` blocks.
    #[inline]
    #[must_use]
    pub fn has_data(self) -> bool {
        DATA_TYPES & self.bit() != 0
    }
}

const fn mask(types: &[IoType]) -> u32 {
    let mut m = 0;
    let mut i = 0;
    while i < types.len() {
        m |= 1 << (types[i] as u8);
        i += 1;
    }
    m
}

/// Types a plain block device serves ([`IoType::is_block_io`]).
const BLOCK_TYPES: u32 = mask(&[
    IoType::Read,
    IoType::Write,
    IoType::WriteZeroes,
    IoType::Unmap,
    IoType::Flush,
    IoType::Reset,
    IoType::Compare,
    IoType::CompareAndWrite,
    IoType::Copy,
    IoType::Abort,
]);

/// Types that need a writable descriptor.
pub(crate) const WRITE_TYPES: u32 = mask(&[
    IoType::Write,
    IoType::Unmap,
    IoType::WriteZeroes,
    IoType::CompareAndWrite,
    IoType::Copy,
    IoType::ZoneAppend,
    IoType::ZoneManagement,
    IoType::WriteUncorrectable,
    IoType::NvmeIo,
    IoType::NvmeIoMd,
    IoType::NvmeIovMd,
    IoType::NvmeAdmin,
    IoType::NvmeNssr,
]);

/// Types whose block range is checked against the bdev size.
pub(crate) const RANGE_TYPES: u32 = mask(&[
    IoType::Read,
    IoType::Write,
    IoType::Unmap,
    IoType::Flush,
    IoType::WriteZeroes,
    IoType::Compare,
    IoType::CompareAndWrite,
    IoType::Copy,
    IoType::WriteUncorrectable,
]);

/// The zone types: served only by a bdev with a zone geometry.
pub(crate) const ZONE_TYPES: u32 = mask(&[
    IoType::GetZoneInfo,
    IoType::ZoneManagement,
    IoType::ZoneAppend,
]);

/// Types that carry `num_blocks` of data.
pub(crate) const DATA_TYPES: u32 = mask(&[
    IoType::Read,
    IoType::Write,
    IoType::Compare,
    IoType::CompareAndWrite,
]);

impl fmt::Display for IoType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How an I/O ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoStatus {
    /// Not completed yet.
    #[default]
    Pending,
    /// Completed successfully.
    Success,
    /// Failed, no more detail.
    Failed,
    /// Failed with an errno (SPDK's `aio_error`), positive.
    Errno(i32),
    /// Failed with an NVMe status.
    Nvme {
        /// Status code type.
        sct: u8,
        /// Status code.
        sc: u8,
    },
    /// Out of resources: the bdev layer queues and retries it; a consumer
    /// sees it only when it bypasses the retry.
    NoMem,
    /// Compare found different data.
    Miscompare,
    /// Aborted (reset, hot remove, abort request).
    Aborted,
    /// The first command of a fused pair failed.
    FirstFusedFailed,
}

impl IoStatus {
    /// Whether the I/O succeeded.
    #[must_use]
    pub fn is_success(self) -> bool {
        self == IoStatus::Success
    }

    /// The bdev status of an NVMe completion status (status code type
    /// `sct`, status code `sc`), as SPDK maps it: generic success is
    /// `Success`, a compare failure (media errors, 0x85) `Miscompare`, an
    /// abort by request (generic 0x07) `Aborted`, a failed fused command
    /// (generic 0x09) `FirstFusedFailed`; anything else keeps its code in
    /// `Nvme`. Every NVMe module maps its completions with this.
    #[must_use]
    pub fn from_nvme(sct: u8, sc: u8) -> IoStatus {
        match (sct, sc) {
            (0, 0x00) => IoStatus::Success,
            (0, 0x07) => IoStatus::Aborted,
            (0, 0x09) => IoStatus::FirstFusedFailed,
            (2, 0x85) => IoStatus::Miscompare,
            _ => IoStatus::Nvme { sct, sc },
        }
    }

    /// The errno for a failure (0 on success/pending).
    #[must_use]
    pub fn errno(self) -> i32 {
        match self {
            IoStatus::Success | IoStatus::Pending => 0,
            IoStatus::Errno(e) => e,
            IoStatus::NoMem => libc::ENOMEM,
            IoStatus::Miscompare => libc::EILSEQ,
            IoStatus::Aborted => libc::ECANCELED,
            IoStatus::Failed | IoStatus::Nvme { .. } | IoStatus::FirstFusedFailed => libc::EIO,
        }
    }
}

/// Events delivered to descriptor holders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BdevEvent {
    /// The bdev is being removed: close the descriptor.
    Remove,
    /// The block count changed.
    Resize,
    /// Media management event (NVMe).
    MediaManagement,
}

/// Claim types (SPDK's v1 `exclusive_write` and the three v2 types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimType {
    /// One claimant, which becomes a writer; no other claim allowed.
    ExclusiveWrite,
    /// The claiming descriptor is the only writer; readers allowed.
    ReadManyWriteOne,
    /// Nobody writes; shared among read-only claimants.
    ReadManyWriteNone,
    /// Writers that present the same non-zero key share the claim.
    ReadManyWriteShared {
        /// Shared claim key.
        key: u64,
    },
}

impl ClaimType {
    /// SPDK's name as reported by `bdev_get_bdevs`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ClaimType::ExclusiveWrite => "exclusive_write",
            ClaimType::ReadManyWriteOne => "read_many_write_one",
            ClaimType::ReadManyWriteNone => "read_many_write_none",
            ClaimType::ReadManyWriteShared { .. } => "read_many_write_shared",
        }
    }
}

/// Properties a module declares when registering a bdev.
#[derive(Debug, Clone)]
pub struct BdevProps {
    /// Unique name.
    pub name: String,
    /// Extra names.
    pub aliases: Vec<String>,
    /// UUID; generated when `None`.
    pub uuid: Option<Uuid>,
    /// `product_name` of `bdev_get_bdevs`.
    pub product_name: String,
    /// Logical block size in bytes (data + interleaved metadata).
    pub block_size: u32,
    /// Number of blocks.
    pub num_blocks: u64,
    /// Physical block size (0 = block size).
    pub phys_block_size: u32,
    /// log2 of the buffer alignment the module needs (0 = none).
    pub required_alignment: u8,
    /// Boundary in blocks I/O should not cross (0 = none).
    pub optimal_io_boundary: u32,
    /// Split I/O on `optimal_io_boundary`.
    pub split_on_optimal_io_boundary: bool,
    /// Atomic write unit in blocks (0 = 1).
    pub write_unit_size: u32,
    /// The write unit is mandatory: the bdev layer splits writes on
    /// multiples of `write_unit_size` (instead of `optimal_io_boundary`)
    /// and fails a write whose offset or length is not a multiple of it.
    pub split_on_write_unit: bool,
    /// Largest iovec segment in bytes (0 = no limit).
    pub max_segment_size: u32,
    /// Most iovec segments per I/O (0 = no limit).
    pub max_num_segments: u32,
    /// Largest read/write in blocks (0 = no limit).
    pub max_rw_size: u32,
    /// The module tests itself, on its own submission path, whether a
    /// read or write fits the limits above (`required_alignment`,
    /// `max_rw_size`, the segment limits, the boundaries), and hands one
    /// that may not back with
    /// [`ModuleIo::fit_to_limits`](crate::bdev::module::ModuleIo::fit_to_limits):
    /// the bdev layer then passes reads and writes on without a test of
    /// its own. For a module whose fast path checks the same things
    /// anyway (the NVMe driver's PRP1/PRP2 case), so that the common I/O
    /// is tested once.
    pub module_checks_fit: bool,
    /// Largest unmap in blocks (0 = no limit).
    pub max_unmap: u32,
    /// Largest write_zeroes in blocks (0 = no limit).
    pub max_write_zeroes: u32,
    /// Largest copy in blocks (0 = no limit).
    pub max_copy: u32,
    /// Volatile write cache present (flush matters).
    pub write_cache: bool,
    /// Metadata bytes per block.
    pub md_size: u32,
    /// Metadata interleaved with data.
    pub md_interleave: bool,
    /// DIF type (0-3).
    pub dif_type: u32,
    /// DIF at the head of metadata.
    pub dif_is_head_of_md: bool,
    /// DIF PI format.
    pub dif_pi_format: u32,
    /// NUMA node, when the module knows it.
    pub numa_id: Option<i32>,
    /// Preferred write alignment (blocks, 0 = not reported).
    pub preferred_write_alignment: u32,
    /// Preferred write granularity (blocks).
    pub preferred_write_granularity: u32,
    /// Optimal write size (blocks).
    pub optimal_write_size: u32,
    /// Preferred unmap alignment (blocks).
    pub preferred_unmap_alignment: u32,
    /// Preferred unmap granularity (blocks).
    pub preferred_unmap_granularity: u32,
    /// The zone layout of a zoned bdev (`None`: a conventional one). A
    /// zoned bdev serves zone info and zone management (and may serve
    /// zone append); a bdev without zones never gets zone I/O.
    pub zoned: Option<ZoneGeometry>,
}

impl BdevProps {
    /// Properties with the given name, product, geometry and defaults
    /// elsewhere.
    #[must_use]
    pub fn new(
        name: impl Into<String>,
        product_name: impl Into<String>,
        block_size: u32,
        num_blocks: u64,
    ) -> Self {
        BdevProps {
            name: name.into(),
            aliases: Vec::new(),
            uuid: None,
            product_name: product_name.into(),
            block_size,
            num_blocks,
            phys_block_size: 0,
            required_alignment: 0,
            optimal_io_boundary: 0,
            split_on_optimal_io_boundary: false,
            write_unit_size: 0,
            split_on_write_unit: false,
            max_segment_size: 0,
            max_num_segments: 0,
            max_rw_size: 0,
            module_checks_fit: false,
            max_unmap: 0,
            max_write_zeroes: 0,
            max_copy: 0,
            write_cache: false,
            md_size: 0,
            md_interleave: false,
            dif_type: 0,
            dif_is_head_of_md: false,
            dif_pi_format: 0,
            numa_id: None,
            preferred_write_alignment: 0,
            preferred_write_granularity: 0,
            optimal_write_size: 0,
            preferred_unmap_alignment: 0,
            preferred_unmap_granularity: 0,
            zoned: None,
        }
    }
}

/// An NVMe command for passthrough I/O (64 bytes, the submission entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvmeCmd {
    /// The sixteen command dwords.
    pub cdw: [u32; 16],
}

/// The zone layout a zoned bdev declares in its
/// [`BdevProps::zoned`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneGeometry {
    /// Blocks per zone (the bdev's size is a whole number of zones).
    pub zone_size: u64,
    /// Most zones open at once (0 = no limit).
    pub max_open_zones: u32,
    /// Most zones open or closed at once (0 = no limit).
    pub max_active_zones: u32,
    /// Zones the device serves best open at once.
    pub optimal_open_zones: u32,
    /// Largest zone append in blocks (0 = no limit but the zone).
    pub max_zone_append_size: u32,
}

impl ZoneGeometry {
    /// Zones of `zone_size` blocks, no other limits, one optimal open zone.
    #[must_use]
    pub fn new(zone_size: u64) -> Self {
        ZoneGeometry {
            zone_size,
            max_open_zones: 0,
            max_active_zones: 0,
            optimal_open_zones: 1,
            max_zone_append_size: 0,
        }
    }

    /// The number of zones of a bdev of `num_blocks` blocks.
    #[must_use]
    pub fn num_zones(&self, num_blocks: u64) -> u64 {
        num_blocks.checked_div(self.zone_size).unwrap_or(0)
    }

    /// The id (first block) of the zone holding `lba`.
    #[must_use]
    pub fn zone_start(&self, lba: u64) -> u64 {
        lba - lba % self.zone_size.max(1)
    }

    /// Whether this geometry fits a bdev of `num_blocks` blocks: a
    /// non-zero zone size that divides the bdev, at least one zone.
    pub(crate) fn validate(&self, num_blocks: u64) -> Result<(), String> {
        if self.zone_size == 0 {
            return Err("zone size must not be zero".into());
        }
        if num_blocks == 0 || !num_blocks.is_multiple_of(self.zone_size) {
            return Err(format!(
                "{num_blocks} blocks are not a whole number of zones of {} blocks",
                self.zone_size
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvme_status_maps_as_spdk_and_keeps_the_code() {
        assert_eq!(IoStatus::from_nvme(0, 0), IoStatus::Success);
        assert_eq!(IoStatus::from_nvme(0, 0x07), IoStatus::Aborted);
        assert_eq!(IoStatus::from_nvme(0, 0x09), IoStatus::FirstFusedFailed);
        assert_eq!(IoStatus::from_nvme(2, 0x85), IoStatus::Miscompare);
        let invalid_opcode = IoStatus::from_nvme(0, 0x01);
        assert_eq!(invalid_opcode, IoStatus::Nvme { sct: 0, sc: 1 });
        assert_eq!(invalid_opcode.errno(), libc::EIO);
        assert_eq!(
            IoStatus::from_nvme(1, 0x80),
            IoStatus::Nvme { sct: 1, sc: 0x80 }
        );
    }

    #[test]
    fn block_io_types_are_the_plain_device_set() {
        let block: Vec<IoType> = IoType::ALL
            .into_iter()
            .filter(|t| t.is_block_io())
            .collect();
        assert_eq!(block.len(), 10);
        assert!(!IoType::NvmeIo.is_block_io() && !IoType::ZoneAppend.is_block_io());
    }
}
