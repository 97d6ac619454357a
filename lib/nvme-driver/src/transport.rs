//! The transport seam: what the controller and queue pair logic need from
//! a way of reaching a controller. PCIe ([`crate::pcie::PcieTransport`],
//! over VFIO or the emulated controller) is the first; NVMe/TCP plugs in
//! here too: registers become Property Get/Set, a queue becomes a
//! connection, data pointers become in-capsule data or R2T transfers.
//! Nothing above this file knows what a doorbell or a PRP is.
//! [`crate::tcp::TcpTransport`] is the second. A new transport (RDMA)
//! implements [`Transport`] and [`QueueTransport`] in a module of its own
//! and adds one line to the list in `any.rs`, which generates
//! [`crate::AnyTransport`] and [`crate::AnyQueue`] and their forwarding.

use std::fmt;
use std::os::fd::RawFd;

use bdevkit_nvme_spec::{Cqe, Sqe};

use crate::error::Result;

/// Which of a request's data sets a command moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Data {
    /// No data.
    None,
    /// The request's main segments.
    Main,
    /// The second set (the write half of compare-and-write).
    Aux,
}

/// Direction of a command's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Host to controller (write, compare).
    ToDevice,
    /// Controller to host (read).
    FromDevice,
}

/// A request's data, as the queue pair sees it: segments of process
/// memory that stay valid until the request completes. Implemented by the
/// user of the driver (the bdev adapter implements it for its I/O).
///
/// The addresses a request hands out are given to the controller, which
/// reads and writes them by DMA (PCIe), without the compiler knowing. So
/// the trait is `unsafe`: only an implementation that vouches for its
/// memory can be submitted, and safe code cannot hand the device memory
/// it does not own. Everything else a command could point the device at
/// is the driver's: it sets the data pointer itself (from the request's
/// segments, its own PRP pages or bounce buffers; zero for a command
/// without data), clears the metadata pointer, and refuses commands whose
/// other fields carry host addresses (see [`crate::Controller::submit_admin`]
/// and [`QueueTransport::submit`]).
///
/// # Safety
///
/// An implementor promises, for every value it submits to a queue pair:
///
/// * each segment `(addr, len)` of [`Request::segment`] and
///   [`Request::single_segment`] is memory of this process, valid for
///   `len` bytes, that stays allocated and is not reused from the moment
///   the request is submitted until the queue pair gives the request back
///   (its completion, [`crate::Qpair::fail_all`]) or drops it;
/// * for data the device writes ([`Dir::FromDevice`]), no Rust reference
///   to that memory is used in that time (the device writes it), and for
///   data the device reads, nothing writes it;
/// * the segments do not change while the request is in flight, and
///   [`Request::segment_count`] agrees with them.
///
/// Owning the memory is the simple way to keep the promise (the bdev
/// adapter's requests hold their `BdevIo`, whose buffers live as long as
/// it). A request that borrows its buffer cannot keep it: safe code cannot
/// implement the trait at all:
///
/// ```compile_fail,E0200
/// use bdevkit_nvme_driver::{Data, Request};
///
/// /// A buffer borrowed from the caller's stack.
/// struct Borrowed<'a>(&'a mut [u8]);
///
/// impl Request for Borrowed<'_> {
///     fn segment_count(&self, _d: Data) -> usize {
///         1
///     }
///     fn segment(&self, _d: Data, _i: usize) -> (usize, usize) {
///         (self.0.as_ptr() as usize, self.0.len())
///     }
///     fn for_each_segment(&self, _d: Data, f: &mut dyn FnMut(&[u8])) {
///         f(self.0)
///     }
///     fn for_each_segment_mut(&mut self, _d: Data, f: &mut dyn FnMut(&mut [u8])) -> bool {
///         f(self.0);
///         true
///     }
/// }
/// ```
pub unsafe trait Request {
    /// Number of segments of `data`.
    fn segment_count(&self, data: Data) -> usize;
    /// Segment `i` of `data`: address and length.
    fn segment(&self, data: Data, i: usize) -> (usize, usize);
    /// The one segment of `data` when it has exactly one (the common
    /// case, asked first on the submission path: one call instead of
    /// [`Request::segment_count`] and [`Request::segment`]).
    #[inline]
    fn single_segment(&self, data: Data) -> Option<(usize, usize)> {
        (self.segment_count(data) == 1).then(|| self.segment(data, 0))
    }
    /// Calls `f` with each segment of `data`, in order (for copying into a
    /// bounce buffer).
    fn for_each_segment(&self, data: Data, f: &mut dyn FnMut(&[u8]));
    /// Calls `f` with each segment of `data`, writable, in order (copying
    /// back from a bounce buffer); false when the data is not writable.
    fn for_each_segment_mut(&mut self, data: Data, f: &mut dyn FnMut(&mut [u8])) -> bool;
}

/// Why a submission did not happen; the request comes back with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    /// Every slot (or bounce buffer) is busy: try again after completions.
    Busy,
    /// The data cannot be described (misaligned, too large).
    Invalid,
    /// The queue is not connected (reset in progress, controller gone).
    Disconnected,
    /// Refused by [`QueueTransport::submit_short`]: the data needs more
    /// than the command itself can point at (PCIe: a PRP list, an SGL or
    /// a bounce buffer). Nothing was queued; `submit` takes it.
    Long,
}

/// Whether a submitted command's slot holds resources that
/// [`QueueTransport::release`] must free at its completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Nothing to free (PCIe: the data pointer points into the request's
    /// own memory).
    NotNeeded,
    /// A bounce buffer, a data buffer to copy back, or per-slot state.
    Needed,
}

/// One queue pair's transport side: moves commands to the controller and
/// completions back. Owned by one thread; no locks.
pub trait QueueTransport: Send + fmt::Debug {
    /// Queue id (0 = admin).
    fn qid(&self) -> u16;

    /// Commands the queue holds at once (slots 0..depth).
    fn depth(&self) -> u16;

    /// Queues `sqe` (its CID set) for slot `slot`, describing `data` of
    /// `req` moving in `dir`. Resources it needs per command (PRP list
    /// page, bounce buffer) belong to the slot until
    /// [`QueueTransport::release`]. Returns [`Release::Needed`] when the
    /// command holds such resources (or its data must be copied back), so
    /// that a completion of a command that holds none skips `release`.
    fn submit(
        &mut self,
        slot: u16,
        sqe: Sqe,
        req: &dyn Request,
        data: Data,
        dir: Dir,
    ) -> std::result::Result<Release, SubmitError>;

    /// [`QueueTransport::submit`] for data the command itself points at
    /// (PCIe: one segment within two pages, PRP1 and PRP2, in the
    /// request's own reachable memory); anything else is refused with
    /// [`SubmitError::Long`], nothing queued. The common I/O's path, with
    /// no slow branch inside it: the caller decides what to do with the
    /// rest. What a command it takes holds is the same for every one:
    /// [`QueueTransport::short_release`]. Default: `submit` (a transport
    /// with no such distinction).
    #[inline]
    fn submit_short(
        &mut self,
        slot: u16,
        sqe: Sqe,
        req: &dyn Request,
        data: Data,
        dir: Dir,
    ) -> std::result::Result<(), SubmitError> {
        self.submit(slot, sqe, req, data, dir).map(drop)
    }

    /// Whether the commands [`QueueTransport::submit_short`] takes hold
    /// resources to release (one answer per queue, asked once). Default:
    /// [`Release::Needed`].
    fn short_release(&self) -> Release {
        Release::Needed
    }

    /// Queues `sqe` with a data buffer the queue builds in the slot's own
    /// page (`fill` writes up to one page: Dataset Management ranges).
    fn submit_with_page(
        &mut self,
        slot: u16,
        sqe: &mut Sqe,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> std::result::Result<(), SubmitError>;

    /// Hands everything queued since the last call to the controller (one
    /// doorbell write on PCIe).
    fn flush(&mut self);

    /// Starts a pass over new completions (a fabrics queue takes what its
    /// connection has received). Then [`QueueTransport::next_cqe`] until
    /// it says none, or enough, then [`QueueTransport::reap_end`].
    fn reap_start(&mut self) {}

    /// The next new completion, if there is one.
    fn next_cqe(&mut self) -> Option<Cqe>;

    /// Ends a pass: gives the completion queue slots taken since
    /// [`QueueTransport::reap_start`] back to the controller (PCIe: one CQ
    /// head doorbell write). Returns whether the pass took any completion
    /// (so that its owner need not count them); the default says it may
    /// have.
    fn reap_end(&mut self) -> bool {
        true
    }

    /// The command in `slot` completed: copies bounced read data back into
    /// `req` and frees the slot's resources. Called for every command
    /// whose submission returned [`Release::Needed`] (calling it for
    /// others is harmless).
    fn release(&mut self, slot: u16, req: Option<&mut dyn Request>);

    /// Forgets every queued and in-flight command (the controller dropped
    /// them: disabled or gone) and starts empty.
    fn clear(&mut self);

    /// Whether the controller reads and writes the requests' memory by
    /// DMA (PCIe), so that a request may be handed back only once the
    /// controller stopped. `false` for a transport whose data the driver
    /// moves itself (fabrics: after [`QueueTransport::clear`] nothing
    /// touches a request). The default is the careful answer.
    fn dma(&self) -> bool {
        true
    }

    /// Whether the queue still reaches the controller (a fabrics
    /// connection can drop; the owner then resets the controller).
    fn is_alive(&self) -> bool {
        true
    }

    /// Whether the queue is still connecting (a fabrics queue connects
    /// from its own polls): commands submitted meanwhile wait in it, and
    /// fail with Transient Transport Error if the connect fails (then
    /// [`QueueTransport::is_alive`] turns false).
    fn is_connecting(&self) -> bool {
        false
    }

    /// A descriptor that turns readable when the queue has something to
    /// reap (a fabrics queue's socket), with an id that changes whenever
    /// the descriptor does (a reconnect makes a new socket, which may get
    /// the old number). `None` (the default, PCIe): nothing to wait on.
    /// A connect's deadline is not announced: an owner that sleeps on the
    /// descriptor wakes now and then while the queue
    /// [`is_connecting`](QueueTransport::is_connecting).
    fn wake_fd(&self) -> Option<(RawFd, u64)> {
        None
    }

    /// Whether the queue has work its [`QueueTransport::wake_fd`] turning
    /// readable would not announce: bytes the socket did not take yet,
    /// received bytes left for the next reap. An owner that sleeps on the descriptor keeps
    /// polling while this is true. Default: true (always poll).
    fn needs_poll(&self) -> bool {
        true
    }
}

/// Executes admin commands synchronously for a transport that needs them
/// to set up queues (PCIe: Create I/O CQ/SQ).
pub trait AdminExec {
    /// Runs `sqe`, returns its completion (the status may be an error).
    fn exec(&mut self, sqe: Sqe) -> Result<Cqe>;
}

/// A way of reaching one controller.
pub trait Transport: Send + Sync + fmt::Debug + 'static {
    /// The queue type.
    type Queue: QueueTransport;

    /// Transport name as SPDK spells it in a trid (`PCIe`, `TCP`).
    fn trtype(&self) -> &'static str;

    /// The controller's address (PCI BDF, IP).
    fn traddr(&self) -> &str;

    /// Reads a 32-bit controller register (property).
    fn read_reg32(&self, off: u32) -> Result<u32>;
    /// Reads a 64-bit controller register.
    fn read_reg64(&self, off: u32) -> Result<u64>;
    /// Writes a 32-bit controller register.
    fn write_reg32(&self, off: u32, v: u32) -> Result<()>;
    /// Writes a 64-bit controller register.
    fn write_reg64(&self, off: u32, v: u64) -> Result<()>;

    /// Builds the admin queue with `entries` slots and tells the
    /// controller where it is (PCIe: AQA/ASQ/ACQ); called with the
    /// controller disabled.
    fn admin_queue(&self, entries: u16) -> Result<Self::Queue>;

    /// Builds I/O queue `qid` with `entries` slots and connects it
    /// (PCIe: Create I/O CQ then SQ through `admin`).
    fn connect_io_queue(
        &self,
        qid: u16,
        entries: u16,
        admin: &mut dyn AdminExec,
    ) -> Result<Self::Queue>;

    /// Connects an existing queue again after a controller reset, starting
    /// empty.
    fn reconnect_io_queue(&self, q: &mut Self::Queue, admin: &mut dyn AdminExec) -> Result<()>;

    /// Disconnects an I/O queue (PCIe: Delete I/O SQ then CQ).
    fn disconnect_io_queue(&self, q: &mut Self::Queue, admin: &mut dyn AdminExec) -> Result<()>;

    /// A data buffer for admin commands the driver issues itself
    /// (Identify, log pages, passthrough data), reachable by the controller.
    fn alloc_buffer(&self, len: usize) -> Result<crate::sys::DmaMem>;

    /// Whether the controller needs Keep Alive commands (fabrics).
    fn needs_keep_alive(&self) -> bool;

    /// Largest data transfer one command's pointer can describe, in bytes
    /// (PCIe: one PRP list page).
    fn max_data_bytes(&self) -> usize;

    /// Tells the transport how the controller supports SGLs (from
    /// Identify Controller), before I/O queues are made.
    fn set_sgl_support(&self, sgl: bdevkit_nvme_spec::identify::SglSupport);

    /// Whether this is a fabrics transport: registers are properties
    /// (Property Get/Set on the admin queue, which the controller sends;
    /// the `*_reg*` methods are not used), the admin queue exists before
    /// any register is read, and a reset builds every queue again.
    fn is_fabrics(&self) -> bool {
        false
    }

    /// Tells the transport the controller's Identify data (fabrics: the
    /// in-capsule data size of I/O queues), before I/O queues are made.
    fn set_controller_data(&self, _id: &bdevkit_nvme_spec::identify::IdentifyController) {}

    /// PCI vendor id, when the transport knows one.
    fn vendor_id(&self) -> u16 {
        0
    }

    /// Allows or stops the controller's access to host memory (PCIe: Bus
    /// Master Enable). Stopped, it touches no host memory from the moment
    /// this returns. Transports that move data without DMA (fabrics) do
    /// nothing.
    fn set_dma(&self, _on: bool) {}

    /// Whether the controller reads and writes host memory by DMA (PCIe),
    /// rather than the driver moving the data (fabrics).
    fn uses_dma(&self) -> bool {
        false
    }
}
