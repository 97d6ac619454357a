//! The PCIe function boundary: what the PCIe transport needs from a PCI
//! NVMe function — its registers, its doorbells and DMA memory it can
//! reach. Two implementations: [`crate::vfio::VfioFunction`] (a real
//! device through VFIO) and [`crate::emu::EmuFunction`] (the in-process
//! emulated controller). Everything above (queues, PRPs, controller) is
//! the same code for both.

use std::fmt;
use std::sync::atomic::AtomicUsize;

use crate::error::Result;
use crate::sys::{DmaMem, Doorbell};

/// One PCI NVMe function (BAR0 + DMA).
pub trait PciFunction: Send + Sync + fmt::Debug + 'static {
    /// Its address (`0000:00:04.0`, or `emu:NAME`).
    fn address(&self) -> &str;

    /// Reads the 32-bit register at `off` of BAR0. A removed device reads
    /// all ones.
    fn read32(&self, off: u32) -> u32;

    /// Writes the 32-bit register at `off`.
    fn write32(&self, off: u32, v: u32);

    /// Reads a 64-bit register as two 32-bit reads (low first).
    fn read64(&self, off: u32) -> u64 {
        u64::from(self.read32(off)) | (u64::from(self.read32(off + 4)) << 32)
    }

    /// Writes a 64-bit register as two 32-bit writes (low first).
    fn write64(&self, off: u32, v: u64) {
        self.write32(off, (v & 0xffff_ffff) as u32);
        self.write32(off + 4, (v >> 32) as u32);
    }

    /// The doorbell register at BAR0 offset `off`.
    fn doorbell(&self, off: u32) -> Doorbell;

    /// Page-aligned, zeroed memory the device can reach (queue rings, PRP
    /// lists, bounce buffers), mapped for it.
    fn alloc_dma(&self, len: usize) -> Result<DmaMem>;

    /// Whether the device reaches `[addr, addr + len)` of the process's
    /// memory at IOVA `addr` (the data buffers of I/O: IOVA = virtual
    /// address, mapped once per buffer through the bdev layer's
    /// registration hook). `false` makes the queue pair bounce the data.
    fn reaches(&self, addr: usize, len: usize) -> bool;

    /// A count that is 0 while [`PciFunction::reaches`] holds for every
    /// buffer: the queue reads it (one load) instead of calling `reaches`
    /// per I/O. `None`: call `reaches` every time.
    fn reach_gate(&self) -> Option<&'static AtomicUsize> {
        None
    }

    /// PCI vendor id (`vendor_id` of `bdev_get_bdevs`), when known.
    fn vendor_id(&self) -> u16 {
        0
    }

    /// Sets or clears Bus Master Enable in the PCI command register. With
    /// it clear the function cannot access host memory: once this returns
    /// `false`-wise, no DMA of the device is in progress or to come. The
    /// driver clears it when a controller does not stop (so that its
    /// commands' memory can be handed back) and sets it before enabling.
    fn set_bus_master(&self, on: bool);
}
