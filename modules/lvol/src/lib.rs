//! The `lvol` module: logical volume stores on any bdev, in SPDK's on-disk
//! format (an lvstore made by SPDK v26.05 loads here and the other way
//! round), each logical volume a bdev.
//!
//! # The model
//!
//! An **lvol store** is a blobstore (`bdevkit-blobstore`) of type
//! `LVOLSTORE` on a base bdev, which it claims; its super blob holds the
//! store's name and UUID. Each **lvol** is a blob with a name and a UUID;
//! it is registered as a bdev named by its UUID with the alias
//! `lvs_name/lvol_name`. A thick lvol owns its clusters from creation; a
//! thin one gets each cluster on its first write, reads zeros where it has
//! none, and gives a cluster back when it is unmapped whole.
//!
//! `bdev_lvol_create_lvstore` makes a store; a bdev that carries one is
//! found by examine, claimed and its lvols registered, with no
//! configuration at all: the store is its own configuration, so
//! `save_config` writes nothing for this module (as SPDK's). The base's
//! removal (or the app's shutdown) unregisters the lvols and unloads the
//! store cleanly; a store that was not unloaded (kill -9, power loss) is
//! recovered at the next load.
//!
//! # Threads
//!
//! Each store has a **metadata thread**, the one that created or loaded it
//! (the app thread): it owns the blobstore, runs every control operation
//! and every cluster allocation (`md.rs`, `control.rs`). The I/O path runs
//! on every thread with a channel of its own (`io.rs`): it translates an
//! I/O cluster by cluster with the lvol's cluster table — an atomic per
//! cluster the metadata thread fills in once a mapping is on disk — and
//! sends it on this thread's channel of the base. It asks the metadata
//! thread by message only for a cluster not allocated yet (writes to it
//! wait, nothing else does) or one to give back.
//!
//! # Snapshots and clones
//!
//! `bdev_lvol_snapshot` makes a read-only snapshot lvol that takes the
//! volume's clusters; the volume becomes its thin clone (SPDK's way, in
//! the blobstore). `bdev_lvol_clone` adds clones of a snapshot. A clone's
//! channels read an unallocated cluster from the parent chain's cluster
//! (a second table, `backing`), and its first write to one is copied whole
//! from the parent by the blobstore's allocation. Operations that move
//! clusters freeze the lvol's writes and drain those sent (`snap.rs`).
//! `bdev_lvol_inflate`, `bdev_lvol_decouple_parent`, `bdev_lvol_set_parent`
//! and `bdev_lvol_delete` of a snapshot (merged into its one clone; EBUSY
//! with more) are SPDK's.
//!
//! # Shallow copy
//!
//! `bdev_lvol_start_shallow_copy` copies the clusters a read-only lvol
//! holds itself (not its parents') to the same offsets of another bdev, in
//! the background on the metadata thread, the destination claimed and the
//! lvol busy meanwhile (`shallow.rs`); `bdev_lvol_check_shallow_copy`
//! reports its progress (SPDK's).
//!
//! # External-snapshot clones
//!
//! `bdev_lvol_clone_bdev` makes a thin clone of a bdev outside the store
//! (named in the blob by its UUID); `bdev_lvol_set_parent_bdev` gives a
//! thin lvol such a parent. The store opens the bdev read-only, claimed
//! `read_many_write_none`; the channels read unwritten clusters there, and
//! a first write copies the cluster in (`esnap.rs`). Without the bdev
//! (missing at load, or removed) the lvols whose chain ends at it are
//! degraded: listed, not served, until it appears.
//!
//! # Not here (yet)
//!
//! Seek data/hole. Metadata pages other than 4 KiB.
//!
//! RPCs: see [`rpc`]. `doc/lvol.md` has examples and the differences from
//! SPDK.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// Layers, each file importing only from those before it: `error`,
// `lvs` (the store core, generic over the device), `dev` (the bdev as the
// blobstore's device), `table` (cluster tables), `io` (the lvol bdev and
// its I/O path), `md` (the metadata thread), `control` (operations on
// it), `snap` (the lineage operations), `esnap` (external-snapshot
// clones), `module` (examine, the store list, the operations' entry points),
// `rpc`.
mod control;
mod dev;
pub mod error;
mod esnap;
mod io;
pub mod lvs;
mod md;
mod module;
pub mod rpc;
mod shallow;
mod snap;
pub mod table;
// `shallow` (the shallow copy) sits after `snap`, before `module`.

use bdevkit::bdev::module::BdevManager;
use std::sync::Arc;

pub use dev::BdevDev;
pub use error::{LvolError, Result};
pub use io::{LvolBdev, LvolChannel};
pub use lvs::{LvolMeta, LvolOptions, LvsCore, LvsOptions, Parent};
pub use module::start_shallow_copy;
pub use module::{
    clone_lvol, create_lvol, create_lvstore, decouple_parent, delete_lvol, delete_lvstore,
    get_lvols, get_lvstores, grow_lvstore, inflate_lvol, rename_lvol, rename_lvstore, resize_lvol,
    set_parent, set_read_only, snapshot_lvol, store_clear_method, CreateLvstore, LvolModule,
    LvsRef,
};
pub use shallow::{CopyState, CopyStatus, ShallowCopy, CHUNK_BYTES, SLOTS};

/// Module name (also the RPC infix).
pub const MODULE: &str = "lvol";
/// `product_name` of lvol bdevs.
pub const PRODUCT_NAME: &str = "Logical Volume";

/// Adds the lvol module to `mgr`.
pub fn register(mgr: &BdevManager) {
    mgr.register_module(Arc::new(LvolModule::default()));
}

/// What an app links of this module: [`register`], the RPC methods of
/// [`rpc`] and its log flags (`log_set_flag`).
pub const MODULE_DEF: bdevkit::bdev::module::ModuleDef<
    bdevkit_jsonrpc::MethodRegistry,
    bdevkit_jsonrpc::Error,
> = bdevkit::bdev::module::ModuleDef {
    name: MODULE,
    register,
    register_rpcs: rpc::register_rpcs,
    log_flags: &[
        bdevkit::bdev::module::LogFlag {
            name: "vbdev_lvol",
            targets: &["bdevkit_lvol"],
            aliases: &["lvol", "lvol_rpc"],
        },
        bdevkit::bdev::module::LogFlag {
            name: "blob",
            targets: &["bdevkit_blobstore"],
            aliases: &[],
        },
    ],
};
