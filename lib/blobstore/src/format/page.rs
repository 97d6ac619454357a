//! Metadata pages: header, descriptor walk, and a page builder.
//!
//! Page layout: id u64 @0, sequence u32 @8, reserved u32 @12, descriptors
//! @16..4088, next u32 @4088 (0xFFFFFFFF ends a chain), crc u32 @4092. A
//! descriptor is u8 type, u32 length, then `length` bytes; type 0 with
//! length 0 ends the page.

use super::{
    page_crc, rd_u16, rd_u32, rd_u64, wr_u32, wr_u64, CRC_OFFSET, DESC_AREA, DESC_EXTENT_PAGE,
    DESC_EXTENT_RLE, DESC_EXTENT_TABLE, DESC_FLAGS, DESC_HEADER, DESC_PADDING, DESC_START,
    DESC_XATTR, DESC_XATTR_INTERNAL, INVALID_PAGE, NEXT_OFFSET, PAGE_SIZE,
};
use crate::error::Corruption;

/// One metadata page.
pub(crate) type Page = [u8; PAGE_SIZE];

/// A page's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageHeader {
    pub id: u64,
    pub sequence: u32,
    pub next: u32,
}

/// The header of a page whose CRC is good.
pub(crate) fn checked_header(p: &Page) -> Result<PageHeader, Corruption> {
    if page_crc(p) != rd_u32(p, CRC_OFFSET) {
        return Err(Corruption::BadCrc);
    }
    Ok(PageHeader {
        id: rd_u64(p, 0),
        sequence: rd_u32(p, 8),
        next: rd_u32(p, NEXT_OFFSET),
    })
}

/// A decoded descriptor (borrowing the page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Desc<'a> {
    Flags {
        invalid: u64,
        data_ro: u64,
        md_ro: u64,
    },
    Xattr {
        internal: bool,
        name: &'a [u8],
        value: &'a [u8],
    },
    /// Pairs of u32 (cluster index, run length).
    ExtentRle(&'a [u8]),
    /// `entries`: pairs of u32 (page index, page count).
    ExtentTable {
        num_clusters: u64,
        entries: &'a [u8],
    },
    /// `entries`: u32 cluster indices.
    ExtentPage {
        start_cluster: u32,
        entries: &'a [u8],
    },
    Unknown(u8),
}

/// Iterates u32 pairs of an RLE or extent-table payload.
pub(crate) fn pairs(entries: &[u8]) -> impl Iterator<Item = (u32, u32)> + '_ {
    entries
        .chunks_exact(8)
        .map(|c| (rd_u32(c, 0), rd_u32(c, 4)))
}

/// Iterates the u32 entries of an extent page payload.
pub(crate) fn words(entries: &[u8]) -> impl Iterator<Item = u32> + '_ {
    entries.chunks_exact(4).map(|c| rd_u32(c, 0))
}

/// Walks a page's descriptors. Stops at the end marker or the first error.
pub(crate) fn descriptors(p: &Page) -> Descriptors<'_> {
    Descriptors {
        area: &p[DESC_START..DESC_START + DESC_AREA],
        pos: 0,
        done: false,
    }
}

/// Iterator of [`descriptors`].
pub(crate) struct Descriptors<'a> {
    area: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> Descriptors<'a> {
    fn decode(desc_type: u8, payload: &'a [u8]) -> Result<Option<Desc<'a>>, Corruption> {
        let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let bad = Corruption::DescriptorLength { desc_type, length };
        Ok(Some(match desc_type {
            DESC_PADDING => return Ok(None),
            DESC_FLAGS => {
                if payload.len() != 24 {
                    return Err(bad);
                }
                Desc::Flags {
                    invalid: rd_u64(payload, 0),
                    data_ro: rd_u64(payload, 8),
                    md_ro: rd_u64(payload, 16),
                }
            }
            DESC_XATTR | DESC_XATTR_INTERNAL => {
                if payload.len() < 4 {
                    return Err(bad);
                }
                let nl = usize::from(rd_u16(payload, 0));
                let vl = usize::from(rd_u16(payload, 2));
                if payload.len() != 4 + nl + vl {
                    return Err(bad);
                }
                Desc::Xattr {
                    internal: desc_type == DESC_XATTR_INTERNAL,
                    name: &payload[4..4 + nl],
                    value: &payload[4 + nl..],
                }
            }
            DESC_EXTENT_RLE => {
                if payload.is_empty() || !payload.len().is_multiple_of(8) {
                    return Err(bad);
                }
                Desc::ExtentRle(payload)
            }
            DESC_EXTENT_TABLE => {
                if payload.len() < 8 || !(payload.len() - 8).is_multiple_of(8) {
                    return Err(bad);
                }
                Desc::ExtentTable {
                    num_clusters: rd_u64(payload, 0),
                    entries: &payload[8..],
                }
            }
            DESC_EXTENT_PAGE => {
                if payload.len() <= 4 || !(payload.len() - 4).is_multiple_of(4) {
                    return Err(bad);
                }
                Desc::ExtentPage {
                    start_cluster: rd_u32(payload, 0),
                    entries: &payload[4..],
                }
            }
            other => Desc::Unknown(other),
        }))
    }
}

impl<'a> Iterator for Descriptors<'a> {
    type Item = Result<Desc<'a>, Corruption>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            if self.pos + DESC_HEADER > self.area.len() {
                self.done = true;
                return None;
            }
            let desc_type = self.area[self.pos];
            let length = rd_u32(self.area, self.pos + 1);
            if desc_type == DESC_PADDING && length == 0 {
                self.done = true;
                return None;
            }
            let start = self.pos + DESC_HEADER;
            let end = match usize::try_from(length)
                .ok()
                .and_then(|l| start.checked_add(l))
            {
                Some(end) if end <= self.area.len() => end,
                _ => {
                    self.done = true;
                    return Some(Err(Corruption::DescriptorOverrun { desc_type }));
                }
            };
            self.pos = end;
            match Self::decode(desc_type, &self.area[start..end]) {
                Ok(Some(d)) => return Some(Ok(d)),
                Ok(None) => continue,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

/// Builds one metadata page.
pub(crate) struct PageBuilder {
    page: Box<Page>,
    pos: usize,
}

impl PageBuilder {
    pub(crate) fn new(id: u64, sequence: u32) -> Self {
        let mut page = Box::new([0u8; PAGE_SIZE]);
        wr_u64(&mut page[..], 0, id);
        wr_u32(&mut page[..], 8, sequence);
        PageBuilder { page, pos: 0 }
    }

    /// Descriptor bytes left.
    pub(crate) fn room(&self) -> usize {
        DESC_AREA - self.pos
    }

    /// Appends a descriptor if it fits (header included); returns whether it
    /// did.
    pub(crate) fn push(&mut self, desc_type: u8, payload: &[u8]) -> bool {
        if DESC_HEADER + payload.len() > self.room() {
            return false;
        }
        let at = DESC_START + self.pos;
        self.page[at] = desc_type;
        wr_u32(
            &mut self.page[..],
            at + 1,
            u32::try_from(payload.len()).unwrap_or(u32::MAX),
        );
        self.page[at + DESC_HEADER..at + DESC_HEADER + payload.len()].copy_from_slice(payload);
        self.pos += DESC_HEADER + payload.len();
        true
    }

    /// Sets `next` and the CRC.
    pub(crate) fn finish(mut self, next: u32) -> Box<Page> {
        wr_u32(&mut self.page[..], NEXT_OFFSET, next);
        let crc = page_crc(&self.page);
        wr_u32(&mut self.page[..], CRC_OFFSET, crc);
        self.page
    }

    /// A page that ends a chain.
    pub(crate) fn finish_last(self) -> Box<Page> {
        self.finish(INVALID_PAGE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn build_and_walk() {
        let mut b = PageBuilder::new(0x1_0000_0003, 0);
        let mut flags = [0u8; 24];
        flags[0] = 1;
        assert!(b.push(DESC_FLAGS, &flags));
        let mut x = vec![4, 0, 3, 0];
        x.extend_from_slice(b"nameabc");
        assert!(b.push(DESC_XATTR, &x));
        let p = b.finish_last();
        let h = checked_header(&p).unwrap();
        assert_eq!(
            h,
            PageHeader {
                id: 0x1_0000_0003,
                sequence: 0,
                next: INVALID_PAGE
            }
        );
        let d: Vec<_> = descriptors(&p).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            d,
            vec![
                Desc::Flags {
                    invalid: 1,
                    data_ro: 0,
                    md_ro: 0
                },
                Desc::Xattr {
                    internal: false,
                    name: b"name",
                    value: b"abc"
                },
            ]
        );
    }

    #[test]
    fn overrun_and_bad_lengths_are_errors() {
        let mut p = [0u8; PAGE_SIZE];
        p[DESC_START] = DESC_XATTR;
        wr_u32(&mut p, DESC_START + 1, 5000);
        assert_eq!(
            descriptors(&p).next(),
            Some(Err(Corruption::DescriptorOverrun {
                desc_type: DESC_XATTR
            }))
        );
        let mut b = PageBuilder::new(1, 0);
        assert!(b.push(DESC_FLAGS, &[0u8; 23]));
        let p = b.finish_last();
        assert!(matches!(
            descriptors(&p).next(),
            Some(Err(Corruption::DescriptorLength { .. }))
        ));
    }

    #[test]
    fn a_full_page_takes_no_more() {
        let mut b = PageBuilder::new(1, 0);
        assert!(b.push(DESC_EXTENT_RLE, &vec![0u8; DESC_AREA - DESC_HEADER]));
        assert_eq!(b.room(), 0);
        assert!(!b.push(DESC_EXTENT_RLE, &[0u8; 8]));
    }

    proptest! {
        #[test]
        fn arbitrary_pages_never_panic(bytes in proptest::collection::vec(any::<u8>(), PAGE_SIZE)) {
            let mut p = [0u8; PAGE_SIZE];
            p.copy_from_slice(&bytes);
            let _ = checked_header(&p);
            for d in descriptors(&p) {
                if let Ok(Desc::ExtentRle(e)) | Ok(Desc::ExtentTable { entries: e, .. }) = d {
                    let _ = pairs(e).count();
                }
            }
        }
    }
}
