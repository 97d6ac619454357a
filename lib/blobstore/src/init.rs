//! Creating a store on a device (SPDK's `spdk_bs_init` layout).
//!
//! Layout, in 4 KiB pages: the super block; the used-page mask; the
//! used-cluster mask, with room for as many clusters as there are metadata
//! pages (that room sets how far the store can grow); the used-blobid mask;
//! then `md_len` metadata pages. The clusters these cover are marked used.

use std::collections::BTreeMap;

use crate::bitmap::BitVec;
use crate::device::BlobDevice;
use crate::error::{Error, Result};
use crate::format::super_block::{SuperBlock, BLOBID_INVALID, VERSION};
use crate::format::{mask_pages, PAGE_SIZE_U32, PAGE_SIZE_U64};
use crate::options::{InitOptions, StoreClearMethod};
use crate::store::{Geometry, State, Store};

/// Checks a device block size: a power of two from 512 to 4096.
pub(crate) fn check_block_size(bs: u32) -> Result<()> {
    if bs.is_power_of_two() && (512..=4096).contains(&bs) {
        Ok(())
    } else {
        Err(Error::Unsupported(
            "device block size must be a power of two from 512 to 4096",
        ))
    }
}

fn to_u32(v: u64, what: &'static str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::InvalidArgument(what))
}

pub(crate) async fn init<D: BlobDevice>(dev: D, o: &InitOptions) -> Result<Store<D>> {
    let bs = dev.block_size();
    check_block_size(bs)?;
    if o.md_page_size != PAGE_SIZE_U32 {
        return Err(Error::Unsupported("metadata page size other than 4096"));
    }
    if o.cluster_size == 0 || !o.cluster_size.is_multiple_of(PAGE_SIZE_U32) {
        return Err(Error::InvalidArgument(
            "cluster size must be a non-zero multiple of 4 KiB",
        ));
    }
    let num_blocks = dev.num_blocks();
    let dev_bytes = num_blocks
        .checked_mul(u64::from(bs))
        .ok_or(Error::InvalidArgument("device size"))?;
    if dev_bytes < u64::from(o.cluster_size) {
        return Err(Error::NoSpace);
    }
    let blocks_per_cluster = u64::from(o.cluster_size / bs);
    let total_clusters = num_blocks / blocks_per_cluster;
    let md_len = match o.num_md_pages {
        Some(n) => u64::from(n),
        None => u64::from(o.md_pages_per_cluster_ratio) * total_clusters / 100,
    };
    if md_len == 0 {
        return Err(Error::InvalidArgument("no metadata pages"));
    }
    let md_len = to_u32(md_len, "too many metadata pages")?;
    let page_mask_len = mask_pages(u64::from(md_len));
    let cluster_mask_len = mask_pages(total_clusters);
    let cluster_mask_room = page_mask_len.max(cluster_mask_len);
    let blobid_mask_len = page_mask_len;
    let md_start = 1 + page_mask_len + cluster_mask_room + blobid_mask_len;
    let pages_per_cluster = u64::from(o.cluster_size) / PAGE_SIZE_U64;
    let md_pages_total = md_start + u64::from(md_len);
    let md_clusters = md_pages_total.div_ceil(pages_per_cluster);
    if md_clusters > total_clusters {
        return Err(Error::NoMetadataSpace);
    }
    let sb = SuperBlock {
        version: VERSION,
        length: PAGE_SIZE_U32,
        clean: false,
        super_blob: BLOBID_INVALID,
        cluster_size: o.cluster_size,
        used_page_mask_start: 1,
        used_page_mask_len: to_u32(page_mask_len, "mask")?,
        used_cluster_mask_start: to_u32(1 + page_mask_len, "mask")?,
        used_cluster_mask_len: to_u32(cluster_mask_len, "mask")?,
        md_start: to_u32(md_start, "layout")?,
        md_len,
        bstype: o.bstype,
        used_blobid_mask_start: to_u32(1 + page_mask_len + cluster_mask_room, "mask")?,
        used_blobid_mask_len: to_u32(blobid_mask_len, "mask")?,
        size: dev_bytes,
        io_unit_size: bs,
        md_page_size: PAGE_SIZE_U32,
    };
    let blocks_per_page = PAGE_SIZE_U64 / u64::from(bs);
    let geo = Geometry {
        block_size: bs,
        cluster_size: o.cluster_size,
        io_unit_size: bs,
        blocks_per_page,
        blocks_per_cluster,
        md_start,
        md_len,
        first_data_cluster: md_clusters,
    };
    let mut used_clusters = BitVec::new(total_clusters);
    for c in 0..md_clusters {
        used_clusters.set(c);
    }
    let state = State {
        sb: sb.clone(),
        size: dev_bytes,
        total_clusters,
        used_pages: BitVec::new(u64::from(md_len)),
        used_clusters,
        used_blobids: BitVec::new(u64::from(md_len)),
        blobs: BTreeMap::new(),
        snapshots: std::collections::BTreeSet::new(),
        cow_bufs: Vec::new(),
        failed: false,
        unloaded: false,
        ops: 0,
    };
    let store = Store::new(dev, geo, state);
    // Zero the metadata, clear the data area, then the super block (still
    // dirty: masks are written at the first clean unload, as SPDK does).
    let md_blocks = md_pages_total * blocks_per_page;
    store.write_zeroes(0, md_blocks).await?;
    if num_blocks > md_blocks {
        match o.clear_method {
            StoreClearMethod::Unmap => store.unmap(md_blocks, num_blocks - md_blocks).await?,
            StoreClearMethod::WriteZeroes => {
                store
                    .write_zeroes(md_blocks, num_blocks - md_blocks)
                    .await?
            }
            StoreClearMethod::None => {}
        }
    }
    store.write_super(&sb).await?;
    tracing::info!(
        md_len,
        total_clusters,
        cluster_size = o.cluster_size,
        "blobstore initialized"
    );
    Ok(store)
}
