//! x
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod alloc;
mod bitmap;
mod blob;
mod blobstore;
pub mod device;
pub mod error;
pub mod format;
mod init;
mod load;
pub mod mem;
pub mod options;
mod persist;
mod store;

/// A blob's id: `(1 << 32) | index of its first metadata page`.
pub type BlobId = u64;

pub use blob::Blob;
pub use blobstore::{Blobstore, VerifyReport};
pub use device::{BlobDevice, DeviceError};
pub use error::{Corruption, Error, Result};
pub use mem::{MemDevice, MemImage, MemStats};
pub use options::{
    bstype, BlobOptions, ClearMethod, InitOptions, LoadOptions, StoreClearMethod, StoreInfo,
};
