//! A user-space NVMe driver (SPDK's lib/nvme): a controller and polled
//! queue pairs over a transport, with no dependency on the bdev layer
//! (`bdevkit-nvme` is the bdev adapter on top).
//!
//! # Layers
//!
//! ```text
//! ctrlr      Controller<T>: bring-up, Identify, features, async events,
//!            keep alive, disable/enable (reset), shutdown
//! admin      the admin queue: shared behind a mutex, sync commands for
//!            set-up, async ones with callbacks
//! discovery  NVMe-oF discovery controllers: the discovery log page (LID
//!            70h), read consistently
//! ns         namespaces: active list, Identify Namespace, identifiers
//!            (UUID / NGUID / EUI-64)
//! qpair      Qpair<Q, C>: slots (CID = slot index), completions, timeouts
//!            by ageing, fused pairs; one per thread, no locks
//! transport  Transport / QueueTransport: the seam
//! any        AnyTransport: every transport behind one type, generated
//!            from one list (a new transport is its module and a line)
//! tcp        TcpTransport: NVMe/TCP connections per queue, properties,
//!            in-capsule / R2T writes, C2H reads, digests
//! pcie       PcieTransport: SQ/CQ rings, phase tags, doorbells, PRP/SGL per
//!            slot, bounce buffers; over any PciFunction
//! bus        PciFunction: registers, doorbells, DMA memory
//!   vfio     VfioFunction: a real device (container/group API, BAR0 mmap)
//!   emu      EmuFunction: the in-process emulated controller
//! prp        PRP / SGL construction and the PRP walker (pure arithmetic)
//! sys        the unsafe layer: DMA memory, MMIO, doorbells
//! ```
//!
//! # The I/O path
//!
//! `Qpair::submit` takes a free slot, builds the data pointer (PRPs into
//! the slot's page, an SGL when the layout needs one and the controller
//! has them, a bounce buffer otherwise) and writes the SQE;
//! `Qpair::submit_short` is the common I/O's path (PRP1/PRP2 only: the
//! rest comes back as `SubmitError::Long`). `Qpair::flush` rings the SQ
//! doorbell once for everything submitted since (SPDK's
//! `delay_cmd_submit`). `Qpair::reap_start`, then `Qpair::reap_next` (one
//! finished request at a time, by phase tag; the caller may submit
//! between two) until it finds none (or enough), then `Qpair::reap_end`,
//! which rings the CQ doorbell once for the pass and says whether it took
//! anything (`Qpair::process` does all three into a vector, at most
//! [`qpair::BATCH`]). Nothing allocates.
//!
//! # Example
//!
//! ```
//! use bdevkit_nvme_driver::emu::{EmuController, EmuOptions};
//! use bdevkit_nvme_driver::{Controller, ControllerOptions, PcieTransport};
//!
//! let emu = EmuController::start("doc", EmuOptions::default())?;
//! let t = PcieTransport::new(emu.function())?;
//! let ctrlr = Controller::attach(t, ControllerOptions::default())?;
//! assert_eq!(ctrlr.identify().serial(), "EMU0001");
//! assert_eq!(ctrlr.namespaces()[0].block_size, 512);
//! ctrlr.shutdown()?;
//! # Ok::<(), bdevkit_nvme_driver::Error>(())
//! ```
#![warn(missing_docs)]

mod admin;
pub mod any;
pub mod bus;
pub mod ctrlr;
pub mod discovery;
pub mod emu;
mod error;
pub mod ns;
pub mod pcie;
pub mod prp;
pub mod qpair;
pub mod sys;
pub mod tcp;
pub mod transport;
pub mod vfio;

pub use any::{AnyQueue, AnyTransport};
pub use ctrlr::{Controller, ControllerOptions, Health, State};
pub use error::{Error, Result};
pub use ns::{Namespace, NsIds};
pub use pcie::PcieTransport;
pub use qpair::{Completion, Qpair};
pub use tcp::{Dhchap, TcpOptions, TcpPath, TcpTransport};
pub use transport::{Data, Dir, QueueTransport, Release, Request, SubmitError, Transport};
