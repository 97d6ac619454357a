//! Options of init, load and blob creation, and what a store reports.

/// How a blob's freed clusters are cleared (stored in the blob's md-ro
/// flags, bits 0-1, as SPDK's `enum blob_clear_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClearMethod {
    /// What the blob's metadata says; for a new blob: unmap.
    #[default]
    Default,
    /// Leave freed clusters as they are.
    None,
    /// Unmap freed clusters.
    Unmap,
    /// Write zeroes to freed clusters.
    WriteZeroes,
}

impl ClearMethod {
    pub(crate) fn bits(self) -> u64 {
        match self {
            ClearMethod::Default => 0,
            ClearMethod::None => 1,
            ClearMethod::Unmap => 2,
            ClearMethod::WriteZeroes => 3,
        }
    }

    pub(crate) fn from_bits(bits: u64) -> Self {
        match bits & 3 {
            1 => ClearMethod::None,
            2 => ClearMethod::Unmap,
            3 => ClearMethod::WriteZeroes,
            _ => ClearMethod::Default,
        }
    }
}

/// How init clears the data area (SPDK's `enum bs_clear_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreClearMethod {
    /// Unmap it (SPDK's default).
    #[default]
    Unmap,
    /// Write zeroes to it.
    WriteZeroes,
    /// Leave it.
    None,
}

/// Options of [`Blobstore::init`](crate::Blobstore::init).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitOptions {
    /// Cluster size in bytes: a multiple of 4 KiB. Default 1 MiB (SPDK's
    /// blobstore default; lvol uses 4 MiB).
    pub cluster_size: u32,
    /// Metadata pages per cluster, in percent. Default 100 (one page per
    /// cluster, as both SPDK's blobstore and lvol default to).
    pub md_pages_per_cluster_ratio: u32,
    /// Metadata pages, overriding the ratio.
    pub num_md_pages: Option<u32>,
    /// The store's type (lvol: "LVOLSTORE"), zero padded.
    pub bstype: [u8; 16],
    /// Metadata page size: only 4096 is supported.
    pub md_page_size: u32,
    /// How the data area is cleared.
    pub clear_method: StoreClearMethod,
}

impl Default for InitOptions {
    fn default() -> Self {
        InitOptions {
            cluster_size: 1 << 20,
            md_pages_per_cluster_ratio: 100,
            num_md_pages: None,
            bstype: [0; 16],
            md_page_size: 4096,
            clear_method: StoreClearMethod::Unmap,
        }
    }
}

/// A bstype from a string (truncated to 16 bytes, zero padded).
#[must_use]
pub fn bstype(name: &str) -> [u8; 16] {
    let mut b = [0u8; 16];
    let n = name.len().min(16);
    b[..n].copy_from_slice(&name.as_bytes()[..n]);
    b
}

/// Options of [`Blobstore::load`](crate::Blobstore::load).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadOptions {
    /// The type expected; all zeros loads any store.
    pub bstype: [u8; 16],
    /// Rebuild the masks from the metadata pages even after a clean unload.
    pub force_recover: bool,
    /// Bytes per metadata read (rounded to 4 KiB). Default 1 MiB.
    pub read_size: usize,
    /// Metadata reads in flight at once. Default 32.
    pub max_reads_in_flight: usize,
    /// After loading, grow into the device if it grew (as `spdk_bs_grow`;
    /// see [`Blobstore::grow`](crate::Blobstore::grow)).
    pub grow: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            bstype: [0; 16],
            force_recover: false,
            read_size: 1 << 20,
            max_reads_in_flight: 32,
            grow: false,
        }
    }
}

/// Options of [`Blobstore::create_blob`](crate::Blobstore::create_blob).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobOptions {
    /// Size in clusters.
    pub num_clusters: u64,
    /// Thin provisioned: clusters are allocated on first write.
    pub thin_provision: bool,
    /// Extended attributes (name, value).
    pub xattrs: Vec<(String, Vec<u8>)>,
    /// Internal xattrs (SPDK's SNAP, EXTSNAP...); sets the INTERNAL_XATTR flag.
    pub internal_xattrs: Vec<(String, Vec<u8>)>,
    /// How freed clusters are cleared.
    pub clear_method: ClearMethod,
    /// Extent table and extent pages (SPDK's default) rather than RLE extents.
    pub use_extent_table: bool,
}

impl Default for BlobOptions {
    fn default() -> Self {
        BlobOptions {
            num_clusters: 0,
            thin_provision: false,
            xattrs: Vec::new(),
            internal_xattrs: Vec::new(),
            clear_method: ClearMethod::Default,
            use_extent_table: true,
        }
    }
}

/// What a store reports (`bdev_lvol_get_lvstores` fields among them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreInfo {
    /// Cluster size in bytes.
    pub cluster_size: u32,
    /// The I/O unit (the device block size at init).
    pub io_unit_size: u32,
    /// Metadata page size (4096).
    pub md_page_size: u32,
    /// Clusters on the device (metadata clusters included).
    pub total_clusters: u64,
    /// Clusters available to blobs.
    pub total_data_clusters: u64,
    /// Free clusters.
    pub free_clusters: u64,
    /// The largest size the store can grow to (bytes), as SPDK's
    /// `spdk_bs_get_max_growable_size`.
    pub max_growable_size: u64,
    /// The store's type.
    pub bstype: [u8; 16],
    /// Whether the super block on disk says clean.
    pub clean_on_disk: bool,
    /// First metadata page (from the start of the device).
    pub md_start: u64,
    /// Metadata pages.
    pub md_len: u32,
    /// Metadata pages in use.
    pub used_md_pages: u64,
    /// Blobs.
    pub num_blobs: usize,
}
