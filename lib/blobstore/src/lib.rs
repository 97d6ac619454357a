//! x
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod bitmap;
pub mod device;
pub mod error;
pub mod format;
pub mod mem;

/// A blob's id: `(1 << 32) | index of its first metadata page`.
pub type BlobId = u64;

pub use device::{BlobDevice, DeviceError};
pub use error::{Error, Result};
pub use mem::{MemDevice, MemImage, MemStats};
