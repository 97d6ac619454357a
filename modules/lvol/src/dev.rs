//! The blobstore's device over a bdev: what SPDK's `blob_bdev` is to
//! `lib/blob`. It lives on the store's metadata thread, with that thread's
//! channel to the (claimed) base, and goes through the bdev layer's async
//! API: every command is a `BdevIo` with a DMA buffer of its own, which the
//! data is copied through (the blobstore lends buffers only for the
//! duration of a call; metadata I/O, not the data path).

use bdevkit::bdev::module::{Bdev, BdevChannel, DmaBuf, IoType};
use bdevkit_blobstore::{BlobDevice, DeviceError, ExternalDevice, ReadFuture};

/// A bdev as a [`BlobDevice`], through one channel of the metadata thread.
#[derive(Debug)]
pub struct BdevDev {
    ch: BdevChannel,
    bdev: Bdev,
    unmap: bool,
    copy: bool,
}

fn dev_err(e: &bdevkit::Error) -> DeviceError {
    DeviceError::new(e.errno())
}

fn buffer(len: usize) -> Result<DmaBuf, DeviceError> {
    DmaBuf::new(len).map_err(|_| DeviceError::new(libc::ENOMEM))
}

impl BdevDev {
    /// The device behind `ch` (a channel of this thread).
    #[must_use]
    pub fn new(ch: BdevChannel) -> Self {
        let bdev = ch.bdev();
        let unmap = bdev.supports(IoType::Unmap);
        let copy = bdev.supports(IoType::Copy);
        BdevDev {
            ch,
            bdev,
            unmap,
            copy,
        }
    }

    /// The bdev.
    #[must_use]
    pub fn bdev(&self) -> &Bdev {
        &self.bdev
    }

    fn blocks(&self, bytes: usize) -> u64 {
        bytes as u64 / u64::from(self.bdev.block_size())
    }
}

impl BlobDevice for BdevDev {
    fn block_size(&self) -> u32 {
        self.bdev.block_size()
    }

    /// The base's size now (grows are followed: `bdev_lvol_grow_lvstore`).
    fn num_blocks(&self) -> u64 {
        self.bdev.num_blocks()
    }

    async fn read(&self, offset_blocks: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        let d = buffer(buf.len())?;
        let d = self
            .ch
            .read(offset_blocks, self.blocks(buf.len()), d)
            .await
            .map_err(|f| dev_err(&f.error))?;
        buf.copy_from_slice(d.as_slice());
        Ok(())
    }

    async fn write(&self, offset_blocks: u64, buf: &[u8]) -> Result<(), DeviceError> {
        let mut d = buffer(buf.len())?;
        d.as_mut_slice().copy_from_slice(buf);
        self.ch
            .write(offset_blocks, self.blocks(buf.len()), d)
            .await
            .map_err(|f| dev_err(&f.error))?;
        Ok(())
    }

    /// A base without unmap keeps its data (the blobstore writes zeros
    /// where it needs them), as SPDK's `blob_bdev` does.
    async fn unmap(&self, offset_blocks: u64, num_blocks: u64) -> Result<(), DeviceError> {
        if !self.unmap || num_blocks == 0 {
            return Ok(());
        }
        self.ch
            .unmap(offset_blocks, num_blocks)
            .await
            .map_err(|e| dev_err(&e))
    }

    /// The base's copy where it has one (malloc: one memory copy), else a
    /// read and a write through one DMA buffer.
    async fn copy(&self, dst: u64, src: u64, num_blocks: u64) -> Result<(), DeviceError> {
        if self.copy {
            return self
                .ch
                .copy(dst, src, num_blocks)
                .await
                .map_err(|e| dev_err(&e));
        }
        let len = usize::try_from(num_blocks * u64::from(self.bdev.block_size()))
            .map_err(|_| DeviceError::new(libc::EINVAL))?;
        let d = self
            .ch
            .read(src, num_blocks, buffer(len)?)
            .await
            .map_err(|f| dev_err(&f.error))?;
        self.ch
            .write(dst, num_blocks, d)
            .await
            .map_err(|f| dev_err(&f.error))?;
        Ok(())
    }

    /// The bdev layer emulates write zeroes where the base lacks it.
    async fn write_zeroes(&self, offset_blocks: u64, num_blocks: u64) -> Result<(), DeviceError> {
        if num_blocks == 0 {
            return Ok(());
        }
        self.ch
            .write_zeroes(offset_blocks, num_blocks)
            .await
            .map_err(|e| dev_err(&e))
    }
}

/// An external snapshot's bdev as the blobstore reads it (copy-on-write of
/// an esnap clone's cluster), through one channel of the metadata thread.
#[derive(Debug)]
pub struct ExtDev(BdevDev);

impl ExtDev {
    /// The device behind `ch` (a channel of this thread).
    #[must_use]
    pub fn new(ch: BdevChannel) -> Self {
        ExtDev(BdevDev::new(ch))
    }
}

impl ExternalDevice for ExtDev {
    fn block_size(&self) -> u32 {
        self.0.block_size()
    }

    fn num_blocks(&self) -> u64 {
        self.0.num_blocks()
    }

    fn read<'a>(&'a self, offset_blocks: u64, buf: &'a mut [u8]) -> ReadFuture<'a> {
        Box::pin(BlobDevice::read(&self.0, offset_blocks, buf))
    }
}
