//! One virtqueue served by a poller of one lightweight thread: the data
//! path. The poller takes the chains the guest made available, walks and
//! parses each (`chain`, `blk`), and submits one bdev I/O whose segments
//! are the guest's own buffers (zero copy); the completion writes the
//! status byte, puts the chain in the used ring and, once per poll,
//! signals the guest's call eventfd. Nothing here allocates per request:
//! completed `BdevIo`s are kept for the next request, the chain scratch
//! and the slot table are allocated when the queue starts.
//!
//! In interrupt mode the kick eventfd is in the reactor's epoll set: the
//! poller drains it when it goes idle and looks at the ring once more, so
//! a kick between its last look and the drain is not lost.
//!
//! Guest mistakes fail the request with a virtio status; a ring that
//! cannot be read or a chain that cannot be walked marks the queue broken
//! (it stops, and the frontend hears of it on the vring's error eventfd);
//! either way only this queue's guest is affected.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::{Read, Write};
use std::num::Wrapping;
use std::rc::Rc;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::{mpsc, Arc};

use bdevkit::bdev::{BdevChannel, BdevDesc, BdevIo, IoCompletion, IoStatus};
use bdevkit::clock;
use bdevkit::thread::{InterruptFd, IoChannel, Poller, PollerStatus, Thread};
use virtio_bindings::virtio_ring::VRING_AVAIL_F_NO_INTERRUPT;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress};

use crate::blk::{self, BlkInfo, Req, S_IOERR, S_OK};
use crate::chain::{Chain, WalkError};
use crate::memory::GuestMem;

/// Chains taken per poll at most (the rest wait for the next poll).
const BATCH: u16 = 64;
/// SPDK's coalescing statistics interval.
const STATS_INTERVAL_MS: u64 = 10;

/// Interrupt coalescing (`vhost_controller_set_coalescing`): SPDK's
/// model. With `delay_base_us` 0 every poll that completed something
/// signals the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coalescing {
    /// Base delay of an interrupt, µs.
    pub delay_base_us: u32,
    /// Requests per second above which interrupts are delayed.
    pub iops_threshold: u32,
}

/// What a queue starts with (built by the control thread).
#[derive(Debug)]
pub(crate) struct QueueStart {
    pub index: u16,
    pub size: u16,
    /// Guest physical addresses of the descriptor table and the rings.
    pub desc: u64,
    pub avail: u64,
    pub used: u64,
    /// Where the guest's available ring is to be read from.
    pub next_avail: u16,
    pub kick: File,
    pub call: Option<File>,
    pub err: Option<File>,
    pub mem: Arc<GuestMem>,
    pub info: Arc<BlkInfo>,
    pub bdev: Option<Arc<BdevDesc>>,
    pub coalescing: Coalescing,
    /// Requests in flight, for `vhost_get_controllers` (plain stores).
    pub in_flight: Arc<AtomicU32>,
    /// Sleep on the kick eventfd (interrupt mode).
    pub interrupt: bool,
}

/// The queues on one thread (an `IoDevice` channel per controller): how
/// control messages find a queue.
#[derive(Default)]
pub(crate) struct Queues {
    workers: RefCell<Vec<Rc<Worker>>>,
}

impl Queues {
    fn find(&self, index: u16) -> Option<Rc<Worker>> {
        self.workers
            .borrow()
            .iter()
            .find(|w| w.index == index)
            .cloned()
    }

    /// Starts a queue on this thread.
    pub(crate) fn start(this: &IoChannel<Queues>, s: QueueStart) -> Result<(), String> {
        let t = Thread::try_current().map_err(|e| e.to_string())?;
        let w = Worker::new(s)?;
        let intr = if w.interrupt {
            use std::os::fd::AsRawFd;
            Some(
                t.register_interrupt_fd(w.kick.as_raw_fd())
                    .map_err(|e| e.to_string())?,
            )
        } else {
            None
        };
        *w.intr.borrow_mut() = intr;
        let (w2, keep) = (Rc::clone(&w), this.clone());
        let poller = t.register_poller(format!("vhost_vq{}", w.index), 0, move |_| {
            let busy = w2.poll(&keep);
            PollerStatus::from(busy)
        });
        *w.poller.borrow_mut() = Some(poller);
        this.workers.borrow_mut().push(w);
        Ok(())
    }

    /// Stops queue `index` once its requests are done; `reply` gets the
    /// next available index (the ring's base for a restart).
    pub(crate) fn stop(&self, index: u16, reply: mpsc::Sender<u16>) {
        match self.find(index) {
            Some(w) => *w.stop.borrow_mut() = Some(reply),
            None => drop(reply),
        }
    }

    /// The bdev is going away: every queue here fails new requests and
    /// drops its bdev channel once its requests are done.
    pub(crate) fn bdev_gone(&self) {
        for w in self.workers.borrow().iter() {
            w.bdev_gone.set(true);
            if w.in_flight.get() == 0 {
                w.release_bdev();
            }
        }
    }

    /// New coalescing parameters for every queue here.
    pub(crate) fn set_coalescing(&self, c: Coalescing) {
        for w in self.workers.borrow().iter() {
            *w.coalesce.borrow_mut() = Coalesce::new(c);
        }
    }
}

/// A request in flight, by its chain's head index.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    status_gpa: u64,
    used_len: u32,
    busy: bool,
}

/// SPDK's coalescing state (in ticks).
#[derive(Debug, Default)]
struct Coalesce {
    delay_base: u64,
    threshold: u64,
    req_cnt: u64,
    next_check: u64,
    irq_delay: u64,
    next_event: u64,
}

impl Coalesce {
    fn new(c: Coalescing) -> Coalesce {
        Coalesce {
            delay_base: clock::us_to_ticks(u64::from(c.delay_base_us)),
            threshold: u64::from(c.iops_threshold) * STATS_INTERVAL_MS / 1000,
            ..Coalesce::default()
        }
    }

    /// Whether to signal now (false: later; the poller stays busy).
    fn may_signal(&mut self) -> bool {
        if self.delay_base == 0 || self.threshold == 0 {
            return true;
        }
        let now = clock::ticks();
        if now >= self.next_check {
            self.next_check = now + clock::us_to_ticks(STATS_INTERVAL_MS * 1000);
            if self.req_cnt > self.threshold {
                self.irq_delay = self.delay_base * (self.req_cnt - self.threshold) / self.threshold;
                self.req_cnt = 0;
                self.next_event = now;
            }
        }
        if now < self.next_event {
            return false;
        }
        self.next_event = now + self.irq_delay;
        true
    }
}

/// One started virtqueue.
pub(crate) struct Worker {
    index: u16,
    q: RefCell<Queue>,
    mem: Arc<GuestMem>,
    info: Arc<BlkInfo>,
    kick: File,
    call: Option<File>,
    err: Option<File>,
    interrupt: bool,
    ch: RefCell<Option<BdevChannel>>,
    slots: RefCell<Vec<Slot>>,
    /// Completed requests' `BdevIo`s, reused.
    free: RefCell<Vec<BdevIo>>,
    chain: RefCell<Box<Chain>>,
    in_flight: Cell<u32>,
    shared_in_flight: Arc<AtomicU32>,
    signal_due: Cell<bool>,
    broken: Cell<bool>,
    bdev_gone: Cell<bool>,
    waiting_for_io: Cell<bool>,
    stop: RefCell<Option<mpsc::Sender<u16>>>,
    coalesce: RefCell<Coalesce>,
    /// This worker as the completion handler of its I/Os (a cycle, broken
    /// when the queue stops).
    handler: RefCell<Option<Rc<dyn IoCompletion>>>,
    poller: RefCell<Option<Poller>>,
    intr: RefCell<Option<InterruptFd>>,
}

impl Worker {
    fn new(s: QueueStart) -> Result<Rc<Worker>, String> {
        let mut q = Queue::new(s.size).map_err(|e| format!("queue size {}: {e}", s.size))?;
        q.try_set_size(s.size).map_err(|e| e.to_string())?;
        q.try_set_desc_table_address(GuestAddress(s.desc))
            .map_err(|e| e.to_string())?;
        q.try_set_avail_ring_address(GuestAddress(s.avail))
            .map_err(|e| e.to_string())?;
        q.try_set_used_ring_address(GuestAddress(s.used))
            .map_err(|e| e.to_string())?;
        q.set_next_avail(s.next_avail);
        q.set_next_used(s.next_avail);
        q.set_ready(true);
        if !q.is_valid(s.mem.mem()) {
            return Err("rings are not in guest memory".into());
        }
        rustix::io::ioctl_fionbio(&s.kick, true).map_err(|e| e.to_string())?;
        let ch = match &s.bdev {
            Some(d) if !s.info.removed.load(Ordering::Acquire) => {
                Some(d.get_io_channel().map_err(|e| e.to_string())?)
            }
            _ => None,
        };
        let w = Rc::new(Worker {
            index: s.index,
            q: RefCell::new(q),
            mem: s.mem,
            info: s.info,
            kick: s.kick,
            call: s.call,
            err: s.err,
            interrupt: s.interrupt,
            ch: RefCell::new(ch),
            slots: RefCell::new(vec![Slot::default(); usize::from(s.size)]),
            free: RefCell::new(Vec::with_capacity(usize::from(s.size))),
            chain: RefCell::new(Box::default()),
            in_flight: Cell::new(0),
            shared_in_flight: s.in_flight,
            signal_due: Cell::new(false),
            broken: Cell::new(false),
            bdev_gone: Cell::new(false),
            waiting_for_io: Cell::new(false),
            stop: RefCell::new(None),
            coalesce: RefCell::new(Coalesce::new(s.coalescing)),
            handler: RefCell::new(None),
            poller: RefCell::new(None),
            intr: RefCell::new(None),
        });
        let h: Rc<dyn IoCompletion> = Rc::clone(&w) as Rc<dyn IoCompletion>;
        *w.handler.borrow_mut() = Some(h);
        Ok(w)
    }

    fn serving(&self) -> bool {
        !self.broken.get() && self.stop.borrow().is_none()
    }

    /// One poll: take requests, signal, finish a stop.
    fn poll(self: &Rc<Self>, queues: &IoChannel<Queues>) -> bool {
        let mut busy = false;
        if self.serving() {
            busy |= self.take_requests();
        }
        if self.signal_due.get() {
            busy |= self.signal();
        }
        if self.bdev_gone.get() && self.in_flight.get() == 0 && self.ch.borrow().is_some() {
            // The bdev is going: its channel goes once nothing is in
            // flight (here, not inside the channel's own completion).
            self.release_bdev();
        }
        if self.stop.borrow().is_some() && self.in_flight.get() == 0 {
            self.finish_stop(queues);
            return true;
        }
        if !busy && self.interrupt {
            // Going idle: consume the kicks, then look once more.
            let mut buf = [0u8; 8];
            while matches!((&self.kick).read(&mut buf), Ok(8)) {}
            if self.serving() && self.has_requests() {
                busy |= self.take_requests();
            }
        }
        busy
    }

    fn has_requests(&self) -> bool {
        let q = self.q.borrow();
        q.avail_idx(self.mem.mem(), Ordering::Acquire)
            .is_ok_and(|i| i.0 != q.next_avail())
    }

    /// Takes up to [`BATCH`] chains from the available ring.
    fn take_requests(self: &Rc<Self>) -> bool {
        let mem = self.mem.mem();
        let pending = {
            let q = self.q.borrow();
            let Ok(avail) = q.avail_idx(mem, Ordering::Acquire) else {
                drop(q);
                self.mark_broken("available ring outside guest memory");
                return false;
            };
            let n = (avail - Wrapping(q.next_avail())).0;
            if n > q.size() {
                drop(q);
                self.mark_broken("available index ran past the queue");
                return false;
            }
            n
        };
        let mut done = 0;
        while done < pending.min(BATCH) && self.serving() {
            let io = if self.ch.borrow().is_some() && !self.bdev_gone.get() {
                match self.take_io() {
                    Some(io) => Some(io),
                    None => {
                        self.wait_for_io();
                        break;
                    }
                }
            } else {
                None
            };
            let head = {
                let mut q = self.q.borrow_mut();
                q.pop_descriptor_chain(mem).map(|c| c.head_index())
            };
            let Some(head) = head else {
                self.mark_broken("available ring outside guest memory");
                break;
            };
            self.serve(head, io);
            done += 1;
        }
        done > 0
    }

    fn take_io(&self) -> Option<BdevIo> {
        if let Some(io) = self.free.borrow_mut().pop() {
            return Some(io);
        }
        self.ch.borrow().as_ref().and_then(BdevChannel::alloc_io)
    }

    /// No `BdevIo` to be had: poll again once one is freed.
    fn wait_for_io(self: &Rc<Self>) {
        if self.waiting_for_io.replace(true) {
            return;
        }
        let me = Rc::clone(self);
        if let Some(ch) = self.ch.borrow().as_ref() {
            ch.queue_io_wait(move || me.waiting_for_io.set(false));
        }
    }

    /// Serves the chain at `head` with `io` (none: fail it).
    fn serve(&self, head: u16, io: Option<BdevIo>) {
        let mem = self.mem.mem();
        let (table, size) = {
            let q = self.q.borrow();
            (q.desc_table(), q.size())
        };
        let mut chain = self.chain.borrow_mut();
        let parsed = match chain.walk(mem, table, size, head) {
            Err(WalkError::Broken(why)) => {
                self.recycle(io);
                return self.mark_broken(why);
            }
            Err(WalkError::TooLong(last)) => {
                self.recycle(io);
                return match blk::status_of(mem, &last) {
                    Some(gpa) => self.finish_now(head, gpa, S_IOERR, 1),
                    None => self.used(head, 0),
                };
            }
            Ok(()) => blk::parse(&mut chain, mem, &self.info),
        };
        let Some(p) = parsed else {
            // Nowhere to put a status: hand the chain back untouched.
            self.recycle(io);
            return self.used(head, 0);
        };
        if self.slots.borrow()[usize::from(head)].busy {
            self.recycle(io);
            return self.mark_broken("chain made available twice");
        }
        let req = match p.req {
            Ok(r) => r,
            Err(status) => {
                self.recycle(io);
                return self.finish_now(head, p.status_gpa, status, 1);
            }
        };
        if let Req::GetId { data } = req {
            self.recycle(io);
            let descs = &chain.descs()[data.0..data.1];
            return match blk::write_id(mem, descs, &self.info.id) {
                Some(n) => self.finish_now(head, p.status_gpa, S_OK, n + 1),
                None => self.finish_now(head, p.status_gpa, S_IOERR, 1),
            };
        }
        let Some(mut io) = io else {
            return self.finish_now(head, p.status_gpa, S_IOERR, 1);
        };
        let mut used_len = 1;
        let ext = self.mem.ext();
        let built = match req {
            Req::Read {
                offset_blocks,
                num_blocks,
                data,
                bytes,
            } => {
                io.read_ext(offset_blocks, num_blocks, ext);
                used_len = bytes + 1;
                self.push_segments(&mut io, &chain.descs()[data.0..data.1])
            }
            Req::Write {
                offset_blocks,
                num_blocks,
                data,
            } => {
                io.write_ext(offset_blocks, num_blocks, ext);
                self.push_segments(&mut io, &chain.descs()[data.0..data.1])
            }
            Req::Flush => {
                io.flush(0, self.info.num_blocks.load(Ordering::Acquire));
                true
            }
            Req::Unmap {
                offset_blocks,
                num_blocks,
            } => {
                io.unmap(offset_blocks, num_blocks);
                true
            }
            Req::WriteZeroes {
                offset_blocks,
                num_blocks,
            } => {
                io.write_zeroes(offset_blocks, num_blocks);
                true
            }
            Req::GetId { .. } => false,
        };
        drop(chain);
        if !built {
            self.recycle(Some(io));
            return self.finish_now(head, p.status_gpa, S_IOERR, 1);
        }
        io.set_tag(u64::from(head));
        if let Some(h) = self.handler.borrow().as_ref() {
            io.on_done(Rc::clone(h));
        }
        self.slots.borrow_mut()[usize::from(head)] = Slot {
            status_gpa: p.status_gpa,
            used_len,
            busy: true,
        };
        self.count_in_flight(1);
        let rejected = match self.ch.borrow().as_ref() {
            Some(ch) => ch.submit(io).err().map(|e| e.io),
            None => Some(io),
        };
        if let Some(io) = rejected {
            self.slots.borrow_mut()[usize::from(head)].busy = false;
            self.count_in_flight(-1);
            self.recycle(Some(io));
            self.finish_now(head, p.status_gpa, S_IOERR, 1);
        }
    }

    /// The host pieces of `descs` as `io`'s segments; false when one is
    /// not guest memory.
    fn push_segments(&self, io: &mut BdevIo, descs: &[crate::chain::Desc]) -> bool {
        descs.iter().all(|d| {
            self.mem.to_host(d.gpa, d.len, |hva, len| {
                io.push_ext_segment(hva, len).is_ok()
            })
        })
    }

    fn count_in_flight(&self, d: i32) {
        let n = self.in_flight.get().saturating_add_signed(d);
        self.in_flight.set(n);
        self.shared_in_flight.store(n, Ordering::Relaxed);
    }

    fn recycle(&self, io: Option<BdevIo>) {
        if let Some(io) = io {
            let mut f = self.free.borrow_mut();
            if f.len() < f.capacity() {
                f.push(io);
            }
        }
    }

    /// Answers `head` with `status` now.
    fn finish_now(&self, head: u16, status_gpa: u64, status: u8, used_len: u32) {
        // The status byte was checked to be guest memory; a failure here
        // (a table changed under us) leaves the guest's byte as it was.
        let _ = self.mem.mem().write_obj(status, GuestAddress(status_gpa));
        self.used(head, used_len);
    }

    /// Puts `head` in the used ring; the guest is signalled at the end of
    /// the poll.
    fn used(&self, head: u16, len: u32) {
        let r = self.q.borrow_mut().add_used(self.mem.mem(), head, len);
        if r.is_err() {
            return self.mark_broken("used ring outside guest memory");
        }
        self.coalesce.borrow_mut().req_cnt += 1;
        self.signal_due.set(true);
    }

    /// Signals the guest unless it asked not to be (`NO_INTERRUPT`) or
    /// coalescing holds it back; true while a signal is still due.
    fn signal(&self) -> bool {
        let avail = GuestAddress(self.q.borrow().avail_ring());
        // The used index (stored by add_used) before the flags' load.
        fence(Ordering::SeqCst);
        let flags: u16 = self.mem.mem().read_obj(avail).unwrap_or(0);
        if u32::from(u16::from_le(flags)) & VRING_AVAIL_F_NO_INTERRUPT != 0 {
            self.signal_due.set(false);
            return false;
        }
        if !self.coalesce.borrow_mut().may_signal() {
            return true;
        }
        self.signal_due.set(false);
        if let Some(call) = &self.call {
            let _ = (&*call).write(&1u64.to_ne_bytes());
        }
        false
    }

    /// The queue cannot go on (virtio: the device needs a reset): stop
    /// taking requests and tell the frontend.
    fn mark_broken(&self, why: &'static str) {
        if self.broken.replace(true) {
            return;
        }
        tracing::warn!(queue = self.index, why, "virtqueue broken by the guest");
        if let Some(err) = &self.err {
            let _ = (&*err).write(&1u64.to_ne_bytes());
        }
    }

    fn release_bdev(&self) {
        self.free.borrow_mut().clear();
        self.ch.borrow_mut().take();
    }

    /// Stopped with nothing in flight: answer the control thread, let go
    /// of everything.
    fn finish_stop(self: &Rc<Self>, queues: &IoChannel<Queues>) {
        let next = self.q.borrow().next_avail();
        if let Some(tx) = self.stop.borrow_mut().take() {
            let _ = tx.send(next);
        }
        if let Some(p) = self.poller.borrow_mut().take() {
            p.unregister();
        }
        self.intr.borrow_mut().take();
        self.release_bdev();
        self.handler.borrow_mut().take();
        queues.workers.borrow_mut().retain(|w| !Rc::ptr_eq(w, self));
    }
}

impl IoCompletion for Worker {
    fn io_done(&self, io: BdevIo) {
        let head = u16::try_from(io.tag()).unwrap_or(u16::MAX);
        let slot = self
            .slots
            .borrow_mut()
            .get_mut(usize::from(head))
            .map(std::mem::take);
        let status = if io.status() == IoStatus::Success {
            S_OK
        } else {
            S_IOERR
        };
        self.recycle(Some(io));
        self.count_in_flight(-1);
        if let Some(s) = slot.filter(|s| s.busy) {
            let used_len = if status == S_OK { s.used_len } else { 1 };
            self.finish_now(head, s.status_gpa, status, used_len);
        }
    }
}
