//! Zoned block devices: the geometry a zoned bdev declares, what a zone
//! report says of each zone, and the zone management actions — SPDK's zone
//! API (`spdk_bdev_zone_info`, `spdk_bdev_zone_action`) in Rust types.
//!
//! A zoned bdev is split into zones of `zone_size` blocks (zone *n* starts
//! at block `n * zone_size`; its id is that first block). In a zone that
//! must be written sequentially, a write must start at the zone's write
//! pointer and stay within its `capacity` (which may be less than the zone
//! size); a zone append names the zone, and the device picks the blocks and
//! reports where it wrote ([`BdevIo::zone_append_lba`](crate::bdev::BdevIo::zone_append_lba)).
//!
//! A zone report ([`BdevIo::get_zone_info`](crate::bdev::BdevIo::get_zone_info))
//! comes back in the I/O's data buffer as [`ZONE_INFO_SIZE`]-byte records,
//! which [`ZoneInfo::decode_all`] reads; a module writes them with
//! [`ZoneInfo::encode`] (or `ModuleIo::copy_zone_infos`).

use std::fmt;

use super::types::IoStatus;
pub use super::types::ZoneGeometry;

/// A zone's condition (the ZNS zone states; SPDK's `spdk_bdev_zone_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ZoneState {
    /// Written nowhere; the write pointer is at the zone's start.
    Empty = 0,
    /// Opened by a write.
    ImplicitOpen = 1,
    /// Written up to its capacity (or finished).
    Full = 2,
    /// Closed: written partly, holding no open resource.
    Closed = 3,
    /// Readable, not writable.
    ReadOnly = 4,
    /// Neither readable nor writable.
    Offline = 5,
    /// Opened by an open command.
    ExplicitOpen = 6,
}

impl ZoneState {
    /// Every state, in code order.
    pub const ALL: [ZoneState; 7] = [
        ZoneState::Empty,
        ZoneState::ImplicitOpen,
        ZoneState::Full,
        ZoneState::Closed,
        ZoneState::ReadOnly,
        ZoneState::Offline,
        ZoneState::ExplicitOpen,
    ];

    /// The state of code `c`.
    #[must_use]
    pub fn from_code(c: u8) -> Option<Self> {
        Self::ALL.get(usize::from(c)).copied()
    }

    /// Whether the zone is open (implicitly or explicitly).
    #[must_use]
    pub fn is_open(self) -> bool {
        matches!(self, ZoneState::ImplicitOpen | ZoneState::ExplicitOpen)
    }

    /// Lower-case name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ZoneState::Empty => "empty",
            ZoneState::ImplicitOpen => "implicit_open",
            ZoneState::Full => "full",
            ZoneState::Closed => "closed",
            ZoneState::ReadOnly => "read_only",
            ZoneState::Offline => "offline",
            ZoneState::ExplicitOpen => "explicit_open",
        }
    }
}

impl fmt::Display for ZoneState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a zone may be written (the ZNS zone types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ZoneType {
    /// Writes must start at the write pointer.
    SequentialWriteRequired = 2,
    /// Writes should start at the write pointer.
    SequentialWritePreferred = 3,
    /// Written anywhere, like a conventional device.
    Conventional = 1,
}

impl ZoneType {
    fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(ZoneType::Conventional),
            2 => Some(ZoneType::SequentialWriteRequired),
            3 => Some(ZoneType::SequentialWritePreferred),
            _ => None,
        }
    }
}

/// What a zone report says of one zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneInfo {
    /// The zone's first block.
    pub zone_id: u64,
    /// The next block a write must start at.
    pub write_pointer: u64,
    /// Writable blocks in the zone (at most the zone size).
    pub capacity: u64,
    /// Its condition.
    pub state: ZoneState,
    /// How it may be written.
    pub zone_type: ZoneType,
}

/// Bytes of one record of a zone report in an I/O's buffer.
pub const ZONE_INFO_SIZE: usize = 32;

impl ZoneInfo {
    /// The record: zone id, write pointer and capacity (little-endian
    /// u64s), state code, type code, six zero bytes.
    #[must_use]
    pub fn encode(&self) -> [u8; ZONE_INFO_SIZE] {
        let mut b = [0u8; ZONE_INFO_SIZE];
        b[0..8].copy_from_slice(&self.zone_id.to_le_bytes());
        b[8..16].copy_from_slice(&self.write_pointer.to_le_bytes());
        b[16..24].copy_from_slice(&self.capacity.to_le_bytes());
        b[24] = self.state as u8;
        b[25] = self.zone_type as u8;
        b
    }

    /// Reads one record; `None` when it is short or its codes are unknown.
    #[must_use]
    pub fn decode(b: &[u8]) -> Option<ZoneInfo> {
        let b = b.get(..ZONE_INFO_SIZE)?;
        let u = |r: std::ops::Range<usize>| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[r]);
            u64::from_le_bytes(w)
        };
        Some(ZoneInfo {
            zone_id: u(0..8),
            write_pointer: u(8..16),
            capacity: u(16..24),
            state: ZoneState::from_code(b[24])?,
            zone_type: ZoneType::from_code(b[25])?,
        })
    }

    /// The first `num_zones` records of a zone report's buffer; `None`
    /// when the buffer is short or a record is malformed.
    #[must_use]
    pub fn decode_all(buf: &[u8], num_zones: usize) -> Option<Vec<ZoneInfo>> {
        (0..num_zones)
            .map(|n| ZoneInfo::decode(buf.get(n.checked_mul(ZONE_INFO_SIZE)?..)?))
            .collect()
    }
}

/// A zone management action (SPDK's `spdk_bdev_zone_action`, same codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ZoneAction {
    /// Closes an open zone.
    Close = 0,
    /// Moves the write pointer to the end: the zone becomes full.
    Finish = 1,
    /// Opens a zone explicitly.
    Open = 2,
    /// Empties a zone: the write pointer back at its start.
    Reset = 3,
    /// Takes a zone offline.
    Offline = 4,
}

impl ZoneAction {
    /// Every action, in code order.
    pub const ALL: [ZoneAction; 5] = [
        ZoneAction::Close,
        ZoneAction::Finish,
        ZoneAction::Open,
        ZoneAction::Reset,
        ZoneAction::Offline,
    ];

    /// The action of code `c`.
    #[must_use]
    pub fn from_code(c: u64) -> Option<Self> {
        Self::ALL.get(usize::try_from(c).ok()?).copied()
    }

    /// Lower-case name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ZoneAction::Close => "close",
            ZoneAction::Finish => "finish",
            ZoneAction::Open => "open",
            ZoneAction::Reset => "reset",
            ZoneAction::Offline => "offline",
        }
    }
}

impl fmt::Display for ZoneAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a zone refused an I/O: the ZNS command set's status codes (NVMe
/// status code type 1, command specific), which a zoned bdev completes
/// with ([`ZoneError::status`]) so that they reach an NVMe-oF host as
/// they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ZoneError {
    /// The I/O crosses the end of its zone (Zoned Boundary Error).
    #[error("the I/O crosses a zone boundary")]
    Boundary,
    /// The zone is full (Zone Is Full).
    #[error("the zone is full")]
    Full,
    /// The zone is read-only (Zone Is Read Only).
    #[error("the zone is read-only")]
    ReadOnly,
    /// The zone is offline (Zone Is Offline).
    #[error("the zone is offline")]
    Offline,
    /// A write not at the write pointer (Zone Invalid Write).
    #[error("the write does not start at the zone's write pointer")]
    InvalidWrite,
    /// More zones would be active than allowed (Too Many Active Zones).
    #[error("too many active zones")]
    TooManyActive,
    /// More zones would be open than allowed (Too Many Open Zones).
    #[error("too many open zones")]
    TooManyOpen,
    /// The action is not allowed in the zone's state (Invalid Zone State
    /// Transition).
    #[error("invalid zone state transition")]
    InvalidTransition,
}

impl ZoneError {
    /// The NVMe status code (type 1, command specific).
    #[must_use]
    pub fn status_code(self) -> u8 {
        match self {
            ZoneError::Boundary => 0xb8,
            ZoneError::Full => 0xb9,
            ZoneError::ReadOnly => 0xba,
            ZoneError::Offline => 0xbb,
            ZoneError::InvalidWrite => 0xbc,
            ZoneError::TooManyActive => 0xbd,
            ZoneError::TooManyOpen => 0xbe,
            ZoneError::InvalidTransition => 0xbf,
        }
    }

    /// The I/O status a zoned bdev completes with.
    #[must_use]
    pub fn status(self) -> IoStatus {
        IoStatus::Nvme {
            sct: 1,
            sc: self.status_code(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_malformed_ones_are_refused() {
        let z = ZoneInfo {
            zone_id: 4096,
            write_pointer: 4100,
            capacity: 4000,
            state: ZoneState::ImplicitOpen,
            zone_type: ZoneType::SequentialWriteRequired,
        };
        let mut buf = z.encode().to_vec();
        assert_eq!(ZoneInfo::decode(&buf), Some(z));
        buf.extend_from_slice(&z.encode());
        assert_eq!(ZoneInfo::decode_all(&buf, 2), Some(vec![z, z]));
        assert_eq!(ZoneInfo::decode_all(&buf, 3), None, "short buffer");
        buf[24] = 9;
        assert_eq!(ZoneInfo::decode(&buf), None, "unknown state");
        buf[24] = 0;
        buf[25] = 0;
        assert_eq!(ZoneInfo::decode(&buf), None, "unknown type");
    }

    #[test]
    fn codes_and_geometry() {
        for s in ZoneState::ALL {
            assert_eq!(ZoneState::from_code(s as u8), Some(s));
        }
        for a in ZoneAction::ALL {
            assert_eq!(ZoneAction::from_code(a as u64), Some(a));
        }
        assert_eq!(ZoneAction::from_code(5), None);
        let g = ZoneGeometry::new(256);
        assert_eq!((g.num_zones(1024), g.zone_start(700)), (4, 512));
        assert!(g.validate(1024).is_ok());
        assert!(g.validate(1000).is_err());
        assert!(g.validate(0).is_err());
        assert!(ZoneGeometry::new(0).validate(1024).is_err());
    }
}
