//! NVMe over Fabrics commands: Connect (and its 1024-byte data),
//! Property Get/Set, Disconnect, Authentication Send/Receive; the
//! Connect response; NQNs.
//!
//! Every fabrics command has opcode 0x7f with its command type (FCTYPE)
//! in byte 4, SGL1 in bytes 24..40 and its own fields in bytes 40..64
//! (dwords 10..15), so the typed commands here implement [`Command`] like
//! the admin and I/O ones. A target decodes a capsule's entry with
//! [`FabricsCommand::decode`] before trying [`crate::admin::AdminCommand`]
//! or [`crate::io::IoCommand`].
//!
//! Properties are the controller registers of [`crate::regs`]: Property
//! Get of CAP answers 8 bytes in completion dwords 0-1
//! ([`crate::cpl::Cqe::dw01`]).

use zerocopy::little_endian::U16;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::bits::{bit, flag, hi32, lo32, u16_at, u64_of, u8_at};
use crate::cmd::{Command, Sqe};
use crate::error::Result;
use crate::opcode::{FabricsType, FABRICS_OPCODE};
use crate::regs::PropertySize;
use crate::text::{self, PAD_NUL};

pub use crate::nqn::{
    uuid_nqn, validate_nqn, NqnError, DISCOVERY_NQN, NQN_MAX_LEN, NQN_MIN_LEN, UUID_NQN_PREFIX,
};

/// Connect's controller id for "any controller" (dynamic controller model).
pub const CNTLID_DYNAMIC: u16 = 0xffff;
/// Connect's controller id for "any controller" (static controller model).
pub const CNTLID_STATIC_ANY: u16 = 0xfffe;
/// The admin queue's queue id.
pub const ADMIN_QID: u16 = 0;
/// The smallest admin queue a fabrics host may ask for (entries).
pub const MIN_ADMIN_QUEUE_ENTRIES: u16 = 32;

/// Connect (fctype 0x01): creates the admin queue (qid 0) or an I/O queue
/// of the controller named in the [`ConnectData`] sent as its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Connect {
    /// Record format (0).
    pub recfmt: u16,
    /// Queue id (0 = admin).
    pub qid: u16,
    /// Submission queue size - 1 (0's based).
    pub sqsize: u16,
    /// Connect attributes: priority class (bits 1:0), disable SQ flow
    /// control (bit 2), I/O queue deletion (bit 3).
    pub cattr: u8,
    /// Keep alive timeout, ms (admin queue only; 0 = none).
    pub kato_ms: u32,
}

impl Connect {
    /// CATTR bit: disable SQ flow control (the host ignores SQHD).
    pub const CATTR_DISABLE_SQ_FLOW_CONTROL: u8 = 1 << 2;

    /// Connects queue `qid` with `entries` submission queue entries
    /// (1..=65536; 0 and larger values saturate to the ends).
    #[must_use]
    pub fn new(qid: u16, entries: u32, kato_ms: u32) -> Self {
        Connect {
            qid,
            sqsize: u16::try_from(entries.clamp(1, 1 << 16) - 1).unwrap_or(u16::MAX),
            kato_ms,
            ..Connect::default()
        }
    }

    /// Submission queue entries (SQSIZE + 1).
    #[must_use]
    pub fn sq_entries(&self) -> u32 {
        u32::from(self.sqsize) + 1
    }
}

impl Command for Connect {
    const OPCODE: u8 = FABRICS_OPCODE;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.nsid.set(u32::from(FabricsType::Connect as u8));
        sqe.cdw10
            .set(u32::from(self.recfmt) | (u32::from(self.qid) << 16));
        sqe.cdw11
            .set(u32::from(self.sqsize) | (u32::from(self.cattr) << 16));
        sqe.cdw12.set(self.kato_ms);
    }

    fn decode(sqe: &Sqe) -> Self {
        let (d10, d11) = (sqe.cdw10.get(), sqe.cdw11.get());
        Connect {
            recfmt: u16_at(d10, 0),
            qid: u16_at(d10, 16),
            sqsize: u16_at(d11, 0),
            cattr: u8_at(d11, 16),
            kato_ms: sqe.cdw12.get(),
        }
    }
}

/// The data of a Connect command (1024 bytes).
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct ConnectData {
    /// Host identifier (128 bits).
    pub hostid: [u8; 16],
    /// Controller id: [`CNTLID_DYNAMIC`] on the admin queue, the id the
    /// admin Connect returned on I/O queues.
    pub cntlid: U16,
    /// Reserved.
    pub rsvd18: [u8; 238],
    /// Subsystem NQN (NUL padded).
    pub subnqn: [u8; 256],
    /// Host NQN (NUL padded).
    pub hostnqn: [u8; 256],
    /// Reserved.
    pub rsvd768: [u8; 256],
}

const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<ConnectData>() == 1024);
    assert!(offset_of!(ConnectData, cntlid) == 16);
    assert!(offset_of!(ConnectData, subnqn) == 256);
    assert!(offset_of!(ConnectData, hostnqn) == 512);
};

impl Default for ConnectData {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

impl ConnectData {
    /// Connect data for host `hostid`/`hostnqn` to `subnqn`; both NQNs
    /// are validated.
    pub fn new(hostid: [u8; 16], cntlid: u16, subnqn: &str, hostnqn: &str) -> Result<Self> {
        validate_nqn(subnqn)?;
        validate_nqn(hostnqn)?;
        let mut d = ConnectData {
            hostid,
            cntlid: U16::new(cntlid),
            ..ConnectData::default()
        };
        text::pad(&mut d.subnqn, subnqn, PAD_NUL, "subnqn")?;
        text::pad(&mut d.hostnqn, hostnqn, PAD_NUL, "hostnqn")?;
        Ok(d)
    }

    /// Subsystem NQN, trimmed (validate it with [`validate_nqn`]).
    #[must_use]
    pub fn subnqn(&self) -> std::borrow::Cow<'_, str> {
        text::trim(&self.subnqn)
    }

    /// Host NQN, trimmed.
    #[must_use]
    pub fn hostnqn(&self) -> std::borrow::Cow<'_, str> {
        text::trim(&self.hostnqn)
    }
}

/// Completion dword 0 of a successful Connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ConnectResponse {
    /// The controller id (on the admin queue: the controller created).
    pub cntlid: u16,
    /// Authentication required: ATR (bit 1), ASCR (bit 2).
    pub authreq: u16,
}

impl ConnectResponse {
    /// Encodes completion dword 0.
    #[must_use]
    pub fn to_dword(self) -> u32 {
        u32::from(self.cntlid) | (u32::from(self.authreq) << 16)
    }

    /// Decodes completion dword 0.
    #[must_use]
    pub fn from_dword(dw: u32) -> Self {
        ConnectResponse {
            cntlid: u16_at(dw, 0),
            authreq: u16_at(dw, 16),
        }
    }

    /// Whether an authentication transaction is required before use.
    #[must_use]
    pub fn auth_required(self) -> bool {
        self.authreq & 0b10 != 0
    }
}

/// Completion dword 0 of a Connect failed with
/// [`crate::status::Status::CONNECT_INVALID_PARAMETERS`]: where the bad
/// field is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ConnectInvalidParameter {
    /// The field is in the Connect data (true) or in the command (false).
    pub in_data: bool,
    /// Byte offset of the field.
    pub offset: u16,
}

impl ConnectInvalidParameter {
    /// Encodes completion dword 0 (IPO bits 15:0, IATTR bit 16).
    #[must_use]
    pub fn to_dword(self) -> u32 {
        u32::from(self.offset) | flag(self.in_data, 16)
    }

    /// Decodes completion dword 0.
    #[must_use]
    pub fn from_dword(dw: u32) -> Self {
        ConnectInvalidParameter {
            in_data: bit(dw, 16),
            offset: u16_at(dw, 0),
        }
    }
}

/// Property Get (fctype 0x04): reads a controller register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PropertyGet {
    /// Attributes: the size in bits 2:0 (0 = 4 bytes, 1 = 8 bytes); see
    /// [`PropertyGet::size`].
    pub attrib: u8,
    /// Register offset ([`crate::regs::offset`]).
    pub offset: u32,
}

/// Property Set (fctype 0x00): writes a controller register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PropertySet {
    /// Attributes: the size in bits 2:0 (0 = 4 bytes, 1 = 8 bytes); see
    /// [`PropertySet::size`].
    pub attrib: u8,
    /// Register offset ([`crate::regs::offset`]).
    pub offset: u32,
    /// Value (the low 4 bytes for a 4-byte property).
    pub value: u64,
}

fn attrib(size: PropertySize) -> u8 {
    match size {
        PropertySize::Four => 0,
        PropertySize::Eight => 1,
    }
}

/// The size ATTRIB encodes; `None` for a reserved value (Invalid Field).
fn size_of_attrib(attrib: u8) -> Option<PropertySize> {
    match attrib & 7 {
        0 => Some(PropertySize::Four),
        1 => Some(PropertySize::Eight),
        _ => None,
    }
}

impl PropertyGet {
    /// Reads the `size` property at `offset`.
    #[must_use]
    pub fn new(size: PropertySize, offset: u32) -> Self {
        PropertyGet {
            attrib: attrib(size),
            offset,
        }
    }

    /// The property size, or `None` for a reserved ATTRIB value.
    #[must_use]
    pub fn size(&self) -> Option<PropertySize> {
        size_of_attrib(self.attrib)
    }
}

impl PropertySet {
    /// Writes `value` to the `size` property at `offset`.
    #[must_use]
    pub fn new(size: PropertySize, offset: u32, value: u64) -> Self {
        PropertySet {
            attrib: attrib(size),
            offset,
            value,
        }
    }

    /// The property size, or `None` for a reserved ATTRIB value.
    #[must_use]
    pub fn size(&self) -> Option<PropertySize> {
        size_of_attrib(self.attrib)
    }
}

impl Command for PropertyGet {
    const OPCODE: u8 = FABRICS_OPCODE;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.nsid.set(u32::from(FabricsType::PropertyGet as u8));
        sqe.cdw10.set(u32::from(self.attrib));
        sqe.cdw11.set(self.offset);
    }

    fn decode(sqe: &Sqe) -> Self {
        PropertyGet {
            attrib: u8_at(sqe.cdw10.get(), 0),
            offset: sqe.cdw11.get(),
        }
    }
}

impl Command for PropertySet {
    const OPCODE: u8 = FABRICS_OPCODE;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.nsid.set(u32::from(FabricsType::PropertySet as u8));
        sqe.cdw10.set(u32::from(self.attrib));
        sqe.cdw11.set(self.offset);
        sqe.cdw12.set(lo32(self.value));
        sqe.cdw13.set(hi32(self.value));
    }

    fn decode(sqe: &Sqe) -> Self {
        PropertySet {
            attrib: u8_at(sqe.cdw10.get(), 0),
            offset: sqe.cdw11.get(),
            value: u64_of(sqe.cdw12.get(), sqe.cdw13.get()),
        }
    }
}

/// The security protocol of NVMe in-band authentication (SECP of
/// Authentication Send / Receive).
pub const AUTH_SECP_NVME: u8 = 0xe9;

/// Authentication Send (fctype 0x05) and Authentication Receive (fctype
/// 0x06): one DH-HMAC-CHAP message to the controller (`len` = TL, the
/// message's length, as the command's data) or from it (`len` = AL, the
/// buffer the host gives). SECP is [`AUTH_SECP_NVME`], SPSP0 and SPSP1
/// are 1 for DH-HMAC-CHAP (dword 10: SPSP0 in bits 15:8, SPSP1 in 23:16,
/// SECP in 31:24; dword 11: TL or AL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Auth {
    /// `true`: Authentication Receive; `false`: Authentication Send.
    pub receive: bool,
    /// Security protocol.
    pub secp: u8,
    /// Security protocol specific 0.
    pub spsp0: u8,
    /// Security protocol specific 1.
    pub spsp1: u8,
    /// Transfer length (Send) or allocation length (Receive), bytes.
    pub len: u32,
}

impl Auth {
    /// Authentication Send of a `len`-byte DH-HMAC-CHAP message.
    #[must_use]
    pub fn send(len: u32) -> Self {
        Auth {
            receive: false,
            secp: AUTH_SECP_NVME,
            spsp0: 1,
            spsp1: 1,
            len,
        }
    }

    /// Authentication Receive into a `len`-byte buffer.
    #[must_use]
    pub fn receive(len: u32) -> Self {
        Auth {
            receive: true,
            ..Auth::send(len)
        }
    }

    /// Whether SECP, SPSP0 and SPSP1 name DH-HMAC-CHAP.
    #[must_use]
    pub fn is_dhchap(&self) -> bool {
        (self.secp, self.spsp0, self.spsp1) == (AUTH_SECP_NVME, 1, 1)
    }
}

impl Command for Auth {
    const OPCODE: u8 = FABRICS_OPCODE;

    fn encode(&self, sqe: &mut Sqe) {
        let t = if self.receive {
            FabricsType::AuthenticationReceive
        } else {
            FabricsType::AuthenticationSend
        };
        sqe.nsid.set(u32::from(t as u8));
        sqe.cdw10.set(
            (u32::from(self.secp) << 24)
                | (u32::from(self.spsp1) << 16)
                | (u32::from(self.spsp0) << 8),
        );
        sqe.cdw11.set(self.len);
    }

    fn decode(sqe: &Sqe) -> Self {
        let d = sqe.cdw10.get();
        Auth {
            receive: sqe.fctype() == FabricsType::AuthenticationReceive as u8,
            secp: u8_at(d, 24),
            spsp0: u8_at(d, 8),
            spsp1: u8_at(d, 16),
            len: sqe.cdw11.get(),
        }
    }
}

/// Disconnect (fctype 0x08): deletes the I/O queue it is sent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Disconnect {
    /// Record format (0).
    pub recfmt: u16,
}

impl Command for Disconnect {
    const OPCODE: u8 = FABRICS_OPCODE;

    fn encode(&self, sqe: &mut Sqe) {
        sqe.nsid.set(u32::from(FabricsType::Disconnect as u8));
        sqe.cdw10.set(u32::from(self.recfmt));
    }

    fn decode(sqe: &Sqe) -> Self {
        Disconnect {
            recfmt: u16_at(sqe.cdw10.get(), 0),
        }
    }
}

/// A received fabrics command, decoded by command type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FabricsCommand {
    /// Connect.
    Connect(Connect),
    /// Property Get.
    PropertyGet(PropertyGet),
    /// Property Set.
    PropertySet(PropertySet),
    /// Disconnect.
    Disconnect(Disconnect),
    /// Authentication Send or Receive.
    Auth(Auth),
    /// Another command type (vendor specific).
    Other(u8),
}

impl FabricsCommand {
    /// Decodes `sqe`, or `None` when it is not a fabrics command (opcode
    /// other than 0x7f).
    #[must_use]
    pub fn decode(sqe: &Sqe) -> Option<Self> {
        if sqe.opcode != FABRICS_OPCODE {
            return None;
        }
        Some(match FabricsType::from_u8(sqe.fctype()) {
            Some(FabricsType::Connect) => FabricsCommand::Connect(Connect::decode(sqe)),
            Some(FabricsType::PropertyGet) => FabricsCommand::PropertyGet(PropertyGet::decode(sqe)),
            Some(FabricsType::PropertySet) => FabricsCommand::PropertySet(PropertySet::decode(sqe)),
            Some(FabricsType::Disconnect) => FabricsCommand::Disconnect(Disconnect::decode(sqe)),
            Some(FabricsType::AuthenticationSend | FabricsType::AuthenticationReceive) => {
                FabricsCommand::Auth(Auth::decode(sqe))
            }
            _ => FabricsCommand::Other(sqe.fctype()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs::offset;
    use crate::sgl::SglDescriptor;
    use proptest::prelude::*;

    #[test]
    fn connect_bytes() {
        let c = Connect::new(ADMIN_QID, 32, 120_000);
        let mut s = c.to_sqe(0);
        s.set_sgl1(&SglDescriptor::offset_data_block(0, 1024));
        let b = s.as_bytes();
        assert_eq!(b[0], 0x7f);
        assert_eq!(b[4], 0x01);
        assert_eq!(&b[40..48], &[0, 0, 0, 0, 31, 0, 0, 0]);
        assert_eq!(&b[48..52], &120_000u32.to_le_bytes());
        assert_eq!(b[39], 0x01);
        assert_eq!(c.sq_entries(), 32);
        assert_eq!(FabricsCommand::decode(&s), Some(FabricsCommand::Connect(c)));
        assert_eq!(Connect::new(1, 0, 0).sqsize, 0);
        assert_eq!(Connect::new(1, 1 << 20, 0).sqsize, 0xffff);
    }

    #[test]
    fn connect_data() {
        let hostid = [0x11; 16];
        let d = ConnectData::new(
            hostid,
            CNTLID_DYNAMIC,
            "nqn.2016-06.io.spdk:cnode1",
            "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555",
        )
        .unwrap();
        let b = d.as_bytes();
        assert_eq!(&b[..16], &hostid);
        assert_eq!(&b[16..18], &[0xff, 0xff]);
        assert_eq!(&b[256..266], b"nqn.2016-0");
        assert_eq!(b[256 + 26], 0);
        assert_eq!(d.subnqn(), "nqn.2016-06.io.spdk:cnode1");
        assert!(d.hostnqn().ends_with("555555555555"));
        let e = ConnectData::new(hostid, 0, "bad", DISCOVERY_NQN).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
    }

    #[test]
    fn responses() {
        let r = ConnectResponse {
            cntlid: 1,
            authreq: 0,
        };
        assert_eq!(r.to_dword(), 1);
        assert!(!r.auth_required());
        assert!(ConnectResponse::from_dword(0x0002_0005).auth_required());
        let ip = ConnectInvalidParameter {
            in_data: true,
            offset: 256,
        };
        assert_eq!(ip.to_dword(), 0x0001_0100);
        assert_eq!(ConnectInvalidParameter::from_dword(ip.to_dword()), ip);
    }

    #[test]
    fn properties() {
        let g = PropertyGet::new(PropertySize::Eight, offset::CAP);
        assert_eq!(g.size(), Some(PropertySize::Eight));
        let s = g.to_sqe(3);
        assert_eq!((s.fctype(), s.cdw10.get(), s.cdw11.get()), (0x04, 1, 0));
        assert_eq!(
            FabricsCommand::decode(&s),
            Some(FabricsCommand::PropertyGet(g))
        );
        let p = PropertySet::new(PropertySize::Four, offset::CC, 0x0046_0001);
        assert_eq!(p.size(), Some(PropertySize::Four));
        assert_eq!(
            PropertyGet {
                attrib: 2,
                offset: 0
            }
            .size(),
            None
        );
        let s = p.to_sqe(4);
        assert_eq!(
            (s.fctype(), s.cdw10.get(), s.cdw11.get(), s.cdw12.get()),
            (0, 0, 0x14, 0x0046_0001)
        );
        assert_eq!(
            FabricsCommand::decode(&s),
            Some(FabricsCommand::PropertySet(p))
        );
        assert_eq!(s.name(true), Some("Property Set"));
        assert_eq!(FabricsCommand::decode(&Sqe::new(0x06, 0, 0)), None);
        let mut vendor = Sqe::new(0x7f, 0, 0xc0);
        vendor.cdw10.set(0);
        assert_eq!(
            FabricsCommand::decode(&vendor),
            Some(FabricsCommand::Other(0xc0))
        );
    }

    #[test]
    fn auth_bytes() {
        let s = Auth::send(300).to_sqe(7);
        let b = s.as_bytes();
        assert_eq!((b[0], b[4]), (0x7f, 0x05));
        assert_eq!(&b[40..48], &[0, 1, 1, 0xe9, 44, 1, 0, 0]);
        let r = Auth::receive(4096).to_sqe(8);
        assert_eq!(r.as_bytes()[4], 0x06);
        let Some(FabricsCommand::Auth(a)) = FabricsCommand::decode(&r) else {
            panic!("not an auth command");
        };
        assert!(a.receive && a.is_dhchap() && a.len == 4096);
        let mut bad = s;
        bad.cdw10.set(0x0101_0000);
        let Some(FabricsCommand::Auth(a)) = FabricsCommand::decode(&bad) else {
            panic!("not an auth command");
        };
        assert!(!a.is_dhchap());
    }

    proptest! {
        #[test]
        fn fabrics_round_trip(w0: u16, w1: u16, w2: u16, b: u8, d: u32, v: u64) {
            let c = Connect { recfmt: w0, qid: w1, sqsize: w2, cattr: b, kato_ms: d };
            prop_assert_eq!(FabricsCommand::decode(&c.to_sqe(w0)), Some(FabricsCommand::Connect(c)));
            let p = PropertySet { attrib: b, offset: d, value: v };
            prop_assert_eq!(FabricsCommand::decode(&p.to_sqe(w1)), Some(FabricsCommand::PropertySet(p)));
            let g = PropertyGet { attrib: b, offset: d };
            prop_assert_eq!(FabricsCommand::decode(&g.to_sqe(w1)), Some(FabricsCommand::PropertyGet(g)));
            let x = Disconnect { recfmt: w0 };
            prop_assert_eq!(FabricsCommand::decode(&x.to_sqe(w1)), Some(FabricsCommand::Disconnect(x)));
            let a = Auth { receive: b & 1 == 1, secp: b, spsp0: (w0 & 0xff) as u8, spsp1: (w2 & 0xff) as u8, len: d };
            prop_assert_eq!(FabricsCommand::decode(&a.to_sqe(w1)), Some(FabricsCommand::Auth(a)));
        }
    }
}
