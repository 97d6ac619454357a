//! Identify Namespace (CNS 0x00, NVM command set, 4096 bytes), its LBA
//! formats, and the NVM command set specific Identify Controller (CNS
//! 0x06, CSI 0) that holds the Dataset Management and Write Zeroes limits.

use zerocopy::little_endian::{U128, U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::ctrl::pages_to_bytes;

/// An LBA format (4 bytes).
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
pub struct LbaFormat {
    /// Metadata bytes per block.
    pub ms: U16,
    /// LBA data size: log2 of the block size (9 = 512 B; below 9 = unsupported).
    pub lbads: u8,
    /// Relative performance (bits 1:0; 0 = best).
    pub rp: u8,
}

const _: () = assert!(size_of::<LbaFormat>() == 4);

impl LbaFormat {
    /// A format of 2^`lbads` bytes per block with `ms` metadata bytes.
    #[must_use]
    pub fn new(lbads: u8, ms: u16) -> Self {
        LbaFormat {
            ms: U16::new(ms),
            lbads,
            rp: 0,
        }
    }

    /// Block size in bytes, or `None` for LBADS below 9 (not supported)
    /// or 32 and above (garbage).
    #[must_use]
    pub fn block_size(&self) -> Option<u32> {
        if (9..32).contains(&self.lbads) {
            Some(1 << self.lbads)
        } else {
            None
        }
    }
}

/// Identify Namespace data, NVM command set (NVM Command Set
/// Specification 1.0, figure 97).
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct IdentifyNamespace {
    /// Namespace size, blocks.
    pub nsze: U64,
    /// Namespace capacity, blocks.
    pub ncap: U64,
    /// Namespace utilization, blocks.
    pub nuse: U64,
    /// Namespace features ([`nsfeat`]).
    pub nsfeat: u8,
    /// Number of LBA formats (0's based).
    pub nlbaf: u8,
    /// Formatted LBA size: format index (bits 3:0, 6:5), extended LBA (bit 4).
    pub flbas: u8,
    /// Metadata capabilities.
    pub mc: u8,
    /// End-to-end data protection capabilities.
    pub dpc: u8,
    /// End-to-end data protection type settings.
    pub dps: u8,
    /// Namespace multi-path I/O and sharing (bit 0: shared).
    pub nmic: u8,
    /// Reservation capabilities.
    pub rescap: u8,
    /// Format progress indicator.
    pub fpi: u8,
    /// Deallocate logical block features ([`IdentifyNamespace::deallocated_read_value`]).
    pub dlfeat: u8,
    /// Namespace atomic write unit normal (0's based).
    pub nawun: U16,
    /// Namespace atomic write unit power fail (0's based).
    pub nawupf: U16,
    /// Namespace atomic compare and write unit (0's based).
    pub nacwu: U16,
    /// Namespace atomic boundary size normal (0's based).
    pub nabsn: U16,
    /// Namespace atomic boundary offset.
    pub nabo: U16,
    /// Namespace atomic boundary size power fail (0's based).
    pub nabspf: U16,
    /// Namespace optimal I/O boundary, blocks (0 = not reported).
    pub noiob: U16,
    /// NVM capacity, bytes.
    pub nvmcap: U128,
    /// Preferred write granularity (0's based, blocks; valid with OPTPERF).
    pub npwg: U16,
    /// Preferred write alignment (0's based, blocks).
    pub npwa: U16,
    /// Preferred deallocate granularity (0's based, blocks).
    pub npdg: U16,
    /// Preferred deallocate alignment (0's based, blocks).
    pub npda: U16,
    /// Optimal write size (0's based, blocks).
    pub nows: U16,
    /// Maximum single source range length (Copy).
    pub mssrl: U16,
    /// Maximum copy length.
    pub mcl: U32,
    /// Maximum source range count (0's based).
    pub msrc: u8,
    /// Reserved.
    pub rsvd81: u8,
    /// Number of unique capability LBA formats (0's based).
    pub nulbaf: u8,
    /// Reserved.
    pub rsvd83: [u8; 9],
    /// ANA group identifier.
    pub anagrpid: U32,
    /// Reserved.
    pub rsvd96: [u8; 3],
    /// Namespace attributes (bit 0: write protected).
    pub nsattr: u8,
    /// NVM set identifier.
    pub nvmsetid: U16,
    /// Endurance group identifier.
    pub endgid: U16,
    /// Namespace globally unique identifier.
    pub nguid: [u8; 16],
    /// IEEE extended unique identifier.
    pub eui64: [u8; 8],
    /// LBA formats 0..63.
    pub lbaf: [LbaFormat; 64],
    /// Reserved.
    pub rsvd384: [u8; 3328],
    /// Vendor specific.
    pub vs: [u8; 384],
}

const _: () = {
    use std::mem::offset_of;
    type N = IdentifyNamespace;
    assert!(size_of::<N>() == 4096);
    assert!(offset_of!(N, ncap) == 8);
    assert!(offset_of!(N, nuse) == 16);
    assert!(offset_of!(N, nsfeat) == 24);
    assert!(offset_of!(N, nlbaf) == 25);
    assert!(offset_of!(N, flbas) == 26);
    assert!(offset_of!(N, mc) == 27);
    assert!(offset_of!(N, dps) == 29);
    assert!(offset_of!(N, nmic) == 30);
    assert!(offset_of!(N, dlfeat) == 33);
    assert!(offset_of!(N, nawun) == 34);
    assert!(offset_of!(N, noiob) == 46);
    assert!(offset_of!(N, nvmcap) == 48);
    assert!(offset_of!(N, npwg) == 64);
    assert!(offset_of!(N, npwa) == 66);
    assert!(offset_of!(N, npdg) == 68);
    assert!(offset_of!(N, npda) == 70);
    assert!(offset_of!(N, nows) == 72);
    assert!(offset_of!(N, mssrl) == 74);
    assert!(offset_of!(N, mcl) == 76);
    assert!(offset_of!(N, msrc) == 80);
    assert!(offset_of!(N, nulbaf) == 82);
    assert!(offset_of!(N, anagrpid) == 92);
    assert!(offset_of!(N, nsattr) == 99);
    assert!(offset_of!(N, nvmsetid) == 100);
    assert!(offset_of!(N, endgid) == 102);
    assert!(offset_of!(N, nguid) == 104);
    assert!(offset_of!(N, eui64) == 120);
    assert!(offset_of!(N, lbaf) == 128);
    assert!(offset_of!(N, vs) == 3712);
};

/// Namespace feature bits (NSFEAT).
pub mod nsfeat {
    /// Thin provisioning.
    pub const THIN_PROVISIONING: u8 = 1 << 0;
    /// NAWUN, NAWUPF and NACWU are valid.
    pub const ATOMICS: u8 = 1 << 1;
    /// Reads of deallocated or unwritten blocks may fail (DULBE).
    pub const DEALLOCATED_ERROR: u8 = 1 << 2;
    /// NGUID and EUI64 are never reused.
    pub const IDS_NOT_REUSED: u8 = 1 << 3;
    /// NPWG, NPWA, NPDG, NPDA and NOWS are valid.
    pub const OPTIMAL_PERFORMANCE: u8 = 1 << 4;
}

/// What a read of a deallocated block returns (DLFEAT bits 2:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeallocatedRead {
    /// Not reported.
    NotReported,
    /// All bytes 0x00.
    Zeroes,
    /// All bytes 0xff.
    Ones,
    /// A reserved value.
    Reserved(u8),
}

impl Default for IdentifyNamespace {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

impl IdentifyNamespace {
    /// Index of the LBA format in use (FLBAS bits 3:0, plus bits 6:5 as
    /// the high bits when NLBAF is above 16).
    #[must_use]
    pub fn lba_format_index(&self) -> usize {
        let lo = usize::from(self.flbas & 0xf);
        if self.nlbaf > 16 {
            lo | (usize::from((self.flbas >> 5) & 3) << 4)
        } else {
            lo
        }
    }

    /// The LBA format in use.
    #[must_use]
    pub fn lba_format(&self) -> LbaFormat {
        self.lbaf[self.lba_format_index() & 63]
    }

    /// Block size in bytes of the format in use, or `None` if LBADS is
    /// unsupported (below 9) or garbage.
    #[must_use]
    pub fn lba_size(&self) -> Option<u32> {
        self.lba_format().block_size()
    }

    /// Metadata bytes per block of the format in use.
    #[must_use]
    pub fn metadata_size(&self) -> u16 {
        self.lba_format().ms.get()
    }

    /// Whether metadata travels at the end of each block's data (extended
    /// LBA, FLBAS bit 4) rather than in a separate buffer.
    #[must_use]
    pub fn extended_lba(&self) -> bool {
        self.flbas & (1 << 4) != 0
    }

    /// Whether NSFEAT has every bit of `mask` ([`nsfeat`]).
    #[must_use]
    pub fn nsfeat_has(&self, mask: u8) -> bool {
        self.nsfeat & mask == mask
    }

    /// What reads of deallocated blocks return.
    #[must_use]
    pub fn deallocated_read_value(&self) -> DeallocatedRead {
        match self.dlfeat & 7 {
            0 => DeallocatedRead::NotReported,
            1 => DeallocatedRead::Zeroes,
            2 => DeallocatedRead::Ones,
            r => DeallocatedRead::Reserved(r),
        }
    }

    /// Whether Write Zeroes with DEAC set deallocates (DLFEAT bit 3).
    #[must_use]
    pub fn write_zeroes_deallocates(&self) -> bool {
        self.dlfeat & (1 << 3) != 0
    }

    /// Whether the namespace may be attached to more than one controller.
    #[must_use]
    pub fn shared(&self) -> bool {
        self.nmic & 1 != 0
    }

    /// Sets format 0 to 2^`lbads`-byte blocks with `ms` metadata bytes and
    /// selects it, for a target building its reply (one format, no
    /// metadata interleaving).
    pub fn set_single_format(&mut self, lbads: u8, ms: u16) {
        self.nlbaf = 0;
        self.flbas = 0;
        self.lbaf[0] = LbaFormat::new(lbads, ms);
    }
}

/// NVM command set specific Identify Controller (CNS 0x06, CSI 0; NVM
/// Command Set Specification 1.0, figure 92).
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct NvmIdentifyController {
    /// Verify size limit: 2^VSL minimum pages (0 = no limit).
    pub vsl: u8,
    /// Write Zeroes size limit: 2^WZSL minimum pages (0 = no limit).
    pub wzsl: u8,
    /// Write Uncorrectable size limit: 2^WUSL minimum pages (0 = no limit).
    pub wusl: u8,
    /// Dataset Management ranges limit (0 = not reported).
    pub dmrl: u8,
    /// Dataset Management range size limit, blocks (0 = not reported).
    pub dmrsl: U32,
    /// Dataset Management size limit, blocks (0 = not reported).
    pub dmsl: U64,
    /// Reserved.
    pub rsvd16: [u8; 4080],
}

const _: () = {
    assert!(size_of::<NvmIdentifyController>() == 4096);
    assert!(std::mem::offset_of!(NvmIdentifyController, dmrl) == 3);
    assert!(std::mem::offset_of!(NvmIdentifyController, dmrsl) == 4);
    assert!(std::mem::offset_of!(NvmIdentifyController, dmsl) == 8);
};

impl Default for NvmIdentifyController {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

impl NvmIdentifyController {
    /// The most ranges one Dataset Management command takes (`None` = not reported: 256).
    #[must_use]
    pub fn dsm_max_ranges(&self) -> Option<u32> {
        (self.dmrl != 0).then_some(u32::from(self.dmrl))
    }

    /// The most blocks in one Dataset Management range (`None` = not reported).
    #[must_use]
    pub fn dsm_max_range_blocks(&self) -> Option<u32> {
        match self.dmrsl.get() {
            0 => None,
            n => Some(n),
        }
    }

    /// The most blocks one Dataset Management command covers (`None` = not reported).
    #[must_use]
    pub fn dsm_max_blocks(&self) -> Option<u64> {
        match self.dmsl.get() {
            0 => None,
            n => Some(n),
        }
    }

    /// The largest Write Zeroes in bytes, given CAP.MPSMIN (`None` = no limit).
    #[must_use]
    pub fn write_zeroes_max_bytes(&self, mpsmin: u8) -> Option<u64> {
        pages_to_bytes(self.wzsl, mpsmin)
    }

    /// The largest Verify in bytes, given CAP.MPSMIN (`None` = no limit).
    #[must_use]
    pub fn verify_max_bytes(&self, mpsmin: u8) -> Option<u64> {
        pages_to_bytes(self.vsl, mpsmin)
    }

    /// The largest Write Uncorrectable in bytes, given CAP.MPSMIN (`None` = no limit).
    #[must_use]
    pub fn write_uncorrectable_max_bytes(&self, mpsmin: u8) -> Option<u64> {
        pages_to_bytes(self.wusl, mpsmin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_index_and_sizes() {
        let mut n = IdentifyNamespace::default();
        n.nsze.set(1 << 20);
        n.nlbaf = 1;
        n.lbaf[0] = LbaFormat::new(9, 0);
        n.lbaf[1] = LbaFormat::new(12, 8);
        n.flbas = 0x11;
        assert_eq!(n.lba_format_index(), 1);
        assert_eq!(n.lba_size(), Some(4096));
        assert_eq!(n.metadata_size(), 8);
        assert!(n.extended_lba());
        // High index bits count only with more than 16 formats.
        n.flbas = 0x61;
        assert_eq!(n.lba_format_index(), 1);
        n.nlbaf = 63;
        n.lbaf[49] = LbaFormat::new(13, 0);
        assert_eq!(n.lba_format_index(), 49);
        assert_eq!(n.lba_size(), Some(8192));
        // Garbage LBADS never shifts past 32 bits.
        n.lbaf[49].lbads = 200;
        assert_eq!(n.lba_size(), None);
        n.lbaf[49].lbads = 8;
        assert_eq!(n.lba_size(), None);
        n.set_single_format(9, 0);
        assert_eq!((n.lba_size(), n.lba_format_index()), (Some(512), 0));
        n.dlfeat = 0x9;
        assert_eq!(n.deallocated_read_value(), DeallocatedRead::Zeroes);
        assert!(n.write_zeroes_deallocates());
        n.dlfeat = 0x5;
        assert_eq!(n.deallocated_read_value(), DeallocatedRead::Reserved(5));
    }

    #[test]
    fn nvm_limits() {
        let mut c = NvmIdentifyController::default();
        assert_eq!(c.dsm_max_ranges(), None);
        assert_eq!(c.write_zeroes_max_bytes(0), None);
        c.dmrl = 128;
        c.dmrsl.set(1 << 20);
        c.wzsl = 8;
        assert_eq!(c.dsm_max_ranges(), Some(128));
        assert_eq!(c.dsm_max_range_blocks(), Some(1 << 20));
        assert_eq!(c.write_zeroes_max_bytes(0), Some(1 << 20));
    }
}
