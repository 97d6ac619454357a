//! SPDK's on-disk raid superblock (`bdev_raid_create -s`), so that arrays
//! move between SPDK and bdevkit.
//!
//! Every member of a superblock raid carries a copy at its block 0. The
//! raid's data starts at each member's `data_offset` (1 MiB by default,
//! rounded up to the member's optimal I/O boundary), so the copy never
//! meets data. The layout, all little-endian:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | signature `SPDKRAID` |
//! | 8 | 2 + 2 | version major (1), minor (0) |
//! | 12 | 4 | length of the whole superblock in bytes |
//! | 16 | 4 | CRC-32C of those bytes with this field zero (seed 0, no final xor) |
//! | 20 | 4 | flags |
//! | 24 | 16 | raid UUID |
//! | 40 | 64 | raid name, NUL-terminated |
//! | 104 | 8 | raid size in blocks |
//! | 112 | 4 | block size |
//! | 116 | 4 | level (0 raid0, 1 raid1, 95 raid5f, 99 concat) |
//! | 120 | 4 | strip size in blocks |
//! | 124 | 4 | state (SPDK writes 0) |
//! | 128 | 8 | sequence number, raised by every write |
//! | 136 | 1 | number of members |
//! | 137 | 118 | reserved |
//! | 255 | 1 | number of member entries that follow |
//! | 256 | 64 × n | member entries |
//!
//! A member entry: UUID (16), data offset and data size in blocks (8 + 8),
//! state (4: 0 missing, 1 configured, 2 failed, 3 spare), flags (4), slot
//! (1), 23 reserved bytes.
//!
//! A member is in sync exactly when its entry says *configured*: a member
//! that was removed, failed an I/O or is being rebuilt is written as
//! missing or failed (with its UUID, so that examine knows it when it
//! comes back), never as configured.
//!
//! This file only encodes and decodes; it is the bottom layer with
//! `config.rs` and names no other file of the crate.

use uuid::Uuid;

use crate::config::RaidLevel;

/// The signature at byte 0.
pub const SIGNATURE: &[u8; 8] = b"SPDKRAID";
/// Major version written and accepted.
pub const VERSION_MAJOR: u16 = 1;
/// Minor version written (higher minors are read, with a warning).
pub const VERSION_MINOR: u16 = 0;
/// Size of the fixed header.
pub const HEADER_LEN: usize = 256;
/// Size of one member entry.
pub const ENTRY_LEN: usize = 64;
/// Largest superblock: the header and 255 entries.
pub const MAX_LEN: usize = HEADER_LEN + 255 * ENTRY_LEN;
/// Where a member's data starts by default, in bytes (SPDK's
/// `RAID_BDEV_MIN_DATA_OFFSET_SIZE`).
pub const MIN_DATA_OFFSET_BYTES: u64 = 1024 * 1024;
/// Length of the name field, NUL included.
const NAME_LEN: usize = 64;

/// A member entry's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SbMemberState {
    /// Removed (or never there): not in sync.
    Missing,
    /// In sync: its data is the raid's.
    Configured,
    /// Failed an I/O: not in sync.
    Failed,
    /// A spare (SPDK defines it and uses it nowhere): not in sync.
    Spare,
}

impl SbMemberState {
    fn code(self) -> u32 {
        match self {
            SbMemberState::Missing => 0,
            SbMemberState::Configured => 1,
            SbMemberState::Failed => 2,
            SbMemberState::Spare => 3,
        }
    }

    fn from_code(c: u32) -> Option<SbMemberState> {
        Some(match c {
            0 => SbMemberState::Missing,
            1 => SbMemberState::Configured,
            2 => SbMemberState::Failed,
            3 => SbMemberState::Spare,
            _ => return None,
        })
    }
}

/// One member entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SbMember {
    /// The member bdev's UUID (nil: the slot never had one).
    pub uuid: Uuid,
    /// First block of the raid's data on the member.
    pub data_offset: u64,
    /// Blocks of the raid's data on the member.
    pub data_size: u64,
    /// In sync or not.
    pub state: SbMemberState,
    /// Flags (SPDK defines none; kept as read).
    pub flags: u32,
    /// The member's slot in the raid.
    pub slot: u8,
}

/// A decoded superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// Flags (none defined; kept as read).
    pub flags: u32,
    /// Minor version as read (written as [`VERSION_MINOR`]).
    pub minor: u16,
    /// The raid's UUID (never nil).
    pub uuid: Uuid,
    /// The raid's name.
    pub name: String,
    /// The raid bdev's size in blocks.
    pub raid_size: u64,
    /// Block size (data bytes) of the raid and every member.
    pub block_size: u32,
    /// Level.
    pub level: RaidLevel,
    /// Strip size in blocks (0 for raid1).
    pub strip_size: u32,
    /// Raid state field (SPDK leaves it 0; kept as read).
    pub state: u32,
    /// Raised by every write; the highest copy wins.
    pub seq_number: u64,
    /// Slots of the raid.
    pub num_base_bdevs: u8,
    /// The entries, one per slot in slot order when we write them.
    pub members: Vec<SbMember>,
    /// Reserved header bytes as read, written back unchanged.
    pub reserved: Vec<u8>,
}

/// Why a block 0 holds no usable superblock.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SbError {
    /// No signature: not a raid member.
    #[error("no raid superblock")]
    NoSignature,
    /// The superblock is longer than what was read; read this many bytes.
    #[error("superblock longer than the bytes read")]
    Short(usize),
    /// Signature present but the rest is unusable.
    #[error("bad raid superblock: {0}")]
    Bad(&'static str),
    /// A major version this build does not read.
    #[error("raid superblock major version {0} is not supported")]
    Version(u16),
}

fn level_code(l: RaidLevel) -> u32 {
    match l {
        RaidLevel::Raid0 => 0,
        RaidLevel::Raid1 => 1,
        RaidLevel::Raid5f => 95,
        RaidLevel::Concat => 99,
    }
}

fn level_from(c: u32) -> Option<RaidLevel> {
    Some(match c {
        0 => RaidLevel::Raid0,
        1 => RaidLevel::Raid1,
        95 => RaidLevel::Raid5f,
        99 => RaidLevel::Concat,
        _ => return None,
    })
}

/// SPDK's `spdk_crc32c_update(buf, len, 0)`: CRC-32C from seed 0 without
/// the usual inversions (the crate's form inverts on the way in and out).
fn crc(bytes: &[u8]) -> u32 {
    !crc32c::crc32c_append(!0, bytes)
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

fn uuid_at(b: &[u8], o: usize) -> Uuid {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[o..o + 16]);
    // SPDK's struct spdk_uuid is the 16 bytes in RFC 4122 order.
    Uuid::from_bytes(a)
}

impl Superblock {
    /// Length in bytes of the encoded superblock.
    #[must_use]
    pub fn len(&self) -> usize {
        HEADER_LEN + ENTRY_LEN * self.members.len()
    }

    /// Whether it has no member entries (never true for one we made).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Blocks of `block_size` bytes the encoded superblock takes.
    #[must_use]
    pub fn blocks(&self, block_size: u32) -> u64 {
        (self.len() as u64).div_ceil(u64::from(block_size.max(1)))
    }

    /// The entry of slot `slot`.
    #[must_use]
    pub fn member(&self, slot: usize) -> Option<&SbMember> {
        self.members.iter().find(|m| usize::from(m.slot) == slot)
    }

    /// The entry of slot `slot`, for changing.
    pub fn member_mut(&mut self, slot: usize) -> Option<&mut SbMember> {
        self.members
            .iter_mut()
            .find(|m| usize::from(m.slot) == slot)
    }

    /// The entry naming member `uuid`.
    #[must_use]
    pub fn member_by_uuid(&self, uuid: Uuid) -> Option<&SbMember> {
        self.members
            .iter()
            .find(|m| m.uuid == uuid && !uuid.is_nil())
    }

    /// Slots whose entry says configured.
    #[must_use]
    pub fn configured(&self) -> usize {
        self.members
            .iter()
            .filter(|m| m.state == SbMemberState::Configured)
            .count()
    }

    /// Encodes the superblock into `blocks(block_size)` whole blocks,
    /// the CRC computed (the sequence number is written as it is).
    #[must_use]
    pub fn encode(&self, block_size: u32) -> Vec<u8> {
        let len = self.len();
        let total = usize::try_from(self.blocks(block_size) * u64::from(block_size.max(1)))
            .unwrap_or(len)
            .max(len);
        let mut b = vec![0u8; total];
        b[0..8].copy_from_slice(SIGNATURE);
        b[8..10].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
        b[10..12].copy_from_slice(&VERSION_MINOR.to_le_bytes());
        let len32 = u32::try_from(len).unwrap_or(u32::MAX);
        b[12..16].copy_from_slice(&len32.to_le_bytes());
        b[20..24].copy_from_slice(&self.flags.to_le_bytes());
        b[24..40].copy_from_slice(self.uuid.as_bytes());
        let name = self.name.as_bytes();
        let n = name.len().min(NAME_LEN - 1);
        b[40..40 + n].copy_from_slice(&name[..n]);
        b[104..112].copy_from_slice(&self.raid_size.to_le_bytes());
        b[112..116].copy_from_slice(&self.block_size.to_le_bytes());
        b[116..120].copy_from_slice(&level_code(self.level).to_le_bytes());
        b[120..124].copy_from_slice(&self.strip_size.to_le_bytes());
        b[124..128].copy_from_slice(&self.state.to_le_bytes());
        b[128..136].copy_from_slice(&self.seq_number.to_le_bytes());
        b[136] = self.num_base_bdevs;
        if self.reserved.len() == 118 {
            b[137..255].copy_from_slice(&self.reserved);
        }
        b[255] = u8::try_from(self.members.len()).unwrap_or(u8::MAX);
        for (i, m) in self.members.iter().enumerate() {
            let o = HEADER_LEN + i * ENTRY_LEN;
            b[o..o + 16].copy_from_slice(m.uuid.as_bytes());
            b[o + 16..o + 24].copy_from_slice(&m.data_offset.to_le_bytes());
            b[o + 24..o + 32].copy_from_slice(&m.data_size.to_le_bytes());
            b[o + 32..o + 36].copy_from_slice(&m.state.code().to_le_bytes());
            b[o + 36..o + 40].copy_from_slice(&m.flags.to_le_bytes());
            b[o + 40] = m.slot;
        }
        let c = crc(&b[..len]);
        b[16..20].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes the superblock at the start of `b` (what was read from a
    /// member's first blocks). Checks everything a damaged or hostile
    /// copy could get wrong: signature, length, CRC, version, level,
    /// block size, UUIDs, slots (each in range, none twice), name.
    ///
    /// # Errors
    ///
    /// [`SbError::NoSignature`] for a bdev that is no raid member,
    /// [`SbError::Short`] when the superblock goes on past `b` (read
    /// that many bytes and decode again), [`SbError::Bad`] or
    /// [`SbError::Version`] for a copy that must not be used.
    pub fn decode(b: &[u8]) -> Result<Superblock, SbError> {
        if b.len() < 8 || &b[0..8] != SIGNATURE {
            return Err(SbError::NoSignature);
        }
        if b.len() < HEADER_LEN {
            return Err(SbError::Short(HEADER_LEN));
        }
        let len = usize::try_from(u32_at(b, 12)).unwrap_or(usize::MAX);
        if !(HEADER_LEN..=MAX_LEN).contains(&len) {
            return Err(SbError::Bad("impossible length"));
        }
        if len > b.len() {
            return Err(SbError::Short(len));
        }
        let stored = u32_at(b, 16);
        let mut copy = b[..len].to_vec();
        copy[16..20].fill(0);
        if crc(&copy) != stored {
            return Err(SbError::Bad("crc mismatch"));
        }
        let major = u16_at(b, 8);
        if major != VERSION_MAJOR {
            return Err(SbError::Version(major));
        }
        let minor = u16_at(b, 10);
        let uuid = uuid_at(b, 24);
        if uuid.is_nil() {
            return Err(SbError::Bad("nil raid uuid"));
        }
        let name_field = &b[40..40 + NAME_LEN];
        let Some(nul) = name_field.iter().position(|c| *c == 0) else {
            return Err(SbError::Bad("name not terminated"));
        };
        let name = std::str::from_utf8(&name_field[..nul])
            .map_err(|_| SbError::Bad("name not utf-8"))?
            .to_string();
        if name.is_empty() {
            return Err(SbError::Bad("empty name"));
        }
        let block_size = u32_at(b, 112);
        if block_size == 0 {
            return Err(SbError::Bad("zero block size"));
        }
        let level = level_from(u32_at(b, 116)).ok_or(SbError::Bad("unknown level"))?;
        let strip_size = u32_at(b, 120);
        if level != RaidLevel::Raid1 && !strip_size.is_power_of_two() {
            return Err(SbError::Bad("bad strip size"));
        }
        let num_base_bdevs = b[136];
        let entries = usize::from(b[255]);
        if num_base_bdevs == 0 || HEADER_LEN + entries * ENTRY_LEN > len {
            return Err(SbError::Bad("member count and length disagree"));
        }
        let mut members: Vec<SbMember> = Vec::with_capacity(entries);
        for i in 0..entries {
            let o = HEADER_LEN + i * ENTRY_LEN;
            let m = SbMember {
                uuid: uuid_at(b, o),
                data_offset: u64_at(b, o + 16),
                data_size: u64_at(b, o + 24),
                state: SbMemberState::from_code(u32_at(b, o + 32))
                    .ok_or(SbError::Bad("unknown member state"))?,
                flags: u32_at(b, o + 36),
                slot: b[o + 40],
            };
            if m.slot >= num_base_bdevs {
                return Err(SbError::Bad("member slot out of range"));
            }
            if members.iter().any(|x| x.slot == m.slot) {
                return Err(SbError::Bad("member slot listed twice"));
            }
            if m.state == SbMemberState::Configured {
                if m.uuid.is_nil() {
                    return Err(SbError::Bad("configured member without uuid"));
                }
                if m.data_offset.checked_add(m.data_size).is_none() || m.data_size == 0 {
                    return Err(SbError::Bad("impossible member data range"));
                }
            }
            if !m.uuid.is_nil() && members.iter().any(|x| x.uuid == m.uuid) {
                return Err(SbError::Bad("member uuid listed twice"));
            }
            members.push(m);
        }
        Ok(Superblock {
            flags: u32_at(b, 20),
            minor,
            uuid,
            name,
            raid_size: u64_at(b, 104),
            block_size,
            level,
            strip_size,
            state: u32_at(b, 124),
            seq_number: u64_at(b, 128),
            num_base_bdevs,
            members,
            reserved: b[137..255].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Superblock {
        Superblock {
            flags: 0,
            minor: 0,
            uuid: Uuid::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788),
            name: "r1".into(),
            raid_size: 6144,
            block_size: 512,
            level: RaidLevel::Raid1,
            strip_size: 0,
            state: 0,
            seq_number: 7,
            num_base_bdevs: 2,
            members: vec![
                SbMember {
                    uuid: Uuid::from_u128(1),
                    data_offset: 2048,
                    data_size: 6144,
                    state: SbMemberState::Configured,
                    flags: 0,
                    slot: 0,
                },
                SbMember {
                    uuid: Uuid::from_u128(2),
                    data_offset: 2048,
                    data_size: 6144,
                    state: SbMemberState::Failed,
                    flags: 0,
                    slot: 1,
                },
            ],
            reserved: vec![0; 118],
        }
    }

    #[test]
    fn round_trip_and_layout() {
        let sb = sample();
        let b = sb.encode(512);
        assert_eq!(b.len(), 512);
        assert_eq!(&b[0..8], b"SPDKRAID");
        assert_eq!(u32_at(&b, 12), 256 + 2 * 64);
        assert_eq!(b[136], 2);
        assert_eq!(b[255], 2);
        assert_eq!(u32_at(&b, 256 + 64 + 32), 2, "failed");
        assert_eq!(Superblock::decode(&b).unwrap(), sb);
        // A 4 KiB block holds it whole too.
        assert_eq!(sb.encode(4096).len(), 4096);
    }

    #[test]
    fn crc_is_spdks_raw_form() {
        // spdk_crc32c_update("123456789", 9, 0): the standard check value
        // comes from seed !0 and a final inversion; seed 0 without the
        // inversions is its own value.
        assert_eq!(!crc32c::crc32c_append(!0, b"123456789"), crc(b"123456789"));
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn damaged_copies_are_refused() {
        let good = sample().encode(512);
        let mut b = good.clone();
        b[300] ^= 1;
        assert_eq!(Superblock::decode(&b), Err(SbError::Bad("crc mismatch")));
        let mut b = good.clone();
        b[0] = b'X';
        assert_eq!(Superblock::decode(&b), Err(SbError::NoSignature));
        assert_eq!(
            Superblock::decode(&good[..300]),
            Err(SbError::Short(384)),
            "asks for the rest"
        );
        assert_eq!(Superblock::decode(&[0u8; 4]), Err(SbError::NoSignature));
        // Slot out of range, with a valid CRC.
        let mut sb = sample();
        sb.members[1].slot = 5;
        assert_eq!(
            Superblock::decode(&sb.encode(512)),
            Err(SbError::Bad("member slot out of range"))
        );
        let mut sb = sample();
        sb.members[1].slot = 0;
        assert_eq!(
            Superblock::decode(&sb.encode(512)),
            Err(SbError::Bad("member slot listed twice"))
        );
        let mut sb = sample();
        sb.uuid = Uuid::nil();
        assert_eq!(
            Superblock::decode(&sb.encode(512)),
            Err(SbError::Bad("nil raid uuid"))
        );
    }

    proptest! {
        /// Whatever block 0 holds, decoding never panics.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1024),
                                       sig in any::<bool>()) {
            let mut b = bytes;
            if sig && b.len() >= 8 {
                b[..8].copy_from_slice(SIGNATURE);
            }
            let _ = Superblock::decode(&b);
        }

        /// Flipping any byte of a good copy is caught (or harmless: the
        /// padding after `length`).
        #[test]
        fn any_flipped_byte_is_caught(pos in 0usize..384, bit in 0u8..8) {
            let mut b = sample().encode(512);
            b[pos] ^= 1 << bit;
            prop_assert!(Superblock::decode(&b).is_err());
        }
    }
}
