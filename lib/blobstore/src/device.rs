//! The block device a blobstore lives on.
//!
//! The blobstore knows nothing of bdevs: it reads and writes through
//! [`BlobDevice`], as SPDK's blobstore goes through `struct spdk_bs_dev`. The
//! lvol module adapts a bdev descriptor and channel to it; tests use
//! [`MemDevice`](crate::MemDevice).

use std::future::Future;
use std::rc::Rc;

/// A device command failed, with the errno it failed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("device error {errno}")]
pub struct DeviceError {
    errno: i32,
}

impl DeviceError {
    /// A failure with this (positive) errno.
    #[must_use]
    pub fn new(errno: i32) -> Self {
        DeviceError { errno }
    }

    /// An I/O error (EIO).
    #[must_use]
    pub fn io() -> Self {
        DeviceError { errno: libc::EIO }
    }

    /// The errno.
    #[must_use]
    pub fn errno(&self) -> i32 {
        self.errno
    }
}

impl From<std::io::Error> for DeviceError {
    fn from(e: std::io::Error) -> Self {
        DeviceError {
            errno: e.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

/// A block device as the blobstore needs it.
///
/// All methods are called on the thread that drives the store (the
/// blobstore is single-threaded: no `Send` bound on anything). Offsets and
/// lengths count blocks of [`block_size`](BlobDevice::block_size) bytes;
/// buffers are a whole number of blocks. The store issues several commands
/// at once (loads read the metadata region in large concurrent reads), so an
/// implementation must allow overlapping futures.
///
/// What the implementer owes:
/// - a future resolves once, with `Ok` only when the command is done: a
///   completed write is durable (the store orders its metadata writes by
///   completions, as SPDK's does);
/// - a 4 KiB write aligned to 4 KiB is atomic under power loss: afterwards
///   the 4 KiB hold the old or the new data, never a mix (SPDK relies on the
///   same);
/// - after `unmap` or `write_zeroes`, reads of the range return zeros or, for
///   `unmap`, the old data (the store writes zeros where it needs them);
/// - a dropped future leaves `buf` alone afterwards (copy through an owned
///   DMA buffer if the hardware writes memory after the drop).
pub trait BlobDevice {
    /// Bytes per block: a power of two from 512 to 4096.
    fn block_size(&self) -> u32;

    /// Blocks on the device now. Read at load and by
    /// [`Blobstore::grow`](crate::Blobstore::grow); may grow between them.
    fn num_blocks(&self) -> u64;

    /// Reads `buf.len()` bytes from `offset_blocks`.
    fn read(
        &self,
        offset_blocks: u64,
        buf: &mut [u8],
    ) -> impl Future<Output = Result<(), DeviceError>>;

    /// Writes `buf` at `offset_blocks`.
    fn write(
        &self,
        offset_blocks: u64,
        buf: &[u8],
    ) -> impl Future<Output = Result<(), DeviceError>>;

    /// Deallocates blocks (their later contents may be zeros or old data).
    fn unmap(
        &self,
        offset_blocks: u64,
        num_blocks: u64,
    ) -> impl Future<Output = Result<(), DeviceError>>;

    /// Makes blocks read as zeros.
    fn write_zeroes(
        &self,
        offset_blocks: u64,
        num_blocks: u64,
    ) -> impl Future<Output = Result<(), DeviceError>>;

    /// Copies `num_blocks` from `src_offset_blocks` to `dst_offset_blocks`
    /// (the ranges do not overlap): a copy-on-write of a cluster. The
    /// default reads into a buffer and writes it; a device with a copy
    /// command, or one that can keep the data in one DMA buffer, does
    /// better.
    fn copy(
        &self,
        dst_offset_blocks: u64,
        src_offset_blocks: u64,
        num_blocks: u64,
    ) -> impl Future<Output = Result<(), DeviceError>> {
        async move {
            let len = usize::try_from(num_blocks * u64::from(self.block_size()))
                .map_err(|_| DeviceError::new(libc::EINVAL))?;
            let mut buf = vec![0u8; len];
            self.read(src_offset_blocks, &mut buf).await?;
            self.write(dst_offset_blocks, &buf).await
        }
    }
}

impl<D: BlobDevice + ?Sized> BlobDevice for Rc<D> {
    fn block_size(&self) -> u32 {
        (**self).block_size()
    }

    fn num_blocks(&self) -> u64 {
        (**self).num_blocks()
    }

    fn read(
        &self,
        offset_blocks: u64,
        buf: &mut [u8],
    ) -> impl Future<Output = Result<(), DeviceError>> {
        (**self).read(offset_blocks, buf)
    }

    fn write(
        &self,
        offset_blocks: u64,
        buf: &[u8],
    ) -> impl Future<Output = Result<(), DeviceError>> {
        (**self).write(offset_blocks, buf)
    }

    fn unmap(
        &self,
        offset_blocks: u64,
        num_blocks: u64,
    ) -> impl Future<Output = Result<(), DeviceError>> {
        (**self).unmap(offset_blocks, num_blocks)
    }

    fn write_zeroes(
        &self,
        offset_blocks: u64,
        num_blocks: u64,
    ) -> impl Future<Output = Result<(), DeviceError>> {
        (**self).write_zeroes(offset_blocks, num_blocks)
    }

    fn copy(
        &self,
        dst_offset_blocks: u64,
        src_offset_blocks: u64,
        num_blocks: u64,
    ) -> impl Future<Output = Result<(), DeviceError>> {
        (**self).copy(dst_offset_blocks, src_offset_blocks, num_blocks)
    }
}
