//! The validating parser of received PDU headers.
//!
//! A receiver reads the 8-byte common header, asks [`parse_common_header`]
//! how long the rest of the header is (HLEN plus a header digest), reads
//! it, and calls [`parse_header`] on all of it; the returned
//! [`PduLayout`] then says where the data starts (PDO), how long it is
//! and whether a data digest follows. Every check failure is a
//! [`PduError`] naming the field and the Terminate Connection Request the
//! receiver must answer with ([`PduError::fes`], [`PduError::fei`]).
//!
//! The parser is stateless apart from [`RecvConfig`]: it checks what one
//! header can show (types allowed in this direction and connection
//! state, HLEN per type, PDO/PLEN consistency, digest flags against the
//! negotiated digests, PLEN bounds, the ICReq/ICResp parameters, DATAL
//! against PLEN). Checks that need the command's state (CCCID and TTAG
//! known, DATAO expected, R2T count) are the caller's, who reports them
//! with the same [`PduError`] variants. It never panics, whatever the
//! bytes.

use zerocopy::FromBytes;

use super::digest::header_digest;
use super::pdu::{
    flags, C2HData, CapsuleCmd, CapsuleResp, CommonHeader, H2CData, IcReq, IcResp, PduType,
    TermReq, DIGEST_LEN, MAX_PDA, MIN_MAXH2CDATA, PFV_1_0, R2T, TERM_REQ_MAX_PLEN,
};

/// Which side of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The host (initiator).
    Host,
    /// The controller (target).
    Controller,
}

/// Header and data digests (as negotiated, or as asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Digests {
    /// Header digests.
    pub header: bool,
    /// Data digests.
    pub data: bool,
}

/// Default [`RecvConfig::max_data_len`]: 1 MiB.
pub const DEFAULT_MAX_DATA_LEN: u32 = 1 << 20;

/// What a receiver knows when it parses a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecvConfig {
    /// The receiving side.
    pub role: Role,
    /// Whether ICReq/ICResp were exchanged (before: only those and
    /// TermReqs are allowed; after: never an ICReq/ICResp again).
    pub connected: bool,
    /// The negotiated digests (meaningful once connected).
    pub digests: Digests,
    /// The data alignment this receiver asked for (a controller's CPDA, a
    /// host's HPDA; 0's based dwords): PDO must be a multiple of
    /// `(pda + 1) * 4`.
    pub pda: u8,
    /// The most PDU data bytes accepted in one PDU (in-capsule data,
    /// MAXH2CDATA for a controller, the largest C2H transfer for a host);
    /// more is [`PduError::DataLimitExceeded`].
    pub max_data_len: u32,
}

impl RecvConfig {
    /// A receiver of `role` before the connection exchange: no digests,
    /// no alignment, [`DEFAULT_MAX_DATA_LEN`].
    #[must_use]
    pub fn new(role: Role) -> Self {
        RecvConfig {
            role,
            connected: false,
            digests: Digests::default(),
            pda: 0,
            max_data_len: DEFAULT_MAX_DATA_LEN,
        }
    }

    /// The same receiver after ICReq/ICResp negotiated `digests` and `pda`.
    #[must_use]
    pub fn connected(self, digests: Digests, pda: u8) -> Self {
        RecvConfig {
            connected: true,
            digests,
            pda,
            ..self
        }
    }
}

/// Fatal error status of a Terminate Connection Request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Fes {
    /// Invalid PDU header field (FEI: its byte offset).
    InvalidHeaderField = 0x01,
    /// PDU sequence error.
    PduSequenceError = 0x02,
    /// Header digest error.
    HeaderDigestError = 0x03,
    /// Data transfer out of range.
    DataOutOfRange = 0x04,
    /// Data transfer limit exceeded (also: R2T limit exceeded).
    DataLimitExceeded = 0x05,
    /// Unsupported parameter (FEI: its byte offset).
    UnsupportedParameter = 0x06,
}

impl Fes {
    /// The FES of a received value, if known.
    #[must_use]
    pub const fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            0x01 => Fes::InvalidHeaderField,
            0x02 => Fes::PduSequenceError,
            0x03 => Fes::HeaderDigestError,
            0x04 => Fes::DataOutOfRange,
            0x05 => Fes::DataLimitExceeded,
            0x06 => Fes::UnsupportedParameter,
            _ => return None,
        })
    }
}

/// Why a received PDU header is rejected, and how to answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PduError {
    /// Not a protocol error: `need` bytes are needed, fewer were given.
    #[error("incomplete pdu header: need {need} bytes")]
    Incomplete {
        /// Bytes needed.
        need: usize,
    },
    /// A header field is invalid.
    #[error("invalid pdu header field {field} at byte {offset}")]
    InvalidHeaderField {
        /// Byte offset of the field in the PDU.
        offset: u32,
        /// The field's name.
        field: &'static str,
    },
    /// The PDU type is not allowed now (an ICReq twice, a command before ICReq).
    #[error("pdu type {pdu_type:#04x} out of sequence")]
    SequenceError {
        /// The PDU type received.
        pdu_type: u8,
    },
    /// The header digest does not match the header.
    #[error("header digest mismatch: computed {expected:#010x}, received {received:#010x}")]
    HeaderDigest {
        /// The digest of the header received.
        expected: u32,
        /// The digest that came with it.
        received: u32,
    },
    /// Data outside the command's data (caller's check: DATAO, DATAL).
    #[error("data transfer out of range")]
    DataOutOfRange,
    /// More data in one PDU than allowed, or too many R2Ts.
    #[error("pdu data of {len} bytes exceeds the limit of {max}")]
    DataLimitExceeded {
        /// Bytes of data the PDU carries (or R2Ts outstanding).
        len: u32,
        /// The limit.
        max: u32,
    },
    /// A parameter (PFV) has a value this side does not support.
    #[error("unsupported value of {field} at byte {offset}")]
    UnsupportedParameter {
        /// Byte offset of the field in the PDU.
        offset: u32,
        /// The field's name.
        field: &'static str,
    },
}

impl PduError {
    /// The fatal error status to send, or `None` for [`PduError::Incomplete`].
    #[must_use]
    pub fn fes(&self) -> Option<Fes> {
        match self {
            PduError::Incomplete { .. } => None,
            PduError::InvalidHeaderField { .. } => Some(Fes::InvalidHeaderField),
            PduError::SequenceError { .. } => Some(Fes::PduSequenceError),
            PduError::HeaderDigest { .. } => Some(Fes::HeaderDigestError),
            PduError::DataOutOfRange => Some(Fes::DataOutOfRange),
            PduError::DataLimitExceeded { .. } => Some(Fes::DataLimitExceeded),
            PduError::UnsupportedParameter { .. } => Some(Fes::UnsupportedParameter),
        }
    }

    /// The errno this error maps to (positive): `EAGAIN` for
    /// [`PduError::Incomplete`] (read more), `EPROTO` for the rest.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            PduError::Incomplete { .. } => libc::EAGAIN,
            PduError::InvalidHeaderField { .. }
            | PduError::SequenceError { .. }
            | PduError::HeaderDigest { .. }
            | PduError::DataOutOfRange
            | PduError::DataLimitExceeded { .. }
            | PduError::UnsupportedParameter { .. } => libc::EPROTO,
        }
    }

    /// The fatal error information to send: the field's byte offset for
    /// invalid header fields and unsupported parameters, 0 otherwise.
    #[must_use]
    pub fn fei(&self) -> u32 {
        match self {
            PduError::InvalidHeaderField { offset, .. }
            | PduError::UnsupportedParameter { offset, .. } => *offset,
            _ => 0,
        }
    }
}

/// Where the parts of a PDU are, from its common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PduLayout {
    /// The PDU type.
    pub pdu_type: PduType,
    /// Header length (without digest).
    pub hlen: u8,
    /// A header digest follows the header.
    pub hdgst: bool,
    /// A data digest follows the data.
    pub ddgst: bool,
    /// Offset of the data from the PDU start (0 when there is none).
    pub data_offset: u32,
    /// Bytes of data (TermReq: error data, right after the header).
    pub data_len: u32,
    /// Total PDU length.
    pub plen: u32,
}

impl PduLayout {
    /// Bytes of header including its digest: what [`parse_header`] needs.
    #[must_use]
    pub fn header_len(&self) -> usize {
        usize::from(self.hlen) + if self.hdgst { DIGEST_LEN } else { 0 }
    }

    /// Padding bytes between the header digest and the data.
    #[must_use]
    pub fn padding(&self) -> usize {
        if self.data_len == 0 {
            return 0;
        }
        usize::try_from(self.data_offset).map_or(0, |o| o.saturating_sub(self.header_len()))
    }
}

/// A validated PDU header, viewing the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pdu<'a> {
    /// ICReq.
    IcReq(&'a IcReq),
    /// ICResp.
    IcResp(&'a IcResp),
    /// H2CTermReq.
    H2CTermReq(&'a TermReq),
    /// C2HTermReq.
    C2HTermReq(&'a TermReq),
    /// CapsuleCmd.
    CapsuleCmd(&'a CapsuleCmd),
    /// CapsuleResp.
    CapsuleResp(&'a CapsuleResp),
    /// H2CData.
    H2CData(&'a H2CData),
    /// C2HData.
    C2HData(&'a C2HData),
    /// R2T.
    R2T(&'a R2T),
}

const fn invalid(offset: u32, field: &'static str) -> PduError {
    PduError::InvalidHeaderField { offset, field }
}

/// [`DIGEST_LEN`] as a PDU length.
const DGST: u32 = 4;

const OFF_TYPE: u32 = 0;
const OFF_FLAGS: u32 = 1;
const OFF_HLEN: u32 = 2;
const OFF_PDO: u32 = 3;
const OFF_PLEN: u32 = 4;

/// Checks the common header in the first 8 bytes of `bytes` and returns
/// the PDU's layout.
pub fn parse_common_header(bytes: &[u8], cfg: &RecvConfig) -> Result<PduLayout, PduError> {
    let (ch, _) =
        CommonHeader::ref_from_prefix(bytes).map_err(|_| PduError::Incomplete { need: 8 })?;
    check_common(ch, cfg)
}

fn check_common(ch: &CommonHeader, cfg: &RecvConfig) -> Result<PduLayout, PduError> {
    let t = PduType::from_u8(ch.pdu_type).ok_or(invalid(OFF_TYPE, "pdu_type"))?;
    if t.from_host() != (cfg.role == Role::Controller) {
        return Err(invalid(OFF_TYPE, "pdu_type"));
    }
    let is_ic = matches!(t, PduType::IcReq | PduType::IcResp);
    let is_term = matches!(t, PduType::H2CTermReq | PduType::C2HTermReq);
    if is_ic == cfg.connected && !is_term {
        return Err(PduError::SequenceError {
            pdu_type: ch.pdu_type,
        });
    }
    if ch.hlen != t.hlen() {
        return Err(invalid(OFF_HLEN, "hlen"));
    }
    let hd = ch.flags & flags::HDGSTF != 0;
    let dd = ch.flags & flags::DDGSTF != 0;
    if t.digests_apply() {
        if hd != cfg.digests.header || (dd && !cfg.digests.data) {
            return Err(invalid(OFF_FLAGS, "flags"));
        }
    } else if hd || dd {
        return Err(invalid(OFF_FLAGS, "flags"));
    }
    if t == PduType::C2HData && ch.flags & flags::SUCCESS != 0 && ch.flags & flags::LAST_PDU == 0 {
        return Err(invalid(OFF_FLAGS, "flags"));
    }
    let plen = ch.plen.get();
    let hlen = u32::from(ch.hlen);
    let header_len = hlen + if hd { DGST } else { 0 };
    let mut layout = PduLayout {
        pdu_type: t,
        hlen: ch.hlen,
        hdgst: hd,
        ddgst: dd,
        data_offset: 0,
        data_len: 0,
        plen,
    };
    if is_ic {
        if plen != hlen {
            return Err(invalid(OFF_PLEN, "plen"));
        }
    } else if is_term {
        if plen < hlen || plen > TERM_REQ_MAX_PLEN {
            return Err(invalid(OFF_PLEN, "plen"));
        }
        layout.data_offset = hlen;
        layout.data_len = plen - hlen;
    } else if !t.carries_data() {
        // CapsuleResp, R2T: never data.
        if plen != header_len {
            return Err(invalid(OFF_PLEN, "plen"));
        }
        if dd {
            return Err(invalid(OFF_FLAGS, "flags"));
        }
    } else if plen <= header_len {
        // Only a command may come without data (H2CData/C2HData carry some).
        if plen != header_len || t != PduType::CapsuleCmd {
            return Err(invalid(OFF_PLEN, "plen"));
        }
        if dd {
            return Err(invalid(OFF_FLAGS, "flags"));
        }
    } else {
        let pdo = u32::from(ch.pdo);
        let align = (u32::from(cfg.pda.min(MAX_PDA)) + 1) * 4;
        if pdo < header_len || !pdo.is_multiple_of(align) {
            return Err(invalid(OFF_PDO, "pdo"));
        }
        let ddlen = if dd { DGST } else { 0 };
        if plen <= pdo + ddlen {
            return Err(invalid(OFF_PLEN, "plen"));
        }
        if cfg.digests.data && !dd {
            return Err(invalid(OFF_FLAGS, "flags"));
        }
        layout.data_offset = pdo;
        layout.data_len = plen - pdo - ddlen;
        if layout.data_len > cfg.max_data_len {
            return Err(PduError::DataLimitExceeded {
                len: layout.data_len,
                max: cfg.max_data_len,
            });
        }
    }
    Ok(layout)
}

/// Checks a whole received header (`bytes` holds at least
/// [`PduLayout::header_len`] bytes: the header and its digest) and
/// returns a view of it and its layout.
pub fn parse_header<'a>(
    bytes: &'a [u8],
    cfg: &RecvConfig,
) -> Result<(Pdu<'a>, PduLayout), PduError> {
    let layout = parse_common_header(bytes, cfg)?;
    let need = layout.header_len();
    let header = bytes.get(..need).ok_or(PduError::Incomplete { need })?;
    let hlen = usize::from(layout.hlen);
    if let Some(d) = header.get(hlen..hlen + DIGEST_LEN) {
        let received = u32::from_le_bytes([d[0], d[1], d[2], d[3]]);
        let expected = header_digest(&header[..hlen]);
        if expected != received {
            return Err(PduError::HeaderDigest { expected, received });
        }
    }
    let h = &header[..hlen];
    let pdu = match layout.pdu_type {
        PduType::IcReq => {
            let p = view::<IcReq>(h)?;
            if p.pfv.get() != PFV_1_0 {
                return Err(PduError::UnsupportedParameter {
                    offset: 8,
                    field: "pfv",
                });
            }
            if p.hpda > MAX_PDA {
                return Err(invalid(10, "hpda"));
            }
            Pdu::IcReq(p)
        }
        PduType::IcResp => {
            let p = view::<IcResp>(h)?;
            if p.pfv.get() != PFV_1_0 {
                return Err(PduError::UnsupportedParameter {
                    offset: 8,
                    field: "pfv",
                });
            }
            if p.cpda > MAX_PDA {
                return Err(invalid(10, "cpda"));
            }
            let m = p.maxh2cdata.get();
            if m < MIN_MAXH2CDATA || !m.is_multiple_of(4) {
                return Err(invalid(12, "maxh2cdata"));
            }
            Pdu::IcResp(p)
        }
        PduType::H2CTermReq | PduType::C2HTermReq => {
            let p = view::<TermReq>(h)?;
            if Fes::from_u16(p.fes.get()).is_none() {
                return Err(invalid(8, "fes"));
            }
            if layout.pdu_type == PduType::H2CTermReq {
                Pdu::H2CTermReq(p)
            } else {
                Pdu::C2HTermReq(p)
            }
        }
        PduType::CapsuleCmd => Pdu::CapsuleCmd(view::<CapsuleCmd>(h)?),
        PduType::CapsuleResp => Pdu::CapsuleResp(view::<CapsuleResp>(h)?),
        PduType::H2CData => {
            let p = view::<H2CData>(h)?;
            if p.datal.get() != layout.data_len {
                return Err(invalid(16, "datal"));
            }
            Pdu::H2CData(p)
        }
        PduType::C2HData => {
            let p = view::<C2HData>(h)?;
            if p.datal.get() != layout.data_len {
                return Err(invalid(16, "datal"));
            }
            Pdu::C2HData(p)
        }
        PduType::R2T => {
            let p = view::<R2T>(h)?;
            if p.r2tl.get() == 0 {
                return Err(invalid(16, "r2tl"));
            }
            Pdu::R2T(p)
        }
    };
    Ok((pdu, layout))
}

/// `h` (exactly HLEN bytes, checked against the type) as a `T`.
fn view<T: FromBytes + zerocopy::KnownLayout + zerocopy::Immutable>(
    h: &[u8],
) -> Result<&T, PduError> {
    T::ref_from_bytes(h).map_err(|_| PduError::Incomplete {
        need: size_of::<T>(),
    })
}
