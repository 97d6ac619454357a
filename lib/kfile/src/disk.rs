//! A kernel-file bdev's backing file as the bdev keeps it ([`Disk`]), and
//! the bdev-level steps the modules share: checking a new bdev's name and
//! opening its file ([`check_name`], [`open_new`]), registering the bdev ([`register`]),
//! and finding, deleting and rescanning it by name ([`delete`],
//! [`rescan`]).

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use bdevkit::bdev::module::{Bdev, BdevManager, BdevOps, BdevProps};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::file::{self, Backing, Geometry, Kind};

/// The backing file of a kernel-file bdev and what follows from it.
#[derive(Debug)]
pub struct Disk {
    /// The path the bdev was created with.
    pub path: String,
    /// The open file.
    pub file: File,
    /// What it is.
    pub kind: Kind,
    /// Opened with `O_DIRECT`.
    pub direct: bool,
    /// A block device or a file on a device-backed file system
    /// ([`Backing::device_backed`]).
    pub device_backed: bool,
    /// Block size and size in blocks at creation.
    pub geometry: Geometry,
    /// The bdev's UUID.
    pub uuid: Uuid,
}

/// A bdev of a kernel-file module: the shared steps reach its [`Disk`].
pub trait KfileBdev: BdevOps {
    /// The bdev's backing file.
    fn disk(&self) -> &Disk;

    /// The backing file's path.
    fn filename(&self) -> &str {
        &self.disk().path
    }

    /// Whether the file was opened with `O_DIRECT`.
    fn is_direct(&self) -> bool {
        self.disk().direct
    }
}

/// Whether `name` may name a new bdev of `mgr`: set and free.
///
/// # Errors
/// [`Error::EmptyName`], [`Error::Exists`].
pub fn check_name(mgr: &BdevManager, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::EmptyName);
    }
    if mgr.get(name).is_some() {
        return Err(Error::Exists(name.to_string()));
    }
    Ok(())
}

/// First step of creating bdev `name` of `mgr` over `path`:
/// [`check_name`], then the file is opened ([`file::open`]). The module
/// checks what it must about the file, then makes it a [`Disk`]
/// ([`Backing::into_disk`]).
///
/// # Errors
/// What [`check_name`] and [`file::open`] report.
pub fn open_new(mgr: &BdevManager, name: &str, path: &str, readonly: bool) -> Result<Backing> {
    check_name(mgr, name)?;
    file::open(path, readonly)
}

impl Backing {
    /// The disk of a bdev over this file (at `path`) with block size
    /// `block_size` (absent or 0: auto) and UUID `uuid` (generated when
    /// absent).
    ///
    /// # Errors
    /// What [`Backing::geometry`] reports.
    pub fn into_disk(
        self,
        path: &str,
        block_size: Option<u32>,
        uuid: Option<Uuid>,
    ) -> Result<Disk> {
        let geometry = self.geometry(path, block_size.unwrap_or(0))?;
        Ok(Disk {
            path: path.to_string(),
            file: self.file,
            kind: self.kind,
            direct: self.direct,
            device_backed: self.device_backed,
            geometry,
            uuid: uuid.unwrap_or_else(Uuid::new_v4),
        })
    }
}

impl Disk {
    /// The file's descriptor.
    #[must_use]
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// The properties of bdev `name` over this disk ([`file::props`], with
    /// the UUID).
    #[must_use]
    pub fn props(&self, name: &str, product_name: &str) -> BdevProps {
        let mut props = file::props(name, product_name, self.geometry);
        props.uuid = Some(self.uuid);
        props
    }

    /// Re-reads the file's size for `bdev`: a new size is announced to
    /// descriptor holders (a resize event), size 0 hot-removes the bdev (as
    /// SPDK). `name` is what the caller asked for (the name or an alias).
    ///
    /// # Errors
    /// [`Error::Size`] when the size cannot be read, and
    /// [`Error::ShrinkWhileOpen`] (`EBUSY`) for a smaller size while
    /// descriptors are open.
    pub fn rescan(&self, mgr: &BdevManager, name: &str, bdev: &Bdev) -> Result<()> {
        let size = file::size(&self.file, self.kind).map_err(|source| Error::Size {
            path: self.path.clone(),
            source,
        })?;
        let blocks = size / u64::from(self.geometry.block_size);
        let old = bdev.num_blocks();
        if blocks == old {
            return Ok(());
        }
        if blocks == 0 {
            tracing::info!(bdev = %bdev.name(), "backing file is empty; removing bdev");
            mgr.unregister(bdev, || {});
            return Ok(());
        }
        if blocks < old && bdev.open_descriptors() > 0 {
            return Err(Error::ShrinkWhileOpen(name.to_string()));
        }
        bdev.notify_resize(blocks);
        Ok(())
    }
}

/// Registers `ops` as bdev `name` of `module` (product name `product`).
///
/// # Errors
/// [`Error::Exists`] when the name or the UUID is taken, else
/// [`Error::Register`].
pub fn register<B: KfileBdev>(
    mgr: &BdevManager,
    module: &str,
    name: &str,
    product: &str,
    ops: B,
) -> Result<Bdev> {
    let props = ops.disk().props(name, product);
    mgr.register_bdev(module, props, Arc::new(ops))
        .map_err(|e| match e {
            bdevkit::Error::Exists(n) => Error::Exists(n),
            e => Error::Register(e),
        })
}

/// The live bdev `name` (or alias) of `module`, and its `B`.
fn find<B: KfileBdev>(
    mgr: &BdevManager,
    module: &'static str,
    name: &str,
) -> Result<(Bdev, Arc<B>)> {
    let not_found = || Error::NotFound {
        module,
        name: name.to_string(),
    };
    let b = mgr
        .get(name)
        .filter(|b| b.module_name() == module && !b.is_removing())
        .ok_or_else(not_found)?;
    let ops = b.ops_as::<B>().ok_or_else(not_found)?;
    Ok((b, ops))
}

/// Deletes bdev `name` of `module`; `done` gets the outcome on the calling
/// thread (at once with [`Error::NotFound`] when there is no such bdev).
/// Every I/O in flight completes before the bdev is destructed and its
/// file closed.
pub fn delete(
    mgr: &BdevManager,
    module: &'static str,
    name: &str,
    done: impl FnOnce(Result<()>) + Send + 'static,
) {
    let n = name.to_string();
    mgr.unregister_by_name(name, module, move |r| {
        done(r.map_err(|_| Error::NotFound { module, name: n }));
    });
}

/// Re-reads the size of the file of bdev `name` (a `B` of `module`):
/// [`Disk::rescan`].
///
/// # Errors
/// [`Error::NotFound`] when there is no such bdev, and what
/// [`Disk::rescan`] reports.
pub fn rescan<B: KfileBdev>(mgr: &BdevManager, module: &'static str, name: &str) -> Result<()> {
    let (b, ops) = find::<B>(mgr, module, name)?;
    ops.disk().rescan(mgr, name, &b)
}
