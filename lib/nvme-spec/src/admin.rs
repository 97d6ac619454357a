//! Admin commands: Identify, Get Log Page, Get/Set Features, Create and
//! Delete I/O SQ/CQ, Abort, Asynchronous Event Request, Keep Alive.
//!
//! Each command is a struct of its fields, encoded into and decoded from
//! a [`Sqe`] with the [`Command`] trait; 0's based fields (queue sizes,
//! NUMD) are stored as the spec encodes them and have a 1-based accessor.
//! [`AdminCommand::decode`] dispatches a received entry (the NVMe-oF
//! target's admin queue); other admin opcodes (Format NVM, Firmware,
//! Namespace Management, ...) are named in [`AdminOpcode`] only.

use crate::bits::{bit, bits, flag, hi32, lo32, u16_at, u64_of, u8_at};
use crate::cmd::{Command, Sqe};
use crate::error::{Error, Result};
use crate::features::Feature;
use crate::opcode::AdminOpcode;

/// Identify CNS values (Controller or Namespace Structure, dword 10 bits 7:0).
pub mod cns {
    /// Identify Namespace (NVM command set) of `nsid`.
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u8 = 0x01;
    /// Active namespace id list (ids greater than `nsid`).
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    /// Namespace identification descriptor list of `nsid`.
    pub const NS_ID_DESCRIPTORS: u8 = 0x03;
    /// NVM set list.
    pub const NVM_SET_LIST: u8 = 0x04;
    /// I/O command set specific Identify Namespace (CSI selects the set).
    pub const CS_NAMESPACE: u8 = 0x05;
    /// I/O command set specific Identify Controller (CSI selects the set).
    pub const CS_CONTROLLER: u8 = 0x06;
    /// Active namespace id list of one I/O command set.
    pub const CS_ACTIVE_NS_LIST: u8 = 0x07;
    /// I/O command set independent Identify Namespace.
    pub const NS_INDEPENDENT: u8 = 0x08;
    /// Allocated namespace id list.
    pub const ALLOCATED_NS_LIST: u8 = 0x10;
    /// Identify Namespace of an allocated namespace.
    pub const ALLOCATED_NAMESPACE: u8 = 0x11;
    /// Controllers attached to `nsid`.
    pub const NS_CONTROLLER_LIST: u8 = 0x12;
    /// Controllers in the NVM subsystem.
    pub const CONTROLLER_LIST: u8 = 0x13;
    /// Primary controller capabilities.
    pub const PRIMARY_CONTROLLER_CAPABILITIES: u8 = 0x14;
    /// Secondary controller list.
    pub const SECONDARY_CONTROLLER_LIST: u8 = 0x15;
    /// UUID list.
    pub const UUID_LIST: u8 = 0x17;
    /// I/O command set data structure.
    pub const IO_COMMAND_SETS: u8 = 0x1c;
}

/// Command set identifiers (CSI).
pub mod csi {
    /// NVM command set.
    pub const NVM: u8 = 0x00;
    /// Key Value command set.
    pub const KEY_VALUE: u8 = 0x01;
    /// Zoned Namespace command set.
    pub const ZONED: u8 = 0x02;
}

/// Bytes every Identify command returns.
pub const IDENTIFY_DATA_LEN: usize = 4096;

/// Identify (0x06): returns 4096 bytes of the structure `cns` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Identify {
    /// Namespace id (the namespace, or the list start for CNS 2).
    pub nsid: u32,
    /// Controller or Namespace Structure ([`cns`]).
    pub cns: u8,
    /// Controller id (CNS 0x12, 0x13).
    pub cntid: u16,
    /// CNS specific identifier (NVM set id, domain id; dword 11 bits 15:0).
    pub cns_specific_id: u16,
    /// Command set identifier ([`csi`]; dword 11 bits 31:24).
    pub csi: u8,
    /// UUID index (dword 14 bits 6:0).
    pub uuid_index: u8,
}

impl Identify {
    /// Identify Controller.
    #[must_use]
    pub fn controller() -> Self {
        Identify {
            cns: cns::CONTROLLER,
            ..Identify::default()
        }
    }

    /// Identify Namespace of `nsid`.
    #[must_use]
    pub fn namespace(nsid: u32) -> Self {
        Identify {
            nsid,
            cns: cns::NAMESPACE,
            ..Identify::default()
        }
    }

    /// The active namespace ids above `after` (0 for the first page).
    #[must_use]
    pub fn active_ns_list(after: u32) -> Self {
        Identify {
            nsid: after,
            cns: cns::ACTIVE_NS_LIST,
            ..Identify::default()
        }
    }

    /// The namespace identification descriptors of `nsid`.
    #[must_use]
    pub fn ns_id_descriptors(nsid: u32) -> Self {
        Identify {
            nsid,
            cns: cns::NS_ID_DESCRIPTORS,
            ..Identify::default()
        }
    }

    /// The NVM command set specific Identify Controller (DMRL, DMRSL, WZSL ...).
    #[must_use]
    pub fn nvm_controller() -> Self {
        Identify {
            cns: cns::CS_CONTROLLER,
            csi: csi::NVM,
            ..Identify::default()
        }
    }
}

impl Command for Identify {
    const OPCODE: u8 = AdminOpcode::Identify as u8;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.nsid.set(self.nsid);
        sqe.cdw10
            .set(u32::from(self.cns) | (u32::from(self.cntid) << 16));
        sqe.cdw11
            .set(u32::from(self.cns_specific_id) | (u32::from(self.csi) << 24));
        sqe.cdw14.set(u32::from(self.uuid_index & 0x7f));
    }

    fn decode(sqe: &Sqe) -> Self {
        let (d10, d11) = (sqe.cdw10.get(), sqe.cdw11.get());
        Identify {
            nsid: sqe.nsid.get(),
            cns: u8_at(d10, 0),
            cntid: u16_at(d10, 16),
            cns_specific_id: u16_at(d11, 0),
            csi: u8_at(d11, 24),
            uuid_index: u8_at(bits(sqe.cdw14.get(), 0, 7), 0),
        }
    }
}

/// Get Log Page (0x02).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GetLogPage {
    /// Namespace id ([`crate::cmd::NSID_ALL`] for controller-wide pages).
    pub nsid: u32,
    /// Log page identifier ([`crate::log::lid`]).
    pub lid: u8,
    /// Log specific parameter (7 bits).
    pub lsp: u8,
    /// Retain Asynchronous Event: do not clear the event that reported the page.
    pub rae: bool,
    /// Number of dwords - 1 (NUMDU:NUMDL).
    pub numd: u32,
    /// Log specific identifier (dword 11 bits 31:16).
    pub lsi: u16,
    /// Byte offset into the page (LPOU:LPOL), or an entry index when `ot`.
    pub offset: u64,
    /// UUID index (dword 14 bits 6:0).
    pub uuid_index: u8,
    /// Offset Type: `offset` is an entry index, not bytes.
    pub ot: bool,
    /// Command set identifier.
    pub csi: u8,
}

impl GetLogPage {
    /// Reads `len_bytes` (a multiple of 4, at least 4) of page `lid`.
    pub fn new(lid: u8, nsid: u32, len_bytes: u32) -> Result<Self> {
        if len_bytes < 4 || !len_bytes.is_multiple_of(4) {
            return Err(Error::OutOfRange {
                what: "log page length",
                value: len_bytes.into(),
            });
        }
        Ok(GetLogPage {
            nsid,
            lid,
            numd: len_bytes / 4 - 1,
            ..GetLogPage::default()
        })
    }

    /// Bytes the command transfers.
    #[must_use]
    pub fn len_bytes(&self) -> u64 {
        (u64::from(self.numd) + 1) * 4
    }
}

impl Command for GetLogPage {
    const OPCODE: u8 = AdminOpcode::GetLogPage as u8;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.nsid.set(self.nsid);
        sqe.cdw10.set(
            u32::from(self.lid)
                | (u32::from(self.lsp & 0x7f) << 8)
                | flag(self.rae, 15)
                | ((self.numd & 0xffff) << 16),
        );
        sqe.cdw11
            .set((self.numd >> 16) | (u32::from(self.lsi) << 16));
        sqe.cdw12.set(lo32(self.offset));
        sqe.cdw13.set(hi32(self.offset));
        sqe.cdw14.set(
            u32::from(self.uuid_index & 0x7f) | flag(self.ot, 23) | (u32::from(self.csi) << 24),
        );
    }

    fn decode(sqe: &Sqe) -> Self {
        let (d10, d11, d14) = (sqe.cdw10.get(), sqe.cdw11.get(), sqe.cdw14.get());
        GetLogPage {
            nsid: sqe.nsid.get(),
            lid: u8_at(d10, 0),
            lsp: u8_at(bits(d10, 8, 7), 0),
            rae: bit(d10, 15),
            numd: (d10 >> 16) | ((d11 & 0xffff) << 16),
            lsi: u16_at(d11, 16),
            offset: u64_of(sqe.cdw12.get(), sqe.cdw13.get()),
            uuid_index: u8_at(bits(d14, 0, 7), 0),
            ot: bit(d14, 23),
            csi: u8_at(d14, 24),
        }
    }
}

/// Get Features select values (dword 10 bits 10:8).
pub mod sel {
    /// The current value.
    pub const CURRENT: u8 = 0;
    /// The default value.
    pub const DEFAULT: u8 = 1;
    /// The saved value.
    pub const SAVED: u8 = 2;
    /// The capabilities of the feature (saveable, changeable, per namespace).
    pub const SUPPORTED_CAPABILITIES: u8 = 3;
}

/// Get Features (0x0a). The value comes back in completion dword 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GetFeatures {
    /// Namespace id (for namespace specific features).
    pub nsid: u32,
    /// Feature identifier ([`crate::features::fid`]).
    pub fid: u8,
    /// Which value ([`sel`]).
    pub sel: u8,
    /// Feature specific dword 11.
    pub cdw11: u32,
    /// UUID index (dword 14 bits 6:0).
    pub uuid_index: u8,
}

impl GetFeatures {
    /// The current value of feature `F`.
    #[must_use]
    pub fn of<F: Feature>() -> Self {
        GetFeatures {
            fid: F::FID,
            ..GetFeatures::default()
        }
    }
}

impl Command for GetFeatures {
    const OPCODE: u8 = AdminOpcode::GetFeatures as u8;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.nsid.set(self.nsid);
        sqe.cdw10
            .set(u32::from(self.fid) | (u32::from(self.sel & 7) << 8));
        sqe.cdw11.set(self.cdw11);
        sqe.cdw14.set(u32::from(self.uuid_index & 0x7f));
    }

    fn decode(sqe: &Sqe) -> Self {
        let d10 = sqe.cdw10.get();
        GetFeatures {
            nsid: sqe.nsid.get(),
            fid: u8_at(d10, 0),
            sel: u8_at(bits(d10, 8, 3), 0),
            cdw11: sqe.cdw11.get(),
            uuid_index: u8_at(bits(sqe.cdw14.get(), 0, 7), 0),
        }
    }
}

/// Set Features (0x09). Some features take data (Host Identifier,
/// Timestamp ...): the caller points the data pointer at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SetFeatures {
    /// Namespace id (for namespace specific features).
    pub nsid: u32,
    /// Feature identifier ([`crate::features::fid`]).
    pub fid: u8,
    /// Save: keep the value across power cycles (dword 10 bit 31).
    pub save: bool,
    /// Feature specific dword 11 (the value of most features).
    pub cdw11: u32,
    /// Feature specific dword 12.
    pub cdw12: u32,
    /// Feature specific dword 13.
    pub cdw13: u32,
    /// UUID index (dword 14 bits 6:0).
    pub uuid_index: u8,
    /// Feature specific dword 15.
    pub cdw15: u32,
}

impl SetFeatures {
    /// Sets feature `F` to `value`.
    #[must_use]
    pub fn of<F: Feature>(value: &F) -> Self {
        SetFeatures {
            fid: F::FID,
            cdw11: value.to_dword(),
            ..SetFeatures::default()
        }
    }
}

impl Command for SetFeatures {
    const OPCODE: u8 = AdminOpcode::SetFeatures as u8;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.nsid.set(self.nsid);
        sqe.cdw10.set(u32::from(self.fid) | flag(self.save, 31));
        sqe.cdw11.set(self.cdw11);
        sqe.cdw12.set(self.cdw12);
        sqe.cdw13.set(self.cdw13);
        sqe.cdw14.set(u32::from(self.uuid_index & 0x7f));
        sqe.cdw15.set(self.cdw15);
    }

    fn decode(sqe: &Sqe) -> Self {
        let d10 = sqe.cdw10.get();
        SetFeatures {
            nsid: sqe.nsid.get(),
            fid: u8_at(d10, 0),
            save: bit(d10, 31),
            cdw11: sqe.cdw11.get(),
            cdw12: sqe.cdw12.get(),
            cdw13: sqe.cdw13.get(),
            uuid_index: u8_at(bits(sqe.cdw14.get(), 0, 7), 0),
            cdw15: sqe.cdw15.get(),
        }
    }
}

/// Create I/O Completion Queue (0x05).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CreateIoCq {
    /// Queue id (1..).
    pub qid: u16,
    /// Queue size - 1 (entries, 0's based).
    pub qsize: u16,
    /// Queue memory (PRP1: the queue itself when `pc`, else a PRP list).
    pub prp1: u64,
    /// Physically contiguous.
    pub pc: bool,
    /// Interrupts enabled.
    pub ien: bool,
    /// Interrupt vector (MSI-X).
    pub iv: u16,
}

impl Command for CreateIoCq {
    const OPCODE: u8 = AdminOpcode::CreateIoCq as u8;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.prp1.set(self.prp1);
        sqe.cdw10
            .set(u32::from(self.qid) | (u32::from(self.qsize) << 16));
        sqe.cdw11
            .set(flag(self.pc, 0) | flag(self.ien, 1) | (u32::from(self.iv) << 16));
    }

    fn decode(sqe: &Sqe) -> Self {
        let (d10, d11) = (sqe.cdw10.get(), sqe.cdw11.get());
        CreateIoCq {
            qid: u16_at(d10, 0),
            qsize: u16_at(d10, 16),
            prp1: sqe.prp1.get(),
            pc: bit(d11, 0),
            ien: bit(d11, 1),
            iv: u16_at(d11, 16),
        }
    }
}

/// Create I/O Submission Queue (0x01).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CreateIoSq {
    /// Queue id (1..).
    pub qid: u16,
    /// Queue size - 1 (entries, 0's based).
    pub qsize: u16,
    /// Queue memory (PRP1: the queue itself when `pc`, else a PRP list).
    pub prp1: u64,
    /// Physically contiguous.
    pub pc: bool,
    /// Queue priority for weighted round robin (2 bits; 0 = urgent).
    pub qprio: u8,
    /// The completion queue this queue posts to.
    pub cqid: u16,
    /// NVM set id (dword 12 bits 15:0).
    pub nvmsetid: u16,
}

impl Command for CreateIoSq {
    const OPCODE: u8 = AdminOpcode::CreateIoSq as u8;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.prp1.set(self.prp1);
        sqe.cdw10
            .set(u32::from(self.qid) | (u32::from(self.qsize) << 16));
        sqe.cdw11.set(
            flag(self.pc, 0) | (u32::from(self.qprio & 3) << 1) | (u32::from(self.cqid) << 16),
        );
        sqe.cdw12.set(u32::from(self.nvmsetid));
    }

    fn decode(sqe: &Sqe) -> Self {
        let (d10, d11) = (sqe.cdw10.get(), sqe.cdw11.get());
        CreateIoSq {
            qid: u16_at(d10, 0),
            qsize: u16_at(d10, 16),
            prp1: sqe.prp1.get(),
            pc: bit(d11, 0),
            qprio: u8_at(bits(d11, 1, 2), 0),
            cqid: u16_at(d11, 16),
            nvmsetid: u16_at(sqe.cdw12.get(), 0),
        }
    }
}

/// Delete I/O Submission Queue (0x00).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DeleteIoSq {
    /// Queue id.
    pub qid: u16,
}

impl Command for DeleteIoSq {
    const OPCODE: u8 = AdminOpcode::DeleteIoSq as u8;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.cdw10.set(u32::from(self.qid));
    }

    fn decode(sqe: &Sqe) -> Self {
        DeleteIoSq {
            qid: u16_at(sqe.cdw10.get(), 0),
        }
    }
}

/// Delete I/O Completion Queue (0x04).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DeleteIoCq {
    /// Queue id.
    pub qid: u16,
}

impl Command for DeleteIoCq {
    const OPCODE: u8 = AdminOpcode::DeleteIoCq as u8;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.cdw10.set(u32::from(self.qid));
    }

    fn decode(sqe: &Sqe) -> Self {
        DeleteIoCq {
            qid: u16_at(sqe.cdw10.get(), 0),
        }
    }
}

/// Abort (0x08): aborts command `cid` of submission queue `sqid`.
/// Completion dword 0 bit 0 is set when the command was *not* aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Abort {
    /// The queue of the command to abort.
    pub sqid: u16,
    /// The command to abort.
    pub cid: u16,
}

impl Command for Abort {
    const OPCODE: u8 = AdminOpcode::Abort as u8;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.cdw10
            .set(u32::from(self.sqid) | (u32::from(self.cid) << 16));
    }

    fn decode(sqe: &Sqe) -> Self {
        let d10 = sqe.cdw10.get();
        Abort {
            sqid: u16_at(d10, 0),
            cid: u16_at(d10, 16),
        }
    }
}

/// Asynchronous Event Request (0x0c): completes when an event occurs;
/// dword 0 is an [`crate::log::AsyncEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AsyncEventRequest;

impl Command for AsyncEventRequest {
    const OPCODE: u8 = AdminOpcode::AsyncEventRequest as u8;

    fn encode(&self, _sqe: &mut Sqe) {}

    fn decode(_sqe: &Sqe) -> Self {
        AsyncEventRequest
    }
}

/// Keep Alive (0x18): restarts the controller's keep alive timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct KeepAlive;

impl Command for KeepAlive {
    const OPCODE: u8 = AdminOpcode::KeepAlive as u8;

    fn encode(&self, _sqe: &mut Sqe) {}

    fn decode(_sqe: &Sqe) -> Self {
        KeepAlive
    }
}

/// A received admin command, decoded by opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AdminCommand {
    /// Identify.
    Identify(Identify),
    /// Get Log Page.
    GetLogPage(GetLogPage),
    /// Get Features.
    GetFeatures(GetFeatures),
    /// Set Features.
    SetFeatures(SetFeatures),
    /// Create I/O Completion Queue.
    CreateIoCq(CreateIoCq),
    /// Create I/O Submission Queue.
    CreateIoSq(CreateIoSq),
    /// Delete I/O Submission Queue.
    DeleteIoSq(DeleteIoSq),
    /// Delete I/O Completion Queue.
    DeleteIoCq(DeleteIoCq),
    /// Abort.
    Abort(Abort),
    /// Asynchronous Event Request.
    AsyncEventRequest,
    /// Keep Alive.
    KeepAlive,
    /// Any other opcode (fabrics commands, 0x7f, decode with
    /// [`crate::fabrics::FabricsCommand`]).
    Other(u8),
}

impl AdminCommand {
    /// Decodes `sqe` by its opcode.
    #[must_use]
    pub fn decode(sqe: &Sqe) -> Self {
        use AdminOpcode as O;
        match AdminOpcode::from_u8(sqe.opcode) {
            Some(O::Identify) => AdminCommand::Identify(Identify::decode(sqe)),
            Some(O::GetLogPage) => AdminCommand::GetLogPage(GetLogPage::decode(sqe)),
            Some(O::GetFeatures) => AdminCommand::GetFeatures(GetFeatures::decode(sqe)),
            Some(O::SetFeatures) => AdminCommand::SetFeatures(SetFeatures::decode(sqe)),
            Some(O::CreateIoCq) => AdminCommand::CreateIoCq(CreateIoCq::decode(sqe)),
            Some(O::CreateIoSq) => AdminCommand::CreateIoSq(CreateIoSq::decode(sqe)),
            Some(O::DeleteIoSq) => AdminCommand::DeleteIoSq(DeleteIoSq::decode(sqe)),
            Some(O::DeleteIoCq) => AdminCommand::DeleteIoCq(DeleteIoCq::decode(sqe)),
            Some(O::Abort) => AdminCommand::Abort(Abort::decode(sqe)),
            Some(O::AsyncEventRequest) => AdminCommand::AsyncEventRequest,
            Some(O::KeepAlive) => AdminCommand::KeepAlive,
            _ => AdminCommand::Other(sqe.opcode),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::{KeepAliveTimer, NumberOfQueues};
    use proptest::prelude::*;

    #[test]
    fn identify_encodings() {
        let s = Identify::controller().to_sqe(1);
        assert_eq!((s.opcode, s.nsid.get(), s.cdw10.get()), (0x06, 0, 1));
        let s = Identify::namespace(3).to_sqe(2);
        assert_eq!((s.nsid.get(), s.cdw10.get()), (3, 0));
        let s = Identify::nvm_controller().to_sqe(2);
        assert_eq!((s.cdw10.get(), s.cdw11.get()), (6, 0));
        let mut zns = Identify::nvm_controller();
        zns.csi = csi::ZONED;
        assert_eq!(zns.to_sqe(0).cdw11.get(), 0x0200_0000);
        assert_eq!(
            AdminCommand::decode(&Identify::active_ns_list(0).to_sqe(0)),
            AdminCommand::Identify(Identify::active_ns_list(0))
        );
    }

    #[test]
    fn get_log_page_numd() {
        let g = GetLogPage::new(0x02, crate::cmd::NSID_ALL, 512).unwrap();
        let s = g.to_sqe(5);
        assert_eq!(s.cdw10.get(), (127 << 16) | 0x02);
        assert_eq!(s.cdw11.get(), 0);
        assert_eq!(g.len_bytes(), 512);
        // A length past 256 KiB uses NUMDU.
        let g = GetLogPage::new(0x70, 0, 1 << 20).unwrap();
        let s = g.to_sqe(0);
        assert_eq!(s.cdw10.get() >> 16, 0xffff);
        assert_eq!(s.cdw11.get(), 0x3);
        assert_eq!(GetLogPage::decode(&s), g);
        assert!(GetLogPage::new(1, 0, 0).is_err());
        assert!(GetLogPage::new(1, 0, 6).is_err());
    }

    #[test]
    fn features_shorthands() {
        let s = SetFeatures::of(&NumberOfQueues { nsqr: 3, ncqr: 1 }).to_sqe(1);
        assert_eq!(
            (s.opcode, s.cdw10.get(), s.cdw11.get()),
            (0x09, 0x07, 0x0001_0003)
        );
        let s = GetFeatures::of::<KeepAliveTimer>().to_sqe(1);
        assert_eq!((s.opcode, s.cdw10.get()), (0x0a, 0x0f));
    }

    #[test]
    fn queue_commands() {
        let cq = CreateIoCq {
            qid: 1,
            qsize: 1023,
            prp1: 0x10_0000,
            pc: true,
            ien: true,
            iv: 1,
        };
        let s = cq.to_sqe(7);
        assert_eq!((s.cdw10.get(), s.cdw11.get()), (0x03ff_0001, 0x0001_0003));
        assert_eq!(s.prp1.get(), 0x10_0000);
        let sq = CreateIoSq {
            qid: 1,
            qsize: 1023,
            prp1: 0x20_0000,
            pc: true,
            qprio: 2,
            cqid: 1,
            nvmsetid: 0,
        };
        let s = sq.to_sqe(8);
        assert_eq!(s.cdw11.get(), 0x0001_0005);
        assert_eq!(AdminCommand::decode(&s), AdminCommand::CreateIoSq(sq));
        let s = Abort { sqid: 1, cid: 0x42 }.to_sqe(9);
        assert_eq!(s.cdw10.get(), 0x0042_0001);
        assert_eq!(
            AdminCommand::decode(&KeepAlive.to_sqe(1)),
            AdminCommand::KeepAlive
        );
        assert_eq!(
            AdminCommand::decode(&AsyncEventRequest.to_sqe(1)),
            AdminCommand::AsyncEventRequest
        );
        assert_eq!(
            AdminCommand::decode(&Sqe::new(0x80, 1, 1)),
            AdminCommand::Other(0x80)
        );
    }

    proptest! {
        #[test]
        fn admin_round_trips(
            nsid: u32, b0: u8, b1 in 0u8..0x80, w0: u16, w1: u16, d0: u32, d1: u32, q: u64,
            f0: bool, f1: bool,
        ) {
            let id = Identify { nsid, cns: b0, cntid: w0, cns_specific_id: w1, csi: b0, uuid_index: b1 };
            prop_assert_eq!(AdminCommand::decode(&id.to_sqe(w0)), AdminCommand::Identify(id));
            let g = GetLogPage { nsid, lid: b0, lsp: b1, rae: f0, numd: d0, lsi: w1, offset: q, uuid_index: b1, ot: f1, csi: b0 };
            prop_assert_eq!(AdminCommand::decode(&g.to_sqe(w0)), AdminCommand::GetLogPage(g));
            let gf = GetFeatures { nsid, fid: b0, sel: b1 & 7, cdw11: d0, uuid_index: b1 };
            prop_assert_eq!(AdminCommand::decode(&gf.to_sqe(w0)), AdminCommand::GetFeatures(gf));
            let sf = SetFeatures { nsid, fid: b0, save: f0, cdw11: d0, cdw12: d1, cdw13: d0 ^ d1, uuid_index: b1, cdw15: !d0 };
            prop_assert_eq!(AdminCommand::decode(&sf.to_sqe(w0)), AdminCommand::SetFeatures(sf));
            let cq = CreateIoCq { qid: w0, qsize: w1, prp1: q, pc: f0, ien: f1, iv: w0 ^ w1 };
            prop_assert_eq!(AdminCommand::decode(&cq.to_sqe(w0)), AdminCommand::CreateIoCq(cq));
            let sq = CreateIoSq { qid: w0, qsize: w1, prp1: q, pc: f0, qprio: b0 & 3, cqid: w1, nvmsetid: w0 };
            prop_assert_eq!(AdminCommand::decode(&sq.to_sqe(w0)), AdminCommand::CreateIoSq(sq));
            prop_assert_eq!(AdminCommand::decode(&DeleteIoSq { qid: w0 }.to_sqe(1)), AdminCommand::DeleteIoSq(DeleteIoSq { qid: w0 }));
            prop_assert_eq!(AdminCommand::decode(&DeleteIoCq { qid: w1 }.to_sqe(1)), AdminCommand::DeleteIoCq(DeleteIoCq { qid: w1 }));
            prop_assert_eq!(AdminCommand::decode(&Abort { sqid: w0, cid: w1 }.to_sqe(1)), AdminCommand::Abort(Abort { sqid: w0, cid: w1 }));
        }
    }
}
