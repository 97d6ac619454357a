//! Telling TLS from plain NVMe/TCP by a connection's first bytes: a
//! listener without TLS can refuse a TLS host with a clear log (its
//! ClientHello is not a PDU), and a TLS side can say why the peer's
//! bytes are no handshake. A bottom layer: no imports from the crate.

/// What a connection's first bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniff {
    /// Fewer than 3 bytes: cannot tell yet.
    NeedMore,
    /// A TLS handshake record (a ClientHello from a host that uses TLS,
    /// or a ServerHello).
    TlsHandshake,
    /// Another TLS record (an alert, most likely).
    TlsRecord,
    /// An NVMe/TCP PDU header of this PDU type (0 ICReq, 1 ICResp, 2
    /// H2CTermReq, 3 C2HTermReq, ...).
    NvmeTcp(u8),
    /// Neither.
    Other,
}

impl Sniff {
    /// Whether it is TLS (any record).
    #[must_use]
    pub fn is_tls(self) -> bool {
        matches!(self, Sniff::TlsHandshake | Sniff::TlsRecord)
    }

    /// What a side that expected the other protocol was sent, in words.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Sniff::NeedMore => "too few bytes to tell",
            Sniff::TlsHandshake => "a TLS handshake (the peer uses TLS)",
            Sniff::TlsRecord => "a TLS record (the peer uses TLS)",
            Sniff::NvmeTcp(0) => "a plain NVMe/TCP ICReq (the host does not use TLS)",
            Sniff::NvmeTcp(1) => "a plain NVMe/TCP ICResp (the listener does not use TLS)",
            Sniff::NvmeTcp(3) => "a plain NVMe/TCP C2HTermReq (the listener does not use TLS)",
            Sniff::NvmeTcp(_) => "a plain NVMe/TCP PDU (the peer does not use TLS)",
            Sniff::Other => "bytes that are neither TLS nor NVMe/TCP",
        }
    }
}

/// TLS record content types: change_cipher_spec, alert, handshake,
/// application_data.
const TLS_CONTENT: std::ops::RangeInclusive<u8> = 20..=23;
const TLS_HANDSHAKE: u8 = 22;
/// NVMe/TCP PDU types (ICReq .. R2T).
const NVME_PDU_TYPES: std::ops::RangeInclusive<u8> = 0..=9;

/// Classifies a connection's first bytes (3 are enough; more are
/// checked when given).
#[must_use]
pub fn sniff(first: &[u8]) -> Sniff {
    let [t, b1, b2, ..] = *first else {
        return Sniff::NeedMore;
    };
    // A TLS record: content type, legacy version 3.x (x ≤ 4).
    if TLS_CONTENT.contains(&t) && b1 == 3 && b2 <= 4 {
        return if t == TLS_HANDSHAKE {
            Sniff::TlsHandshake
        } else {
            Sniff::TlsRecord
        };
    }
    // An NVMe/TCP common header: type, flags, hlen (the header lengths
    // the PDU types have: 24, 72 for a command capsule, 128 for IC).
    if NVME_PDU_TYPES.contains(&t) && matches!(b2, 24 | 72 | 128) {
        let plen_ok = first.len() < 8 || {
            let plen = u32::from_le_bytes([first[4], first[5], first[6], first[7]]);
            plen >= u32::from(b2)
        };
        if plen_ok {
            return Sniff::NvmeTcp(t);
        }
    }
    Sniff::Other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_client_hello_from_icreq() {
        // OpenSSL's ClientHello record header, and a TLS 1.3 alert.
        assert_eq!(
            sniff(&[0x16, 0x03, 0x01, 0x01, 0x2c, 0x01]),
            Sniff::TlsHandshake
        );
        assert_eq!(sniff(&[0x15, 0x03, 0x03, 0x00, 0x02]), Sniff::TlsRecord);
        // An ICReq: type 0, flags 0, hlen 128, pdo 0, plen 128.
        let icreq = [0u8, 0, 128, 0, 128, 0, 0, 0];
        assert_eq!(sniff(&icreq), Sniff::NvmeTcp(0));
        assert!(sniff(&icreq).describe().contains("ICReq"));
        // A C2HTermReq (type 3, hlen 24).
        assert_eq!(sniff(&[3, 0, 24, 0, 152, 0, 0, 0]), Sniff::NvmeTcp(3));
        assert_eq!(sniff(&[0x16, 0x03]), Sniff::NeedMore);
        assert_eq!(sniff(&[]), Sniff::NeedMore);
        assert_eq!(sniff(b"GET / HTTP/1.1"), Sniff::Other);
        // plen shorter than hlen: not a PDU.
        assert_eq!(sniff(&[0, 0, 128, 0, 8, 0, 0, 0]), Sniff::Other);
        assert!(Sniff::TlsHandshake.is_tls() && !Sniff::NvmeTcp(0).is_tls());
    }
}
