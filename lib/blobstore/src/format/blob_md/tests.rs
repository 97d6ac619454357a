#![expect(clippy::cast_possible_truncation, reason = "test sizes are small")]

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;
use crate::format::{blob_id, page_crc, CRC_OFFSET, FLAG_EXTENT_TABLE, PAGE_SIZE};

const LIMITS: Limits = Limits {
    md_len: 4096,
    first_data_cluster: 1,
    total_clusters: 100_000,
    reject_unknown: false,
};

/// Writes `md` as the store would: root at its id's page, chain pages from
/// 1000, extent pages from 2000. Returns the pages and the md as written.
fn lay_out(mut md: BlobMd) -> (HashMap<u32, Box<Page>>, BlobMd) {
    let mut out = HashMap::new();
    let root = blob_page(md.id).unwrap();
    if md.use_extent_table {
        md.extent_pages = (0..md.clusters.num_chunks())
            .map(|k| {
                if md.is_thin() && !md.clusters.chunk_is_allocated(k) {
                    0
                } else {
                    2000 + k as u32
                }
            })
            .collect();
        for (k, &p) in md.extent_pages.iter().enumerate() {
            if p != 0 {
                out.insert(
                    p,
                    serialize_extent_page(md.id, k as u64, &md.clusters.chunk_entries(k as u64)),
                );
            }
        }
    }
    let chain = serialize_chain(&md).unwrap();
    md.pages = (0..chain.len() as u32)
        .map(|i| if i == 0 { root } else { 999 + i })
        .collect();
    let n = chain.len();
    for (i, b) in chain.into_iter().enumerate() {
        let next = if i + 1 < n {
            md.pages[i + 1]
        } else {
            INVALID_PAGE
        };
        out.insert(md.pages[i], b.finish(next));
    }
    (out, md)
}

fn parse(pages: &HashMap<u32, Box<Page>>, id: BlobId) -> Result<BlobMd, ParseError> {
    parse_blob(id, &LIMITS, &|i| pages.get(&i).map(|p| &**p))
}

fn empty(id: BlobId, thin: bool, et: bool) -> BlobMd {
    BlobMd {
        id,
        invalid_flags: if thin { FLAG_THIN_PROV } else { 0 }
            | if et { FLAG_EXTENT_TABLE } else { 0 },
        data_ro_flags: 0,
        md_ro_flags: 0,
        xattrs: vec![],
        internal_xattrs: vec![],
        clusters: ClusterMap::new(0),
        use_extent_table: et,
        extent_pages: vec![],
        pages: vec![],
    }
}

fn refix_crc(p: &mut Page) {
    let crc = page_crc(p);
    p[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn an_empty_extent_table_blob_has_one_empty_table_descriptor() {
    let md = empty(blob_id(3), false, true);
    let (pages, md) = lay_out(md);
    assert_eq!(pages.len(), 1);
    let root = &pages[&3];
    let d: Vec<_> = descriptors(root).collect::<Result<_, _>>().unwrap();
    assert_eq!(d.len(), 2);
    assert_eq!(
        d[1],
        Desc::ExtentTable {
            num_clusters: 0,
            entries: &[]
        }
    );
    assert_eq!(parse(&pages, md.id).unwrap(), md);
}

#[test]
fn corruptions_are_errors_not_panics() {
    let mut md = empty(blob_id(3), false, true);
    md.clusters = ClusterMap::new(600);
    for i in 0..600 {
        md.clusters.set(i, 10 + i as u32);
    }
    md.xattrs = (0..3)
        .map(|i| Xattr {
            name: vec![b'a' + i; 10],
            value: vec![i; 3000],
        })
        .collect();
    let (pages, md) = lay_out(md);
    assert!(md.pages.len() >= 3);
    assert_eq!(parse(&pages, md.id).unwrap(), md);

    // A chain page of another blob.
    let mut bad = pages.clone();
    let p = bad.get_mut(&1000).unwrap();
    p[0] ^= 1;
    refix_crc(p);
    assert!(matches!(
        parse(&bad, md.id),
        Err(ParseError {
            page: 1000,
            reason: Corruption::WrongPage { .. }
        })
    ));
    // A cycle: the last chain page points back at the root.
    let mut bad = pages.clone();
    let last = *md.pages.last().unwrap();
    let p = bad.get_mut(&last).unwrap();
    wr_u32(&mut p[..], super::super::NEXT_OFFSET, 3);
    refix_crc(p);
    assert!(matches!(
        parse(&bad, md.id),
        Err(ParseError {
            reason: Corruption::ChainCycle(3),
            ..
        })
    ));
    // A missing extent page.
    let mut bad = pages.clone();
    bad.remove(&2001);
    assert!(matches!(
        parse(&bad, md.id),
        Err(ParseError {
            page: 2001,
            reason: Corruption::BadCrc
        })
    ));
    // A cluster beyond the device.
    let mut bad = pages.clone();
    let p = bad.get_mut(&2000).unwrap();
    wr_u32(&mut p[..], 16 + 5 + 4, 200_000);
    refix_crc(p);
    assert!(matches!(
        parse(&bad, md.id),
        Err(ParseError {
            reason: Corruption::ClusterOutOfRange(200_000),
            ..
        })
    ));
    // The wrong root id.
    assert!(parse(&pages, blob_id(4)).is_err());
}

#[test]
fn thin_blob_with_holes_rle_round_trips() {
    let mut md = empty(blob_id(9), true, false);
    md.clusters = ClusterMap::new(5000);
    md.clusters.set(7, 50);
    md.clusters.set(8, 51);
    md.clusters.set(4000, 52);
    let (pages, md) = lay_out(md);
    assert_eq!(parse(&pages, md.id).unwrap(), md);
}

fn arb_md() -> impl Strategy<Value = BlobMd> {
    (
        0u32..100,
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..40), 0usize..2500),
            0..6,
        ),
        proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 1..10), 0usize..100),
            0..3,
        ),
        0u64..3000,
        proptest::collection::vec(any::<u32>(), 0..64),
        any::<u64>(),
    )
        .prop_map(|(root, thin, et, xs, ixs, n, allocs, flags)| {
            let mut md = empty(blob_id(root), thin, et);
            md.data_ro_flags = flags & 1;
            md.md_ro_flags = flags >> 1 & 3;
            md.xattrs = xs
                .into_iter()
                .map(|(name, vl)| Xattr {
                    name,
                    value: vec![7; vl],
                })
                .collect();
            md.internal_xattrs = ixs
                .into_iter()
                .map(|(name, vl)| Xattr {
                    name,
                    value: vec![9; vl],
                })
                .collect();
            md.clusters = ClusterMap::new(n);
            if thin {
                for a in allocs {
                    if n > 0 {
                        md.clusters.set(u64::from(a) % n, 1 + a % 90_000);
                    }
                }
            } else {
                for i in 0..n {
                    md.clusters
                        .set(i, 1 + ((i as u32).wrapping_mul(7) % 90_000));
                }
            }
            md
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn serialize_then_parse_is_identity(md in arb_md()) {
        let (pages, md) = lay_out(md);
        prop_assert_eq!(parse(&pages, md.id).unwrap(), md);
    }

    #[test]
    fn mutated_pages_never_panic(md in arb_md(), flips in proptest::collection::vec((any::<u16>(), any::<u8>(), any::<u8>()), 1..20), fix in any::<bool>()) {
        let (mut pages, md) = lay_out(md);
        let keys: Vec<u32> = { let mut k: Vec<u32> = pages.keys().copied().collect(); k.sort_unstable(); k };
        for (pos, which, val) in flips {
            let key = keys[usize::from(which) % keys.len()];
            let p = pages.get_mut(&key).unwrap();
            p[usize::from(pos) % PAGE_SIZE] = val;
            if fix { refix_crc(p); }
        }
        let _ = parse(&pages, md.id);
        let strict = Limits { reject_unknown: true, ..LIMITS };
        let _ = parse_blob(md.id, &strict, &|i| pages.get(&i).map(|p| &**p));
    }

    #[test]
    fn random_pages_never_panic(bytes in proptest::collection::vec(any::<u8>(), PAGE_SIZE * 2), next in 0u32..3) {
        let mut pages: HashMap<u32, Box<Page>> = HashMap::new();
        for (i, c) in bytes.chunks_exact(PAGE_SIZE).enumerate() {
            let mut p = Box::new([0u8; PAGE_SIZE]);
            p.copy_from_slice(c);
            p[0..8].copy_from_slice(&blob_id(0).to_le_bytes());
            p[8..12].copy_from_slice(&(i as u32).to_le_bytes());
            wr_u32(&mut p[..], super::super::NEXT_OFFSET, if i == 0 { next } else { INVALID_PAGE });
            refix_crc(&mut p);
            pages.insert(i as u32, p);
        }
        let _ = parse(&pages, blob_id(0));
    }
}
