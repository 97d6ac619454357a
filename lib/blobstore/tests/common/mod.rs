//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::rc::Rc;

use bdevkit_blobstore::{BlobDevice, BlobId, Blobstore, MemDevice};

pub type Store = Blobstore<Rc<MemDevice>>;

/// Runs a future to completion on this thread.
pub fn run<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

/// Everything observable about one blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobState {
    pub num_clusters: u64,
    pub thin: bool,
    pub read_only: bool,
    /// blob index -> device cluster
    pub clusters: BTreeMap<u64, u32>,
    pub xattrs: BTreeMap<String, Vec<u8>>,
    pub internal: BTreeMap<String, Vec<u8>>,
}

/// Every blob's state, and the super blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreState {
    pub blobs: BTreeMap<BlobId, BlobState>,
    pub super_blob: Option<BlobId>,
}

pub fn blob_state<D: BlobDevice>(bs: &Blobstore<D>, id: BlobId) -> BlobState {
    let b = bs.open_blob(id).expect("open");
    BlobState {
        num_clusters: b.num_clusters(),
        thin: b.is_thin(),
        read_only: b.is_read_only(),
        clusters: b.allocated_clusters().into_iter().collect(),
        xattrs: b
            .xattr_names()
            .into_iter()
            .map(|n| (n.clone(), b.xattr(&n).expect("listed")))
            .collect(),
        internal: b
            .internal_xattr_names()
            .into_iter()
            .map(|n| (n.clone(), b.internal_xattr(&n).expect("listed")))
            .collect(),
    }
}

pub fn state<D: BlobDevice>(bs: &Blobstore<D>) -> StoreState {
    StoreState {
        blobs: bs
            .blob_ids()
            .into_iter()
            .map(|id| (id, blob_state(bs, id)))
            .collect(),
        super_blob: bs.super_blob(),
    }
}

/// The store's invariants: its own check, and clusters owned once, inside
/// the data area, counted right.
pub fn check_invariants<D: BlobDevice>(bs: &Blobstore<D>) {
    bs.verify().expect("verify");
    let info = bs.info();
    let first_data = info.total_clusters - info.total_data_clusters;
    let mut owner: BTreeMap<u32, BlobId> = BTreeMap::new();
    let mut used = 0u64;
    for (id, b) in state(bs).blobs {
        assert!(
            b.thin || b.clusters.len() as u64 == b.num_clusters,
            "thick blob {id:#x} with holes"
        );
        for (&idx, &c) in &b.clusters {
            assert!(idx < b.num_clusters);
            assert!(u64::from(c) >= first_data && u64::from(c) < info.total_clusters);
            if let Some(o) = owner.insert(c, id) {
                panic!("cluster {c} owned by {o:#x} and {id:#x}");
            }
            used += 1;
        }
    }
    assert!(info.free_clusters + used <= info.total_data_clusters);
}

/// A fresh device holding `image`.
pub fn device_from(d: &MemDevice, image: bdevkit_blobstore::MemImage) -> Rc<MemDevice> {
    Rc::new(MemDevice::from_image(d.block_size(), d.num_blocks(), image))
}
