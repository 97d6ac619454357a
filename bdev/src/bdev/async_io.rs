//! Futures over the callback path, for applications that prefer
//! `async`/`await`. They run on the reactor threads (spawn them with
//! [`crate::thread::Thread::spawn_local`]); the callback path stays the
//! fast path, and these cost one small allocation per I/O.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use super::channel::BdevChannel;
use super::io::{BdevIo, IoCompletion};
use super::types::IoStatus;
use super::zone::{ZoneAction, ZoneInfo, ZONE_INFO_SIZE};
use crate::dma::DmaBuf;
use crate::error::Error;

#[derive(Default)]
struct Slot {
    io: Cell<Option<BdevIo>>,
    waker: RefCell<Option<Waker>>,
    ready: Cell<bool>,
}

impl IoCompletion for Slot {
    fn io_done(&self, io: BdevIo) {
        self.io.set(Some(io));
        self.ready.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }
}

/// Resolves to the completed I/O.
pub struct IoFuture {
    slot: Rc<Slot>,
}

impl std::fmt::Debug for IoFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoFuture")
            .field("ready", &self.slot.ready.get())
            .finish()
    }
}

impl Future for IoFuture {
    type Output = BdevIo;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<BdevIo> {
        match self.slot.io.take() {
            Some(io) => Poll::Ready(io),
            None => {
                *self.slot.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Waits for a free `BdevIo` on the channel's thread.
struct AllocIo<'a> {
    ch: &'a BdevChannel,
    woken: Rc<Cell<bool>>,
    queued: bool,
}

impl Future for AllocIo<'_> {
    type Output = BdevIo;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<BdevIo> {
        if let Some(io) = self.ch.alloc_io() {
            return Poll::Ready(io);
        }
        if !self.queued || self.woken.get() {
            self.woken.set(false);
            self.queued = true;
            let w = cx.waker().clone();
            let woken = Rc::clone(&self.woken);
            self.ch.queue_io_wait(move || {
                woken.set(true);
                w.wake();
            });
        }
        Poll::Pending
    }
}

/// A failed data I/O: why, and the buffer back when there was one.
#[derive(Debug)]
pub struct IoFailure {
    /// What went wrong.
    pub error: Error,
    /// The data buffer.
    pub buf: Option<DmaBuf>,
}

impl BdevChannel {
    /// Submits `io` and returns a future for its completion (the I/O's
    /// completion callback is replaced).
    pub fn submit_async(&self, mut io: BdevIo) -> Result<IoFuture, Box<super::SubmitError>> {
        let slot = Rc::new(Slot::default());
        io.on_done(Rc::clone(&slot) as Rc<dyn IoCompletion>);
        self.submit(io)?;
        Ok(IoFuture { slot })
    }

    /// Allocates a `BdevIo`, waiting for one if the pool is empty.
    pub async fn alloc_io_async(&self) -> BdevIo {
        AllocIo {
            ch: self,
            woken: Rc::new(Cell::new(false)),
            queued: false,
        }
        .await
    }

    async fn run_data(&self, io: BdevIo) -> Result<DmaBuf, IoFailure> {
        self.run_data_with(io, |_| {}).await
    }

    /// `run_data`, `look` seeing the completed I/O first.
    async fn run_data_with(
        &self,
        io: BdevIo,
        look: impl FnOnce(&BdevIo),
    ) -> Result<DmaBuf, IoFailure> {
        let mut done = match self.submit_async(io) {
            Ok(f) => f.await,
            Err(mut e) => {
                let buf = e.io.take_buf();
                return Err(IoFailure {
                    error: e.error,
                    buf,
                });
            }
        };
        look(&done);
        let status = done.status();
        let buf = done.take_buf();
        match (status, buf) {
            (IoStatus::Success, Some(b)) => Ok(b),
            (IoStatus::Success, None) => Err(IoFailure {
                error: Error::InvalidArg("data I/O without a buffer".into()),
                buf: None,
            }),
            (s, b) => Err(IoFailure {
                error: Error::Io(s),
                buf: b,
            }),
        }
    }

    async fn run_plain(&self, io: BdevIo) -> Result<(), Error> {
        let done = self.submit_async(io).map_err(|e| e.error)?.await;
        match done.status() {
            IoStatus::Success => Ok(()),
            s => Err(Error::Io(s)),
        }
    }

    /// Reads `num_blocks` at `offset_blocks` into `buf`; returns `buf`.
    pub async fn read(
        &self,
        offset_blocks: u64,
        num_blocks: u64,
        buf: DmaBuf,
    ) -> Result<DmaBuf, IoFailure> {
        let mut io = self.alloc_io_async().await;
        io.read(offset_blocks, num_blocks, buf);
        self.run_data(io).await
    }

    /// Writes `num_blocks` at `offset_blocks` from `buf`; returns `buf`.
    pub async fn write(
        &self,
        offset_blocks: u64,
        num_blocks: u64,
        buf: DmaBuf,
    ) -> Result<DmaBuf, IoFailure> {
        let mut io = self.alloc_io_async().await;
        io.write(offset_blocks, num_blocks, buf);
        self.run_data(io).await
    }

    /// Compares the blocks with `buf`; `Error::Io(Miscompare)` on mismatch.
    pub async fn compare(
        &self,
        offset_blocks: u64,
        num_blocks: u64,
        buf: DmaBuf,
    ) -> Result<DmaBuf, IoFailure> {
        let mut io = self.alloc_io_async().await;
        io.compare(offset_blocks, num_blocks, buf);
        self.run_data(io).await
    }

    /// Writes zeroes over the range.
    pub async fn write_zeroes(&self, offset_blocks: u64, num_blocks: u64) -> Result<(), Error> {
        let mut io = self.alloc_io_async().await;
        io.write_zeroes(offset_blocks, num_blocks);
        self.run_plain(io).await
    }

    /// Unmaps the range.
    pub async fn unmap(&self, offset_blocks: u64, num_blocks: u64) -> Result<(), Error> {
        let mut io = self.alloc_io_async().await;
        io.unmap(offset_blocks, num_blocks);
        self.run_plain(io).await
    }

    /// Flushes the range.
    pub async fn flush(&self, offset_blocks: u64, num_blocks: u64) -> Result<(), Error> {
        let mut io = self.alloc_io_async().await;
        io.flush(offset_blocks, num_blocks);
        self.run_plain(io).await
    }

    /// Resets the bdev.
    pub async fn reset(&self) -> Result<(), Error> {
        let mut io = self.alloc_io_async().await;
        io.reset();
        self.run_plain(io).await
    }

    /// The zone report of `num_zones` zones from the zone starting at
    /// `zone_id` (a zoned bdev).
    pub async fn get_zone_info(
        &self,
        zone_id: u64,
        num_zones: u64,
    ) -> Result<Vec<ZoneInfo>, Error> {
        let n = usize::try_from(num_zones)
            .ok()
            .and_then(|n| n.checked_mul(ZONE_INFO_SIZE))
            .ok_or_else(|| Error::InvalidArg("zone report too large".into()))?;
        let buf = DmaBuf::new(n.max(1)).map_err(|e| Error::InvalidArg(e.to_string()))?;
        let mut io = self.alloc_io_async().await;
        io.get_zone_info(zone_id, num_zones, buf);
        let buf = self.run_data(io).await.map_err(|f| f.error)?;
        ZoneInfo::decode_all(&buf, n / ZONE_INFO_SIZE)
            .ok_or_else(|| Error::InvalidArg("malformed zone report".into()))
    }

    /// Zone management: `action` on the zone starting at `zone_id`.
    pub async fn zone_management(&self, zone_id: u64, action: ZoneAction) -> Result<(), Error> {
        let mut io = self.alloc_io_async().await;
        io.zone_management(zone_id, action);
        self.run_plain(io).await
    }

    /// Zone append of `num_blocks` from `buf` into the zone starting at
    /// `zone_id`; returns where the data went and `buf`.
    pub async fn zone_append(
        &self,
        zone_id: u64,
        num_blocks: u64,
        buf: DmaBuf,
    ) -> Result<(u64, DmaBuf), IoFailure> {
        let mut io = self.alloc_io_async().await;
        io.zone_append(zone_id, num_blocks, buf);
        let mut lba = None;
        let buf = self
            .run_data_with(io, |done| lba = done.zone_append_lba())
            .await?;
        // A successful append reports its blocks.
        let lba = lba.ok_or_else(|| IoFailure {
            error: Error::InvalidArg("zone append completed without its blocks".into()),
            buf: None,
        })?;
        Ok((lba, buf))
    }

    /// Copies blocks inside the bdev.
    pub async fn copy(
        &self,
        dst_offset_blocks: u64,
        src_offset_blocks: u64,
        num_blocks: u64,
    ) -> Result<(), Error> {
        let mut io = self.alloc_io_async().await;
        io.copy(dst_offset_blocks, src_offset_blocks, num_blocks);
        self.run_plain(io).await
    }
}
