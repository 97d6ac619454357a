//! The external devices a store's esnap clones read from (see `esnap`),
//! kept apart from the operations on them so that the store's state can
//! hold them without depending on those operations.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use crate::device::DeviceError;

/// A read future of an [`ExternalDevice`].
pub type ReadFuture<'a> = Pin<Box<dyn Future<Output = std::result::Result<(), DeviceError>> + 'a>>;

/// The read-only device an external snapshot names, as the store reads it
/// (on the store's thread). Offsets count blocks of
/// [`block_size`](ExternalDevice::block_size), which must divide the
/// store's cluster size.
pub trait ExternalDevice {
    /// Bytes per block.
    fn block_size(&self) -> u32;
    /// Blocks on the device.
    fn num_blocks(&self) -> u64;
    /// Reads `buf.len()` bytes (whole blocks) from `offset_blocks`.
    fn read<'a>(&'a self, offset_blocks: u64, buf: &'a mut [u8]) -> ReadFuture<'a>;
}

/// Where an unallocated cluster of a blob reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterSource {
    /// Nothing holds it: zeros.
    Zeros,
    /// An ancestor's cluster at this device LBA.
    Device(u64),
    /// The external snapshot at the root of the chain, at the cluster's own
    /// offset (it may be detached: see [`Blobstore::is_degraded`](crate::Blobstore::is_degraded)).
    External,
}

/// The attached external devices, by id.
#[derive(Default)]
pub(crate) struct Externals(RefCell<BTreeMap<Vec<u8>, Rc<dyn ExternalDevice>>>);

impl std::fmt::Debug for Externals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.0
                    .borrow()
                    .keys()
                    .map(|k| String::from_utf8_lossy(k).into_owned()),
            )
            .finish()
    }
}

impl Externals {
    pub(crate) fn get(&self, id: &[u8]) -> Option<Rc<dyn ExternalDevice>> {
        self.0.borrow().get(id).cloned()
    }

    pub(crate) fn insert(&self, id: &[u8], dev: Rc<dyn ExternalDevice>) {
        self.0.borrow_mut().insert(id.to_vec(), dev);
    }

    pub(crate) fn remove(&self, id: &[u8]) -> Option<Rc<dyn ExternalDevice>> {
        self.0.borrow_mut().remove(id)
    }
}
