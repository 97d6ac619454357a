//! NVMe/TCP (NVMe/TCP Transport Specification 1.0): PDU headers,
//! a validating parser for received headers, builders for sent ones, and
//! the CRC32C digests.
//!
//! # The PDU stream
//!
//! Every PDU starts with an 8-byte [`CommonHeader`] (type, flags, HLEN,
//! PDO, PLEN), then the rest of its type's header (HLEN bytes in all), a
//! 4-byte header digest when HDGSTF is set, padding up to PDO, the PDU
//! data, and a 4-byte data digest when DDGSTF is set; PLEN counts it all.
//! The host opens with ICReq (digests wanted, HPDA, MAXR2T), the
//! controller answers ICResp (digests enabled, CPDA, MAXH2CDATA); then
//! commands go in CapsuleCmd PDUs (with in-capsule data, or data pulled
//! by R2T + H2CData), read data comes back in C2HData and completions in
//! CapsuleResp. A fatal error ends the connection with a TermReq carrying
//! a fatal error status (FES) and information (FEI).
//!
//! # Receiving
//!
//! ```
//! use bdevkit_nvme_spec::tcp::{self, Pdu, RecvConfig, Role};
//!
//! // A host's ICReq, as a controller receives it.
//! let mut wire = [0u8; 128];
//! tcp::build_ic_req(&mut wire, 0, tcp::Digests::default(), 0).unwrap();
//!
//! let cfg = RecvConfig::new(Role::Controller);
//! let layout = tcp::parse_common_header(&wire[..8], &cfg).unwrap();
//! assert_eq!(layout.header_len(), 128); // read this many bytes in all
//! match tcp::parse_header(&wire, &cfg) {
//!     Ok((Pdu::IcReq(req), _)) => assert_eq!(req.pfv.get(), 0),
//!     Ok(_) => unreachable!("only an ICReq passes before the exchange"),
//!     // Answer with a C2HTermReq and close.
//!     Err(e) => println!("fes {:?} fei {}", e.fes(), e.fei()),
//! }
//! ```

mod build;
mod digest;
mod parse;
mod pdu;

pub use build::{
    build_c2h_data, build_capsule_cmd, build_capsule_resp, build_h2c_data, build_ic_req,
    build_ic_resp, build_r2t, build_term_req, DataHeader, TxConfig,
};
pub use digest::{data_digest, header_digest, verify_data_digest, DataDigest, DataDigestError};
pub use parse::{
    parse_common_header, parse_header, Digests, Fes, Pdu, PduError, PduLayout, RecvConfig, Role,
    DEFAULT_MAX_DATA_LEN,
};
pub use pdu::{
    digest_bits, flags, C2HData, CapsuleCmd, CapsuleResp, CommonHeader, H2CData, IcReq, IcResp,
    PduType, TermReq, DEFAULT_PORT, DIGEST_LEN, DISCOVERY_PORT, MAX_PDA, MIN_MAXH2CDATA, PFV_1_0,
    R2T, TERM_REQ_MAX_DATA, TERM_REQ_MAX_PLEN,
};

#[cfg(test)]
mod tests;
