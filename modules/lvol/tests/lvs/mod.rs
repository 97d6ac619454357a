//! What the store-core tests share: an lvol store on the blobstore's
//! in-memory device, its observable state, its invariants, data patterns.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use bdevkit_blobstore::{BlobDevice, BlobId, ClearMethod, MemDevice};
use bdevkit_lvol::{LvolOptions, LvsCore, LvsOptions};
use uuid::Uuid;

pub type Core = LvsCore<Rc<MemDevice>>;

pub const BLOCK: u32 = 512;
/// 32 MiB: 512 clusters of 64 KiB.
pub const BLOCKS: u64 = 32 << 11;
pub const CLUSTER: u32 = 64 << 10;

pub fn run<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

pub fn init(dev: &Rc<MemDevice>, name: &str) -> Core {
    run(LvsCore::init(
        dev.clone(),
        &LvsOptions {
            cluster_size: CLUSTER,
            ..LvsOptions::new(name)
        },
    ))
    .expect("init")
}

pub fn load(dev: &Rc<MemDevice>) -> Core {
    run(LvsCore::load(dev.clone())).expect("the store must load")
}

pub fn opts(name: &str, clusters: u64, thin: bool) -> LvolOptions {
    LvolOptions {
        name: name.into(),
        size_bytes: clusters * u64::from(CLUSTER),
        thin,
        clear_method: ClearMethod::Default,
        uuid: None,
    }
}

/// What the store shows of one lvol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LvolState {
    pub id: BlobId,
    pub uuid: Option<Uuid>,
    pub thin: bool,
    pub read_only: bool,
    pub num_clusters: u64,
    /// lvol cluster -> device cluster
    pub clusters: BTreeMap<u64, u32>,
}

/// What the store shows: its name and uuid, its lvols by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub name: String,
    pub uuid: Uuid,
    pub lvols: BTreeMap<String, LvolState>,
}

pub fn state(core: &Core) -> State {
    let bs = core.blobstore();
    State {
        name: core.name(),
        uuid: core.uuid(),
        lvols: core
            .lvols()
            .into_iter()
            .map(|l| {
                let b = bs.open_blob(l.id).expect("an lvol opens");
                let s = LvolState {
                    id: l.id,
                    uuid: l.uuid,
                    thin: l.thin,
                    read_only: l.read_only,
                    num_clusters: l.num_clusters,
                    clusters: b.allocated_clusters().into_iter().collect(),
                };
                (l.name, s)
            })
            .collect(),
    }
}

/// The store's invariants: the blobstore's own check with nothing leaked,
/// every blob's clusters inside the data area and owned once, names
/// unique, thick lvols without holes, free clusters counted right.
pub fn check_invariants(core: &Core) {
    let bs = core.blobstore();
    let report = bs.verify().expect("verify");
    assert_eq!(
        (report.leaked_clusters, report.leaked_pages),
        (0, 0),
        "leaked"
    );
    let info = bs.info();
    let first_data = info.total_clusters - info.total_data_clusters;
    let mut owner: BTreeMap<u32, BlobId> = BTreeMap::new();
    for id in bs.blob_ids() {
        let b = bs.open_blob(id).expect("every blob opens");
        for (idx, c) in b.allocated_clusters() {
            assert!(idx < b.num_clusters());
            assert!(u64::from(c) >= first_data && u64::from(c) < info.total_clusters);
            if let Some(o) = owner.insert(c, id) {
                panic!("cluster {c} owned by {o:#x} and {id:#x}");
            }
        }
    }
    assert_eq!(
        info.free_clusters + owner.len() as u64,
        info.total_data_clusters
    );
    let lvols = core.lvols();
    let names: BTreeSet<&str> = lvols.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names.len(), lvols.len(), "two lvols of one name");
    for l in &lvols {
        assert!(l.uuid.is_some(), "lvol {} without a uuid", l.name);
        assert!(
            l.thin || l.allocated_clusters == l.num_clusters,
            "thick with holes"
        );
    }
}

/// 4 KiB of data for `seed`.
pub fn pattern(seed: u64) -> Vec<u8> {
    (0..4096u64)
        .map(|i| u8::try_from((i * 13 + seed % 251 * 7 + 1) % 251).unwrap_or(0))
        .collect()
}

/// Writes `seed`'s 4 KiB at the start of lvol cluster `idx`, allocating
/// it first in a thin lvol (what the I/O path does on a first write).
pub async fn write(core: &Core, id: BlobId, idx: u64, seed: u64) -> bdevkit_lvol::Result<()> {
    let b = core.blobstore().open_blob(id)?;
    let lba = b.allocate_cluster(idx).await?;
    core.blobstore()
        .device()
        .write(lba, &pattern(seed))
        .await
        .map_err(|e| bdevkit_lvol::LvolError::Invalid(e.to_string()))?;
    Ok(())
}

/// The first 4 KiB of lvol cluster `idx`, through its parent chain (None:
/// neither it nor an ancestor holds the cluster).
pub fn read(core: &Core, id: BlobId, idx: u64) -> Option<Vec<u8>> {
    let b = core.blobstore().open_blob(id).ok()?;
    let lba = b.read_cluster_lba(idx)?;
    let mut buf = vec![0u8; 4096];
    run(core.blobstore().device().read(lba, &mut buf)).expect("read");
    Some(buf)
}
