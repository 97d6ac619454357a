//! A blob's metadata: serialization to a page chain plus extent pages, and
//! the strict parser.
//!
//! A chain holds, in SPDK's order, FLAGS, the XATTRs, the XATTR_INTERNALs,
//! then the extents: EXTENT_TABLE descriptors (one per page, each repeating
//! the blob's cluster count; entries are extent page indices, zero runs run
//! length encoded) for blobs with the extent table, else EXTENT_RLE. Extent
//! pages (sequence 0, the owner's id, one EXTENT_PAGE descriptor of up to 512
//! device clusters) sit outside the chain.

use std::collections::HashSet;

use super::clusters::ClusterMap;
use super::page::{checked_header, descriptors, pairs, words, Desc, Page, PageBuilder};
use super::{
    blob_page, wr_u32, wr_u64, DESC_EXTENT_PAGE, DESC_EXTENT_RLE, DESC_EXTENT_TABLE, DESC_FLAGS,
    DESC_HEADER, DESC_XATTR, DESC_XATTR_INTERNAL, EXTENTS_PER_EP, FLAG_THIN_PROV, INVALID_PAGE,
    MAX_BLOB_CLUSTERS,
};
use crate::error::{Corruption, Error};
use crate::BlobId;

/// One extended attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Xattr {
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

/// Largest `name + value` of one xattr: its descriptor must fit in a page.
pub(crate) const MAX_XATTR_PAYLOAD: usize = super::DESC_AREA - DESC_HEADER - 4;

/// The persistent state of a blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlobMd {
    pub id: BlobId,
    pub invalid_flags: u64,
    pub data_ro_flags: u64,
    pub md_ro_flags: u64,
    pub xattrs: Vec<Xattr>,
    pub internal_xattrs: Vec<Xattr>,
    pub clusters: ClusterMap,
    pub use_extent_table: bool,
    /// Extent page of each 512-cluster range (0: none); extent table only.
    pub extent_pages: Vec<u32>,
    /// The page chain, root first.
    pub pages: Vec<u32>,
}

impl BlobMd {
    pub(crate) fn is_thin(&self) -> bool {
        self.invalid_flags & FLAG_THIN_PROV != 0
    }

    /// An internal xattr's value.
    pub(crate) fn internal(&self, name: &str) -> Option<&[u8]> {
        self.internal_xattrs
            .iter()
            .find(|x| x.name == name.as_bytes())
            .map(|x| &x.value[..])
    }

    /// An internal xattr holding a blob id (8 bytes, little endian).
    pub(crate) fn internal_id(&self, name: &str) -> Option<BlobId> {
        let v = self.internal(name)?;
        Some(u64::from_le_bytes(v.try_into().ok()?))
    }

    /// The parent snapshot: the `SNAP` internal xattr of a thin blob (SPDK
    /// ignores it on a thick one).
    pub(crate) fn parent(&self) -> Option<BlobId> {
        if !self.is_thin() {
            return None;
        }
        self.internal_id(super::XATTR_SNAP)
    }

    /// The external snapshot this blob names (an esnap clone's `EXTSNAP`).
    pub(crate) fn esnap_id(&self) -> Option<&[u8]> {
        if self.invalid_flags & super::FLAG_EXTERNAL_SNAPSHOT == 0 {
            return None;
        }
        self.internal(super::XATTR_EXTSNAP)
    }

    /// Sets an internal xattr (and the INTERNAL_XATTR flag).
    pub(crate) fn set_internal(&mut self, name: &str, value: &[u8]) {
        match self
            .internal_xattrs
            .iter_mut()
            .find(|x| x.name == name.as_bytes())
        {
            Some(x) => x.value = value.to_vec(),
            None => self.internal_xattrs.push(Xattr {
                name: name.as_bytes().to_vec(),
                value: value.to_vec(),
            }),
        }
        self.invalid_flags |= super::FLAG_INTERNAL_XATTR;
    }

    /// Removes an internal xattr (the flag goes with the last one).
    pub(crate) fn remove_internal(&mut self, name: &str) {
        self.internal_xattrs.retain(|x| x.name != name.as_bytes());
        if self.internal_xattrs.is_empty() {
            self.invalid_flags &= !super::FLAG_INTERNAL_XATTR;
        }
    }

    /// Every metadata page the blob uses: its chain (root first; page 0 is a
    /// page like any other there), then its allocated extent pages.
    pub(crate) fn all_pages(&self) -> impl Iterator<Item = u32> + '_ {
        self.pages
            .iter()
            .copied()
            .chain(self.extent_pages.iter().copied().filter(|&p| p != 0))
    }
}

fn xattr_payload(x: &Xattr) -> Vec<u8> {
    let mut p = Vec::with_capacity(4 + x.name.len() + x.value.len());
    p.extend_from_slice(
        &u16::try_from(x.name.len())
            .unwrap_or(u16::MAX)
            .to_le_bytes(),
    );
    p.extend_from_slice(
        &u16::try_from(x.value.len())
            .unwrap_or(u16::MAX)
            .to_le_bytes(),
    );
    p.extend_from_slice(&x.name);
    p.extend_from_slice(&x.value);
    p
}

/// Extent-table entries: (page, count) with runs of unallocated pages merged.
fn table_entries(extent_pages: &[u32]) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &p in extent_pages {
        match out.last_mut() {
            Some((0, n)) if p == 0 => *n += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

/// RLE runs (first device cluster or 0, length) of a cluster map.
fn rle_runs(clusters: &ClusterMap) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for idx in 0..clusters.len() {
        let c = clusters.get(idx);
        match out.last_mut() {
            Some((0, n)) if c == 0 => *n += 1,
            Some((start, n)) if c != 0 && *start != 0 && start.checked_add(*n) == Some(c) => {
                *n += 1
            }
            _ => out.push((c, 1)),
        }
    }
    out
}

/// Writes `entries` as descriptors of `desc_type`, `head` before each one's
/// entries, spilling to new pages. With `at_least_one`, an empty list still
/// gets one descriptor.
fn push_list(
    pages: &mut Vec<PageBuilder>,
    id: BlobId,
    desc_type: u8,
    head: &[u8],
    entries: &[(u32, u32)],
    at_least_one: bool,
) {
    let mut rest = entries;
    let mut first = true;
    while !rest.is_empty() || (first && at_least_one) {
        first = false;
        let mut cur = pages.len() - 1;
        if pages[cur].room() < DESC_HEADER + head.len() + if head.is_empty() { 8 } else { 0 } {
            pages.push(PageBuilder::new(
                id,
                u32::try_from(pages.len()).unwrap_or(u32::MAX),
            ));
            cur += 1;
        }
        let fit = (pages[cur].room() - DESC_HEADER - head.len()) / 8;
        let take = fit.min(rest.len());
        let mut payload = head.to_vec();
        for &(a, b) in &rest[..take] {
            payload.extend_from_slice(&a.to_le_bytes());
            payload.extend_from_slice(&b.to_le_bytes());
        }
        let pushed = pages[cur].push(desc_type, &payload);
        debug_assert!(pushed, "invariant: the descriptor was sized to fit");
        rest = &rest[take..];
        if !rest.is_empty() {
            pages.push(PageBuilder::new(
                id,
                u32::try_from(pages.len()).unwrap_or(u32::MAX),
            ));
        }
    }
}

/// Serializes the chain: the caller assigns pages and calls `finish`.
pub(crate) fn serialize_chain(md: &BlobMd) -> Result<Vec<PageBuilder>, Error> {
    let mut pages = vec![PageBuilder::new(md.id, 0)];
    let mut flags = [0u8; 24];
    wr_u64(&mut flags, 0, md.invalid_flags);
    wr_u64(&mut flags, 8, md.data_ro_flags);
    wr_u64(&mut flags, 16, md.md_ro_flags);
    pages[0].push(DESC_FLAGS, &flags);
    for (list, t) in [
        (&md.xattrs, DESC_XATTR),
        (&md.internal_xattrs, DESC_XATTR_INTERNAL),
    ] {
        for x in list {
            if x.name.len() + x.value.len() > MAX_XATTR_PAYLOAD
                || x.name.len() > usize::from(u16::MAX)
                || x.value.len() > usize::from(u16::MAX)
            {
                return Err(Error::XattrTooLarge);
            }
            let p = xattr_payload(x);
            let last = pages.len() - 1;
            if !pages[last].push(t, &p) {
                let mut page = PageBuilder::new(md.id, u32::try_from(pages.len()).unwrap_or(0));
                if !page.push(t, &p) {
                    return Err(Error::XattrTooLarge);
                }
                pages.push(page);
            }
        }
    }
    if md.use_extent_table {
        let entries = table_entries(&md.extent_pages);
        push_list(
            &mut pages,
            md.id,
            DESC_EXTENT_TABLE,
            &md.clusters.len().to_le_bytes(),
            &entries,
            true,
        );
    } else {
        let runs = rle_runs(&md.clusters);
        push_list(&mut pages, md.id, DESC_EXTENT_RLE, &[], &runs, false);
    }
    Ok(pages)
}

/// Serializes extent page `k` of blob `id` holding `entries`.
pub(crate) fn serialize_extent_page(id: BlobId, k: u64, entries: &[u32]) -> Box<Page> {
    let mut payload = vec![0u8; 4 + 4 * entries.len()];
    wr_u32(
        &mut payload,
        0,
        u32::try_from(k * EXTENTS_PER_EP).unwrap_or(u32::MAX),
    );
    for (i, e) in entries.iter().enumerate() {
        wr_u32(&mut payload, 4 + 4 * i, *e);
    }
    let mut b = PageBuilder::new(id, 0);
    let pushed = b.push(DESC_EXTENT_PAGE, &payload);
    debug_assert!(pushed, "invariant: 512 entries fit in a page");
    b.finish_last()
}

/// Bounds a parse checks against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Pages in the metadata region.
    pub md_len: u32,
    /// First cluster after the metadata.
    pub first_data_cluster: u64,
    /// Clusters on the device.
    pub total_clusters: u64,
    /// Reject unknown descriptor types (dirty recovery, as SPDK's replay)
    /// instead of skipping them (SPDK's open).
    pub reject_unknown: bool,
}

impl Limits {
    fn cluster(&self, c: u64) -> Result<(), Corruption> {
        if c < self.first_data_cluster || c >= self.total_clusters {
            return Err(Corruption::ClusterOutOfRange(c));
        }
        Ok(())
    }
}

/// Where a parse failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub page: u32,
    pub reason: Corruption,
}

fn at(page: u32) -> impl Fn(Corruption) -> ParseError {
    move |reason| ParseError { page, reason }
}

/// Parses blob `id` from its root page, following its chain and extent
/// pages through `get` (`None`: the page is not available — unreadable or
/// all zeros — which fails as a bad CRC).
pub(crate) fn parse_blob<'a>(
    id: BlobId,
    limits: &Limits,
    get: &dyn Fn(u32) -> Option<&'a Page>,
) -> Result<BlobMd, ParseError> {
    let root = blob_page(id).ok_or(ParseError {
        page: 0,
        reason: Corruption::Impossible {
            field: "blob id",
            value: id,
        },
    })?;
    let mut md = BlobMd {
        id,
        invalid_flags: 0,
        data_ro_flags: 0,
        md_ro_flags: 0,
        xattrs: Vec::new(),
        internal_xattrs: Vec::new(),
        clusters: ClusterMap::default(),
        use_extent_table: false,
        extent_pages: Vec::new(),
        pages: Vec::new(),
    };
    let mut seen: HashSet<u32> = HashSet::new();
    let mut rle: Vec<(u32, u32)> = Vec::new();
    let mut rle_total: u64 = 0;
    let mut table: Option<u64> = None;
    let mut table_pages: Vec<u32> = Vec::new();
    let mut idx = root;
    let mut seq: u32 = 0;
    loop {
        let err = at(idx);
        if idx >= limits.md_len {
            return Err(err(Corruption::PageOutOfRange(u64::from(idx))));
        }
        if !seen.insert(idx) {
            return Err(err(Corruption::ChainCycle(idx)));
        }
        let page = get(idx).ok_or_else(|| err(Corruption::BadCrc))?;
        let h = checked_header(page).map_err(&err)?;
        if h.id != id {
            return Err(err(Corruption::WrongPage {
                page: idx,
                reason: "another blob's id",
            }));
        }
        if h.sequence != seq {
            return Err(err(Corruption::WrongPage {
                page: idx,
                reason: "sequence out of order",
            }));
        }
        md.pages.push(idx);
        for d in descriptors(page) {
            match d.map_err(&err)? {
                Desc::Flags {
                    invalid,
                    data_ro,
                    md_ro,
                } => {
                    md.invalid_flags = invalid;
                    md.data_ro_flags = data_ro;
                    md.md_ro_flags = md_ro;
                }
                Desc::Xattr {
                    internal,
                    name,
                    value,
                } => {
                    let x = Xattr {
                        name: name.to_vec(),
                        value: value.to_vec(),
                    };
                    if internal {
                        md.internal_xattrs.push(x)
                    } else {
                        md.xattrs.push(x)
                    }
                }
                Desc::ExtentRle(e) => {
                    if table.is_some() {
                        return Err(err(Corruption::Extents("both extent formats")));
                    }
                    let mut count = 0u64;
                    for (c, n) in pairs(e) {
                        if c != 0 {
                            limits.cluster(u64::from(c)).map_err(&err)?;
                            if n > 0 {
                                let last = u64::from(c) + u64::from(n) - 1;
                                if last > u64::from(u32::MAX) {
                                    return Err(err(Corruption::ClusterOutOfRange(last)));
                                }
                                limits.cluster(last).map_err(&err)?;
                            }
                        } else if !md.is_thin() {
                            return Err(err(Corruption::Extents(
                                "unallocated cluster in a thick blob",
                            )));
                        }
                        count += u64::from(n);
                        rle.push((c, n));
                    }
                    if count == 0 {
                        return Err(err(Corruption::Extents("empty extent descriptor")));
                    }
                    rle_total += count;
                    if rle_total > MAX_BLOB_CLUSTERS {
                        return Err(err(Corruption::Extents("too many clusters")));
                    }
                }
                Desc::ExtentTable {
                    num_clusters,
                    entries,
                } => {
                    if !rle.is_empty() {
                        return Err(err(Corruption::Extents("both extent formats")));
                    }
                    if table.is_some_and(|n| n != num_clusters) {
                        return Err(err(Corruption::Extents(
                            "extent tables disagree on the size",
                        )));
                    }
                    if num_clusters > MAX_BLOB_CLUSTERS {
                        return Err(err(Corruption::Extents("too many clusters")));
                    }
                    table = Some(num_clusters);
                    let max_pages = num_clusters.div_ceil(EXTENTS_PER_EP);
                    for (p, n) in pairs(entries) {
                        if p != 0 {
                            if n != 1 {
                                return Err(err(Corruption::Extents("allocated extent page run")));
                            }
                            if p >= limits.md_len {
                                return Err(err(Corruption::PageOutOfRange(u64::from(p))));
                            }
                        } else if !md.is_thin() {
                            return Err(err(Corruption::Extents(
                                "unallocated extent page in a thick blob",
                            )));
                        }
                        if table_pages.len() as u64 + u64::from(n) > max_pages {
                            return Err(err(Corruption::Extents(
                                "extent table longer than the blob",
                            )));
                        }
                        table_pages.extend(std::iter::repeat_n(p, n as usize));
                    }
                }
                Desc::ExtentPage { .. } => {
                    return Err(err(Corruption::Extents(
                        "extent page descriptor in a chain",
                    )));
                }
                Desc::Unknown(t) => {
                    if limits.reject_unknown {
                        return Err(err(Corruption::UnknownDescriptor(t)));
                    }
                }
            }
        }
        if h.next == INVALID_PAGE {
            break;
        }
        idx = h.next;
        seq = seq.wrapping_add(1);
    }

    if let Some(num_clusters) = table {
        if table_pages.len() as u64 != num_clusters.div_ceil(EXTENTS_PER_EP) {
            return Err(at(root)(Corruption::Extents(
                "extent table does not cover the blob",
            )));
        }
        md.use_extent_table = true;
        md.clusters = ClusterMap::new(num_clusters);
        for (k, &p) in table_pages.iter().enumerate() {
            if p == 0 {
                continue;
            }
            let err = at(p);
            if !seen.insert(p) {
                return Err(err(Corruption::WrongPage {
                    page: p,
                    reason: "extent page used twice",
                }));
            }
            let page = get(p).ok_or_else(|| err(Corruption::BadCrc))?;
            let h = checked_header(page).map_err(&err)?;
            // The id is not checked, as SPDK does not: a snapshot takes its
            // origin's extent pages (bs_snapshot_swap_cluster_maps) with the
            // origin's id in them. A page claimed twice fails at the store.
            if h.sequence != 0 || h.next != INVALID_PAGE {
                return Err(err(Corruption::WrongPage {
                    page: p,
                    reason: "not an extent page",
                }));
            }
            let mut descs = descriptors(page);
            let Some(Ok(Desc::ExtentPage {
                start_cluster,
                entries,
            })) = descs.next()
            else {
                return Err(err(Corruption::WrongPage {
                    page: p,
                    reason: "no extent page descriptor",
                }));
            };
            if descs.next().is_some() {
                return Err(err(Corruption::WrongPage {
                    page: p,
                    reason: "more than one descriptor",
                }));
            }
            let k = k as u64;
            if u64::from(start_cluster) != k * EXTENTS_PER_EP {
                return Err(err(Corruption::Extents(
                    "extent page start does not match the table",
                )));
            }
            if entries.len() / 4 != md.clusters.chunk_len(k) {
                return Err(err(Corruption::Extents(
                    "extent page length does not match the blob",
                )));
            }
            for (i, c) in words(entries).enumerate() {
                if c != 0 {
                    limits.cluster(u64::from(c)).map_err(&err)?;
                    md.clusters.set(k * EXTENTS_PER_EP + i as u64, c);
                } else if !md.is_thin() {
                    return Err(err(Corruption::Extents(
                        "unallocated cluster in a thick blob",
                    )));
                }
            }
        }
        md.extent_pages = table_pages;
    } else {
        md.clusters = ClusterMap::new(rle_total);
        let mut idx = 0u64;
        for (c, n) in rle {
            if c != 0 {
                for j in 0..n {
                    md.clusters.set(idx + u64::from(j), c + j);
                }
            }
            idx += u64::from(n);
        }
    }
    Ok(md)
}

#[cfg(test)]
mod tests;
