//! Controller registers (PCIe BAR0) and NVMe-oF properties.
//!
//! Offsets are in [`offset`]; the registers with fields are newtypes over
//! their raw value with accessors and `with_*` builders ([`Cap`], [`Vs`],
//! [`Cc`], [`Csts`], [`Aqa`]). Nothing here touches memory: the PCIe
//! driver reads and writes BAR0 with its own volatile accessors and wraps
//! the values in these types. NVMe over Fabrics exposes the same
//! registers as *properties* (Property Get/Set), a subset listed by
//! [`property_size`].

use std::fmt;

use crate::bits::{bits, bits64, flag, u16_at, u8_at};

/// Register offsets in BAR0 (NVMe Base Specification 2.0, figure 33).
pub mod offset {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version.
    pub const VS: u32 = 0x08;
    /// Interrupt Mask Set.
    pub const INTMS: u32 = 0x0c;
    /// Interrupt Mask Clear.
    pub const INTMC: u32 = 0x10;
    /// Controller Configuration.
    pub const CC: u32 = 0x14;
    /// Controller Status.
    pub const CSTS: u32 = 0x1c;
    /// NVM Subsystem Reset.
    pub const NSSR: u32 = 0x20;
    /// Admin Queue Attributes.
    pub const AQA: u32 = 0x24;
    /// Admin Submission Queue Base Address (8 bytes).
    pub const ASQ: u32 = 0x28;
    /// Admin Completion Queue Base Address (8 bytes).
    pub const ACQ: u32 = 0x30;
    /// Controller Memory Buffer Location.
    pub const CMBLOC: u32 = 0x38;
    /// Controller Memory Buffer Size.
    pub const CMBSZ: u32 = 0x3c;
    /// Boot Partition Information.
    pub const BPINFO: u32 = 0x40;
    /// Boot Partition Read Select.
    pub const BPRSEL: u32 = 0x44;
    /// Boot Partition Memory Buffer Location (8 bytes).
    pub const BPMBL: u32 = 0x48;
    /// Controller Memory Buffer Memory Space Control (8 bytes).
    pub const CMBMSC: u32 = 0x50;
    /// Controller Memory Buffer Status.
    pub const CMBSTS: u32 = 0x58;
    /// NVM Subsystem Shutdown.
    pub const NSSD: u32 = 0x64;
    /// Controller Ready Timeouts.
    pub const CRTO: u32 = 0x68;
    /// Persistent Memory Region Capabilities.
    pub const PMRCAP: u32 = 0xe00;
    /// First doorbell (SQ 0 tail).
    pub const DOORBELLS: u32 = 0x1000;
}

/// The value written to NSSR to reset the NVM subsystem ("NVMe").
pub const NSSR_RESET: u32 = 0x4e56_4d65;

/// Offset of a doorbell: `0x1000 + (2 * qid + is_cq) * (4 << dstrd)`,
/// the SQ tail doorbell of `qid` when `is_cq` is false, its CQ head
/// doorbell otherwise. `dstrd` is CAP.DSTRD (4 bits).
#[must_use]
pub const fn doorbell_offset(qid: u16, is_cq: bool, dstrd: u8) -> u64 {
    let stride = 4u64 << (dstrd & 0xf);
    offset::DOORBELLS as u64 + (2 * qid as u64 + is_cq as u64) * stride
}

/// Size of a register as an NVMe-oF property.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PropertySize {
    /// 4 bytes (attribute 0).
    Four,
    /// 8 bytes (attribute 1).
    Eight,
}

impl PropertySize {
    /// Bytes.
    #[must_use]
    pub const fn bytes(self) -> u32 {
        match self {
            PropertySize::Four => 4,
            PropertySize::Eight => 8,
        }
    }
}

/// The size of the NVMe-oF property at `offset`, or `None` if fabrics
/// defines none there (a target answers Invalid Field). Fabrics
/// controllers have no admin queue registers (AQA, ASQ, ACQ), no
/// interrupt masks and no doorbells.
#[must_use]
pub const fn property_size(offset: u32) -> Option<PropertySize> {
    match offset {
        offset::CAP => Some(PropertySize::Eight),
        offset::VS | offset::CC | offset::CSTS | offset::NSSR | offset::NSSD | offset::CRTO => {
            Some(PropertySize::Four)
        }
        _ => None,
    }
}

/// Controller Capabilities (CAP, 0x00).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Cap(pub u64);

impl Cap {
    /// CSS bit: the NVM command set.
    pub const CSS_NVM: u8 = 1 << 0;
    /// CSS bit: one or more I/O command sets (CC.CSS = 110b allowed).
    pub const CSS_IO_SETS: u8 = 1 << 6;
    /// CSS bit: admin command set only (no I/O command sets).
    pub const CSS_ADMIN_ONLY: u8 = 1 << 7;

    /// Maximum queue entries supported, 0's based (MQES).
    #[must_use]
    pub const fn mqes(self) -> u16 {
        u16_at(bits64(self.0, 0, 16), 0)
    }

    /// Maximum entries of one queue (MQES + 1).
    #[must_use]
    pub const fn max_queue_entries(self) -> u32 {
        self.mqes() as u32 + 1
    }

    /// Contiguous queues required.
    #[must_use]
    pub const fn cqr(self) -> bool {
        bits64(self.0, 16, 1) != 0
    }

    /// Arbitration mechanisms supported (bit 0: weighted round robin, bit 1: vendor).
    #[must_use]
    pub const fn ams(self) -> u8 {
        u8_at(bits64(self.0, 17, 2), 0)
    }

    /// Timeout (TO): worst-case time to become ready, 500 ms units.
    #[must_use]
    pub const fn to(self) -> u8 {
        u8_at(bits64(self.0, 24, 8), 0)
    }

    /// The ready timeout in milliseconds (TO * 500).
    #[must_use]
    pub const fn timeout_ms(self) -> u32 {
        self.to() as u32 * 500
    }

    /// Doorbell stride exponent (DSTRD): stride = 4 << DSTRD bytes.
    #[must_use]
    pub const fn dstrd(self) -> u8 {
        u8_at(bits64(self.0, 32, 4), 0)
    }

    /// NVM subsystem reset supported.
    #[must_use]
    pub const fn nssrs(self) -> bool {
        bits64(self.0, 36, 1) != 0
    }

    /// Command sets supported (CSS, bits 44:37).
    #[must_use]
    pub const fn css(self) -> u8 {
        u8_at(bits64(self.0, 37, 8), 0)
    }

    /// Boot partition support.
    #[must_use]
    pub const fn bps(self) -> bool {
        bits64(self.0, 45, 1) != 0
    }

    /// Controller power scope (bits 47:46).
    #[must_use]
    pub const fn cps(self) -> u8 {
        u8_at(bits64(self.0, 46, 2), 0)
    }

    /// Memory page size minimum exponent: 2^(12 + MPSMIN) bytes.
    #[must_use]
    pub const fn mpsmin(self) -> u8 {
        u8_at(bits64(self.0, 48, 4), 0)
    }

    /// Memory page size maximum exponent: 2^(12 + MPSMAX) bytes.
    #[must_use]
    pub const fn mpsmax(self) -> u8 {
        u8_at(bits64(self.0, 52, 4), 0)
    }

    /// Persistent memory region supported.
    #[must_use]
    pub const fn pmrs(self) -> bool {
        bits64(self.0, 56, 1) != 0
    }

    /// Controller memory buffer supported.
    #[must_use]
    pub const fn cmbs(self) -> bool {
        bits64(self.0, 57, 1) != 0
    }

    /// NVM subsystem shutdown supported.
    #[must_use]
    pub const fn nsss(self) -> bool {
        bits64(self.0, 58, 1) != 0
    }

    /// Controller ready modes supported (bits 60:59).
    #[must_use]
    pub const fn crms(self) -> u8 {
        u8_at(bits64(self.0, 59, 2), 0)
    }

    /// The smallest memory page size in bytes.
    #[must_use]
    pub const fn min_page_size(self) -> u64 {
        1 << (12 + self.mpsmin() as u32)
    }

    /// The largest memory page size in bytes.
    #[must_use]
    pub const fn max_page_size(self) -> u64 {
        1 << (12 + self.mpsmax() as u32)
    }

    /// Doorbell stride in bytes.
    #[must_use]
    pub const fn doorbell_stride(self) -> u64 {
        4 << self.dstrd()
    }
}

/// Version (VS, 0x08; also Identify Controller VER).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Vs(pub u32);

impl Vs {
    /// NVMe 1.0.
    pub const V1_0: Vs = Vs::new(1, 0, 0);
    /// NVMe 1.2.
    pub const V1_2: Vs = Vs::new(1, 2, 0);
    /// NVMe 1.3.
    pub const V1_3: Vs = Vs::new(1, 3, 0);
    /// NVMe 1.4.
    pub const V1_4: Vs = Vs::new(1, 4, 0);
    /// NVMe 2.0.
    pub const V2_0: Vs = Vs::new(2, 0, 0);

    /// Version `major.minor.tertiary`.
    #[must_use]
    pub const fn new(major: u16, minor: u8, tertiary: u8) -> Self {
        Vs(((major as u32) << 16) | ((minor as u32) << 8) | tertiary as u32)
    }

    /// Major version.
    #[must_use]
    pub const fn major(self) -> u16 {
        u16_at(self.0, 16)
    }

    /// Minor version.
    #[must_use]
    pub const fn minor(self) -> u8 {
        u8_at(self.0, 8)
    }

    /// Tertiary version.
    #[must_use]
    pub const fn tertiary(self) -> u8 {
        u8_at(self.0, 0)
    }
}

impl fmt::Display for Vs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major(), self.minor(), self.tertiary())
    }
}

/// Replaces bits `lo..lo+len` of `v` with `x`.
const fn set_bits(v: u32, lo: u32, len: u32, x: u32) -> u32 {
    let mask = ((1u32 << len) - 1) << lo;
    (v & !mask) | ((x << lo) & mask)
}

/// Controller Configuration (CC, 0x14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Cc(pub u32);

impl Cc {
    /// CSS: the NVM command set.
    pub const CSS_NVM: u8 = 0;
    /// CSS: all I/O command sets CAP.CSS reports.
    pub const CSS_ALL: u8 = 6;
    /// CSS: admin command set only.
    pub const CSS_ADMIN_ONLY: u8 = 7;
    /// SHN: no notification.
    pub const SHN_NONE: u8 = 0;
    /// SHN: normal shutdown.
    pub const SHN_NORMAL: u8 = 1;
    /// SHN: abrupt shutdown.
    pub const SHN_ABRUPT: u8 = 2;

    /// The configuration a host writes to enable a controller: NVM
    /// command set, memory page size 2^(12 + `mps`), round robin, 64-byte
    /// SQ and 16-byte CQ entries, EN set.
    #[must_use]
    pub const fn enabled(mps: u8) -> Self {
        Cc(0)
            .with_css(Cc::CSS_NVM)
            .with_mps(mps)
            .with_iosqes(6)
            .with_iocqes(4)
            .with_en(true)
    }

    /// Enable.
    #[must_use]
    pub const fn en(self) -> bool {
        bits(self.0, 0, 1) != 0
    }

    /// I/O command set selected.
    #[must_use]
    pub const fn css(self) -> u8 {
        u8_at(bits(self.0, 4, 3), 0)
    }

    /// Memory page size exponent: 2^(12 + MPS) bytes.
    #[must_use]
    pub const fn mps(self) -> u8 {
        u8_at(bits(self.0, 7, 4), 0)
    }

    /// Arbitration mechanism selected.
    #[must_use]
    pub const fn ams(self) -> u8 {
        u8_at(bits(self.0, 11, 3), 0)
    }

    /// Shutdown notification.
    #[must_use]
    pub const fn shn(self) -> u8 {
        u8_at(bits(self.0, 14, 2), 0)
    }

    /// I/O submission queue entry size, log2 bytes.
    #[must_use]
    pub const fn iosqes(self) -> u8 {
        u8_at(bits(self.0, 16, 4), 0)
    }

    /// I/O completion queue entry size, log2 bytes.
    #[must_use]
    pub const fn iocqes(self) -> u8 {
        u8_at(bits(self.0, 20, 4), 0)
    }

    /// Controller ready independent of media enable.
    #[must_use]
    pub const fn crime(self) -> bool {
        bits(self.0, 24, 1) != 0
    }

    /// With EN set to `v`.
    #[must_use]
    pub const fn with_en(self, v: bool) -> Self {
        Cc(set_bits(self.0, 0, 1, flag(v, 0)))
    }

    /// With CSS `v` (3 bits).
    #[must_use]
    pub const fn with_css(self, v: u8) -> Self {
        Cc(set_bits(self.0, 4, 3, v as u32))
    }

    /// With MPS `v` (4 bits).
    #[must_use]
    pub const fn with_mps(self, v: u8) -> Self {
        Cc(set_bits(self.0, 7, 4, v as u32))
    }

    /// With AMS `v` (3 bits).
    #[must_use]
    pub const fn with_ams(self, v: u8) -> Self {
        Cc(set_bits(self.0, 11, 3, v as u32))
    }

    /// With SHN `v` (2 bits).
    #[must_use]
    pub const fn with_shn(self, v: u8) -> Self {
        Cc(set_bits(self.0, 14, 2, v as u32))
    }

    /// With IOSQES `v` (4 bits).
    #[must_use]
    pub const fn with_iosqes(self, v: u8) -> Self {
        Cc(set_bits(self.0, 16, 4, v as u32))
    }

    /// With IOCQES `v` (4 bits).
    #[must_use]
    pub const fn with_iocqes(self, v: u8) -> Self {
        Cc(set_bits(self.0, 20, 4, v as u32))
    }
}

/// Controller Status (CSTS, 0x1c).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Csts(pub u32);

impl Csts {
    /// SHST: normal operation.
    pub const SHST_NORMAL: u8 = 0;
    /// SHST: shutdown processing occurring.
    pub const SHST_OCCURRING: u8 = 1;
    /// SHST: shutdown processing complete.
    pub const SHST_COMPLETE: u8 = 2;

    /// Ready.
    #[must_use]
    pub const fn rdy(self) -> bool {
        bits(self.0, 0, 1) != 0
    }

    /// Controller fatal status.
    #[must_use]
    pub const fn cfs(self) -> bool {
        bits(self.0, 1, 1) != 0
    }

    /// Shutdown status.
    #[must_use]
    pub const fn shst(self) -> u8 {
        u8_at(bits(self.0, 2, 2), 0)
    }

    /// NVM subsystem reset occurred.
    #[must_use]
    pub const fn nssro(self) -> bool {
        bits(self.0, 4, 1) != 0
    }

    /// Processing paused.
    #[must_use]
    pub const fn pp(self) -> bool {
        bits(self.0, 5, 1) != 0
    }

    /// Shutdown type (bit 6: NVM subsystem scope).
    #[must_use]
    pub const fn st(self) -> bool {
        bits(self.0, 6, 1) != 0
    }

    /// Whether the read returned all ones: the device is gone (surprise
    /// removal), the other fields mean nothing.
    #[must_use]
    pub const fn is_all_ones(self) -> bool {
        self.0 == u32::MAX
    }

    /// A status with RDY `rdy`, CFS `cfs` and SHST `shst` (a target's
    /// CSTS property).
    #[must_use]
    pub const fn new(rdy: bool, cfs: bool, shst: u8) -> Self {
        Csts(flag(rdy, 0) | flag(cfs, 1) | ((shst as u32 & 3) << 2))
    }
}

/// Admin Queue Attributes (AQA, 0x24): queue sizes, 0's based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Aqa(pub u32);

impl Aqa {
    /// Admin queue sizes `asqs` and `acqs`, 0's based (entries - 1, 12 bits).
    #[must_use]
    pub const fn new(asqs: u16, acqs: u16) -> Self {
        Aqa(((asqs as u32) & 0xfff) | (((acqs as u32) & 0xfff) << 16))
    }

    /// Admin submission queue size, 0's based.
    #[must_use]
    pub const fn asqs(self) -> u16 {
        u16_at(bits(self.0, 0, 12), 0)
    }

    /// Admin completion queue size, 0's based.
    #[must_use]
    pub const fn acqs(self) -> u16 {
        u16_at(bits(self.0, 16, 12), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn qemu_cap() {
        // The CAP QEMU's emulated controller reports (the VM harness README).
        let cap = Cap(0x0040_0820_0f01_07ff);
        assert_eq!(cap.mqes(), 0x7ff);
        assert_eq!(cap.max_queue_entries(), 2048);
        assert!(cap.cqr());
        assert_eq!(cap.to(), 0x0f);
        assert_eq!(cap.timeout_ms(), 7500);
        assert_eq!(cap.dstrd(), 0);
        assert!(!cap.nssrs());
        assert_eq!(cap.css(), 0x41);
        assert_eq!(cap.css() & Cap::CSS_NVM, Cap::CSS_NVM);
        assert_eq!(cap.mpsmin(), 0);
        assert_eq!(cap.mpsmax(), 4);
        assert_eq!((cap.min_page_size(), cap.max_page_size()), (4096, 65536));
        assert!(!cap.cmbs() && !cap.pmrs());
        assert_eq!(cap.doorbell_stride(), 4);
    }

    #[test]
    fn cc_csts_aqa() {
        let cc = Cc::enabled(0);
        assert_eq!(cc.0, 0x0046_0001);
        assert!(cc.en());
        assert_eq!((cc.iosqes(), cc.iocqes(), cc.mps(), cc.css()), (6, 4, 0, 0));
        let down = cc.with_shn(Cc::SHN_NORMAL);
        assert_eq!(down.0, 0x0046_4001);
        assert_eq!(down.with_en(false).0, 0x0046_4000);
        assert_eq!(Cc(0).with_mps(0xff).mps(), 0xf);
        let cs = Csts(0b1001);
        assert!(cs.rdy() && !cs.cfs());
        assert_eq!(cs.shst(), Csts::SHST_COMPLETE);
        assert!(Csts(u32::MAX).is_all_ones());
        assert_eq!(Csts::new(true, false, Csts::SHST_COMPLETE), cs);
        let a = Aqa::new(31, 31);
        assert_eq!(a.0, 0x001f_001f);
        assert_eq!((a.asqs(), a.acqs()), (31, 31));
        assert_eq!(Vs(0x0001_0400).to_string(), "1.4.0");
        assert_eq!(Vs::new(1, 4, 0), Vs::V1_4);
        assert!(Vs::V2_0 > Vs::V1_4);
    }

    #[test]
    fn doorbells_and_properties() {
        assert_eq!(doorbell_offset(0, false, 0), 0x1000);
        assert_eq!(doorbell_offset(0, true, 0), 0x1004);
        assert_eq!(doorbell_offset(1, false, 0), 0x1008);
        assert_eq!(doorbell_offset(3, true, 2), 0x1000 + 7 * 16);
        assert_eq!(
            doorbell_offset(u16::MAX, true, 0xff),
            0x1000 + 131_071 * (4 << 15)
        );
        assert_eq!(property_size(offset::CAP), Some(PropertySize::Eight));
        assert_eq!(
            property_size(offset::CSTS).map(PropertySize::bytes),
            Some(4)
        );
        assert_eq!(property_size(offset::AQA), None);
        assert_eq!(property_size(offset::DOORBELLS), None);
    }

    proptest! {
        #[test]
        fn cc_fields_round_trip(en: bool, css in 0u8..8, mps in 0u8..16, ams in 0u8..8, shn in 0u8..4, sq in 0u8..16, cq in 0u8..16) {
            let cc = Cc(0).with_en(en).with_css(css).with_mps(mps).with_ams(ams).with_shn(shn).with_iosqes(sq).with_iocqes(cq);
            prop_assert_eq!((cc.en(), cc.css(), cc.mps(), cc.ams(), cc.shn(), cc.iosqes(), cc.iocqes()), (en, css, mps, ams, shn, sq, cq));
        }

        #[test]
        fn doorbells_are_strided(qid in 0u16..1000, dstrd in 0u8..16) {
            let sq = doorbell_offset(qid, false, dstrd);
            let cq = doorbell_offset(qid, true, dstrd);
            prop_assert_eq!(cq - sq, 4u64 << dstrd);
            prop_assert_eq!(doorbell_offset(qid + 1, false, dstrd) - cq, 4u64 << dstrd);
        }
    }
}
