//! A raid's layout on its members: each member's data area, the first
//! superblock, and the geometry (raid0 strips, concat extents, raid1's
//! shortest member) the members give.

use bdevkit::bdev::module::{Error, Result};

use crate::config::RaidLevel;
use crate::map::{ConcatMap, Geometry, Raid0Map};
use crate::raid::{Control, Raid, MEMBER_REMOVED};
use crate::sb::{SbMember, SbMemberState, Superblock, MIN_DATA_OFFSET_BYTES, VERSION_MINOR};

impl Raid {
    /// The data area of each member, and the superblock the raid starts
    /// with (a new one, or the one it was found with, checked against its
    /// members).
    pub(crate) fn prepare_superblock(&self) -> Result<()> {
        let mut ctl = self.ctl.lock();
        let block_size = ctl
            .members
            .iter()
            .flatten()
            .next()
            .map(|m| m.bdev.block_size())
            .ok_or_else(|| Error::InvalidArg("raid without members".into()))?;
        let from_sb = ctl.sb.is_some();
        for i in 0..self.num_members() {
            let Some(b) = ctl.members[i].as_ref().map(|m| m.bdev.clone()) else {
                continue;
            };
            if !from_sb {
                let mut off = MIN_DATA_OFFSET_BYTES / u64::from(block_size);
                let boundary = u64::from(b.props().optimal_io_boundary);
                if boundary != 0 {
                    off = off.div_ceil(boundary) * boundary;
                }
                ctl.offsets[i] = off;
            }
            if ctl.offsets[i] >= b.num_blocks() {
                return Err(Error::InvalidArg(format!(
                    "{} is too small for the superblock ({} blocks)",
                    b.name(),
                    b.num_blocks()
                )));
            }
            if from_sb && ctl.offsets[i] + ctl.sizes[i] > b.num_blocks() {
                return Err(Error::InvalidArg(format!(
                    "{} is smaller than its superblock says",
                    b.name()
                )));
            }
        }
        if !from_sb {
            ctl.sb = Some(Superblock {
                flags: 0,
                minor: VERSION_MINOR,
                uuid: self.uuid,
                name: self.name.clone(),
                raid_size: 0,
                block_size,
                level: self.level,
                strip_size: u32::try_from(
                    u64::from(self.strip_size_kb) * 1024 / u64::from(block_size),
                )
                .unwrap_or(u32::MAX),
                state: 0,
                seq_number: 0,
                num_base_bdevs: u8::try_from(self.num_members()).unwrap_or(u8::MAX),
                members: (0..self.num_members())
                    .map(|i| SbMember {
                        uuid: uuid::Uuid::nil(),
                        data_offset: 0,
                        data_size: 0,
                        state: SbMemberState::Missing,
                        flags: 0,
                        slot: u8::try_from(i).unwrap_or(u8::MAX),
                    })
                    .collect(),
                reserved: vec![0; 118],
            });
        }
        // The geometry, so the first superblock carries the sizes.
        let (geometry, sizes) = self.geometry_of(&ctl)?;
        if let Some(want) = ctl.sb.as_ref().filter(|_| from_sb).map(|s| s.raid_size) {
            if geometry.num_blocks() != want {
                return Err(Error::InvalidArg(format!(
                    "the members give {} blocks, the superblock says {want}",
                    geometry.num_blocks()
                )));
            }
        }
        ctl.data_size = geometry.data_size();
        for (i, s) in sizes.into_iter().enumerate() {
            if s != 0 || !from_sb {
                ctl.sizes[i] = s;
            }
        }
        for i in 0..self.num_members() {
            if ctl.absent[i] {
                self.set_member_state(&mut ctl, i, MEMBER_REMOVED);
            }
        }
        Ok(())
    }

    /// The geometry over the members there are, and each slot's data
    /// size. A superblock raid found by examine uses the sizes its
    /// superblock gives, the others what the members hold after their
    /// data offset.
    pub(crate) fn geometry_of(&self, ctl: &Control) -> Result<(Geometry, Vec<u64>)> {
        let from_sb = self.superblock && ctl.sb.as_ref().is_some_and(|s| s.seq_number > 0);
        let avail: Vec<Option<u64>> = (0..self.num_members())
            .map(|i| {
                let m = ctl.members[i].as_ref()?;
                Some(if from_sb && ctl.sizes[i] != 0 {
                    ctl.sizes[i]
                } else {
                    m.bdev.num_blocks().saturating_sub(ctl.offsets[i])
                })
            })
            .collect();
        let block_size = ctl
            .members
            .iter()
            .flatten()
            .next()
            .map_or(512, |m| m.bdev.block_size());
        let present: Vec<u64> = avail.iter().flatten().copied().collect();
        let min = present.iter().copied().min().unwrap_or(0);
        let n = self.num_members();
        if self.level == RaidLevel::Raid1 {
            return Ok((Geometry::Raid1 { num_blocks: min }, vec![min; n]));
        }
        let strip_bytes = u64::from(self.strip_size_kb) * 1024;
        let bs = u64::from(block_size);
        if strip_bytes < bs || strip_bytes % bs != 0 {
            return Err(Error::InvalidArg(format!(
                "strip size {} KiB is not a multiple of block size {block_size}",
                self.strip_size_kb
            )));
        }
        let strip_blocks = strip_bytes / bs;
        if self.level == RaidLevel::Raid0 {
            let member_blocks = min / strip_blocks * strip_blocks;
            if member_blocks == 0 {
                return Err(Error::InvalidArg("members smaller than one strip".into()));
            }
            return Ok((
                Geometry::Raid0(Raid0Map {
                    strip_blocks,
                    members: n as u64,
                    member_blocks,
                }),
                vec![member_blocks; n],
            ));
        }
        let lens: Vec<u64> = avail
            .iter()
            .map(|b| b.unwrap_or(0) / strip_blocks * strip_blocks)
            .collect();
        if lens.contains(&0) {
            return Err(Error::InvalidArg(
                "a member is smaller than one strip".into(),
            ));
        }
        Ok((Geometry::Concat(ConcatMap::new(lens.clone())), lens))
    }
}
