//! The lvol store itself, as SPDK's `lib/lvol` keeps it in a blobstore,
//! with no bdev in sight: generic over the blobstore's device, so that the
//! power-cut tests run it on the blobstore's in-memory device.
//!
//! What lvol stores in blobs (SPDK v26.05):
//!
//! * the store: bstype `LVOLSTORE`; the super blob (no clusters) has the
//!   xattrs `uuid` (the 36-character UUID and a NUL, 37 bytes) and `name`
//!   (the name and a NUL; names are 1 to 63 bytes);
//! * each lvol: a blob with the xattrs `name` (written at creation as
//!   SPDK does, a 64-byte buffer: the name, NUL padded; a rename writes the
//!   name and one NUL) and `uuid` (37 bytes). An lvol without a readable
//!   `uuid` is known by `<store uuid>_<blob id>`. A clone carries the
//!   internal xattr `SNAP` (the parent's blob id, u64 LE); an external
//!   snapshot clone the EXTERNAL_SNAPSHOT flag and `EXTSNAP`.
//!
//! Every operation is durable when it returns; the order of the writes is
//! the blobstore's (see `bdevkit_blobstore`): a creation is one blob
//! persist (its xattrs in its first pages), then, for a store, one super
//! block write naming the super blob.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use bdevkit_blobstore::{
    bstype, BlobDevice, BlobId, BlobOptions, Blobstore, ClearMethod, InitOptions, LoadOptions,
    StoreClearMethod,
};
use uuid::Uuid;

use crate::error::{LvolError, Result};

/// The blobstore type of an lvol store.
pub const BSTYPE: &str = "LVOLSTORE";
/// SPDK's `SPDK_LVS_NAME_MAX` and `SPDK_LVOL_NAME_MAX`: a name and its NUL
/// fit in 64 bytes, so names are 1 to 63 bytes.
pub const NAME_MAX: usize = 64;
/// The default cluster size of an lvol store (SPDK's
/// `SPDK_LVS_OPTS_CLUSTER_SZ`).
pub const DEFAULT_CLUSTER_SIZE: u32 = 4 << 20;
/// The `uuid` xattr: 36 characters and a NUL.
const UUID_XATTR_LEN: usize = 37;

/// Checks a store or lvol name as SPDK does: 1 to 63 bytes (no NUL).
pub fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() >= NAME_MAX || name.contains('\0') {
        return Err(LvolError::invalid(format!(
            "name must be between 1 and {} characters",
            NAME_MAX - 1
        )));
    }
    Ok(())
}

/// A string xattr value: the bytes up to the first NUL.
fn c_string(v: &[u8]) -> String {
    let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

fn uuid_xattr(u: &Uuid) -> Vec<u8> {
    c_str_id(&u.to_string())
}

/// `s` with a NUL: an external snapshot id from its name.
pub(crate) fn c_str_id(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// The external snapshot id SPDK's lvol gives a bdev: its UUID string,
/// lower case, with the NUL (37 bytes).
#[must_use]
pub fn esnap_id(bdev_uuid: &Uuid) -> Vec<u8> {
    uuid_xattr(bdev_uuid)
}

/// An external snapshot id as text (`external_snapshot_name`; the bdev
/// name to look for): up to its NUL.
#[must_use]
pub fn esnap_name(id: &[u8]) -> String {
    c_string(id)
}

fn parse_uuid_xattr(v: &[u8]) -> Option<Uuid> {
    if v.len() != UUID_XATTR_LEN || v[UUID_XATTR_LEN - 1] != 0 {
        return None;
    }
    std::str::from_utf8(&v[..UUID_XATTR_LEN - 1])
        .ok()
        .and_then(|s| Uuid::parse_str(s).ok())
}

/// The name and one NUL (a store's name, a renamed lvol's).
fn name_xattr(name: &str) -> Vec<u8> {
    let mut v = name.as_bytes().to_vec();
    v.push(0);
    v
}

/// A new lvol's name as SPDK writes it: a 64-byte buffer, NUL padded.
fn padded_name_xattr(name: &str) -> Vec<u8> {
    let mut v = vec![0u8; NAME_MAX];
    v[..name.len()].copy_from_slice(name.as_bytes());
    v
}

/// Options of [`LvsCore::init`] (`bdev_lvol_create_lvstore`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LvsOptions {
    /// The store's name.
    pub name: String,
    /// Cluster size in bytes (0: [`DEFAULT_CLUSTER_SIZE`]).
    pub cluster_size: u32,
    /// How the data area is cleared at creation.
    pub clear_method: StoreClearMethod,
    /// Metadata pages per cluster, in percent (0: 100).
    pub md_pages_per_cluster_ratio: u32,
    /// The store's UUID (`None`: a random one).
    pub uuid: Option<Uuid>,
}

impl LvsOptions {
    /// Options for a store called `name`, with SPDK's defaults.
    #[must_use]
    pub fn new(name: impl Into<String>) -> Self {
        LvsOptions {
            name: name.into(),
            cluster_size: 0,
            clear_method: StoreClearMethod::Unmap,
            md_pages_per_cluster_ratio: 0,
            uuid: None,
        }
    }
}

/// Options of [`LvsCore::create_lvol`] (`bdev_lvol_create`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LvolOptions {
    /// The lvol's name in its store.
    pub name: String,
    /// Size in bytes, rounded up to whole clusters.
    pub size_bytes: u64,
    /// Thin provisioned.
    pub thin: bool,
    /// How its freed clusters are cleared.
    pub clear_method: ClearMethod,
    /// Its UUID (`None`: a random one).
    pub uuid: Option<Uuid>,
}

/// Where an lvol's unwritten clusters come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parent {
    /// Nowhere: they read as zeros.
    None,
    /// A snapshot in the store (a clone; internal xattr `SNAP`).
    Snapshot(BlobId),
    /// An external snapshot (EXTERNAL_SNAPSHOT flag; its id, `EXTSNAP`).
    External(Vec<u8>),
}

/// What the store knows of one lvol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LvolMeta {
    /// Its blob.
    pub id: BlobId,
    /// Its name in the store.
    pub name: String,
    /// Its UUID, if the `uuid` xattr holds one.
    pub uuid: Option<Uuid>,
    /// Thin provisioned.
    pub thin: bool,
    /// Data read-only (`bdev_lvol_set_read_only`, or a snapshot).
    pub read_only: bool,
    /// Size in clusters.
    pub num_clusters: u64,
    /// Clusters allocated.
    pub allocated_clusters: u64,
    /// Its parent.
    pub parent: Parent,
    /// Another lvol of the store is a clone of it.
    pub is_snapshot: bool,
    /// Its chain ends at an external snapshot that is not attached (SPDK's
    /// `spdk_lvol_is_degraded`).
    pub degraded: bool,
}

impl LvolMeta {
    /// SPDK's `unique_id`, the bdev name: the UUID, or `<store uuid>_<blob
    /// id>` without one.
    #[must_use]
    pub fn unique_id(&self, lvs_uuid: &Uuid) -> String {
        match &self.uuid {
            Some(u) => u.to_string(),
            None => format!("{lvs_uuid}_{}", self.id),
        }
    }

    /// Whether this module serves it as a bdev: all but the degraded (as
    /// SPDK's, which defers their bdevs until the external snapshot
    /// appears).
    #[must_use]
    pub fn servable(&self) -> bool {
        !self.degraded
    }
}

/// An lvol store on a blobstore.
#[derive(Debug)]
pub struct LvsCore<D: BlobDevice> {
    bs: Blobstore<D>,
    uuid: Uuid,
    name: RefCell<String>,
    super_blob: BlobId,
    /// Every lvol's name, and the names of lvols being created.
    names: RefCell<BTreeMap<BlobId, String>>,
    pending: RefCell<BTreeSet<String>>,
}

impl<D: BlobDevice> LvsCore<D> {
    /// Creates a store on `dev` (everything on it is lost): the blobstore,
    /// then the super blob with the store's uuid and name.
    pub async fn init(dev: D, o: &LvsOptions) -> Result<Self> {
        check_name(&o.name)?;
        let cluster_size = if o.cluster_size == 0 {
            DEFAULT_CLUSTER_SIZE
        } else {
            o.cluster_size
        };
        let block = dev.block_size();
        if cluster_size < block || cluster_size % block != 0 {
            return Err(LvolError::invalid(format!(
                "cluster size {cluster_size} is not a multiple of the block size {block}"
            )));
        }
        let ratio = if o.md_pages_per_cluster_ratio == 0 {
            100
        } else {
            o.md_pages_per_cluster_ratio
        };
        let total_clusters = dev.num_blocks() / u64::from(cluster_size / block);
        let md_pages = u64::from(ratio).saturating_mul(total_clusters) / 100;
        let opts = InitOptions {
            cluster_size,
            md_pages_per_cluster_ratio: ratio,
            num_md_pages: Some(u32::try_from(md_pages).unwrap_or(u32::MAX)),
            bstype: bstype(BSTYPE),
            clear_method: o.clear_method,
            ..InitOptions::default()
        };
        let bs = Blobstore::init(dev, &opts).await?;
        let uuid = o.uuid.unwrap_or_else(Uuid::new_v4);
        let super_blob = bs
            .create_blob(&BlobOptions {
                xattrs: vec![
                    ("uuid".into(), uuid_xattr(&uuid)),
                    ("name".into(), name_xattr(&o.name)),
                ],
                ..BlobOptions::default()
            })
            .await?;
        bs.set_super_blob(Some(super_blob)).await?;
        Ok(LvsCore {
            bs,
            uuid,
            name: RefCell::new(o.name.clone()),
            super_blob,
            names: RefCell::new(BTreeMap::new()),
            pending: RefCell::new(BTreeSet::new()),
        })
    }

    /// Loads the store on `dev`: the blobstore (of type `LVOLSTORE`), the
    /// super blob's uuid and name, every lvol's name.
    pub async fn load(dev: D) -> Result<Self> {
        let opts = LoadOptions {
            bstype: bstype(BSTYPE),
            ..LoadOptions::default()
        };
        let bs = Blobstore::load(dev, &opts).await?;
        let not_lvs = |why, errno| LvolError::NotLvs { why, errno };
        let super_blob = bs
            .super_blob()
            .ok_or(not_lvs("no super blob", libc::ENODEV))?;
        let sb = bs
            .open_blob(super_blob)
            .map_err(|_| not_lvs("the super blob does not open", libc::ENODEV))?;
        let uuid = sb
            .xattr("uuid")
            .as_deref()
            .and_then(parse_uuid_xattr)
            .ok_or(not_lvs("missing or bad uuid", libc::EINVAL))?;
        let name = match sb.xattr("name") {
            Some(v) if v.len() <= NAME_MAX => c_string(&v),
            _ => return Err(not_lvs("missing or bad name", libc::EINVAL)),
        };
        drop(sb);
        let core = LvsCore {
            bs,
            uuid,
            name: RefCell::new(name),
            super_blob,
            names: RefCell::new(BTreeMap::new()),
            pending: RefCell::new(BTreeSet::new()),
        };
        let names = core.lvols().into_iter().map(|l| (l.id, l.name)).collect();
        *core.names.borrow_mut() = names;
        Ok(core)
    }

    /// The blobstore.
    #[must_use]
    pub fn blobstore(&self) -> &Blobstore<D> {
        &self.bs
    }

    /// The store's UUID.
    #[must_use]
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// The store's name.
    #[must_use]
    pub fn name(&self) -> String {
        self.name.borrow().clone()
    }

    /// The super blob.
    #[must_use]
    pub fn super_blob(&self) -> BlobId {
        self.super_blob
    }

    /// Cluster size in bytes.
    #[must_use]
    pub fn cluster_size(&self) -> u64 {
        u64::from(self.bs.info().cluster_size)
    }

    /// Clusters of `size_bytes`, rounded up (SPDK's
    /// `spdk_divide_round_up(sz, cluster_size)`).
    #[must_use]
    pub fn clusters_for(&self, size_bytes: u64) -> u64 {
        size_bytes.div_ceil(self.cluster_size())
    }

    /// One lvol's metadata (`None`: no such lvol, or a blob that does not
    /// open, or without a valid name).
    #[must_use]
    pub fn lvol(&self, id: BlobId) -> Option<LvolMeta> {
        if id == self.super_blob {
            return None;
        }
        let b = self.bs.open_blob(id).ok()?;
        let name = match b.xattr("name") {
            Some(v) if v.len() <= NAME_MAX => c_string(&v),
            _ => {
                tracing::warn!(blob = id, "lvol without a valid name; ignored");
                return None;
            }
        };
        let uuid = b.xattr("uuid").as_deref().and_then(parse_uuid_xattr);
        let parent = if b.is_esnap_clone() {
            Parent::External(b.internal_xattr("EXTSNAP").unwrap_or_default())
        } else {
            match b.internal_xattr("SNAP") {
                Some(v) if v.len() == 8 => {
                    let mut le = [0u8; 8];
                    le.copy_from_slice(&v);
                    Parent::Snapshot(u64::from_le_bytes(le))
                }
                _ => Parent::None,
            }
        };
        Some(LvolMeta {
            id,
            name,
            uuid,
            thin: b.is_thin(),
            read_only: b.is_read_only(),
            num_clusters: b.num_clusters(),
            allocated_clusters: b.num_allocated_clusters(),
            parent,
            is_snapshot: false,
            degraded: self.bs.is_degraded(id),
        })
    }

    /// Every lvol, in blob id order (SPDK's), with snapshots marked.
    #[must_use]
    pub fn lvols(&self) -> Vec<LvolMeta> {
        let mut all: Vec<LvolMeta> = self
            .bs
            .blob_ids()
            .into_iter()
            .filter_map(|id| self.lvol(id))
            .collect();
        let parents: BTreeSet<BlobId> = all
            .iter()
            .filter_map(|l| match l.parent {
                Parent::Snapshot(p) => Some(p),
                _ => None,
            })
            .collect();
        for l in &mut all {
            l.is_snapshot = parents.contains(&l.id) || self.bs.is_snapshot(l.id);
        }
        all
    }

    /// The lvols whose parent is `id`, in blob id order.
    #[must_use]
    pub fn clones_of(&self, id: BlobId) -> Vec<BlobId> {
        self.bs.clones(id)
    }

    /// Name and uuid xattrs of a new lvol.
    fn new_lvol_xattrs(&self, name: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.check_new_lvol_name(name)?;
        let uuid = Uuid::new_v4();
        Ok(vec![
            ("name".into(), padded_name_xattr(name)),
            ("uuid".into(), uuid_xattr(&uuid)),
        ])
    }

    /// Runs `f` with `name` reserved, then records it as blob's name.
    async fn named<F>(&self, name: &str, f: F) -> Result<BlobId>
    where
        F: std::future::Future<Output = std::result::Result<BlobId, bdevkit_blobstore::Error>>,
    {
        self.pending.borrow_mut().insert(name.to_string());
        let r = f.await;
        self.pending.borrow_mut().remove(name);
        let id = r?;
        self.names.borrow_mut().insert(id, name.to_string());
        Ok(id)
    }

    /// Snapshots lvol `id` as a new read-only lvol `name` (SPDK's
    /// `spdk_lvol_create_snapshot`): the snapshot takes its clusters and
    /// `id` becomes its clone. Returns the snapshot's blob. The caller holds
    /// the lvol's writes meanwhile.
    pub async fn snapshot_lvol(&self, id: BlobId, name: &str) -> Result<BlobId> {
        self.known(id)?;
        let xattrs = self.new_lvol_xattrs(name)?;
        self.named(name, self.bs.create_snapshot(id, &xattrs)).await
    }

    /// Clones snapshot `snapshot` as a new thin lvol `name`; returns its blob.
    pub async fn clone_lvol(&self, snapshot: BlobId, name: &str) -> Result<BlobId> {
        self.known(snapshot)?;
        let xattrs = self.new_lvol_xattrs(name)?;
        self.named(name, self.bs.create_clone(snapshot, &xattrs))
            .await
    }

    /// `bdev_lvol_inflate`: every cluster allocated, no parent left.
    pub async fn inflate_lvol(&self, id: BlobId) -> Result<()> {
        self.known(id)?;
        Ok(self.bs.inflate_blob(id).await?)
    }

    /// `bdev_lvol_decouple_parent`: the parent's own clusters copied in,
    /// the grandparent becomes the parent.
    pub async fn decouple_lvol(&self, id: BlobId) -> Result<()> {
        self.known(id)?;
        Ok(self.bs.decouple_parent(id).await?)
    }

    /// `bdev_lvol_set_parent`: snapshot `parent` becomes the parent of thin
    /// lvol `id`.
    pub async fn set_parent_lvol(&self, id: BlobId, parent: BlobId) -> Result<()> {
        self.known(id)?;
        self.known(parent)?;
        Ok(self.bs.set_parent(id, parent).await?)
    }

    /// Creates thin lvol `name`, a clone of the external snapshot of bdev
    /// `esnap` (`size_bytes` long, a whole number of clusters: EINVAL
    /// otherwise, as SPDK's `spdk_lvol_create_esnap_clone`); returns its
    /// blob.
    pub async fn create_esnap_clone(
        &self,
        esnap: &Uuid,
        size_bytes: u64,
        name: &str,
    ) -> Result<BlobId> {
        let cluster = self.cluster_size();
        if size_bytes == 0 || !size_bytes.is_multiple_of(cluster) {
            return Err(LvolError::invalid(format!(
                "size {size_bytes} is not a whole number of {cluster}-byte clusters"
            )));
        }
        let xattrs = self.new_lvol_xattrs(name)?;
        self.named(
            name,
            self.bs.create_esnap_clone(
                &esnap_id(esnap),
                size_bytes / cluster,
                &xattrs,
                ClearMethod::Default,
            ),
        )
        .await
    }

    /// `bdev_lvol_set_parent_bdev`: the external snapshot of bdev `esnap`
    /// becomes the parent of thin lvol `id`.
    pub async fn set_external_parent(&self, id: BlobId, esnap: &Uuid) -> Result<()> {
        self.known(id)?;
        Ok(self.bs.set_external_parent(id, &esnap_id(esnap)).await?)
    }

    /// The lvol called `name`.
    #[must_use]
    pub fn find(&self, name: &str) -> Option<BlobId> {
        self.names
            .borrow()
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(&id, _)| id)
    }

    /// Checks a new lvol name: valid, and neither taken nor being created
    /// (SPDK's `lvs_verify_lvol_name`).
    pub fn check_new_lvol_name(&self, name: &str) -> Result<()> {
        check_name(name)?;
        if self.find(name).is_some() || self.pending.borrow().contains(name) {
            return Err(LvolError::Exists(format!("lvol {name}")));
        }
        Ok(())
    }

    /// Creates an lvol; returns its blob. Thick lvols get all their clusters
    /// now (ENOSPC when the store lacks them).
    pub async fn create_lvol(&self, o: &LvolOptions) -> Result<BlobId> {
        self.check_new_lvol_name(&o.name)?;
        let uuid = o.uuid.unwrap_or_else(Uuid::new_v4);
        let blob = BlobOptions {
            num_clusters: self.clusters_for(o.size_bytes),
            thin_provision: o.thin,
            xattrs: vec![
                ("name".into(), padded_name_xattr(&o.name)),
                ("uuid".into(), uuid_xattr(&uuid)),
            ],
            clear_method: o.clear_method,
            ..BlobOptions::default()
        };
        self.pending.borrow_mut().insert(o.name.clone());
        let r = self.bs.create_blob(&blob).await;
        self.pending.borrow_mut().remove(&o.name);
        let id = r?;
        self.names.borrow_mut().insert(id, o.name.clone());
        Ok(id)
    }

    fn known(&self, id: BlobId) -> Result<()> {
        if self.names.borrow().contains_key(&id) {
            Ok(())
        } else {
            Err(LvolError::NotFound(format!("lvol {id:#x}")))
        }
    }

    /// Renames an lvol (the same name: nothing to do; another lvol's:
    /// EEXIST).
    pub async fn rename_lvol(&self, id: BlobId, new_name: &str) -> Result<()> {
        self.known(id)?;
        if self.names.borrow().get(&id).map(String::as_str) == Some(new_name) {
            return Ok(());
        }
        self.check_new_lvol_name(new_name)?;
        self.pending.borrow_mut().insert(new_name.to_string());
        let r = async {
            let b = self.bs.open_blob(id)?;
            b.set_xattr("name", &name_xattr(new_name)).await?;
            Ok::<(), LvolError>(())
        }
        .await;
        self.pending.borrow_mut().remove(new_name);
        r?;
        self.names.borrow_mut().insert(id, new_name.to_string());
        Ok(())
    }

    /// Resizes an lvol to `size_bytes`, rounded up to clusters. A thick
    /// lvol that grows gets its clusters now (ENOSPC when the store lacks
    /// them); clusters past a smaller end are freed.
    pub async fn resize_lvol(&self, id: BlobId, size_bytes: u64) -> Result<()> {
        self.known(id)?;
        let b = self.bs.open_blob(id)?;
        b.resize(self.clusters_for(size_bytes)).await?;
        Ok(())
    }

    /// Marks an lvol read-only.
    pub async fn set_read_only(&self, id: BlobId) -> Result<()> {
        self.known(id)?;
        self.bs.open_blob(id)?.set_read_only().await?;
        Ok(())
    }

    /// Deletes an lvol (not open): its clusters are freed, cleared by its
    /// clear method. A snapshot with one clone is merged into it first; one
    /// with more answers EBUSY (SPDK's `spdk_lvol_destroy`).
    pub async fn delete_lvol(&self, id: BlobId) -> Result<()> {
        self.known(id)?;
        self.bs.delete_blob(id).await?;
        self.names.borrow_mut().remove(&id);
        Ok(())
    }

    /// Renames the store (the caller checks the name against other
    /// stores).
    pub async fn rename(&self, new_name: &str) -> Result<()> {
        check_name(new_name)?;
        if *self.name.borrow() == new_name {
            return Ok(());
        }
        let sb = self.bs.open_blob(self.super_blob)?;
        sb.set_xattr("name", &name_xattr(new_name)).await?;
        *self.name.borrow_mut() = new_name.to_string();
        Ok(())
    }

    /// Grows the store into a device that grew; returns whether it did.
    pub async fn grow(&self) -> Result<bool> {
        Ok(self.bs.grow().await?)
    }

    /// Unloads the store cleanly (no blob may be open).
    pub async fn unload(&self) -> Result<()> {
        Ok(self.bs.unload().await?)
    }

    /// Destroys the store (`bdev_lvol_delete_lvstore`): deletes every lvol
    /// (clones before their snapshots), then the super blob, then zeroes
    /// the super block. Cut short, the store still loads with the lvols not
    /// deleted yet.
    pub async fn destroy(&self) -> Result<()> {
        loop {
            let all = self.lvols();
            if all.is_empty() {
                break;
            }
            let parents: BTreeSet<BlobId> = all
                .iter()
                .filter_map(|l| match l.parent {
                    Parent::Snapshot(p) => Some(p),
                    _ => None,
                })
                .collect();
            let leaves: Vec<BlobId> = all
                .iter()
                .map(|l| l.id)
                .filter(|id| !parents.contains(id))
                .collect();
            if leaves.is_empty() {
                return Err(LvolError::Busy("lvols depend on each other".into()));
            }
            for id in leaves {
                self.bs.delete_blob(id).await?;
                self.names.borrow_mut().remove(&id);
            }
        }
        self.bs.delete_blob(self.super_blob).await?;
        Ok(self.bs.destroy().await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_spdk() {
        assert!(check_name("a").is_ok());
        assert!(check_name(&"x".repeat(63)).is_ok());
        assert!(check_name(&"x".repeat(64)).is_err());
        assert!(check_name("").is_err());
        assert!(check_name("a\0b").is_err());
    }

    #[test]
    fn xattr_encodings() {
        let u = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let x = uuid_xattr(&u);
        assert_eq!(x.len(), 37);
        assert_eq!(parse_uuid_xattr(&x), Some(u));
        assert_eq!(parse_uuid_xattr(&x[..36]), None);
        let p = padded_name_xattr("vol");
        assert_eq!(p.len(), 64);
        assert_eq!(c_string(&p), "vol");
        assert_eq!(name_xattr("vol"), b"vol\0");
        assert_eq!(c_string(b"ab"), "ab");
    }
}
