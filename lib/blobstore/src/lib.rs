//! An SPDK-compatible blobstore: blobs of clusters on a block device, with
//! their metadata on the same device, in SPDK's on-disk format version 3
//! (what SPDK v26.05's `lib/blob` and the lvol module write and read).
//!
//! # The model
//!
//! A **store** divides a device into **clusters** (1 MiB by default; lvol
//! uses 4 MiB). The first clusters hold the metadata: a super block, three
//! masks (used metadata pages, used clusters, used blob ids) and a region of
//! 4 KiB **metadata pages** (one per cluster by default). A **blob** is an
//! ordered list of clusters plus extended attributes (**xattrs**: name and
//! bytes; *internal* xattrs for the library's own links, such as SPDK's
//! `SNAP`) and flags. Its metadata is a chain of pages starting at a fixed
//! root page — its id is `(1 << 32) | root page index` — and, for blobs with
//! an extent table (the default), extent pages of 512 cluster entries each.
//! A **thick** blob owns all its clusters from creation; a **thin** one gets
//! each cluster on first write ([`Blob::allocate_cluster`]) and can give it
//! back ([`Blob::release_cluster`]). One blob may be marked the **super
//! blob**; lvol keeps the store's name and uuid there.
//!
//! The store knows nothing about bdevs. It does I/O through [`BlobDevice`]
//! (as SPDK's blobstore goes through `spdk_bs_dev`): the lvol module adapts
//! a bdev to it; [`MemDevice`] is a sparse in-memory one for tests.
//!
//! ## One thread, async
//!
//! A store is driven from one thread, like SPDK's metadata thread: nothing
//! is `Send`, state lives in `RefCell`s that are never held across an
//! `.await`, and operations are `async fn`s on `&self` that can run
//! concurrently on a single-threaded executor (bdevkit's reactor
//! `spawn_local`, or `futures::executor`). A blob's metadata writes are
//! ordered by a per-blob async lock; the super block's by another. Every
//! operation is durable when it returns; there is no separate "sync".
//!
//! ## Loading
//!
//! All metadata is read at load, in a few large concurrent reads (1 MiB
//! each, 32 in flight by default), and parsed in memory: after a clean
//! unload, the masks and then only the used pages; after a dirty shutdown,
//! the whole metadata region, from which the masks are rebuilt as SPDK's
//! recovery does. Opening a blob then needs no I/O. Parsing is strict: bad
//! CRCs, descriptor overruns, cycles, extents outside the device, extent
//! tables that do not cover the blob, and pages or clusters claimed twice
//! fail the load with an [`Error`] naming the blob and page; a store is never
//! written before it has loaded. A blob with invalid-flag bits this library
//! does not know loads (its clusters stay reserved) but cannot be opened;
//! unknown data-ro bits open it read-only, unknown md-ro bits with read-only
//! metadata, all as SPDK does.
//!
//! ## Crash safety
//!
//! Metadata is written so that a power cut after any write leaves a store
//! that loads, with each blob in its old or its new state and every
//! acknowledged operation kept: the first metadata write after a clean load
//! rewrites the super block with clean = 0; a blob's changed extent pages
//! and non-root pages go to fresh pages and its root page is written in
//! place last, so the switch is one atomic 4 KiB write; superseded pages are
//! zeroed and freed clusters cleared before either is reused; a thin
//! allocation rewrites one extent page in place. `tests/crash.rs` cuts every
//! operation at every write and checks this.
//!
//! # Example
//!
//! ```
//! use std::rc::Rc;
//! use bdevkit_blobstore::{bstype, BlobOptions, Blobstore, InitOptions, LoadOptions, MemDevice};
//!
//! # fn main() -> Result<(), bdevkit_blobstore::Error> {
//! futures::executor::block_on(async {
//!     let dev = Rc::new(MemDevice::new(512, 128 << 11)); // 128 MiB
//!     let opts = InitOptions { cluster_size: 4 << 20, bstype: bstype("LVOLSTORE"), ..InitOptions::default() };
//!     let bs = Blobstore::init(dev.clone(), &opts).await?;
//!     let id = bs
//!         .create_blob(&BlobOptions {
//!             num_clusters: 8,
//!             thin_provision: true,
//!             xattrs: vec![("name".into(), b"vol0\0".to_vec())],
//!             ..BlobOptions::default()
//!         })
//!         .await?;
//!     let blob = bs.open_blob(id)?;
//!     assert_eq!(blob.cluster_lba(2), None); // not allocated yet
//!     let lba = blob.allocate_cluster(2).await?; // the I/O path, on first write
//!     assert_eq!(blob.cluster_lba(2), Some(lba));
//!     drop(blob);
//!     bs.unload().await?;
//!
//!     let bs = Blobstore::load(dev, &LoadOptions::default()).await?;
//!     let blob = bs.open_blob(id)?;
//!     assert_eq!(blob.xattr("name").as_deref(), Some(&b"vol0\0"[..]));
//!     assert_eq!(blob.num_allocated_clusters(), 1);
//!     Ok(())
//! })
//! # }
//! ```
//!
//! ## Snapshots and clones
//!
//! [`Blobstore::create_snapshot`] makes SPDK's kind of snapshot: a new
//! read-only blob takes the volume's clusters and the volume becomes its
//! thin clone (internal xattr `SNAP` = the parent's id);
//! [`Blobstore::create_clone`] adds more clones of a snapshot. An
//! unallocated cluster of a clone reads from its parent chain
//! ([`Blob::read_cluster_lba`]); its first write copies the parent's whole
//! cluster into a new one (copy-on-write, in [`Blob::allocate_cluster`]'s
//! path). [`Blobstore::inflate_blob`], [`Blobstore::decouple_parent`],
//! [`Blobstore::set_parent`] and [`Blobstore::delete_blob`] of a snapshot
//! (merged into its one clone; EBUSY with more) change the lineage as
//! SPDK's do, and load finishes or undoes the ones a crash cut (SPDK's
//! `SNAPTMP` / `SNAPRM` markers).
//!
//! ## External-snapshot clones
//!
//! [`Blobstore::create_esnap_clone`] and [`Blobstore::set_external_parent`]
//! make SPDK's esnap clones: the EXTERNAL_SNAPSHOT flag and `EXTSNAP` = an
//! id the consumer chooses. The consumer attaches a device to the id
//! ([`Blobstore::attach_external`], an [`ExternalDevice`]); unallocated
//! clusters of a chain that ends there read from it
//! ([`ClusterSource::External`]) and are copied from it on first write.
//! Without it the chain is degraded ([`Blobstore::is_degraded`]).
//!
//! # Not here (yet)
//!
//! Metadata pages other than 4 KiB are refused.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod alloc;
mod bitmap;
mod blob;
mod blobstore;
mod budget;
mod cow;
pub mod device;
pub mod error;
mod esnap;
mod external;
pub mod format;
mod init;
mod lineage;
mod load;
pub mod mem;
pub mod options;
mod persist;
mod recover;
mod store;

/// A blob's id: `(1 << 32) | index of its first metadata page`.
pub type BlobId = u64;

pub use blob::Blob;
pub use blobstore::{Blobstore, VerifyReport};
pub use device::{BlobDevice, DeviceError};
pub use error::{Corruption, Error, Result};
pub use external::{ClusterSource, ExternalDevice, ReadFuture};
pub use mem::{MemDevice, MemImage, MemStats};
pub use options::{
    bstype, BlobOptions, ClearMethod, InitOptions, LoadOptions, StoreClearMethod, StoreInfo,
};
