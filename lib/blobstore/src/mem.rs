//! A sparse in-memory [`BlobDevice`] with power-cut emulation and counters.
//!
//! Only written 4 KiB chunks take memory, so a device of a terabyte whose
//! data nobody writes costs only its metadata. Tests use it to:
//! - count commands ([`MemDevice::stats`]) — how many reads a load takes;
//! - cut power ([`MemDevice::cut_after`]): the first N write units persist,
//!   the one that crosses the cut persists a prefix of its 4 KiB chunks (a
//!   torn multi-chunk write), and from then on every command fails with EIO;
//!   [`MemDevice::image`] then is what a reboot would find;
//! - interleave concurrent commands: every command yields once before it
//!   completes, so futures in flight together really overlap.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use crate::device::{BlobDevice, DeviceError};

const CHUNK: usize = 4096;

/// Contents of a [`MemDevice`]: its written 4 KiB chunks.
#[derive(Debug, Clone, Default)]
pub struct MemImage {
    chunks: HashMap<u64, Rc<[u8; CHUNK]>>,
}

impl MemImage {
    /// Bytes held (written chunks only).
    #[must_use]
    pub fn stored_bytes(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    /// Reads `buf.len()` bytes at byte offset `offset` (zeros where nothing
    /// was written).
    pub fn read_bytes(&self, offset: u64, buf: &mut [u8]) {
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let chunk = pos / CHUNK as u64;
            let within = usize::try_from(pos % CHUNK as u64).unwrap_or(0);
            let n = (CHUNK - within).min(buf.len() - done);
            match self.chunks.get(&chunk) {
                Some(c) => buf[done..done + n].copy_from_slice(&c[within..within + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
    }

    /// Writes `data` at byte offset `offset`.
    pub fn write_bytes(&mut self, offset: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let chunk = pos / CHUNK as u64;
            let within = usize::try_from(pos % CHUNK as u64).unwrap_or(0);
            let n = (CHUNK - within).min(data.len() - done);
            self.write_chunk_part(chunk, within, &data[done..done + n]);
            done += n;
        }
    }

    fn write_chunk_part(&mut self, chunk: u64, within: usize, data: &[u8]) {
        let mut page = match self.chunks.get(&chunk) {
            Some(c) => **c,
            None => [0u8; CHUNK],
        };
        page[within..within + data.len()].copy_from_slice(data);
        if page.iter().all(|&b| b == 0) {
            self.chunks.remove(&chunk);
        } else {
            self.chunks.insert(chunk, Rc::new(page));
        }
    }

    fn zero_range(&mut self, offset: u64, len: u64) {
        let end = offset + len;
        let first_full = offset.div_ceil(CHUNK as u64);
        let last_full = end / CHUNK as u64;
        if first_full < last_full && last_full - first_full > self.chunks.len() as u64 {
            self.chunks.retain(|&c, _| c < first_full || c >= last_full);
        } else {
            for c in first_full..last_full {
                self.chunks.remove(&c);
            }
        }
        // Partial chunks at either end.
        let head_end = (first_full * CHUNK as u64).min(end);
        if offset < head_end {
            let zeros = vec![0u8; usize::try_from(head_end - offset).unwrap_or(0)];
            self.write_bytes(offset, &zeros);
        }
        let tail_start = (last_full * CHUNK as u64).max(head_end);
        if tail_start < end {
            let zeros = vec![0u8; usize::try_from(end - tail_start).unwrap_or(0)];
            self.write_bytes(tail_start, &zeros);
        }
    }
}

/// Command counts of a [`MemDevice`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemStats {
    /// Read commands.
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Write commands.
    pub writes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Unmap and write-zeroes commands.
    pub clears: u64,
    /// Write units so far: one per 4 KiB chunk a write touches, one per
    /// unmap or write-zeroes (what [`MemDevice::cut_after`] counts).
    pub write_units: u64,
}

/// A sparse in-memory block device. See the [module docs](self).
#[derive(Debug)]
pub struct MemDevice {
    block_size: u32,
    num_blocks: Cell<u64>,
    image: RefCell<MemImage>,
    stats: Cell<MemStats>,
    /// Write units left before the power cut; `None`: no cut planned.
    cut_left: Cell<Option<u64>>,
    dead: Cell<bool>,
}

impl MemDevice {
    /// An empty (all zeros) device.
    ///
    /// # Panics
    ///
    /// If `block_size` is not a power of two from 512 to 4096 (a test
    /// helper's precondition).
    #[must_use]
    pub fn new(block_size: u32, num_blocks: u64) -> Self {
        Self::from_image(block_size, num_blocks, MemImage::default())
    }

    /// A device holding `image`.
    ///
    /// # Panics
    ///
    /// As [`MemDevice::new`].
    #[must_use]
    pub fn from_image(block_size: u32, num_blocks: u64, image: MemImage) -> Self {
        assert!(
            block_size.is_power_of_two() && (512..=4096).contains(&block_size),
            "block size must be a power of two from 512 to 4096"
        );
        MemDevice {
            block_size,
            num_blocks: Cell::new(num_blocks),
            image: RefCell::new(image),
            stats: Cell::new(MemStats::default()),
            cut_left: Cell::new(None),
            dead: Cell::new(false),
        }
    }

    /// What the device holds now (after a cut: what survived it).
    #[must_use]
    pub fn image(&self) -> MemImage {
        self.image.borrow().clone()
    }

    /// Grows (or shrinks) the device.
    pub fn set_num_blocks(&self, num_blocks: u64) {
        self.num_blocks.set(num_blocks);
    }

    /// Counts so far.
    #[must_use]
    pub fn stats(&self) -> MemStats {
        self.stats.get()
    }

    /// Zeroes the counts.
    pub fn reset_stats(&self) {
        self.stats.set(MemStats::default());
    }

    /// Plans a power cut: `units` more write units persist (see
    /// [`MemStats::write_units`]), then the device dies.
    pub fn cut_after(&self, units: u64) {
        self.cut_left.set(Some(units));
    }

    /// Whether the planned cut has happened.
    #[must_use]
    pub fn is_dead(&self) -> bool {
        self.dead.get()
    }

    /// Reads bytes directly (no counting, works after a cut).
    pub fn peek(&self, offset_bytes: u64, buf: &mut [u8]) {
        self.image.borrow().read_bytes(offset_bytes, buf);
    }

    /// Writes bytes directly (no counting) — to corrupt a store on purpose.
    pub fn poke(&self, offset_bytes: u64, data: &[u8]) {
        self.image.borrow_mut().write_bytes(offset_bytes, data);
    }

    fn check_range(&self, offset_blocks: u64, len_bytes: u64) -> Result<u64, DeviceError> {
        let bs = u64::from(self.block_size);
        if !len_bytes.is_multiple_of(bs) {
            return Err(DeviceError::new(libc::EINVAL));
        }
        let end = offset_blocks
            .checked_add(len_bytes / bs)
            .ok_or(DeviceError::new(libc::EINVAL))?;
        if end > self.num_blocks.get() {
            return Err(DeviceError::new(libc::EINVAL));
        }
        if self.dead.get() {
            return Err(DeviceError::io());
        }
        Ok(offset_blocks * bs)
    }

    /// Takes `units` write units from the budget: how many may persist.
    fn take_units(&self, units: u64) -> u64 {
        let mut s = self.stats.get();
        s.write_units += units;
        self.stats.set(s);
        match self.cut_left.get() {
            None => units,
            Some(left) if left >= units => {
                self.cut_left.set(Some(left - units));
                units
            }
            Some(left) => {
                self.cut_left.set(Some(0));
                self.dead.set(true);
                left
            }
        }
    }

    fn do_read(&self, offset_blocks: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        let off = self.check_range(offset_blocks, buf.len() as u64)?;
        let mut s = self.stats.get();
        s.reads += 1;
        s.read_bytes += buf.len() as u64;
        self.stats.set(s);
        self.image.borrow().read_bytes(off, buf);
        Ok(())
    }

    fn do_write(&self, offset_blocks: u64, buf: &[u8]) -> Result<(), DeviceError> {
        let off = self.check_range(offset_blocks, buf.len() as u64)?;
        let mut s = self.stats.get();
        s.writes += 1;
        s.write_bytes += buf.len() as u64;
        self.stats.set(s);
        // Split at 4 KiB chunk boundaries: each piece is one unit.
        let mut pieces = Vec::new();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let within = usize::try_from(pos % CHUNK as u64).unwrap_or(0);
            let n = (CHUNK - within).min(buf.len() - done);
            pieces.push((pos, done, n));
            done += n;
        }
        let allowed = self.take_units(pieces.len() as u64);
        let mut image = self.image.borrow_mut();
        for &(pos, start, n) in pieces.iter().take(usize::try_from(allowed).unwrap_or(0)) {
            image.write_bytes(pos, &buf[start..start + n]);
        }
        drop(image);
        if allowed < pieces.len() as u64 {
            return Err(DeviceError::io());
        }
        Ok(())
    }

    fn do_clear(&self, offset_blocks: u64, num_blocks: u64) -> Result<(), DeviceError> {
        let len = num_blocks
            .checked_mul(u64::from(self.block_size))
            .ok_or(DeviceError::new(libc::EINVAL))?;
        let off = self.check_range(offset_blocks, len)?;
        let mut s = self.stats.get();
        s.clears += 1;
        self.stats.set(s);
        if self.take_units(1) == 0 {
            return Err(DeviceError::io());
        }
        self.image.borrow_mut().zero_range(off, len);
        Ok(())
    }
}

/// Completes on its second poll: lets other futures run in between.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

impl BlobDevice for MemDevice {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.num_blocks.get()
    }

    async fn read(&self, offset_blocks: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        YieldOnce(false).await;
        self.do_read(offset_blocks, buf)
    }

    async fn write(&self, offset_blocks: u64, buf: &[u8]) -> Result<(), DeviceError> {
        YieldOnce(false).await;
        self.do_write(offset_blocks, buf)
    }

    async fn unmap(&self, offset_blocks: u64, num_blocks: u64) -> Result<(), DeviceError> {
        YieldOnce(false).await;
        self.do_clear(offset_blocks, num_blocks)
    }

    async fn write_zeroes(&self, offset_blocks: u64, num_blocks: u64) -> Result<(), DeviceError> {
        YieldOnce(false).await;
        self.do_clear(offset_blocks, num_blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

    #[test]
    fn sparse_read_write_and_zero() {
        let d = MemDevice::new(512, 1 << 30);
        block_on(async {
            d.write(9, &[7u8; 1024]).await.unwrap();
            let mut b = vec![0u8; 2048];
            d.read(8, &mut b).await.unwrap();
            assert!(b[..512].iter().all(|&x| x == 0));
            assert!(b[512..1536].iter().all(|&x| x == 7));
            d.write_zeroes(10, 1).await.unwrap();
            d.read(8, &mut b).await.unwrap();
            assert!(b[1024..1536].iter().all(|&x| x == 0));
            assert!(b[512..1024].iter().all(|&x| x == 7));
        });
        assert_eq!(d.image().stored_bytes(), 4096);
        assert_eq!(d.stats().reads, 2);
    }

    #[test]
    fn cut_tears_a_multi_chunk_write_and_kills_the_device() {
        let d = MemDevice::new(4096, 64);
        d.cut_after(2);
        block_on(async {
            d.write(0, &[1u8; 4096]).await.unwrap();
            assert!(d.write(1, &[2u8; 3 * 4096]).await.is_err());
            assert!(d.is_dead());
            let mut b = [0u8; 4096];
            assert!(d.read(0, &mut b).await.is_err());
        });
        let mut b = [0u8; 4 * 4096];
        d.peek(0, &mut b);
        assert!(b[..4096].iter().all(|&x| x == 1));
        assert!(b[4096..8192].iter().all(|&x| x == 2));
        assert!(b[8192..].iter().all(|&x| x == 0));
    }

    #[test]
    fn out_of_range_is_einval() {
        let d = MemDevice::new(4096, 4);
        let mut b = [0u8; 4096];
        let e = block_on(d.read(4, &mut b)).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
    }
}
