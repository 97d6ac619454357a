//! Loading a store: the super block, then the metadata in a few large
//! concurrent reads, parsed in memory.
//!
//! After a clean unload the masks are exact: load reads them (one read
//! covers all three), then only the used metadata pages, as runs of at most
//! `read_size` bytes. After a dirty shutdown (or with `force_recover`) it
//! reads the whole metadata region in `read_size` reads, keeps the pages
//! whose CRC is good, and takes as a blob root every page with sequence 0
//! whose id names its own page, as SPDK's recovery does; the masks are
//! rebuilt from what the roots reference. Either way every blob is parsed
//! strictly, and a page or cluster claimed twice fails the load: the store
//! is never written before it has loaded.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use futures::StreamExt;

use crate::bitmap::BitVec;
use crate::device::BlobDevice;
use crate::error::{Corruption, Error, Result};
use crate::format::blob_md::{parse_blob, BlobMd, Limits};
use crate::format::mask::{self, MASK_USED_BLOBIDS, MASK_USED_CLUSTERS, MASK_USED_PAGES};
use crate::format::page::{checked_header, Page};
use crate::format::super_block::SuperBlock;
use crate::format::{blob_id, mask_pages, PAGE_SIZE, PAGE_SIZE_U32, PAGE_SIZE_U64};
use crate::init::check_block_size;
use crate::options::LoadOptions;
use crate::store::{BlobEntry, Geometry, State, Store};
use crate::BlobId;

fn impossible(field: &'static str, value: u64) -> Error {
    Error::BadSuper(Corruption::Impossible { field, value })
}

/// Checks the super block's layout against the device.
fn geometry(sb: &SuperBlock, block_size: u32, dev_bytes: u64) -> Result<(Geometry, u64, u64)> {
    let size = if sb.size == 0 { dev_bytes } else { sb.size };
    if size > dev_bytes {
        return Err(Error::SizeMismatch {
            store_bytes: size,
            device_bytes: dev_bytes,
        });
    }
    let md_page_size = if sb.md_page_size == 0 {
        PAGE_SIZE_U32
    } else {
        sb.md_page_size
    };
    if md_page_size != PAGE_SIZE_U32 {
        return Err(Error::Unsupported("metadata page size other than 4096"));
    }
    let io_unit_size = if sb.io_unit_size == 0 {
        PAGE_SIZE_U32
    } else {
        sb.io_unit_size
    };
    if !io_unit_size.is_power_of_two() || !(512..=PAGE_SIZE_U32).contains(&io_unit_size) {
        return Err(impossible("io_unit_size", u64::from(io_unit_size)));
    }
    // SPDK serves a store's blobs in io units; this library in the device's
    // blocks. They agree only when the two are one size (what SPDK writes
    // at init), so a store moved to a device of another block size is
    // refused rather than served with another block size than SPDK's.
    if io_unit_size != block_size {
        return Err(Error::Unsupported(
            "io unit size other than the device's block size",
        ));
    }
    let cs = u64::from(sb.cluster_size);
    if cs == 0 || !cs.is_multiple_of(PAGE_SIZE_U64) {
        return Err(impossible("cluster_size", cs));
    }
    let total_clusters = size / cs;
    if total_clusters == 0 {
        return Err(impossible("size", size));
    }
    let md_start = u64::from(sb.md_start);
    let md_len = u64::from(sb.md_len);
    let dev_pages = size / PAGE_SIZE_U64;
    if md_len == 0 || md_start == 0 || md_start + md_len > dev_pages {
        return Err(impossible("md_len", md_len));
    }
    let region = |start: u32, len: u32, need: u64, field: &'static str| -> Result<()> {
        let (s, l) = (u64::from(start), u64::from(len));
        if s == 0 || s + l > md_start || l < need {
            return Err(impossible(field, s));
        }
        Ok(())
    };
    region(
        sb.used_page_mask_start,
        sb.used_page_mask_len,
        mask_pages(md_len),
        "used_page_mask",
    )?;
    region(
        sb.used_cluster_mask_start,
        sb.used_cluster_mask_len,
        mask_pages(total_clusters),
        "used_cluster_mask",
    )?;
    if sb.used_blobid_mask_len != 0 {
        region(
            sb.used_blobid_mask_start,
            sb.used_blobid_mask_len,
            mask_pages(md_len),
            "used_blobid_mask",
        )?;
    }
    let pages_per_cluster = cs / PAGE_SIZE_U64;
    let first_data_cluster = (md_start + md_len).div_ceil(pages_per_cluster);
    if first_data_cluster > total_clusters {
        return Err(impossible("md_len", md_len));
    }
    let geo = Geometry {
        block_size,
        cluster_size: sb.cluster_size,
        io_unit_size,
        blocks_per_page: PAGE_SIZE_U64 / u64::from(block_size),
        blocks_per_cluster: cs / u64::from(block_size),
        md_start,
        md_len: sb.md_len,
        first_data_cluster,
    };
    Ok((geo, total_clusters, size))
}

/// Reads page ranges (device page, count) in reads of at most `read_pages`
/// pages, `in_flight` at a time, handing each buffer to `sink`.
async fn read_ranges<D: BlobDevice>(
    dev: &D,
    blocks_per_page: u64,
    ranges: &[(u64, u64)],
    o: &LoadOptions,
    mut sink: impl FnMut(u64, &[u8]),
) -> Result<()> {
    let read_pages = (o.read_size / PAGE_SIZE).max(1) as u64;
    let mut chunks = Vec::new();
    for &(start, n) in ranges {
        let mut p = start;
        while p < start + n {
            let k = read_pages.min(start + n - p);
            chunks.push((p, k));
            p += k;
        }
    }
    // Buffers are reused: a fresh 1 MiB buffer per read costs more in page
    // faults than the read itself.
    let pool: std::cell::RefCell<Vec<Vec<u8>>> = std::cell::RefCell::new(Vec::new());
    let pool = &pool;
    let mut reads = futures::stream::iter(chunks.into_iter().map(|(p, k)| async move {
        let mut buf = pool.borrow_mut().pop().unwrap_or_default();
        buf.resize(usize::try_from(k).unwrap_or(0) * PAGE_SIZE, 0);
        let lba = p * blocks_per_page;
        dev.read(lba, &mut buf)
            .await
            .map(|()| (p, buf))
            .map_err(|source| Error::Device {
                op: "read",
                offset_blocks: lba,
                source,
            })
    }))
    .buffer_unordered(o.max_reads_in_flight.max(1));
    while let Some(r) = reads.next().await {
        let (p, buf) = r?;
        sink(p, &buf);
        pool.borrow_mut().push(buf);
    }
    Ok(())
}

/// Keeps the pages of `buf` (starting at device page `first`) that have a
/// good CRC, by metadata-region index.
fn keep_valid(pages: &mut HashMap<u32, Box<Page>>, md_start: u64, first: u64, buf: &[u8]) {
    for (i, chunk) in buf.chunks_exact(PAGE_SIZE).enumerate() {
        let Ok(page) = <&Page>::try_from(chunk) else {
            continue;
        };
        // Every page of a blob carries the blob's id, whose high half is 1:
        // skip the CRC of pages that cannot be one (zeroed, never written).
        if page[4..8] != [1, 0, 0, 0] {
            continue;
        }
        if checked_header(page).is_ok() {
            if let Ok(idx) = u32::try_from(first + i as u64 - md_start) {
                pages.insert(idx, Box::new(*page));
            }
        }
    }
}

/// Runs of set bits, merged across gaps of at most `gap` clear bits.
fn runs(bits: &BitVec, gap: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for i in bits.iter_ones() {
        match out.last_mut() {
            Some((s, n)) if *s + *n + gap >= i => *n = i - *s + 1,
            _ => out.push((i, 1)),
        }
    }
    out
}

/// Who owns each page and cluster while blobs are collected.
struct Claims {
    pages: Vec<u32>,
    clusters: Vec<u32>,
    ids: Vec<BlobId>,
}

impl Claims {
    fn claim(
        owners: &mut [u32],
        ids: &[BlobId],
        what: &'static str,
        index: u64,
        who: u32,
    ) -> Result<()> {
        let slot = usize::try_from(index).ok().and_then(|i| owners.get_mut(i));
        match slot {
            Some(s) if *s == 0 => {
                *s = who;
                Ok(())
            }
            Some(s) => Err(Error::ClaimedTwice {
                what,
                index,
                first: ids[*s as usize - 1],
                second: ids[who as usize - 1],
            }),
            None => Err(Error::BadSuper(Corruption::Impossible {
                field: what,
                value: index,
            })),
        }
    }
}

/// Loads a store; returns it with the interrupted snapshot operations that
/// the caller must finish or undo (see `recover`).
pub(crate) async fn load<D: BlobDevice>(
    dev: D,
    o: &LoadOptions,
) -> Result<(Store<D>, Vec<crate::recover::Fixup>)> {
    let bs = dev.block_size();
    check_block_size(bs)?;
    let dev_bytes = dev.num_blocks().saturating_mul(u64::from(bs));
    if dev_bytes < PAGE_SIZE_U64 {
        return Err(Error::Unsupported("device smaller than a page"));
    }
    let mut first = [0u8; PAGE_SIZE];
    dev.read(0, &mut first)
        .await
        .map_err(|source| Error::Device {
            op: "read",
            offset_blocks: 0,
            source,
        })?;
    let sb = SuperBlock::decode(&first)?;
    if o.bstype != [0; 16] && o.bstype != sb.bstype {
        return Err(Error::BstypeMismatch);
    }
    let (geo, total_clusters, size) = geometry(&sb, bs, dev_bytes)?;
    let md_len = u64::from(geo.md_len);
    let dirty = !sb.clean || sb.used_blobid_mask_len == 0 || o.force_recover;
    let mut pages: HashMap<u32, Box<Page>> = HashMap::new();
    let bpp = geo.blocks_per_page;

    let (masks, roots): (Option<(BitVec, BitVec, BitVec)>, Vec<u32>) = if dirty {
        read_ranges(&dev, bpp, &[(geo.md_start, md_len)], o, |p, buf| {
            keep_valid(&mut pages, geo.md_start, p, buf)
        })
        .await?;
        let mut roots: Vec<u32> = pages
            .iter()
            .filter_map(|(&i, p)| {
                let h = checked_header(p).ok()?;
                (h.sequence == 0 && h.id == blob_id(i)).then_some(i)
            })
            .collect();
        roots.sort_unstable();
        (None, roots)
    } else {
        let lo = u64::from(
            sb.used_page_mask_start
                .min(sb.used_cluster_mask_start)
                .min(sb.used_blobid_mask_start),
        );
        let mut region = vec![0u8; usize::try_from(geo.md_start - lo).unwrap_or(0) * PAGE_SIZE];
        read_ranges(&dev, bpp, &[(lo, geo.md_start - lo)], o, |p, buf| {
            let at = usize::try_from(p - lo).unwrap_or(0) * PAGE_SIZE;
            region[at..at + buf.len()].copy_from_slice(buf);
        })
        .await?;
        let slice = |start: u32, len: u32| {
            let s = usize::try_from(u64::from(start) - lo).unwrap_or(0) * PAGE_SIZE;
            &region[s..s + len as usize * PAGE_SIZE]
        };
        let bad = |mask: &'static str| move |reason| Error::BadMask { mask, reason };
        let (n, used_pages) = mask::decode(
            MASK_USED_PAGES,
            slice(sb.used_page_mask_start, sb.used_page_mask_len),
        )
        .map_err(bad("used-page"))?;
        if n != md_len {
            return Err(Error::BadMask {
                mask: "used-page",
                reason: Corruption::Mask("length is not md_len"),
            });
        }
        let (n, blobids) = mask::decode(
            MASK_USED_BLOBIDS,
            slice(sb.used_blobid_mask_start, sb.used_blobid_mask_len),
        )
        .map_err(bad("used-blobid"))?;
        if n != md_len {
            return Err(Error::BadMask {
                mask: "used-blobid",
                reason: Corruption::Mask("length is not md_len"),
            });
        }
        let cl = slice(sb.used_cluster_mask_start, sb.used_cluster_mask_len);
        let (n, _) = mask::decode(MASK_USED_CLUSTERS, cl).map_err(bad("used-cluster"))?;
        if n < total_clusters {
            return Err(Error::BadMask {
                mask: "used-cluster",
                reason: Corruption::Mask("shorter than the store"),
            });
        }
        // A failed grow can leave a longer mask: take the store's part (SPDK).
        let used_clusters = BitVec::from_bytes(&cl[5..], total_clusters);
        let ranges: Vec<(u64, u64)> = runs(&used_pages, 16)
            .into_iter()
            .map(|(s, n)| (geo.md_start + s, n))
            .collect();
        read_ranges(&dev, bpp, &ranges, o, |p, buf| {
            keep_valid(&mut pages, geo.md_start, p, buf)
        })
        .await?;
        let roots = blobids
            .iter_ones()
            .filter_map(|i| u32::try_from(i).ok())
            .collect();
        (Some((used_pages, used_clusters, blobids)), roots)
    };

    let limits = Limits {
        md_len: geo.md_len,
        first_data_cluster: geo.first_data_cluster,
        total_clusters,
        reject_unknown: dirty,
    };
    let mut claims = Claims {
        pages: vec![0; usize::try_from(md_len).unwrap_or(0)],
        clusters: vec![0; usize::try_from(total_clusters).unwrap_or(0)],
        ids: Vec::with_capacity(roots.len()),
    };
    let mut parsed: BTreeMap<BlobId, BlobMd> = BTreeMap::new();
    for &root in &roots {
        let id = blob_id(root);
        let md: BlobMd =
            parse_blob(id, &limits, &|i| pages.get(&i).map(|p| &**p)).map_err(|e| {
                let unmarked = masks
                    .as_ref()
                    .is_some_and(|(used, _, _)| !used.get(u64::from(e.page)));
                let reason = if unmarked && e.reason == Corruption::BadCrc {
                    Corruption::PageNotMarked(e.page)
                } else {
                    e.reason
                };
                Error::CorruptBlob {
                    blob: id,
                    page: e.page,
                    reason,
                }
            })?;
        parsed.insert(id, md);
    }
    // Snapshot operations cut half-way share clusters between two blobs
    // until they are finished or undone; the masks on disk may not match
    // the outcome, so they are rebuilt.
    let fixups = crate::recover::resolve(&mut parsed);
    let masks = if fixups.is_empty() { masks } else { None };
    let mut blobs: BTreeMap<BlobId, Rc<BlobEntry>> = BTreeMap::new();
    for (id, md) in parsed {
        let Some(root) = crate::format::blob_page(id) else {
            continue;
        };
        claims.ids.push(id);
        let who = u32::try_from(claims.ids.len()).unwrap_or(u32::MAX);
        for p in md.all_pages() {
            if let Some((used, _, _)) = &masks {
                if !used.get(u64::from(p)) {
                    return Err(Error::CorruptBlob {
                        blob: id,
                        page: p,
                        reason: Corruption::PageNotMarked(p),
                    });
                }
            }
            Claims::claim(&mut claims.pages, &claims.ids, "page", u64::from(p), who)?;
        }
        for (_, c) in md.clusters.iter_allocated() {
            if let Some((_, used, _)) = &masks {
                if !used.get(u64::from(c)) {
                    return Err(Error::CorruptBlob {
                        blob: id,
                        page: root,
                        reason: Corruption::ClusterNotMarked(u64::from(c)),
                    });
                }
            }
            Claims::claim(
                &mut claims.clusters,
                &claims.ids,
                "cluster",
                u64::from(c),
                who,
            )?;
        }
        blobs.insert(id, Rc::new(BlobEntry::new(md)));
    }

    let (used_pages, mut used_clusters, used_blobids) = match masks {
        Some(m) => m,
        None => {
            let mut up = BitVec::new(md_len);
            for (i, &o) in claims.pages.iter().enumerate() {
                if o != 0 {
                    up.set(i as u64);
                }
            }
            let mut uc = BitVec::new(total_clusters);
            for (i, &o) in claims.clusters.iter().enumerate() {
                if o != 0 {
                    uc.set(i as u64);
                }
            }
            let mut ub = BitVec::new(md_len);
            for &r in &roots {
                ub.set(u64::from(r));
            }
            (up, uc, ub)
        }
    };
    for c in 0..geo.first_data_cluster {
        used_clusters.set(c);
    }
    let snapshots = blobs
        .values()
        .filter_map(|b| b.md.borrow().parent())
        .collect();
    tracing::info!(blobs = blobs.len(), dirty, "blobstore loaded");
    let state = State {
        sb,
        size,
        total_clusters,
        used_pages,
        used_clusters,
        used_blobids,
        blobs,
        snapshots,
        cow_bufs: Vec::new(),
        failed: false,
        unloaded: false,
        ops: 0,
    };
    Ok((Store::new(dev, geo, state), fixups))
}
