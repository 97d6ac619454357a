//! PDU builders: each writes a PDU header into the caller's buffer (no
//! allocation) and returns the bytes written.
//!
//! For PDUs with data the bytes written are the header, its digest and
//! the padding up to PDO; the caller sends its data next and then, when
//! data digests are on, the 4-byte [`super::data_digest`] of it
//! (little-endian). PLEN already counts both. A TermReq carries its error
//! data itself.

use zerocopy::little_endian::{U16, U32};
use zerocopy::{Immutable, IntoBytes};

use super::digest::header_digest;
use super::parse::{Digests, Fes, Role};
use super::pdu::{
    digest_bits, flags, C2HData, CapsuleCmd, CapsuleResp, CommonHeader, H2CData, IcReq, IcResp,
    PduType, TermReq, DIGEST_LEN, MAX_PDA, PFV_1_0, R2T, TERM_REQ_MAX_DATA,
};
use crate::cmd::Sqe;
use crate::cpl::Cqe;
use crate::error::{need, Error, Result};

/// What a sender knows once connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TxConfig {
    /// The negotiated digests.
    pub digests: Digests,
    /// The data alignment the *peer* asked for (a host sends with the
    /// controller's CPDA, a controller with the host's HPDA).
    pub pda: u8,
}

/// The fields of an H2CData or C2HData header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DataHeader {
    /// Command capsule CID.
    pub cccid: u16,
    /// Transfer tag (H2CData only: the R2T's).
    pub ttag: u16,
    /// Offset of the data in the command's data.
    pub datao: u32,
    /// Bytes of data.
    pub datal: u32,
    /// Last data PDU of the command.
    pub last: bool,
    /// C2HData only: the command succeeded, no response capsule follows
    /// (requires `last`).
    pub success: bool,
}

/// How one PDU is laid out on the wire.
struct Plan {
    flags: u8,
    pdo: u8,
    plen: u32,
    /// Bytes the builder writes: header, header digest, padding.
    out_len: usize,
}

fn plan(t: PduType, data_len: u32, tx: &TxConfig) -> Result<Plan> {
    let hlen = u32::from(t.hlen());
    let apply = t.digests_apply();
    let hd = apply && tx.digests.header;
    let dd = apply && tx.digests.data && data_len > 0;
    let header_len = hlen + if hd { 4 } else { 0 };
    let (pdo, start) = if data_len > 0 && t.carries_data() {
        let align = (u32::from(tx.pda.min(MAX_PDA)) + 1) * 4;
        let pdo = header_len.div_ceil(align) * align;
        (pdo, pdo)
    } else {
        (0, header_len)
    };
    let plen = start
        .checked_add(data_len)
        .and_then(|p| p.checked_add(if dd { 4 } else { 0 }))
        .ok_or(Error::OutOfRange {
            what: "pdu data length",
            value: data_len.into(),
        })?;
    Ok(Plan {
        flags: if hd { flags::HDGSTF } else { 0 } | if dd { flags::DDGSTF } else { 0 },
        pdo: u8::try_from(pdo).expect("invariant: pdo <= 128 (hlen 76 aligned to at most 128)"),
        plen,
        out_len: usize::try_from(start).expect("invariant: header length fits usize"),
    })
}

fn common(t: PduType, extra_flags: u8, p: &Plan) -> CommonHeader {
    CommonHeader {
        pdu_type: t as u8,
        flags: p.flags | extra_flags,
        hlen: t.hlen(),
        pdo: p.pdo,
        plen: U32::new(p.plen),
    }
}

/// Writes `hdr`, its digest when the plan says so, and zero padding.
fn emit<T: IntoBytes + Immutable>(buf: &mut [u8], hdr: &T, p: &Plan) -> Result<usize> {
    let bytes = hdr.as_bytes();
    let hlen = bytes.len();
    need(buf.len(), p.out_len)?;
    buf[..hlen].copy_from_slice(bytes);
    let mut end = hlen;
    if p.flags & flags::HDGSTF != 0 {
        let d = header_digest(&buf[..hlen]);
        buf[hlen..hlen + DIGEST_LEN].copy_from_slice(&d.to_le_bytes());
        end += DIGEST_LEN;
    }
    buf[end..p.out_len].fill(0);
    Ok(p.out_len)
}

fn dgst_byte(d: Digests) -> u8 {
    (if d.header { digest_bits::HEADER } else { 0 }) | if d.data { digest_bits::DATA } else { 0 }
}

/// ICReq: the host asks for `digests`, wants C2H data aligned to
/// `(hpda + 1) * 4` bytes, and allows `maxr2t + 1` outstanding R2Ts.
pub fn build_ic_req(buf: &mut [u8], hpda: u8, digests: Digests, maxr2t: u32) -> Result<usize> {
    let p = plan(PduType::IcReq, 0, &TxConfig::default())?;
    let hdr = IcReq {
        ch: common(PduType::IcReq, 0, &p),
        pfv: U16::new(PFV_1_0),
        hpda,
        dgst: dgst_byte(digests),
        maxr2t: U32::new(maxr2t),
        rsvd: [0; 112],
    };
    emit(buf, &hdr, &p)
}

/// ICResp: the controller enables `digests`, wants H2C data aligned to
/// `(cpda + 1) * 4` bytes and takes at most `maxh2cdata` bytes per H2CData.
pub fn build_ic_resp(buf: &mut [u8], cpda: u8, digests: Digests, maxh2cdata: u32) -> Result<usize> {
    let p = plan(PduType::IcResp, 0, &TxConfig::default())?;
    let hdr = IcResp {
        ch: common(PduType::IcResp, 0, &p),
        pfv: U16::new(PFV_1_0),
        cpda,
        dgst: dgst_byte(digests),
        maxh2cdata: U32::new(maxh2cdata),
        rsvd: [0; 112],
    };
    emit(buf, &hdr, &p)
}

/// A TermReq from `sender` (a host sends H2CTermReq, a controller
/// C2HTermReq) with `fes`/`fei` ([`super::PduError::fes`] and
/// [`super::PduError::fei`]) and, as error data, the first 128 bytes of
/// the offending PDU header. Returns the whole PDU's length.
pub fn build_term_req(
    buf: &mut [u8],
    sender: Role,
    fes: Fes,
    fei: u32,
    offending: &[u8],
) -> Result<usize> {
    let t = match sender {
        Role::Host => PduType::H2CTermReq,
        Role::Controller => PduType::C2HTermReq,
    };
    let data = &offending[..offending.len().min(TERM_REQ_MAX_DATA)];
    let data_len = u32::try_from(data.len()).expect("invariant: at most 128 bytes");
    let p = plan(t, data_len, &TxConfig::default())?;
    let hdr = TermReq {
        ch: common(t, 0, &p),
        fes: U16::new(fes as u16),
        fei: U32::new(fei),
        rsvd: [0; 10],
    };
    let n = emit(buf, &hdr, &p)?;
    need(buf.len(), n + data.len())?;
    buf[n..n + data.len()].copy_from_slice(data);
    Ok(n + data.len())
}

/// A command capsule for `sqe` with `data_len` bytes of in-capsule data
/// (0 for none).
pub fn build_capsule_cmd(buf: &mut [u8], sqe: &Sqe, data_len: u32, tx: &TxConfig) -> Result<usize> {
    let p = plan(PduType::CapsuleCmd, data_len, tx)?;
    let hdr = CapsuleCmd {
        ch: common(PduType::CapsuleCmd, 0, &p),
        sqe: *sqe,
    };
    emit(buf, &hdr, &p)
}

/// A response capsule for `cqe`.
pub fn build_capsule_resp(buf: &mut [u8], cqe: &Cqe, tx: &TxConfig) -> Result<usize> {
    let p = plan(PduType::CapsuleResp, 0, tx)?;
    let hdr = CapsuleResp {
        ch: common(PduType::CapsuleResp, 0, &p),
        cqe: *cqe,
    };
    emit(buf, &hdr, &p)
}

fn data_flags(h: &DataHeader, c2h: bool) -> u8 {
    (if h.last { flags::LAST_PDU } else { 0 }) | if c2h && h.success { flags::SUCCESS } else { 0 }
}

/// An H2CData header for `h.datal` bytes (`h.success` is ignored).
pub fn build_h2c_data(buf: &mut [u8], h: &DataHeader, tx: &TxConfig) -> Result<usize> {
    let p = plan(PduType::H2CData, h.datal, tx)?;
    let hdr = H2CData {
        ch: common(PduType::H2CData, data_flags(h, false), &p),
        cccid: U16::new(h.cccid),
        ttag: U16::new(h.ttag),
        datao: U32::new(h.datao),
        datal: U32::new(h.datal),
        rsvd: [0; 4],
    };
    emit(buf, &hdr, &p)
}

/// A C2HData header for `h.datal` bytes (`h.ttag` is ignored).
pub fn build_c2h_data(buf: &mut [u8], h: &DataHeader, tx: &TxConfig) -> Result<usize> {
    let p = plan(PduType::C2HData, h.datal, tx)?;
    let hdr = C2HData {
        ch: common(PduType::C2HData, data_flags(h, true), &p),
        cccid: U16::new(h.cccid),
        rsvd10: [0; 2],
        datao: U32::new(h.datao),
        datal: U32::new(h.datal),
        rsvd: [0; 4],
    };
    emit(buf, &hdr, &p)
}

/// An R2T asking for `r2tl` bytes at offset `r2to` of command `cccid`,
/// to come back tagged `ttag`.
pub fn build_r2t(
    buf: &mut [u8],
    cccid: u16,
    ttag: u16,
    r2to: u32,
    r2tl: u32,
    tx: &TxConfig,
) -> Result<usize> {
    let p = plan(PduType::R2T, 0, tx)?;
    let hdr = R2T {
        ch: common(PduType::R2T, 0, &p),
        cccid: U16::new(cccid),
        ttag: U16::new(ttag),
        r2to: U32::new(r2to),
        r2tl: U32::new(r2tl),
        rsvd: [0; 4],
    };
    emit(buf, &hdr, &p)
}
