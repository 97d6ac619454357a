//! NVM command set I/O commands: Read, Write, Compare, Write Zeroes,
//! Write Uncorrectable, Flush, Dataset Management (with its range
//! descriptor).
//!
//! The LBA-range commands share one layout (NVM Command Set
//! Specification 1.0, §3.2): SLBA in dwords 10-11, NLB (0's based) in
//! bits 15:0 of dword 12 with the flags above it, directives and dataset
//! management hints in dword 13, end-to-end protection tags in dwords
//! 14-15. [`BlockRange`] holds SLBA and NLB and takes the block count
//! 1-based, so "0 blocks" cannot be encoded by mistake.
//!
//! [`IoCommand::decode`] turns a received entry into the typed command
//! (the NVMe-oF target's dispatch).

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::bits::{bit, bits, flag, hi32, lo32, u16_at, u64_of, u8_at};
use crate::cmd::{Command, Sqe};
use crate::error::{Error, Result};
use crate::opcode::NvmOpcode;

/// The most blocks one LBA-range command moves (NLB is 16 bits, 0's based).
pub const MAX_BLOCKS_PER_COMMAND: u32 = 1 << 16;

/// The most ranges in one Dataset Management command (NR is 8 bits, 0's based).
pub const DSM_MAX_RANGES: usize = 256;

/// A command's LBA range: starting LBA and number of blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockRange {
    slba: u64,
    nlb: u16,
}

impl BlockRange {
    /// `num_blocks` blocks from `slba`: 1..=65536 blocks, and the last
    /// block's LBA must fit in 64 bits.
    pub fn new(slba: u64, num_blocks: u32) -> Result<Self> {
        if num_blocks == 0 || num_blocks > MAX_BLOCKS_PER_COMMAND {
            return Err(Error::OutOfRange {
                what: "num_blocks",
                value: num_blocks.into(),
            });
        }
        let nlb = u16::try_from(num_blocks - 1).expect("invariant: num_blocks <= 65536");
        if slba.checked_add(u64::from(nlb)).is_none() {
            return Err(Error::OutOfRange {
                what: "slba",
                value: slba,
            });
        }
        Ok(BlockRange { slba, nlb })
    }

    /// The range with SLBA `slba` and the 0's based NLB `nlb` of a
    /// received command (never fails; check it with [`BlockRange::within`]).
    #[must_use]
    pub const fn from_raw(slba: u64, nlb: u16) -> Self {
        BlockRange { slba, nlb }
    }

    /// Starting LBA.
    #[must_use]
    pub const fn slba(&self) -> u64 {
        self.slba
    }

    /// Number of blocks (1..=65536).
    #[must_use]
    pub const fn num_blocks(&self) -> u32 {
        self.nlb as u32 + 1
    }

    /// NLB as encoded: number of blocks - 1.
    #[must_use]
    pub const fn nlb(&self) -> u16 {
        self.nlb
    }

    /// Whether the range lies inside a namespace of `nsze` blocks (what a
    /// target checks before answering LBA Out of Range).
    #[must_use]
    pub const fn within(&self, nsze: u64) -> bool {
        self.slba < nsze && nsze - self.slba > self.nlb as u64
    }

    fn encode(&self, sqe: &mut Sqe, cdw12_flags: u32) {
        sqe.cdw10.set(lo32(self.slba));
        sqe.cdw11.set(hi32(self.slba));
        sqe.cdw12
            .set(u32::from(self.nlb) | (cdw12_flags & 0xffff_0000));
    }

    fn decode(sqe: &Sqe) -> Self {
        let slba = u64_of(sqe.cdw10.get(), sqe.cdw11.get());
        BlockRange::from_raw(slba, u16_at(sqe.cdw12.get(), 0))
    }
}

/// End-to-end protection tags (dwords 14 and 15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PiTags {
    /// Expected/initial logical block reference tag (EILBRT/ILBRT, dword 14).
    pub reftag: u32,
    /// Logical block application tag (bits 15:0 of dword 15).
    pub apptag: u16,
    /// Application tag mask (bits 31:16 of dword 15).
    pub appmask: u16,
}

impl PiTags {
    fn encode(&self, sqe: &mut Sqe) {
        sqe.cdw14.set(self.reftag);
        sqe.cdw15
            .set(u32::from(self.apptag) | (u32::from(self.appmask) << 16));
    }

    fn decode(sqe: &Sqe) -> Self {
        let d15 = sqe.cdw15.get();
        PiTags {
            reftag: sqe.cdw14.get(),
            apptag: u16_at(d15, 0),
            appmask: u16_at(d15, 16),
        }
    }
}

/// Flags of dword 12 shared by the LBA-range commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RwFlags {
    /// Limited Retry (bit 31).
    pub lr: bool,
    /// Force Unit Access (bit 30): the data is on media at completion.
    pub fua: bool,
    /// Protection Information field (bits 29:26).
    pub prinfo: u8,
    /// Directive Type (bits 23:20; writes only).
    pub dtype: u8,
}

impl RwFlags {
    fn to_cdw12(self) -> u32 {
        flag(self.lr, 31)
            | flag(self.fua, 30)
            | ((u32::from(self.prinfo) & 0xf) << 26)
            | ((u32::from(self.dtype) & 0xf) << 20)
    }

    fn from_cdw12(d: u32) -> Self {
        RwFlags {
            lr: bit(d, 31),
            fua: bit(d, 30),
            prinfo: u8_at(bits(d, 26, 4), 0),
            dtype: u8_at(bits(d, 20, 4), 0),
        }
    }
}

/// Defines an LBA-range data command with flags, dword 13 and PI tags.
macro_rules! rw_command {
    ($(#[$m:meta])* $name:ident, $opc:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name {
            /// Namespace id.
            pub nsid: u32,
            /// Blocks to move.
            pub range: BlockRange,
            /// Dword 12 flags.
            pub flags: RwFlags,
            /// Dataset management hints (bits 7:0 of dword 13).
            pub dsm: u8,
            /// Directive specific (bits 31:16 of dword 13; writes only).
            pub dspec: u16,
            /// End-to-end protection tags.
            pub pi: PiTags,
        }

        impl $name {
            /// The command on `range` of namespace `nsid`, all flags clear.
            #[must_use]
            pub fn new(nsid: u32, range: BlockRange) -> Self {
                $name {
                    nsid,
                    range,
                    flags: RwFlags::default(),
                    dsm: 0,
                    dspec: 0,
                    pi: PiTags::default(),
                }
            }
        }

        impl Command for $name {
            const OPCODE: u8 = $opc as u8;

            fn encode(&self, sqe: &mut Sqe) {
                sqe.nsid.set(self.nsid);
                self.range.encode(sqe, self.flags.to_cdw12());
                sqe.cdw13
                    .set(u32::from(self.dsm) | (u32::from(self.dspec) << 16));
                self.pi.encode(sqe);
            }

            fn decode(sqe: &Sqe) -> Self {
                let d13 = sqe.cdw13.get();
                $name {
                    nsid: sqe.nsid.get(),
                    range: BlockRange::decode(sqe),
                    flags: RwFlags::from_cdw12(sqe.cdw12.get()),
                    dsm: u8_at(d13, 0),
                    dspec: u16_at(d13, 16),
                    pi: PiTags::decode(sqe),
                }
            }
        }
    };
}

rw_command!(
    /// Read (0x02): blocks into the host's buffer.
    Read,
    NvmOpcode::Read
);
rw_command!(
    /// Write (0x01): blocks from the host's buffer.
    Write,
    NvmOpcode::Write
);
rw_command!(
    /// Compare (0x05): fails with Compare Failure when the media differs
    /// from the host's buffer.
    Compare,
    NvmOpcode::Compare
);

/// Write Zeroes (0x08): sets blocks to zero, no data transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WriteZeroes {
    /// Namespace id.
    pub nsid: u32,
    /// Blocks to zero.
    pub range: BlockRange,
    /// Dword 12 flags.
    pub flags: RwFlags,
    /// Deallocate (bit 25): the controller may deallocate the blocks.
    pub deac: bool,
    /// Directive specific (bits 31:16 of dword 13).
    pub dspec: u16,
    /// End-to-end protection tags.
    pub pi: PiTags,
}

impl WriteZeroes {
    /// Zeroes `range` of namespace `nsid`, flags clear.
    #[must_use]
    pub fn new(nsid: u32, range: BlockRange) -> Self {
        WriteZeroes {
            nsid,
            range,
            flags: RwFlags::default(),
            deac: false,
            dspec: 0,
            pi: PiTags::default(),
        }
    }
}

impl Command for WriteZeroes {
    const OPCODE: u8 = NvmOpcode::WriteZeroes as u8;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.nsid.set(self.nsid);
        self.range
            .encode(sqe, self.flags.to_cdw12() | flag(self.deac, 25));
        sqe.cdw13.set(u32::from(self.dspec) << 16);
        self.pi.encode(sqe);
    }

    fn decode(sqe: &Sqe) -> Self {
        WriteZeroes {
            nsid: sqe.nsid.get(),
            range: BlockRange::decode(sqe),
            flags: RwFlags::from_cdw12(sqe.cdw12.get()),
            deac: bit(sqe.cdw12.get(), 25),
            dspec: u16_at(sqe.cdw13.get(), 16),
            pi: PiTags::decode(sqe),
        }
    }
}

/// Write Uncorrectable (0x04): marks blocks invalid (reads fail until
/// they are written).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WriteUncorrectable {
    /// Namespace id.
    pub nsid: u32,
    /// Blocks to mark.
    pub range: BlockRange,
}

impl Command for WriteUncorrectable {
    const OPCODE: u8 = NvmOpcode::WriteUncorrectable as u8;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.nsid.set(self.nsid);
        self.range.encode(sqe, 0);
    }

    fn decode(sqe: &Sqe) -> Self {
        WriteUncorrectable {
            nsid: sqe.nsid.get(),
            range: BlockRange::decode(sqe),
        }
    }
}

/// Flush (0x00): commits the volatile write cache of namespace `nsid`
/// ([`crate::cmd::NSID_ALL`] for all, when the controller supports it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flush {
    /// Namespace id.
    pub nsid: u32,
}

impl Command for Flush {
    const OPCODE: u8 = NvmOpcode::Flush as u8;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.nsid.set(self.nsid);
    }

    fn decode(sqe: &Sqe) -> Self {
        Flush {
            nsid: sqe.nsid.get(),
        }
    }
}

/// Dataset Management attributes (dword 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DsmAttributes {
    /// Integral Dataset for Read (bit 0).
    pub idr: bool,
    /// Integral Dataset for Write (bit 1).
    pub idw: bool,
    /// Deallocate (bit 2): unmap the ranges.
    pub ad: bool,
}

/// Dataset Management (0x09): hints or deallocation for up to 256 ranges
/// given in the data buffer as [`DsmRange`] descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DatasetManagement {
    /// Namespace id.
    pub nsid: u32,
    /// Number of ranges - 1 (bits 7:0 of dword 10).
    pub nr: u8,
    /// What to do with the ranges.
    pub attributes: DsmAttributes,
}

impl DatasetManagement {
    /// Deallocates `num_ranges` (1..=256) ranges of namespace `nsid`.
    pub fn deallocate(nsid: u32, num_ranges: usize) -> Result<Self> {
        if num_ranges == 0 || num_ranges > DSM_MAX_RANGES {
            return Err(Error::OutOfRange {
                what: "dsm ranges",
                value: num_ranges as u64,
            });
        }
        Ok(DatasetManagement {
            nsid,
            nr: u8::try_from(num_ranges - 1).expect("invariant: num_ranges <= 256"),
            attributes: DsmAttributes {
                ad: true,
                ..DsmAttributes::default()
            },
        })
    }

    /// Number of ranges (1..=256).
    #[must_use]
    pub fn num_ranges(&self) -> usize {
        usize::from(self.nr) + 1
    }

    /// Bytes of range descriptors the data buffer holds.
    #[must_use]
    pub fn data_len(&self) -> usize {
        self.num_ranges() * size_of::<DsmRange>()
    }
}

impl Command for DatasetManagement {
    const OPCODE: u8 = NvmOpcode::DatasetManagement as u8;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.nsid.set(self.nsid);
        sqe.cdw10.set(u32::from(self.nr));
        let a = self.attributes;
        sqe.cdw11
            .set(flag(a.idr, 0) | flag(a.idw, 1) | flag(a.ad, 2));
    }

    fn decode(sqe: &Sqe) -> Self {
        let d11 = sqe.cdw11.get();
        DatasetManagement {
            nsid: sqe.nsid.get(),
            nr: u8_at(sqe.cdw10.get(), 0),
            attributes: DsmAttributes {
                idr: bit(d11, 0),
                idw: bit(d11, 1),
                ad: bit(d11, 2),
            },
        }
    }
}

/// One Dataset Management range (16 bytes). Its length is a block count,
/// not 0's based; 0 blocks is allowed (and means nothing to do).
#[repr(C)]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
pub struct DsmRange {
    /// Context attributes (access frequency, latency, sequential hints).
    pub cattr: U32,
    /// Length in logical blocks.
    pub nlb: U32,
    /// Starting LBA.
    pub slba: U64,
}

const _: () = {
    assert!(size_of::<DsmRange>() == 16);
    assert!(std::mem::offset_of!(DsmRange, nlb) == 4);
    assert!(std::mem::offset_of!(DsmRange, slba) == 8);
};

impl DsmRange {
    /// A range of `num_blocks` from `slba` without context attributes.
    #[must_use]
    pub fn new(slba: u64, num_blocks: u32) -> Self {
        DsmRange {
            cattr: U32::ZERO,
            nlb: U32::new(num_blocks),
            slba: U64::new(slba),
        }
    }
}

/// A received NVM I/O command, decoded by opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoCommand {
    /// Read.
    Read(Read),
    /// Write.
    Write(Write),
    /// Compare.
    Compare(Compare),
    /// Write Zeroes.
    WriteZeroes(WriteZeroes),
    /// Write Uncorrectable.
    WriteUncorrectable(WriteUncorrectable),
    /// Flush.
    Flush(Flush),
    /// Dataset Management.
    DatasetManagement(DatasetManagement),
    /// Any other opcode (a fabrics Connect on an I/O queue included: see
    /// [`crate::fabrics::FabricsCommand`]).
    Other(u8),
}

impl IoCommand {
    /// Decodes `sqe` by its opcode.
    #[must_use]
    pub fn decode(sqe: &Sqe) -> Self {
        match NvmOpcode::from_u8(sqe.opcode) {
            Some(NvmOpcode::Read) => IoCommand::Read(Read::decode(sqe)),
            Some(NvmOpcode::Write) => IoCommand::Write(Write::decode(sqe)),
            Some(NvmOpcode::Compare) => IoCommand::Compare(Compare::decode(sqe)),
            Some(NvmOpcode::WriteZeroes) => IoCommand::WriteZeroes(WriteZeroes::decode(sqe)),
            Some(NvmOpcode::WriteUncorrectable) => {
                IoCommand::WriteUncorrectable(WriteUncorrectable::decode(sqe))
            }
            Some(NvmOpcode::Flush) => IoCommand::Flush(Flush::decode(sqe)),
            Some(NvmOpcode::DatasetManagement) => {
                IoCommand::DatasetManagement(DatasetManagement::decode(sqe))
            }
            _ => IoCommand::Other(sqe.opcode),
        }
    }

    /// The LBA range of an LBA-range command.
    #[must_use]
    pub fn range(&self) -> Option<BlockRange> {
        match self {
            IoCommand::Read(c) => Some(c.range),
            IoCommand::Write(c) => Some(c.range),
            IoCommand::Compare(c) => Some(c.range),
            IoCommand::WriteZeroes(c) => Some(c.range),
            IoCommand::WriteUncorrectable(c) => Some(c.range),
            IoCommand::Flush(_) | IoCommand::DatasetManagement(_) | IoCommand::Other(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_range() -> impl Strategy<Value = BlockRange> {
        (1u32..=MAX_BLOCKS_PER_COMMAND).prop_flat_map(|n| {
            (0..=u64::MAX - u64::from(n - 1))
                .prop_map(move |slba| BlockRange::new(slba, n).expect("in range"))
        })
    }

    #[test]
    fn range_limits() {
        assert!(BlockRange::new(0, 0).is_err());
        assert!(BlockRange::new(0, 65537).is_err());
        assert_eq!(BlockRange::new(7, 65536).unwrap().nlb(), 0xffff);
        assert!(BlockRange::new(u64::MAX, 2).is_err());
        assert_eq!(BlockRange::new(u64::MAX, 1).unwrap().num_blocks(), 1);
        let r = BlockRange::new(10, 6).unwrap();
        assert!(r.within(16));
        assert!(!r.within(15));
        assert!(!BlockRange::from_raw(u64::MAX, 0xffff).within(u64::MAX));
        assert!(!BlockRange::from_raw(20, 0).within(20));
    }

    #[test]
    fn read_bytes() {
        let mut rd = Read::new(1, BlockRange::new(0x1_0000_0002, 8).unwrap());
        rd.flags.fua = true;
        let s = rd.to_sqe(3);
        assert_eq!(s.opcode, 0x02);
        assert_eq!(s.cid.get(), 3);
        assert_eq!(s.cdw10.get(), 2);
        assert_eq!(s.cdw11.get(), 1);
        assert_eq!(s.cdw12.get(), 0x4000_0007);
        assert_eq!(IoCommand::decode(&s), IoCommand::Read(rd));
        assert_eq!(IoCommand::decode(&s).range(), Some(rd.range));
    }

    #[test]
    fn write_zeroes_and_dsm() {
        let mut wz = WriteZeroes::new(2, BlockRange::new(100, 1).unwrap());
        wz.deac = true;
        let s = wz.to_sqe(1);
        assert_eq!(s.opcode, 0x08);
        assert_eq!(s.cdw12.get(), 1 << 25);
        assert_eq!(WriteZeroes::decode(&s), wz);

        let d = DatasetManagement::deallocate(1, 3).unwrap();
        let s = d.to_sqe(9);
        assert_eq!((s.opcode, s.cdw10.get(), s.cdw11.get()), (0x09, 2, 4));
        assert_eq!(IoCommand::decode(&s), IoCommand::DatasetManagement(d));
        assert_eq!(d.data_len(), 48);
        assert!(DatasetManagement::deallocate(1, 0).is_err());
        assert!(DatasetManagement::deallocate(1, 257).is_err());
        assert_eq!(DatasetManagement::deallocate(1, 256).unwrap().nr, 255);

        let r = DsmRange::new(0x0102_0304_0506_0708, 16);
        assert_eq!(
            r.as_bytes(),
            &[0, 0, 0, 0, 16, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]
        );
        let f = Flush { nsid: 5 }.to_sqe(4);
        assert_eq!(IoCommand::decode(&f), IoCommand::Flush(Flush { nsid: 5 }));
        assert_eq!(
            IoCommand::decode(&Sqe::new(0x99, 0, 1)),
            IoCommand::Other(0x99)
        );
    }

    proptest! {
        #[test]
        fn lba_commands_round_trip(
            range in any_range(),
            nsid: u32,
            cid: u16,
            lr: bool,
            fua: bool,
            prinfo in 0u8..16,
            dtype in 0u8..16,
            dsm: u8,
            dspec: u16,
            reftag: u32,
            apptag: u16,
            appmask: u16,
            deac: bool,
        ) {
            let flags = RwFlags { lr, fua, prinfo, dtype };
            let pi = PiTags { reftag, apptag, appmask };
            let w = Write { nsid, range, flags, dsm, dspec, pi };
            let s = w.to_sqe(cid);
            prop_assert_eq!(s.cid.get(), cid);
            prop_assert_eq!(s.nsid.get(), nsid);
            prop_assert_eq!(u64::from(s.cdw10.get()) | u64::from(s.cdw11.get()) << 32, range.slba());
            prop_assert_eq!(s.cdw12.get() & 0xffff, range.num_blocks() - 1);
            prop_assert_eq!(IoCommand::decode(&s), IoCommand::Write(w));

            let r = Read { nsid, range, flags, dsm, dspec, pi };
            prop_assert_eq!(Read::decode(&r.to_sqe(cid)), r);
            let c = Compare { nsid, range, flags, dsm, dspec, pi };
            prop_assert_eq!(IoCommand::decode(&c.to_sqe(cid)), IoCommand::Compare(c));
            let z = WriteZeroes { nsid, range, flags, deac, dspec, pi };
            prop_assert_eq!(IoCommand::decode(&z.to_sqe(cid)), IoCommand::WriteZeroes(z));
            let u = WriteUncorrectable { nsid, range };
            prop_assert_eq!(IoCommand::decode(&u.to_sqe(cid)), IoCommand::WriteUncorrectable(u));
        }

        #[test]
        fn block_range_new_accepts_exactly_the_encodable(slba: u64, n in 0u32..70_000) {
            let ok = BlockRange::new(slba, n);
            let expect = (1..=MAX_BLOCKS_PER_COMMAND).contains(&n) && slba.checked_add(u64::from(n) - 1).is_some();
            prop_assert_eq!(ok.is_ok(), expect);
            if let Ok(r) = ok {
                prop_assert_eq!((r.slba(), r.num_blocks()), (slba, n));
            }
        }
    }
}
