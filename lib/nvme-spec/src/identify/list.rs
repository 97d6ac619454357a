//! Namespace id lists (Identify CNS 0x02, the Changed Namespace List log
//! page) and namespace identification descriptors (Identify CNS 0x03).

use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::{need, Result};

/// Entries in a namespace id list.
pub const NS_LIST_ENTRIES: usize = 1024;

/// A list of up to 1024 namespace ids in increasing order, ended by the
/// first zero entry (4096 bytes).
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct NamespaceList {
    /// The ids; unused entries are 0.
    pub ids: [U32; NS_LIST_ENTRIES],
}

const _: () = assert!(size_of::<NamespaceList>() == 4096);

impl Default for NamespaceList {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

impl NamespaceList {
    /// A list of the first 1024 of `ids` (the caller sorts them; a target
    /// answering CNS 2 lists the ids above the command's nsid).
    #[must_use]
    pub fn from_ids(ids: impl IntoIterator<Item = u32>) -> Self {
        let mut l = NamespaceList::default();
        for (slot, id) in l.ids.iter_mut().zip(ids) {
            slot.set(id);
        }
        l
    }

    /// The ids up to the first zero entry.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.ids.iter().map(|i| i.get()).take_while(|&i| i != 0)
    }

    /// Changed Namespace List: whether more than 1024 namespaces changed
    /// (the first entry is 0xffffffff and the host must rescan them all).
    #[must_use]
    pub fn overflowed(&self) -> bool {
        self.ids[0].get() == 0xffff_ffff
    }
}

/// Namespace identifier types (NIDT).
pub mod nidt {
    /// IEEE EUI-64 (8 bytes).
    pub const EUI64: u8 = 1;
    /// Namespace globally unique identifier (16 bytes).
    pub const NGUID: u8 = 2;
    /// UUID (16 bytes).
    pub const UUID: u8 = 3;
    /// Command set identifier (1 byte).
    pub const CSI: u8 = 4;
}

/// One namespace identification descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NsIdDescriptor {
    /// IEEE EUI-64.
    Eui64([u8; 8]),
    /// NGUID.
    Nguid([u8; 16]),
    /// UUID (RFC 4122 byte order).
    Uuid([u8; 16]),
    /// Command set identifier.
    Csi(u8),
    /// A type this crate does not know, or a known type with a wrong length.
    Other {
        /// Identifier type.
        nidt: u8,
        /// Identifier bytes.
        nid: Vec<u8>,
    },
}

impl NsIdDescriptor {
    fn parts(&self) -> (u8, &[u8]) {
        match self {
            NsIdDescriptor::Eui64(b) => (nidt::EUI64, b),
            NsIdDescriptor::Nguid(b) => (nidt::NGUID, b),
            NsIdDescriptor::Uuid(b) => (nidt::UUID, b),
            NsIdDescriptor::Csi(b) => (nidt::CSI, std::slice::from_ref(b)),
            NsIdDescriptor::Other { nidt, nid } => (*nidt, nid),
        }
    }
}

/// Parses a namespace identification descriptor list: 4-byte headers
/// (NIDT, NIDL, 2 reserved bytes) each followed by NIDL bytes, ended by
/// NIDT 0 or the end of `buf`. Never fails and never panics: a truncated
/// descriptor ends the list, a known type with the wrong length comes back
/// as [`NsIdDescriptor::Other`].
#[must_use]
pub fn parse_ns_id_descriptors(buf: &[u8]) -> Vec<NsIdDescriptor> {
    let mut out = Vec::new();
    let mut rest = buf;
    while let [t, l, _, _, tail @ ..] = rest {
        let (t, l) = (*t, usize::from(*l));
        if t == 0 || tail.len() < l {
            break;
        }
        let (nid, next) = tail.split_at(l);
        out.push(match (t, nid) {
            (nidt::EUI64, &[a, b, c, d, e, f, g, h]) => {
                NsIdDescriptor::Eui64([a, b, c, d, e, f, g, h])
            }
            (nidt::NGUID, n) if n.len() == 16 => NsIdDescriptor::Nguid(to16(n)),
            (nidt::UUID, n) if n.len() == 16 => NsIdDescriptor::Uuid(to16(n)),
            (nidt::CSI, &[c]) => NsIdDescriptor::Csi(c),
            _ => NsIdDescriptor::Other {
                nidt: t,
                nid: nid.to_vec(),
            },
        });
        rest = next;
    }
    out
}

fn to16(n: &[u8]) -> [u8; 16] {
    let mut a = [0; 16];
    a.copy_from_slice(n);
    a
}

/// Writes `descs` as a descriptor list into `buf` and zeroes the rest of
/// it (the terminator); returns the bytes of descriptors written. Fails
/// if they do not fit with a terminator, or one is longer than 255 bytes.
pub fn write_ns_id_descriptors(descs: &[NsIdDescriptor], buf: &mut [u8]) -> Result<usize> {
    let mut off = 0;
    for d in descs {
        let (t, nid) = d.parts();
        let nidl = u8::try_from(nid.len()).map_err(|_| crate::error::Error::FieldTooLong {
            field: "namespace identifier",
            len: nid.len(),
            max: 255,
        })?;
        let end = off + 4 + nid.len();
        need(buf.len(), end)?;
        buf[off..off + 4].copy_from_slice(&[t, nidl, 0, 0]);
        buf[off + 4..end].copy_from_slice(nid);
        off = end;
    }
    if off < buf.len() {
        buf[off..].fill(0);
    } else if !descs.is_empty() {
        need(buf.len(), off + 1)?;
    }
    Ok(off)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn list_iter_stops_at_zero() {
        let l = NamespaceList::from_ids([1, 2, 5]);
        assert_eq!(l.iter().collect::<Vec<_>>(), [1, 2, 5]);
        assert_eq!(&l.as_bytes()[..12], &[1, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0]);
        assert!(!l.overflowed());
        assert!(NamespaceList::from_ids([0xffff_ffff]).overflowed());
        assert_eq!(NamespaceList::from_ids(1..=2000).iter().count(), 1024);
    }

    #[test]
    fn descriptors_round_trip() {
        let descs = vec![
            NsIdDescriptor::Eui64([1, 2, 3, 4, 5, 6, 7, 8]),
            NsIdDescriptor::Nguid([0xaa; 16]),
            NsIdDescriptor::Uuid([0x11; 16]),
            NsIdDescriptor::Csi(0),
        ];
        let mut buf = [0xff; 4096];
        let n = write_ns_id_descriptors(&descs, &mut buf).unwrap();
        assert_eq!(n, 12 + 20 + 20 + 5);
        assert_eq!(&buf[..4], &[1, 8, 0, 0]);
        assert!(buf[n..].iter().all(|&b| b == 0));
        assert_eq!(parse_ns_id_descriptors(&buf), descs);
        // No room for the terminator.
        let mut small = [0; 12];
        assert!(write_ns_id_descriptors(&descs[..1], &mut small).is_err());
        let mut small = [0; 13];
        assert_eq!(write_ns_id_descriptors(&descs[..1], &mut small), Ok(12));
    }

    #[test]
    fn garbage_tolerated() {
        // Wrong length for a UUID, then a truncated descriptor.
        let buf = [3, 2, 0, 0, 9, 9, 1, 8, 0, 0, 1, 2];
        assert_eq!(
            parse_ns_id_descriptors(&buf),
            vec![NsIdDescriptor::Other {
                nidt: 3,
                nid: vec![9, 9]
            }]
        );
        assert!(parse_ns_id_descriptors(&[]).is_empty());
        assert!(parse_ns_id_descriptors(&[1, 8, 0]).is_empty());
        assert_eq!(
            parse_ns_id_descriptors(&[7, 0, 0, 0]),
            vec![NsIdDescriptor::Other {
                nidt: 7,
                nid: vec![]
            }]
        );
    }

    proptest! {
        #[test]
        fn parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..600)) {
            let descs = parse_ns_id_descriptors(&buf);
            // Every descriptor came from at least 4 bytes of input.
            prop_assert!(descs.len() * 4 <= buf.len());
        }
    }
}
