//! [`AnyTransport`]: PCIe or TCP behind one type, so that a user of the
//! driver (the bdev module) keeps one controller type for both. Each call
//! is one `match`; the queue pair code stays monomorphic.

use bdevkit_nvme_spec::identify::{IdentifyController, SglSupport};
use bdevkit_nvme_spec::{Cqe, Sqe};

use crate::error::Result;
use crate::pcie::{PcieQueue, PcieTransport};
use crate::sys::DmaMem;
use crate::tcp::{TcpQueue, TcpTransport};
use crate::transport::{
    AdminExec, Data, Dir, QueueTransport, Release, Request, SubmitError, Transport,
};

/// A PCIe or a TCP transport.
#[derive(Debug)]
pub enum AnyTransport {
    /// NVMe over PCIe (VFIO or the emulated controller).
    Pcie(PcieTransport),
    /// NVMe over TCP.
    Tcp(TcpTransport),
}

/// The queue of an [`AnyTransport`].
#[derive(Debug)]
pub enum AnyQueue {
    /// A PCIe queue pair.
    Pcie(PcieQueue),
    /// An NVMe/TCP connection.
    Tcp(TcpQueue),
}

impl AnyTransport {
    /// The PCIe transport, if it is one.
    #[must_use]
    pub fn pcie(&self) -> Option<&PcieTransport> {
        match self {
            AnyTransport::Pcie(t) => Some(t),
            AnyTransport::Tcp(_) => None,
        }
    }

    /// The TCP transport, if it is one.
    #[must_use]
    pub fn tcp(&self) -> Option<&TcpTransport> {
        match self {
            AnyTransport::Tcp(t) => Some(t),
            AnyTransport::Pcie(_) => None,
        }
    }
}

/// Calls `$m` on whichever transport `$s` is.
macro_rules! each {
    ($s:expr, $t:ident => $e:expr) => {
        match $s {
            AnyTransport::Pcie($t) => $e,
            AnyTransport::Tcp($t) => $e,
        }
    };
}

/// Calls `$e` on whichever queue `$s` is.
macro_rules! each_q {
    ($s:expr, $q:ident => $e:expr) => {
        match $s {
            AnyQueue::Pcie($q) => $e,
            AnyQueue::Tcp($q) => $e,
        }
    };
}

impl QueueTransport for AnyQueue {
    fn qid(&self) -> u16 {
        each_q!(self, q => q.qid())
    }
    fn depth(&self) -> u16 {
        each_q!(self, q => q.depth())
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
        match self {
            AnyQueue::Pcie(q) => q.submit(slot, sqe, req, data, dir),
            // A fresh copy for the call: the caller's command then never
            // has its address taken, so that it stays in registers and
            // goes to a PCIe queue in one pass.
            AnyQueue::Tcp(q) => q.submit(slot, Sqe::from_dwords(sqe.to_dwords()), req, data, dir),
        }
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
        match self {
            AnyQueue::Pcie(q) => q.submit_short(slot, sqe, req, data, dir),
            // (A fresh copy, as in `submit`.)
            AnyQueue::Tcp(q) => q
                .submit(slot, Sqe::from_dwords(sqe.to_dwords()), req, data, dir)
                .map(drop),
        }
    }
    fn short_release(&self) -> Release {
        each_q!(self, q => q.short_release())
    }
    fn submit_with_page(
        &mut self,
        slot: u16,
        sqe: &mut Sqe,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> std::result::Result<(), SubmitError> {
        each_q!(self, q => q.submit_with_page(slot, sqe, len, fill))
    }
    #[inline]
    fn flush(&mut self) {
        each_q!(self, q => q.flush());
    }
    #[inline]
    fn reap_start(&mut self) {
        each_q!(self, q => q.reap_start());
    }
    #[inline]
    fn next_cqe(&mut self) -> Option<Cqe> {
        each_q!(self, q => q.next_cqe())
    }
    #[inline]
    fn reap_end(&mut self) -> bool {
        each_q!(self, q => q.reap_end())
    }
    #[inline]
    fn release(&mut self, slot: u16, req: Option<&mut dyn Request>) {
        each_q!(self, q => q.release(slot, req));
    }
    fn clear(&mut self) {
        each_q!(self, q => q.clear());
    }
    fn dma(&self) -> bool {
        each_q!(self, q => q.dma())
    }
    fn is_alive(&self) -> bool {
        each_q!(self, q => q.is_alive())
    }

    fn is_connecting(&self) -> bool {
        each_q!(self, q => q.is_connecting())
    }

    fn wake_fd(&self) -> Option<(std::os::fd::RawFd, u64)> {
        each_q!(self, q => q.wake_fd())
    }

    fn needs_poll(&self) -> bool {
        each_q!(self, q => q.needs_poll())
    }
}

impl Transport for AnyTransport {
    type Queue = AnyQueue;

    fn trtype(&self) -> &'static str {
        each!(self, t => t.trtype())
    }
    fn traddr(&self) -> &str {
        each!(self, t => t.traddr())
    }
    fn is_fabrics(&self) -> bool {
        each!(self, t => t.is_fabrics())
    }
    fn read_reg32(&self, off: u32) -> Result<u32> {
        each!(self, t => t.read_reg32(off))
    }
    fn read_reg64(&self, off: u32) -> Result<u64> {
        each!(self, t => t.read_reg64(off))
    }
    fn write_reg32(&self, off: u32, v: u32) -> Result<()> {
        each!(self, t => t.write_reg32(off, v))
    }
    fn write_reg64(&self, off: u32, v: u64) -> Result<()> {
        each!(self, t => t.write_reg64(off, v))
    }
    fn admin_queue(&self, entries: u16) -> Result<AnyQueue> {
        match self {
            AnyTransport::Pcie(t) => t.admin_queue(entries).map(AnyQueue::Pcie),
            AnyTransport::Tcp(t) => t.admin_queue(entries).map(AnyQueue::Tcp),
        }
    }
    fn connect_io_queue(
        &self,
        qid: u16,
        entries: u16,
        admin: &mut dyn AdminExec,
    ) -> Result<AnyQueue> {
        match self {
            AnyTransport::Pcie(t) => t.connect_io_queue(qid, entries, admin).map(AnyQueue::Pcie),
            AnyTransport::Tcp(t) => t.connect_io_queue(qid, entries, admin).map(AnyQueue::Tcp),
        }
    }
    fn reconnect_io_queue(&self, q: &mut AnyQueue, admin: &mut dyn AdminExec) -> Result<()> {
        match (self, q) {
            (AnyTransport::Pcie(t), AnyQueue::Pcie(q)) => t.reconnect_io_queue(q, admin),
            (AnyTransport::Tcp(t), AnyQueue::Tcp(q)) => t.reconnect_io_queue(q, admin),
            _ => Err(crate::Error::InvalidArg(
                "queue of another transport".into(),
            )),
        }
    }
    fn disconnect_io_queue(&self, q: &mut AnyQueue, admin: &mut dyn AdminExec) -> Result<()> {
        match (self, q) {
            (AnyTransport::Pcie(t), AnyQueue::Pcie(q)) => t.disconnect_io_queue(q, admin),
            (AnyTransport::Tcp(t), AnyQueue::Tcp(q)) => t.disconnect_io_queue(q, admin),
            _ => Err(crate::Error::InvalidArg(
                "queue of another transport".into(),
            )),
        }
    }
    fn alloc_buffer(&self, len: usize) -> Result<DmaMem> {
        each!(self, t => t.alloc_buffer(len))
    }
    fn needs_keep_alive(&self) -> bool {
        each!(self, t => t.needs_keep_alive())
    }
    fn max_data_bytes(&self) -> usize {
        each!(self, t => t.max_data_bytes())
    }
    fn set_sgl_support(&self, sgl: SglSupport) {
        each!(self, t => t.set_sgl_support(sgl));
    }
    fn set_controller_data(&self, id: &IdentifyController) {
        each!(self, t => t.set_controller_data(id));
    }
    fn vendor_id(&self) -> u16 {
        each!(self, t => t.vendor_id())
    }
    fn set_dma(&self, on: bool) {
        each!(self, t => t.set_dma(on));
    }
    fn uses_dma(&self) -> bool {
        each!(self, t => t.uses_dma())
    }
}
