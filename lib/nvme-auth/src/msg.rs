//! The DH-HMAC-CHAP messages (NVMe Base Specification, Authentication
//! Send/Receive with SECP 0xE9, SPSP 1/1): encoded and decoded with every
//! length and field checked, as a host or a controller may send anything.
//!
//! | message | type/id | layout after the 6-byte header (type, id, 2 reserved, t_id) |
//! |---|---|---|
//! | AUTH_Negotiate | 0/0x00 | sc_c, napd, napd × 64-byte descriptors (auth_id, rsvd, halen, dhlen, 30 hash ids, 30 group ids) |
//! | DH-HMAC-CHAP_Challenge | 1/0x01 | hl, rsvd, hash, group, dhvlen (2), seqnum (4), `cval[hl]`, `dhv[dhvlen]` |
//! | DH-HMAC-CHAP_Reply | 1/0x02 | hl, rsvd, cvalid, rsvd, dhvlen (2), seqnum (4), `rval[hl]`, `cval[hl]`, `dhv[dhvlen]` |
//! | DH-HMAC-CHAP_Success1 | 1/0x03 | hl, rsvd, rvalid, 7 rsvd, `rval[hl]` |
//! | DH-HMAC-CHAP_Success2 | 1/0x04 | 10 reserved |
//! | AUTH_Failure2 / Failure1 | 0/0xF0, 0xF1 | rescode (1: failure), rescode explanation |
//!
//! Multi-byte fields are little-endian.

use crate::ids::{DhGroup, HashFn};
use crate::Error;

/// Authentication types.
const TYPE_COMMON: u8 = 0;
const TYPE_DHCHAP: u8 = 1;
/// Message identifiers.
const ID_NEGOTIATE: u8 = 0x00;
const ID_CHALLENGE: u8 = 0x01;
const ID_REPLY: u8 = 0x02;
const ID_SUCCESS1: u8 = 0x03;
const ID_SUCCESS2: u8 = 0x04;
const ID_FAILURE2: u8 = 0xf0;
const ID_FAILURE1: u8 = 0xf1;
/// A negotiate descriptor's protocol: DH-HMAC-CHAP.
const AUTH_ID_DHCHAP: u8 = 1;
/// Largest message: what one Authentication Send/Receive moves (the DH
/// value of ffdhe8192 is 1 KiB).
pub const MAX_MESSAGE: usize = 4096;

/// Why authentication failed (the rescode explanation of a failure
/// message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The response did not match (1).
    Failed,
    /// No common protocol (2).
    ProtocolUnusable,
    /// Secure channel concatenation mismatch (3).
    SccMismatch,
    /// No common hash (4).
    HashUnusable,
    /// No common DH group (5).
    DhGroupUnusable,
    /// A message's fields are wrong (6).
    IncorrectPayload,
    /// A message out of its place in the sequence (7).
    IncorrectProtocolMessage,
    /// An explanation this build does not know.
    Other(u8),
}

impl Reason {
    fn code(self) -> u8 {
        match self {
            Reason::Failed => 1,
            Reason::ProtocolUnusable => 2,
            Reason::SccMismatch => 3,
            Reason::HashUnusable => 4,
            Reason::DhGroupUnusable => 5,
            Reason::IncorrectPayload => 6,
            Reason::IncorrectProtocolMessage => 7,
            Reason::Other(c) => c,
        }
    }

    fn from_code(c: u8) -> Reason {
        match c {
            1 => Reason::Failed,
            2 => Reason::ProtocolUnusable,
            3 => Reason::SccMismatch,
            4 => Reason::HashUnusable,
            5 => Reason::DhGroupUnusable,
            6 => Reason::IncorrectPayload,
            7 => Reason::IncorrectProtocolMessage,
            c => Reason::Other(c),
        }
    }
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Host to controller: the hashes and groups it can use.
    Negotiate {
        /// Transaction id.
        tid: u16,
        /// Secure channel concatenation asked for.
        sc_c: u8,
        /// Hash ids offered (unknown ones kept, ignored by the
        /// controller).
        hashes: Vec<u8>,
        /// Group ids offered.
        groups: Vec<u8>,
    },
    /// Controller to host.
    Challenge {
        /// Transaction id.
        tid: u16,
        /// The hash chosen.
        hash: HashFn,
        /// The group chosen.
        group: DhGroup,
        /// Sequence number S1.
        seqnum: u32,
        /// Challenge C1.
        cval: Vec<u8>,
        /// The controller's DH public value (empty for `Null`).
        dhv: Vec<u8>,
    },
    /// Host to controller.
    Reply {
        /// Transaction id.
        tid: u16,
        /// Response R1.
        rval: Vec<u8>,
        /// The host's challenge C2 (bidirectional), else `None`.
        cval: Option<Vec<u8>>,
        /// Sequence number S2 (0 when unidirectional).
        seqnum: u32,
        /// The host's DH public value.
        dhv: Vec<u8>,
    },
    /// Controller to host: R1 was right (with R2 when bidirectional).
    Success1 {
        /// Transaction id.
        tid: u16,
        /// The hash's length (HL), set even without R2: SPDK's target
        /// sets it, and the Linux host expects it.
        hl: u8,
        /// Response R2, when the host asked for one.
        rval: Option<Vec<u8>>,
    },
    /// Host to controller: R2 was right.
    Success2 {
        /// Transaction id.
        tid: u16,
    },
    /// AUTH_Failure1 (controller to host) or AUTH_Failure2 (host to
    /// controller).
    Failure {
        /// `1`: Failure1, `2`: Failure2.
        which: u8,
        /// Transaction id.
        tid: u16,
        /// The explanation.
        reason: Reason,
    },
}

fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn header(buf: &mut Vec<u8>, ty: u8, id: u8, tid: u16) {
    buf.extend_from_slice(&[ty, id, 0, 0]);
    buf.extend_from_slice(&tid.to_le_bytes());
}

impl Message {
    /// The transaction id.
    #[must_use]
    pub fn tid(&self) -> u16 {
        match self {
            Message::Negotiate { tid, .. }
            | Message::Challenge { tid, .. }
            | Message::Reply { tid, .. }
            | Message::Success1 { tid, .. }
            | Message::Success2 { tid }
            | Message::Failure { tid, .. } => *tid,
        }
    }

    /// The message's name, for logs.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Message::Negotiate { .. } => "negotiate",
            Message::Challenge { .. } => "challenge",
            Message::Reply { .. } => "reply",
            Message::Success1 { .. } => "success1",
            Message::Success2 { .. } => "success2",
            Message::Failure { which: 1, .. } => "failure1",
            Message::Failure { .. } => "failure2",
        }
    }

    /// The wire form.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64);
        match self {
            Message::Negotiate {
                tid,
                sc_c,
                hashes,
                groups,
            } => {
                header(&mut b, TYPE_COMMON, ID_NEGOTIATE, *tid);
                b.extend_from_slice(&[*sc_c, 1]);
                let (nh, ng) = (hashes.len().min(30), groups.len().min(30));
                b.extend_from_slice(&[
                    AUTH_ID_DHCHAP,
                    0,
                    u8::try_from(nh).unwrap_or(30),
                    u8::try_from(ng).unwrap_or(30),
                ]);
                let mut h = [0u8; 30];
                h[..nh].copy_from_slice(&hashes[..nh]);
                let mut g = [0u8; 30];
                g[..ng].copy_from_slice(&groups[..ng]);
                b.extend_from_slice(&h);
                b.extend_from_slice(&g);
            }
            Message::Challenge {
                tid,
                hash,
                group,
                seqnum,
                cval,
                dhv,
            } => {
                header(&mut b, TYPE_DHCHAP, ID_CHALLENGE, *tid);
                b.extend_from_slice(&[
                    u8::try_from(cval.len()).unwrap_or(0),
                    0,
                    hash.id(),
                    group.id(),
                ]);
                b.extend_from_slice(&u16::try_from(dhv.len()).unwrap_or(0).to_le_bytes());
                b.extend_from_slice(&seqnum.to_le_bytes());
                b.extend_from_slice(cval);
                b.extend_from_slice(dhv);
            }
            Message::Reply {
                tid,
                rval,
                cval,
                seqnum,
                dhv,
            } => {
                header(&mut b, TYPE_DHCHAP, ID_REPLY, *tid);
                let hl = rval.len();
                b.extend_from_slice(&[
                    u8::try_from(hl).unwrap_or(0),
                    0,
                    u8::from(cval.is_some()),
                    0,
                ]);
                b.extend_from_slice(&u16::try_from(dhv.len()).unwrap_or(0).to_le_bytes());
                b.extend_from_slice(&seqnum.to_le_bytes());
                b.extend_from_slice(rval);
                match cval {
                    Some(c) => b.extend_from_slice(c),
                    None => b.resize(b.len() + hl, 0),
                }
                b.extend_from_slice(dhv);
            }
            Message::Success1 { tid, hl, rval } => {
                header(&mut b, TYPE_DHCHAP, ID_SUCCESS1, *tid);
                b.extend_from_slice(&[*hl, 0, u8::from(rval.is_some())]);
                b.extend_from_slice(&[0; 7]);
                if let Some(r) = rval {
                    b.extend_from_slice(r);
                }
            }
            Message::Success2 { tid } => {
                header(&mut b, TYPE_DHCHAP, ID_SUCCESS2, *tid);
                b.extend_from_slice(&[0; 10]);
            }
            Message::Failure { which, tid, reason } => {
                let id = if *which == 1 {
                    ID_FAILURE1
                } else {
                    ID_FAILURE2
                };
                header(&mut b, TYPE_COMMON, id, *tid);
                b.extend_from_slice(&[1, reason.code()]);
            }
        }
        b
    }

    /// Decodes a message, checking every length and field it can check
    /// on its own (the sequence is the state machines' job).
    ///
    /// Decodes a message that came back in an Authentication Receive:
    /// the controller may fill the host's whole buffer (AL), past the
    /// message (Linux's nvmet copies AL bytes), so what follows the length
    /// its header gives is ignored; otherwise as [`Message::decode`].
    ///
    /// # Errors
    /// [`Error::Message`] with what is wrong.
    pub fn decode_received(b: &[u8]) -> Result<Message, Error> {
        let len = match (b.first(), b.get(1)) {
            (Some(&TYPE_DHCHAP), Some(&ID_CHALLENGE)) if b.len() >= 16 => {
                16 + usize::from(b[6]) + usize::from(le16(b, 10))
            }
            (Some(&TYPE_DHCHAP), Some(&ID_SUCCESS1)) if b.len() >= 16 => {
                16 + if b[8] == 1 { usize::from(b[6]) } else { 0 }
            }
            (Some(&TYPE_COMMON), Some(&(ID_FAILURE1 | ID_FAILURE2))) => 8,
            _ => b.len(),
        };
        Message::decode(b.get(..len).unwrap_or(b))
    }

    /// # Errors
    /// [`Error::Message`] with what is wrong.
    pub fn decode(b: &[u8]) -> Result<Message, Error> {
        let bad = |w: &'static str| Err(Error::Message(w));
        if b.len() < 8 {
            return bad("shorter than a header");
        }
        if b.len() > MAX_MESSAGE {
            return bad("longer than a message can be");
        }
        let tid = le16(b, 4);
        match (b[0], b[1]) {
            (TYPE_COMMON, ID_NEGOTIATE) => {
                let napd = usize::from(b[7]);
                if napd == 0 || b.len() != 8 + 64 * napd {
                    return bad("negotiate length does not match its descriptors");
                }
                let d = (0..napd)
                    .map(|i| &b[8 + 64 * i..8 + 64 * (i + 1)])
                    .find(|d| d[0] == AUTH_ID_DHCHAP);
                let Some(d) = d else {
                    return Ok(Message::Negotiate {
                        tid,
                        sc_c: b[6],
                        hashes: Vec::new(),
                        groups: Vec::new(),
                    });
                };
                let (nh, ng) = (usize::from(d[2]), usize::from(d[3]));
                if nh > 30 || ng > 30 {
                    return bad("negotiate lists longer than 30");
                }
                Ok(Message::Negotiate {
                    tid,
                    sc_c: b[6],
                    hashes: d[4..4 + nh].to_vec(),
                    groups: d[34..34 + ng].to_vec(),
                })
            }
            (TYPE_DHCHAP, ID_CHALLENGE) => {
                if b.len() < 16 {
                    return bad("challenge shorter than its header");
                }
                let hl = usize::from(b[6]);
                let hash = HashFn::from_id(b[8]).ok_or(Error::Message("unknown hash"))?;
                let group = DhGroup::from_id(b[9]).ok_or(Error::Message("unknown DH group"))?;
                let dhvlen = usize::from(le16(b, 10));
                if hl != hash.len() {
                    return bad("challenge length does not match its hash");
                }
                if dhvlen != group.value_len() {
                    return bad("DH value length does not match its group");
                }
                if b.len() != 16 + hl + dhvlen {
                    return bad("challenge length does not match its fields");
                }
                Ok(Message::Challenge {
                    tid,
                    hash,
                    group,
                    seqnum: le32(b, 12),
                    cval: b[16..16 + hl].to_vec(),
                    dhv: b[16 + hl..].to_vec(),
                })
            }
            (TYPE_DHCHAP, ID_REPLY) => {
                if b.len() < 16 {
                    return bad("reply shorter than its header");
                }
                let hl = usize::from(b[6]);
                let cvalid = b[8];
                let dhvlen = usize::from(le16(b, 10));
                if !matches!(hl, 32 | 48 | 64) || cvalid > 1 {
                    return bad("reply fields out of range");
                }
                if b.len() != 16 + 2 * hl + dhvlen {
                    return bad("reply length does not match its fields");
                }
                let seqnum = le32(b, 12);
                Ok(Message::Reply {
                    tid,
                    rval: b[16..16 + hl].to_vec(),
                    cval: (cvalid == 1).then(|| b[16 + hl..16 + 2 * hl].to_vec()),
                    seqnum,
                    dhv: b[16 + 2 * hl..].to_vec(),
                })
            }
            (TYPE_DHCHAP, ID_SUCCESS1) => {
                if b.len() < 16 {
                    return bad("success1 shorter than its header");
                }
                let hl = b[6];
                let rvalid = b[8];
                // HL names the hash even without R2 (SPDK, Linux); R2
                // follows only when RVALID says so.
                if !matches!(hl, 0 | 32 | 48 | 64) || rvalid > 1 || (rvalid == 1 && hl == 0) {
                    return bad("success1 fields out of range");
                }
                let len = 16 + if rvalid == 1 { usize::from(hl) } else { 0 };
                if b.len() != len {
                    return bad("success1 length does not match its fields");
                }
                Ok(Message::Success1 {
                    tid,
                    hl,
                    rval: (rvalid == 1).then(|| b[16..].to_vec()),
                })
            }
            (TYPE_DHCHAP, ID_SUCCESS2) => {
                if b.len() != 16 {
                    return bad("success2 of the wrong length");
                }
                Ok(Message::Success2 { tid })
            }
            (TYPE_COMMON, id @ (ID_FAILURE1 | ID_FAILURE2)) => {
                if b.len() != 8 {
                    return bad("failure of the wrong length");
                }
                Ok(Message::Failure {
                    which: if id == ID_FAILURE1 { 1 } else { 2 },
                    tid,
                    reason: Reason::from_code(b[7]),
                })
            }
            _ => bad("unknown message"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Message> {
        vec![
            Message::Negotiate {
                tid: 7,
                sc_c: 0,
                hashes: vec![1, 2, 3],
                groups: vec![0, 1, 5],
            },
            Message::Challenge {
                tid: 7,
                hash: HashFn::Sha384,
                group: DhGroup::Ffdhe2048,
                seqnum: 99,
                cval: vec![3; 48],
                dhv: vec![9; 256],
            },
            Message::Reply {
                tid: 7,
                rval: vec![1; 32],
                cval: Some(vec![2; 32]),
                seqnum: 5,
                dhv: vec![],
            },
            Message::Reply {
                tid: 7,
                rval: vec![1; 64],
                cval: None,
                seqnum: 0,
                dhv: vec![4; 8],
            },
            Message::Success1 {
                tid: 1,
                hl: 32,
                rval: Some(vec![8; 32]),
            },
            Message::Success1 {
                tid: 1,
                hl: 48,
                rval: None,
            },
            Message::Success2 { tid: 3 },
            Message::Failure {
                which: 1,
                tid: 3,
                reason: Reason::HashUnusable,
            },
            Message::Failure {
                which: 2,
                tid: 3,
                reason: Reason::Failed,
            },
        ]
    }

    #[test]
    fn received_messages_may_be_padded_to_the_buffer() {
        for m in samples() {
            if !matches!(
                m,
                Message::Challenge { .. } | Message::Success1 { .. } | Message::Failure { .. }
            ) {
                continue;
            }
            let mut b = m.encode();
            b.resize(MAX_MESSAGE, 0);
            assert_eq!(Message::decode_received(&b).unwrap(), m);
            assert!(Message::decode(&b).is_err(), "decode stays strict");
        }
        // Shorter than its header says: still an error.
        let b = samples()
            .into_iter()
            .find(|m| matches!(m, Message::Challenge { .. }))
            .unwrap()
            .encode();
        assert!(Message::decode_received(&b[..b.len() - 1]).is_err());
    }

    #[test]
    fn messages_round_trip_with_spdks_sizes() {
        for m in samples() {
            let b = m.encode();
            assert_eq!(Message::decode(&b).unwrap(), m, "{}", m.name());
        }
        // Sizes as SPDK's structs: negotiate 8 + 64, failure 8, success2 16.
        assert_eq!(samples()[0].encode().len(), 72);
        assert_eq!(samples()[7].encode().len(), 8);
        assert_eq!(samples()[6].encode().len(), 16);
    }

    #[test]
    fn truncated_or_padded_messages_are_refused() {
        for m in samples() {
            let b = m.encode();
            for cut in 0..b.len() {
                assert!(
                    Message::decode(&b[..cut]).is_err(),
                    "{} cut at {cut}",
                    m.name()
                );
            }
            let mut long = b.clone();
            long.push(0);
            assert!(Message::decode(&long).is_err(), "{} padded", m.name());
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Message::decode(&b);
            let _ = Message::decode_received(&b);
        }

        #[test]
        fn mutated_messages_never_panic(i in 0usize..9, pos in 0usize..400, v in any::<u8>()) {
            let mut b = samples()[i].encode();
            if !b.is_empty() {
                let p = pos % b.len();
                b[p] = v;
            }
            let _ = Message::decode(&b);
            let _ = Message::decode_received(&b);
        }
    }
}
