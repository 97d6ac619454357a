//! Identify Controller (CNS 0x01, 4096 bytes) and its power state
//! descriptors.

use std::borrow::Cow;

use zerocopy::little_endian::{U128, U16, U32};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::Result;
use crate::regs::Vs;
use crate::text::{self, PAD_NUL, PAD_SPACE};

/// Controller types (CNTRLTYPE, byte 111).
pub mod cntrltype {
    /// Not reported (controllers before NVMe 1.4).
    pub const NOT_REPORTED: u8 = 0;
    /// I/O controller.
    pub const IO: u8 = 1;
    /// Discovery controller.
    pub const DISCOVERY: u8 = 2;
    /// Administrative controller.
    pub const ADMIN: u8 = 3;
}

/// Optional Admin Command Support bits (OACS).
pub mod oacs {
    /// Security Send / Receive.
    pub const SECURITY: u16 = 1 << 0;
    /// Format NVM.
    pub const FORMAT: u16 = 1 << 1;
    /// Firmware Commit / Image Download.
    pub const FIRMWARE: u16 = 1 << 2;
    /// Namespace Management.
    pub const NS_MANAGEMENT: u16 = 1 << 3;
    /// Device Self-test.
    pub const SELF_TEST: u16 = 1 << 4;
    /// Directives.
    pub const DIRECTIVES: u16 = 1 << 5;
    /// NVMe-MI Send / Receive.
    pub const NVME_MI: u16 = 1 << 6;
    /// Virtualization Management.
    pub const VIRTUALIZATION: u16 = 1 << 7;
    /// Doorbell Buffer Config.
    pub const DOORBELL_BUFFER_CONFIG: u16 = 1 << 8;
    /// Get LBA Status.
    pub const GET_LBA_STATUS: u16 = 1 << 9;
    /// Command and Feature Lockdown.
    pub const LOCKDOWN: u16 = 1 << 10;
}

/// Optional NVM Command Support bits (ONCS).
pub mod oncs {
    /// Compare.
    pub const COMPARE: u16 = 1 << 0;
    /// Write Uncorrectable.
    pub const WRITE_UNCORRECTABLE: u16 = 1 << 1;
    /// Dataset Management.
    pub const DSM: u16 = 1 << 2;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u16 = 1 << 3;
    /// The Save field of Set Features and the Select field of Get Features.
    pub const SAVE_SELECT: u16 = 1 << 4;
    /// Reservations.
    pub const RESERVATIONS: u16 = 1 << 5;
    /// Timestamp feature.
    pub const TIMESTAMP: u16 = 1 << 6;
    /// Verify.
    pub const VERIFY: u16 = 1 << 7;
    /// Copy.
    pub const COPY: u16 = 1 << 8;
}

/// How the controller supports SGLs (SGLS bits 1:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SglSupport {
    /// No SGLs (PRPs only).
    None,
    /// SGLs without alignment rules.
    Supported,
    /// SGLs with dword-aligned data blocks.
    DwordAligned,
    /// Reserved value 11b.
    Reserved,
}

/// A power state descriptor (32 bytes).
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
pub struct PowerStateDescriptor {
    /// Maximum power (centiwatts, or 0.0001 W units when MXPS).
    pub mp: U16,
    /// Reserved.
    pub rsvd2: u8,
    /// MXPS (bit 0: max power scale), NOPS (bit 1: non-operational).
    pub flags: u8,
    /// Entry latency, µs.
    pub enlat: U32,
    /// Exit latency, µs.
    pub exlat: U32,
    /// Relative read throughput (bits 4:0).
    pub rrt: u8,
    /// Relative read latency (bits 4:0).
    pub rrl: u8,
    /// Relative write throughput (bits 4:0).
    pub rwt: u8,
    /// Relative write latency (bits 4:0).
    pub rwl: u8,
    /// Idle power.
    pub idlp: U16,
    /// Idle power scale (bits 7:6).
    pub ips: u8,
    /// Reserved.
    pub rsvd19: u8,
    /// Active power.
    pub actp: U16,
    /// Active power workload (bits 2:0) and scale (bits 7:6).
    pub apw_aps: u8,
    /// Reserved.
    pub rsvd23: [u8; 9],
}

const _: () = {
    assert!(size_of::<PowerStateDescriptor>() == 32);
    assert!(std::mem::offset_of!(PowerStateDescriptor, enlat) == 4);
    assert!(std::mem::offset_of!(PowerStateDescriptor, idlp) == 16);
    assert!(std::mem::offset_of!(PowerStateDescriptor, actp) == 20);
};

/// Identify Controller data (NVMe Base Specification 2.0, figure 275).
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct IdentifyController {
    /// PCI vendor id.
    pub vid: U16,
    /// PCI subsystem vendor id.
    pub ssvid: U16,
    /// Serial number (ASCII, space padded): see [`IdentifyController::serial`].
    pub sn: [u8; 20],
    /// Model number (ASCII, space padded).
    pub mn: [u8; 40],
    /// Firmware revision (ASCII, space padded).
    pub fr: [u8; 8],
    /// Recommended arbitration burst.
    pub rab: u8,
    /// IEEE OUI identifier.
    pub ieee: [u8; 3],
    /// Multi-path I/O and namespace sharing capabilities.
    pub cmic: u8,
    /// Maximum data transfer size: 2^MDTS minimum pages (0 = no limit).
    pub mdts: u8,
    /// Controller id.
    pub cntlid: U16,
    /// Version (same layout as the VS register).
    pub ver: U32,
    /// RTD3 resume latency, µs.
    pub rtd3r: U32,
    /// RTD3 entry latency, µs.
    pub rtd3e: U32,
    /// Optional asynchronous events supported.
    pub oaes: U32,
    /// Controller attributes.
    pub ctratt: U32,
    /// Read recovery levels supported.
    pub rrls: U16,
    /// Reserved.
    pub rsvd102: [u8; 9],
    /// Controller type ([`cntrltype`]).
    pub cntrltype: u8,
    /// FRU globally unique identifier.
    pub fguid: [u8; 16],
    /// Command retry delay times 1..3, 100 ms units.
    pub crdt: [U16; 3],
    /// Reserved.
    pub rsvd134: [u8; 119],
    /// NVM subsystem report.
    pub nvmsr: u8,
    /// VPD write cycle information.
    pub vwci: u8,
    /// Management endpoint capabilities.
    pub mec: u8,
    /// Optional admin command support ([`oacs`]).
    pub oacs: U16,
    /// Abort command limit (0's based).
    pub acl: u8,
    /// Asynchronous event request limit (0's based).
    pub aerl: u8,
    /// Firmware updates.
    pub frmw: u8,
    /// Log page attributes.
    pub lpa: u8,
    /// Error log page entries (0's based).
    pub elpe: u8,
    /// Number of power states supported (0's based).
    pub npss: u8,
    /// Admin vendor specific command configuration.
    pub avscc: u8,
    /// Autonomous power state transition attributes.
    pub apsta: u8,
    /// Warning composite temperature threshold, kelvin.
    pub wctemp: U16,
    /// Critical composite temperature threshold, kelvin.
    pub cctemp: U16,
    /// Maximum time for firmware activation, 100 ms units.
    pub mtfa: U16,
    /// Host memory buffer preferred size, 4 KiB units.
    pub hmpre: U32,
    /// Host memory buffer minimum size, 4 KiB units.
    pub hmmin: U32,
    /// Total NVM capacity, bytes.
    pub tnvmcap: U128,
    /// Unallocated NVM capacity, bytes.
    pub unvmcap: U128,
    /// Replay protected memory block support.
    pub rpmbs: U32,
    /// Extended device self-test time, minutes.
    pub edstt: U16,
    /// Device self-test options.
    pub dsto: u8,
    /// Firmware update granularity, 4 KiB units.
    pub fwug: u8,
    /// Keep alive support: granularity in 100 ms units (0 = unsupported).
    pub kas: U16,
    /// Host controlled thermal management attributes.
    pub hctma: U16,
    /// Minimum thermal management temperature.
    pub mntmt: U16,
    /// Maximum thermal management temperature.
    pub mxtmt: U16,
    /// Sanitize capabilities.
    pub sanicap: U32,
    /// Host memory buffer minimum descriptor entry size.
    pub hmminds: U32,
    /// Host memory maximum descriptors entries.
    pub hmmaxd: U16,
    /// NVM set identifier maximum.
    pub nsetidmax: U16,
    /// Endurance group identifier maximum.
    pub endgidmax: U16,
    /// ANA transition time, seconds.
    pub anatt: u8,
    /// Asymmetric namespace access capabilities.
    pub anacap: u8,
    /// ANA group identifier maximum.
    pub anagrpmax: U32,
    /// Number of ANA group identifiers.
    pub nanagrpid: U32,
    /// Persistent event log size, 64 KiB units.
    pub pels: U32,
    /// Domain identifier.
    pub domainid: U16,
    /// Reserved.
    pub rsvd358: [u8; 10],
    /// Max endurance group capacity, bytes.
    pub megcap: U128,
    /// Reserved.
    pub rsvd384: [u8; 128],
    /// Submission queue entry size: required (bits 3:0) and maximum (bits 7:4), log2 bytes.
    pub sqes: u8,
    /// Completion queue entry size: required (bits 3:0) and maximum (bits 7:4), log2 bytes.
    pub cqes: u8,
    /// Maximum outstanding commands (fabrics).
    pub maxcmd: U16,
    /// Number of namespaces (the largest namespace id).
    pub nn: U32,
    /// Optional NVM command support ([`oncs`]).
    pub oncs: U16,
    /// Fused operation support (bit 0: Compare and Write).
    pub fuses: U16,
    /// Format NVM attributes.
    pub fna: u8,
    /// Volatile write cache: present (bit 0), flush broadcast (bits 2:1).
    pub vwc: u8,
    /// Atomic write unit normal (0's based, blocks).
    pub awun: U16,
    /// Atomic write unit power fail (0's based, blocks).
    pub awupf: U16,
    /// I/O command set vendor specific command configuration (NVSCC).
    pub nvscc: u8,
    /// Namespace write protection capabilities.
    pub nwpc: u8,
    /// Atomic compare and write unit (0's based, blocks).
    pub acwu: U16,
    /// Copy descriptor formats supported.
    pub ocfs: U16,
    /// SGL support.
    pub sgls: U32,
    /// Maximum number of allowed namespaces.
    pub mnan: U32,
    /// Maximum domain namespace attachments.
    pub maxdna: U128,
    /// Maximum I/O controller namespace attachments.
    pub maxcna: U32,
    /// Reserved.
    pub rsvd564: [u8; 204],
    /// NVM subsystem NQN (UTF-8, NUL padded).
    pub subnqn: [u8; 256],
    /// Reserved.
    pub rsvd1024: [u8; 768],
    /// Fabrics: I/O queue command capsule supported size, 16-byte units.
    pub ioccsz: U32,
    /// Fabrics: I/O queue response capsule supported size, 16-byte units.
    pub iorcsz: U32,
    /// Fabrics: in capsule data offset, 16-byte units.
    pub icdoff: U16,
    /// Fabrics: controller attributes (bit 0: static controller model).
    pub fcatt: u8,
    /// Fabrics: maximum SGL data block descriptors.
    pub msdbd: u8,
    /// Fabrics: optional fabric commands supported (bit 0: Disconnect).
    pub ofcs: U16,
    /// Reserved.
    pub rsvd1806: [u8; 242],
    /// Power state descriptors 0..31.
    pub psd: [PowerStateDescriptor; 32],
    /// Vendor specific.
    pub vs: [u8; 1024],
}

const _: () = {
    use std::mem::offset_of;
    type C = IdentifyController;
    assert!(size_of::<C>() == 4096);
    assert!(offset_of!(C, sn) == 4);
    assert!(offset_of!(C, mn) == 24);
    assert!(offset_of!(C, fr) == 64);
    assert!(offset_of!(C, rab) == 72);
    assert!(offset_of!(C, cmic) == 76);
    assert!(offset_of!(C, mdts) == 77);
    assert!(offset_of!(C, cntlid) == 78);
    assert!(offset_of!(C, ver) == 80);
    assert!(offset_of!(C, oaes) == 92);
    assert!(offset_of!(C, ctratt) == 96);
    assert!(offset_of!(C, cntrltype) == 111);
    assert!(offset_of!(C, fguid) == 112);
    assert!(offset_of!(C, crdt) == 128);
    assert!(offset_of!(C, nvmsr) == 253);
    assert!(offset_of!(C, oacs) == 256);
    assert!(offset_of!(C, acl) == 258);
    assert!(offset_of!(C, aerl) == 259);
    assert!(offset_of!(C, frmw) == 260);
    assert!(offset_of!(C, lpa) == 261);
    assert!(offset_of!(C, elpe) == 262);
    assert!(offset_of!(C, npss) == 263);
    assert!(offset_of!(C, wctemp) == 266);
    assert!(offset_of!(C, tnvmcap) == 280);
    assert!(offset_of!(C, unvmcap) == 296);
    assert!(offset_of!(C, kas) == 320);
    assert!(offset_of!(C, sanicap) == 328);
    assert!(offset_of!(C, anatt) == 342);
    assert!(offset_of!(C, anagrpmax) == 344);
    assert!(offset_of!(C, pels) == 352);
    assert!(offset_of!(C, megcap) == 368);
    assert!(offset_of!(C, sqes) == 512);
    assert!(offset_of!(C, cqes) == 513);
    assert!(offset_of!(C, maxcmd) == 514);
    assert!(offset_of!(C, nn) == 516);
    assert!(offset_of!(C, oncs) == 520);
    assert!(offset_of!(C, fuses) == 522);
    assert!(offset_of!(C, fna) == 524);
    assert!(offset_of!(C, vwc) == 525);
    assert!(offset_of!(C, awun) == 526);
    assert!(offset_of!(C, awupf) == 528);
    assert!(offset_of!(C, nvscc) == 530);
    assert!(offset_of!(C, acwu) == 532);
    assert!(offset_of!(C, sgls) == 536);
    assert!(offset_of!(C, mnan) == 540);
    assert!(offset_of!(C, maxcna) == 560);
    assert!(offset_of!(C, subnqn) == 768);
    assert!(offset_of!(C, ioccsz) == 1792);
    assert!(offset_of!(C, iorcsz) == 1796);
    assert!(offset_of!(C, icdoff) == 1800);
    assert!(offset_of!(C, fcatt) == 1802);
    assert!(offset_of!(C, msdbd) == 1803);
    assert!(offset_of!(C, ofcs) == 1804);
    assert!(offset_of!(C, psd) == 2048);
    assert!(offset_of!(C, vs) == 3072);
};

impl Default for IdentifyController {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

impl IdentifyController {
    /// Serial number, trimmed.
    #[must_use]
    pub fn serial(&self) -> Cow<'_, str> {
        text::trim(&self.sn)
    }

    /// Model number, trimmed.
    #[must_use]
    pub fn model(&self) -> Cow<'_, str> {
        text::trim(&self.mn)
    }

    /// Firmware revision, trimmed.
    #[must_use]
    pub fn firmware(&self) -> Cow<'_, str> {
        text::trim(&self.fr)
    }

    /// NVM subsystem NQN, trimmed.
    #[must_use]
    pub fn subnqn(&self) -> Cow<'_, str> {
        text::trim(&self.subnqn)
    }

    /// Sets the serial number (at most 20 bytes, space padded).
    pub fn set_serial(&mut self, s: &str) -> Result<()> {
        text::pad(&mut self.sn, s, PAD_SPACE, "serial number")
    }

    /// Sets the model number (at most 40 bytes, space padded).
    pub fn set_model(&mut self, s: &str) -> Result<()> {
        text::pad(&mut self.mn, s, PAD_SPACE, "model number")
    }

    /// Sets the firmware revision (at most 8 bytes, space padded).
    pub fn set_firmware(&mut self, s: &str) -> Result<()> {
        text::pad(&mut self.fr, s, PAD_SPACE, "firmware revision")
    }

    /// Sets the subsystem NQN (at most 255 bytes, NUL padded).
    pub fn set_subnqn(&mut self, s: &str) -> Result<()> {
        text::pad(&mut self.subnqn, s, PAD_NUL, "subnqn")
    }

    /// The NVMe version the controller implements.
    #[must_use]
    pub fn version(&self) -> Vs {
        Vs(self.ver.get())
    }

    /// The largest data transfer of one command, in bytes, given the
    /// minimum memory page size CAP.MPSMIN (4 bits: page = 2^(12 + MPSMIN)).
    /// `None` when the controller sets no limit (MDTS 0) or the limit
    /// does not fit in 64 bits.
    #[must_use]
    pub fn max_transfer_bytes(&self, mpsmin: u8) -> Option<u64> {
        pages_to_bytes(self.mdts, mpsmin)
    }

    /// Whether ONCS has every bit of `mask` ([`oncs`]).
    #[must_use]
    pub fn oncs_has(&self, mask: u16) -> bool {
        self.oncs.get() & mask == mask
    }

    /// Whether the controller supports Compare.
    #[must_use]
    pub fn supports_compare(&self) -> bool {
        self.oncs_has(oncs::COMPARE)
    }

    /// Whether the controller supports Write Uncorrectable.
    #[must_use]
    pub fn supports_write_uncorrectable(&self) -> bool {
        self.oncs_has(oncs::WRITE_UNCORRECTABLE)
    }

    /// Whether the controller supports Dataset Management (deallocate).
    #[must_use]
    pub fn supports_dsm(&self) -> bool {
        self.oncs_has(oncs::DSM)
    }

    /// Whether the controller supports Write Zeroes.
    #[must_use]
    pub fn supports_write_zeroes(&self) -> bool {
        self.oncs_has(oncs::WRITE_ZEROES)
    }

    /// Whether the controller supports Verify.
    #[must_use]
    pub fn supports_verify(&self) -> bool {
        self.oncs_has(oncs::VERIFY)
    }

    /// Whether the controller supports Copy.
    #[must_use]
    pub fn supports_copy(&self) -> bool {
        self.oncs_has(oncs::COPY)
    }

    /// Whether the controller supports reservations.
    #[must_use]
    pub fn supports_reservations(&self) -> bool {
        self.oncs_has(oncs::RESERVATIONS)
    }

    /// Whether the controller supports the fused Compare and Write.
    #[must_use]
    pub fn supports_compare_and_write(&self) -> bool {
        self.fuses.get() & 1 != 0
    }

    /// Whether a volatile write cache is present (Flush is meaningful).
    #[must_use]
    pub fn volatile_write_cache(&self) -> bool {
        self.vwc & 1 != 0
    }

    /// How the controller supports SGLs.
    #[must_use]
    pub fn sgl_support(&self) -> SglSupport {
        match self.sgls.get() & 3 {
            0 => SglSupport::None,
            1 => SglSupport::Supported,
            2 => SglSupport::DwordAligned,
            _ => SglSupport::Reserved,
        }
    }

    /// Whether keyed SGL data blocks are supported (SGLS bit 2).
    #[must_use]
    pub fn supports_keyed_sgl(&self) -> bool {
        self.sgls.get() & (1 << 2) != 0
    }

    /// Whether the SGL bit bucket descriptor is supported (SGLS bit 16).
    #[must_use]
    pub fn supports_sgl_bit_bucket(&self) -> bool {
        self.sgls.get() & (1 << 16) != 0
    }

    /// Whether offset SGL data blocks (in-capsule data) are supported (SGLS bit 20).
    #[must_use]
    pub fn supports_sgl_offset(&self) -> bool {
        self.sgls.get() & (1 << 20) != 0
    }

    /// Required submission queue entry size in bytes (64 for NVMe).
    #[must_use]
    pub fn sq_entry_size(&self) -> u32 {
        1 << (self.sqes & 0xf)
    }

    /// Required completion queue entry size in bytes (16 for NVMe).
    #[must_use]
    pub fn cq_entry_size(&self) -> u32 {
        1 << (self.cqes & 0xf)
    }

    /// Keep alive timer granularity in ms (`None` if keep alive is unsupported).
    #[must_use]
    pub fn keep_alive_granularity_ms(&self) -> Option<u32> {
        match self.kas.get() {
            0 => None,
            k => Some(u32::from(k) * 100),
        }
    }

    /// Fabrics: bytes of in-capsule data an I/O command capsule may carry
    /// (IOCCSZ * 16 minus the 64-byte command).
    #[must_use]
    pub fn in_capsule_data_bytes(&self) -> u32 {
        self.ioccsz.get().saturating_mul(16).saturating_sub(64)
    }
}

/// 2^`exp` pages of 2^(12 + `mpsmin`) bytes; `None` for `exp` 0 (no
/// limit) or a result past 64 bits.
pub(crate) fn pages_to_bytes(exp: u8, mpsmin: u8) -> Option<u64> {
    if exp == 0 {
        return None;
    }
    let shift = u32::from(exp) + 12 + u32::from(mpsmin & 0xf);
    1u64.checked_shl(shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_read_back() {
        let mut c = IdentifyController::default();
        c.set_serial("SN1").unwrap();
        c.set_model("bdevkit").unwrap();
        c.set_firmware("0.1").unwrap();
        c.set_subnqn("nqn.2016-06.io.spdk:cnode1").unwrap();
        c.mdts = 5;
        c.oncs.set(oncs::WRITE_ZEROES | oncs::DSM);
        c.vwc = 1;
        c.ioccsz.set(260);
        assert_eq!(&c.as_bytes()[4..8], b"SN1 ");
        assert_eq!(c.serial(), "SN1");
        assert_eq!(c.model(), "bdevkit");
        assert_eq!(c.subnqn(), "nqn.2016-06.io.spdk:cnode1");
        assert_eq!(c.max_transfer_bytes(0), Some(128 * 1024));
        assert!(c.supports_write_zeroes() && c.supports_dsm() && !c.supports_compare());
        assert!(c.volatile_write_cache());
        assert_eq!(c.in_capsule_data_bytes(), 4096);
        assert!(c.set_serial("123456789012345678901").is_err());
        let back = IdentifyController::read_from_bytes(c.as_bytes()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn transfer_limit_edges() {
        assert_eq!(pages_to_bytes(0, 0), None);
        assert_eq!(pages_to_bytes(7, 0), Some(512 * 1024));
        assert_eq!(pages_to_bytes(1, 15), Some(1 << 28));
        assert_eq!(pages_to_bytes(52, 0), None);
        assert_eq!(pages_to_bytes(255, 255), None);
    }
}
