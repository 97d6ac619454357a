//! [`AnyTransport`]: every transport of the driver behind one type, so
//! that a user of the driver (the bdev module) keeps one controller type
//! for all of them. Each call is one `match`; the queue pair code stays
//! monomorphic.
//!
//! The transports are one list, in `with_transports!`: a line per
//! transport (its variant, transport type, queue type and accessor).
//! The enums, the accessors and every forwarding method are generated
//! from that list, so a new transport (NVMe/RDMA next) is its own module
//! implementing [`Transport`] and [`QueueTransport`], and one line there.

use bdevkit_nvme_spec::identify::{IdentifyController, SglSupport};
use bdevkit_nvme_spec::{Cqe, Sqe};

use crate::error::Result;
use crate::pcie::{PcieQueue, PcieTransport};
use crate::sys::DmaMem;
use crate::tcp::{TcpQueue, TcpTransport};
use crate::transport::{
    AdminExec, Data, Dir, QueueTransport, Release, Request, SubmitError, Transport,
};

/// The driver's transports, one line each: `Variant(Transport, Queue)
/// accessor`, with the variant's doc. Calls `$m!` with the list in
/// brackets, then whatever follows `$m,` (the list is written once; the
/// macros below expand over it).
macro_rules! with_transports {
    ($m:ident, $($rest:tt)*) => {
        $m! {
            [
                /// NVMe over PCIe (VFIO or the emulated controller).
                Pcie(PcieTransport, PcieQueue) pcie,
                /// NVMe over TCP.
                Tcp(TcpTransport, TcpQueue) tcp,
            ]
            $($rest)*
        }
    };
}

/// The two enums and the accessors, from the list.
macro_rules! define_any {
    ([$( $(#[$doc:meta])* $v:ident($t:ty, $q:ty) $get:ident, )+]) => {
        /// A controller's transport, any of the driver's.
        #[derive(Debug)]
        #[expect(
            clippy::large_enum_variant,
            reason = "one per controller, never moved on the I/O path"
        )]
        pub enum AnyTransport {
            $( $(#[$doc])* $v($t), )+
        }

        /// The queue of an [`AnyTransport`] (of the same variant).
        #[derive(Debug)]
        pub enum AnyQueue {
            $( $(#[$doc])* $v($q), )+
        }

        impl AnyTransport {
            $(
                #[doc = concat!("The `", stringify!($v), "` transport, if it is one.")]
                #[must_use]
                pub fn $get(&self) -> Option<&$t> {
                    if let AnyTransport::$v(t) = self {
                        Some(t)
                    } else {
                        None
                    }
                }
            )+
        }
    };
}

with_transports!(define_any,);

/// One `match` over the list: `$body` with `$x` bound to the transport
/// (`$e` = `AnyTransport`) or queue (`$e` = `AnyQueue`) inside `$s`.
macro_rules! each_arm {
    ([$( $(#[$doc:meta])* $v:ident($t:ty, $q:ty) $get:ident, )+]
     $e:ident, $s:expr, $x:ident => $body:expr) => {
        match $s {
            $( $e::$v($x) => $body, )+
        }
    };
}

/// Calls `$body` on whichever transport or queue `$s` is.
macro_rules! each {
    ($e:ident, $s:expr, $x:ident => $body:expr) => {
        with_transports!(each_arm, $e, $s, $x => $body)
    };
}

/// A queue made by whichever transport `$s` is (`$body` gives a
/// `Result` of that transport's queue), as an [`AnyQueue`].
macro_rules! queue_arm {
    ([$( $(#[$doc:meta])* $v:ident($t:ty, $q:ty) $get:ident, )+]
     $s:expr, $x:ident => $body:expr) => {
        match $s {
            $( AnyTransport::$v($x) => $body.map(AnyQueue::$v), )+
        }
    };
}

/// A transport and a queue of the same variant (`$body` with both
/// bound), or an error for a queue of another transport.
macro_rules! pair_arm {
    ([$( $(#[$doc:meta])* $v:ident($t:ty, $q:ty) $get:ident, )+]
     $s:expr, $qs:expr, $x:ident, $y:ident => $body:expr) => {
        match ($s, $qs) {
            $( (AnyTransport::$v($x), AnyQueue::$v($y)) => $body, )+
            _ => Err(crate::Error::InvalidArg("queue of another transport".into())),
        }
    };
}

impl QueueTransport for AnyQueue {
    fn qid(&self) -> u16 {
        each!(AnyQueue, self, q => q.qid())
    }
    fn depth(&self) -> u16 {
        each!(AnyQueue, self, q => q.depth())
    }
    #[inline(always)]
    fn submit(
        &mut self,
        slot: u16,
        sqe: Sqe,
        req: &dyn Request,
        data: Data,
        dir: Dir,
    ) -> std::result::Result<Release, SubmitError> {
        // A queue whose submission is not inlined takes a fresh copy of
        // the command in its own inlined `submit` (`TcpQueue`), so that
        // the caller's stays in registers on the PCIe arm.
        each!(AnyQueue, self, q => q.submit(slot, sqe, req, data, dir))
    }
    #[inline(always)]
    fn submit_short(
        &mut self,
        slot: u16,
        sqe: Sqe,
        req: &dyn Request,
        data: Data,
        dir: Dir,
    ) -> std::result::Result<(), SubmitError> {
        // (A fresh copy in the arms that need one, as in `submit`.)
        each!(AnyQueue, self, q => q.submit_short(slot, sqe, req, data, dir))
    }
    fn short_release(&self) -> Release {
        each!(AnyQueue, self, q => q.short_release())
    }
    fn submit_with_page(
        &mut self,
        slot: u16,
        sqe: &mut Sqe,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> std::result::Result<(), SubmitError> {
        each!(AnyQueue, self, q => q.submit_with_page(slot, sqe, len, fill))
    }
    #[inline]
    fn flush(&mut self) {
        each!(AnyQueue, self, q => q.flush());
    }
    #[inline]
    fn reap_start(&mut self) {
        each!(AnyQueue, self, q => q.reap_start());
    }
    #[inline]
    fn next_cqe(&mut self) -> Option<Cqe> {
        each!(AnyQueue, self, q => q.next_cqe())
    }
    #[inline]
    fn reap_end(&mut self) -> bool {
        each!(AnyQueue, self, q => q.reap_end())
    }
    #[inline]
    fn release(&mut self, slot: u16, req: Option<&mut dyn Request>) {
        each!(AnyQueue, self, q => q.release(slot, req));
    }
    fn clear(&mut self) {
        each!(AnyQueue, self, q => q.clear());
    }
    fn dma(&self) -> bool {
        each!(AnyQueue, self, q => q.dma())
    }
    fn is_alive(&self) -> bool {
        each!(AnyQueue, self, q => q.is_alive())
    }
    fn is_connecting(&self) -> bool {
        each!(AnyQueue, self, q => q.is_connecting())
    }
    fn wake_fd(&self) -> Option<(std::os::fd::RawFd, u64)> {
        each!(AnyQueue, self, q => q.wake_fd())
    }
    fn needs_poll(&self) -> bool {
        each!(AnyQueue, self, q => q.needs_poll())
    }
}

impl Transport for AnyTransport {
    type Queue = AnyQueue;

    fn trtype(&self) -> &'static str {
        each!(AnyTransport, self, t => t.trtype())
    }
    fn traddr(&self) -> &str {
        each!(AnyTransport, self, t => t.traddr())
    }
    fn is_fabrics(&self) -> bool {
        each!(AnyTransport, self, t => t.is_fabrics())
    }
    fn read_reg32(&self, off: u32) -> Result<u32> {
        each!(AnyTransport, self, t => t.read_reg32(off))
    }
    fn read_reg64(&self, off: u32) -> Result<u64> {
        each!(AnyTransport, self, t => t.read_reg64(off))
    }
    fn write_reg32(&self, off: u32, v: u32) -> Result<()> {
        each!(AnyTransport, self, t => t.write_reg32(off, v))
    }
    fn write_reg64(&self, off: u32, v: u64) -> Result<()> {
        each!(AnyTransport, self, t => t.write_reg64(off, v))
    }
    fn admin_queue(&self, entries: u16) -> Result<AnyQueue> {
        with_transports!(queue_arm, self, t => t.admin_queue(entries))
    }
    fn connect_io_queue(
        &self,
        qid: u16,
        entries: u16,
        admin: &mut dyn AdminExec,
    ) -> Result<AnyQueue> {
        with_transports!(queue_arm, self, t => t.connect_io_queue(qid, entries, admin))
    }
    fn reconnect_io_queue(&self, q: &mut AnyQueue, admin: &mut dyn AdminExec) -> Result<()> {
        with_transports!(pair_arm, self, q, t, q => t.reconnect_io_queue(q, admin))
    }
    fn disconnect_io_queue(&self, q: &mut AnyQueue, admin: &mut dyn AdminExec) -> Result<()> {
        with_transports!(pair_arm, self, q, t, q => t.disconnect_io_queue(q, admin))
    }
    fn alloc_buffer(&self, len: usize) -> Result<DmaMem> {
        each!(AnyTransport, self, t => t.alloc_buffer(len))
    }
    fn needs_keep_alive(&self) -> bool {
        each!(AnyTransport, self, t => t.needs_keep_alive())
    }
    fn max_data_bytes(&self) -> usize {
        each!(AnyTransport, self, t => t.max_data_bytes())
    }
    fn set_sgl_support(&self, sgl: SglSupport) {
        each!(AnyTransport, self, t => t.set_sgl_support(sgl));
    }
    fn set_controller_data(&self, id: &IdentifyController) {
        each!(AnyTransport, self, t => t.set_controller_data(id));
    }
    fn vendor_id(&self) -> u16 {
        each!(AnyTransport, self, t => t.vendor_id())
    }
    fn set_dma(&self, on: bool) {
        each!(AnyTransport, self, t => t.set_dma(on));
    }
    fn uses_dma(&self) -> bool {
        each!(AnyTransport, self, t => t.uses_dma())
    }
}
