//! The admin queue: a queue pair shared by every thread that sends admin
//! commands (the control path), behind a mutex. Commands are synchronous
//! (the caller waits, bounded: bring-up, queue creation) or asynchronous
//! (a callback gets the completion from [`AdminQueue::poll`]). A waiter
//! that reaps another waiter's completion keeps it in a stash for its
//! owner. Knows nothing of the controller above it: the controller hands
//! in its health check and timeouts.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use bdevkit_nvme_spec::fabrics::{PropertyGet, PropertySet};
use bdevkit_nvme_spec::opcode::FABRICS_OPCODE;
use bdevkit_nvme_spec::regs::property_size;
use bdevkit_nvme_spec::{Command, Cqe, Sqe, Status};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::qpair::{Completion, Qpair, BATCH};
use crate::sys::DmaMem;
use crate::transport::{Data, Dir, QueueTransport, Request, SubmitError};

/// Gets an async admin command's status, dword 0 and data buffer.
pub type AdminCallback = Box<dyn FnOnce(Status, u32, Option<DmaMem>) + Send>;

/// An admin command's request: its data buffer (driver-owned DMA memory,
/// never bounced) and how it completes.
pub(crate) struct AdminReq {
    buf: Option<(DmaMem, usize)>,
    kind: AdminKind,
}

enum AdminKind {
    Sync(u64),
    Async(AdminCallback),
}

// SAFETY: the one segment is the request's own `DmaMem`, driver-allocated
// DMA memory that the request owns until its completion (or until the
// queue pair drops it); callers never hold references into DmaMem (it is
// read and written by copies).
unsafe impl Request for AdminReq {
    fn segment_count(&self, _d: Data) -> usize {
        usize::from(self.buf.is_some())
    }
    fn segment(&self, _d: Data, _i: usize) -> (usize, usize) {
        self.buf.as_ref().map_or((0, 0), |(m, l)| (m.vaddr(), *l))
    }
    // PCIe reaches admin data where it lies (never bounced); a fabrics
    // transport copies it, through the stack a page at a time.
    fn for_each_segment(&self, _d: Data, f: &mut dyn FnMut(&[u8])) {
        let Some((m, len)) = &self.buf else { return };
        let mut chunk = [0u8; 4096];
        let mut at = 0;
        while at < *len {
            let k = (*len - at).min(chunk.len());
            m.read_bytes(at, &mut chunk[..k]);
            f(&chunk[..k]);
            at += k;
        }
    }
    fn for_each_segment_mut(&mut self, _d: Data, f: &mut dyn FnMut(&mut [u8])) -> bool {
        let Some((m, len)) = &self.buf else {
            return false;
        };
        let mut chunk = [0u8; 4096];
        let mut at = 0;
        while at < *len {
            let k = (*len - at).min(chunk.len());
            f(&mut chunk[..k]);
            m.write_bytes(at, &chunk[..k]);
            at += k;
        }
        true
    }
}

fn command_ok(c: &Cqe) -> Result<()> {
    let status = c.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(Error::Command {
            opcode: FABRICS_OPCODE,
            status,
        })
    }
}

/// A finished synchronous command: id, status, dword 0, data buffer.
type SyncDone = (u64, Status, (u32, u32), Option<DmaMem>);

struct Admin<Q: QueueTransport> {
    qp: Qpair<Q, AdminReq>,
    next_sync: u64,
    /// Sync completions that another caller reaped.
    done_sync: Vec<SyncDone>,
    last_keep_alive: Instant,
}

/// The admin queue of one controller (absent while it is disabled).
pub(crate) struct AdminQueue<Q: QueueTransport> {
    inner: Mutex<Option<Admin<Q>>>,
    /// The completion batch of [`AdminQueue::poll`], kept so that a poll
    /// does not allocate.
    batch: Mutex<Vec<Completion<AdminReq>>>,
}

/// The direction and data set of a command with (or without) a buffer.
fn data_of(sqe: &Sqe, buf: &Option<(DmaMem, usize)>) -> (Data, Dir) {
    let dir = if sqe.opcode & 1 == 1 {
        Dir::ToDevice
    } else {
        Dir::FromDevice
    };
    let data = if buf.is_some() {
        Data::Main
    } else {
        Data::None
    };
    (data, dir)
}

fn deliver(done: &mut Vec<Completion<AdminReq>>) {
    for c in done.drain(..) {
        let status = c.status();
        if let AdminKind::Async(cb) = c.ctx.kind {
            cb(status, c.dw0, c.ctx.buf.map(|b| b.0));
        }
    }
}

/// Moves sync completions into the stash, leaving the async ones.
fn stash_sync<Q: QueueTransport>(a: &mut Admin<Q>, done: &mut Vec<Completion<AdminReq>>) {
    let mut i = 0;
    while i < done.len() {
        if let AdminKind::Sync(id) = done[i].ctx.kind {
            let c = done.swap_remove(i);
            a.done_sync
                .push((id, c.status(), (c.dw0, c.dw1), c.ctx.buf.map(|b| b.0)));
        } else {
            i += 1;
        }
    }
}

impl<Q: QueueTransport> AdminQueue<Q> {
    pub(crate) fn new() -> Self {
        AdminQueue {
            inner: Mutex::new(None),
            batch: Mutex::new(Vec::with_capacity(BATCH)),
        }
    }

    /// Installs a fresh queue (the controller is about to be enabled).
    pub(crate) fn install(&self, q: Q) {
        *self.inner.lock() = Some(Admin {
            qp: Qpair::new(q),
            next_sync: 1,
            done_sync: Vec::new(),
            last_keep_alive: Instant::now(),
        });
    }

    /// The controller dropped every command (disabled): they complete
    /// with "aborted, SQ deletion" and the queue takes no more until the
    /// next [`AdminQueue::install`].
    pub(crate) fn abort_all(&self) {
        let mut failed = Vec::new();
        if let Some(a) = self.inner.lock().as_mut() {
            // Called when the controller is disabled or gone (the doc
            // above): it works on none of these commands any more.
            a.qp.fail_all_now(Status::ABORTED_SQ_DELETION, &mut failed);
            a.qp.set_connected(false);
        }
        deliver(&mut failed);
    }

    /// Whether the queue is installed, connected and its transport alive
    /// (`true` while another thread holds it: it is in use).
    pub(crate) fn alive(&self) -> bool {
        match self.inner.try_lock() {
            Some(g) => g
                .as_ref()
                .is_some_and(|a| a.qp.is_connected() && a.qp.transport().is_alive()),
            None => true,
        }
    }

    /// What an owner sleeping on the queue needs: its descriptor and
    /// whether it needs polling anyway ([`QueueTransport::wake_fd`],
    /// [`QueueTransport::needs_poll`]). `None` while another thread holds
    /// the queue (it drives it then) or none is installed.
    pub(crate) fn wake(&self) -> Option<(Option<(RawFd, u64)>, bool)> {
        let g = self.inner.try_lock()?;
        let q = g.as_ref()?.qp.transport();
        Some((q.wake_fd(), q.needs_poll()))
    }

    /// Fabrics: reads property `off` (Property Get), waiting up to `timeout`.
    pub(crate) fn property_get(&self, off: u32, timeout: Duration) -> Result<u64> {
        let size =
            property_size(off).ok_or_else(|| Error::InvalidArg(format!("property {off:#x}")))?;
        let (c, _) = self.exec(
            PropertyGet::new(size, off).to_sqe(0),
            None,
            timeout,
            &|| Ok(()),
        )?;
        command_ok(&c)?;
        Ok(c.dw01())
    }

    /// Fabrics: writes property `off` (Property Set), waiting up to `timeout`.
    pub(crate) fn property_set(&self, off: u32, v: u64, timeout: Duration) -> Result<()> {
        let size =
            property_size(off).ok_or_else(|| Error::InvalidArg(format!("property {off:#x}")))?;
        let sqe = PropertySet::new(size, off, v).to_sqe(0);
        let (c, _) = self.exec(sqe, None, timeout, &|| Ok(()))?;
        command_ok(&c)
    }

    /// Sends a command; `cb` gets its completion from [`AdminQueue::poll`]
    /// (or at once, with an error status, when the queue is down).
    pub(crate) fn submit(&self, sqe: Sqe, buf: Option<(DmaMem, usize)>, cb: AdminCallback) {
        let (data, dir) = data_of(&sqe, &buf);
        let req = AdminReq {
            buf,
            kind: AdminKind::Async(cb),
        };
        let mut guard = self.inner.lock();
        let r = match guard.as_mut() {
            Some(a) => a.qp.submit(sqe, data, dir, req).map(|_| a.qp.flush()),
            None => Err((req, SubmitError::Disconnected)),
        };
        drop(guard);
        if let Err((req, _)) = r {
            if let AdminKind::Async(cb) = req.kind {
                cb(Status::ABORTED_SQ_DELETION, 0, req.buf.map(|b| b.0));
            }
        }
    }

    /// Reaps completions and runs their callbacks (outside the lock).
    /// Returns true when a keep alive is due (`keep_alive`: its period).
    /// Never waits: skips the poll if another thread holds the queue.
    pub(crate) fn poll(&self, keep_alive: Option<Duration>) -> bool {
        let Some(mut done) = self.batch.try_lock() else {
            return false;
        };
        let mut due = false;
        if let Some(mut g) = self.inner.try_lock() {
            if let Some(a) = g.as_mut() {
                a.qp.process(&mut done);
                if keep_alive.is_some_and(|p| a.last_keep_alive.elapsed() > p) {
                    a.last_keep_alive = Instant::now();
                    due = true;
                }
                stash_sync(a, &mut done);
            }
        }
        deliver(&mut done);
        due
    }

    /// Runs a command and waits for it, up to `timeout`; `check` runs now
    /// and then meanwhile (removal, fatal status) and ends the wait with
    /// its error. Blocks: a helper thread, or set-up that is quick.
    pub(crate) fn exec(
        &self,
        sqe: Sqe,
        buf: Option<(DmaMem, usize)>,
        timeout: Duration,
        check: &dyn Fn() -> Result<()>,
    ) -> Result<(Cqe, Option<DmaMem>)> {
        let (data, dir) = data_of(&sqe, &buf);
        let id = {
            let mut g = self.inner.lock();
            let a = g.as_mut().ok_or(Error::Busy)?;
            let id = a.next_sync;
            a.next_sync += 1;
            let req = AdminReq {
                buf,
                kind: AdminKind::Sync(id),
            };
            a.qp.submit(sqe, data, dir, req).map_err(|(_, e)| match e {
                SubmitError::Busy | SubmitError::Disconnected => Error::Busy,
                SubmitError::Invalid | SubmitError::Long => Error::InvalidArg("admin data".into()),
            })?;
            a.qp.flush();
            id
        };
        let start = Instant::now();
        let mut spins = 0u32;
        let mut done = Vec::new();
        loop {
            let mut mine = None;
            if let Some(a) = self.inner.lock().as_mut() {
                a.qp.process(&mut done);
                stash_sync(a, &mut done);
                if let Some(p) = a.done_sync.iter().position(|d| d.0 == id) {
                    mine = Some(a.done_sync.swap_remove(p));
                }
            } else {
                return Err(Error::Busy);
            }
            deliver(&mut done);
            if let Some((_, status, (dw0, dw1), buf)) = mine {
                let mut c = Cqe::new(0, status, dw0);
                c.set_status(status);
                c.dw1.set(dw1);
                return Ok((c, buf));
            }
            spins += 1;
            if spins.is_multiple_of(64) {
                check()?;
                if start.elapsed() > timeout {
                    return Err(Error::Timeout("an admin command"));
                }
            }
            std::thread::yield_now();
        }
    }
}

/// An admin command from outside the driver, made safe to send: the data
/// pointer comes from the driver's buffer or is cleared, the metadata
/// pointer is cleared, and commands that carry host addresses elsewhere
/// (or would undo what the driver set up) are refused with the status
/// they complete with.
pub(crate) fn vet_admin(mut sqe: Sqe, has_buf: bool) -> std::result::Result<Sqe, Status> {
    use bdevkit_nvme_spec::opcode::{
        AdminOpcode as A, ADMIN_VENDOR_SPECIFIC_START, FABRICS_OPCODE,
    };
    /// Set Features: Host Memory Buffer (its descriptor list address is
    /// in dwords 13 to 15).
    const FID_HOST_MEMORY_BUFFER: u32 = 0x0d;
    let op = sqe.opcode;
    let owned_by_driver = [
        A::DeleteIoSq,
        A::CreateIoSq,
        A::DeleteIoCq,
        A::CreateIoCq,
        A::DoorbellBufferConfig,
    ]
    .iter()
    .any(|a| *a as u8 == op);
    if owned_by_driver || op == FABRICS_OPCODE || op >= ADMIN_VENDOR_SPECIFIC_START {
        return Err(Status::INVALID_OPCODE);
    }
    if op == A::SetFeatures as u8 && sqe.cdw10.get() & 0xff == FID_HOST_MEMORY_BUFFER {
        return Err(Status::INVALID_FIELD);
    }
    sqe.mptr.set(0);
    if !has_buf {
        sqe.set_prps(0, 0);
    }
    Ok(sqe)
}
