//! # bdevkit-vhost
//!
//! A vhost-user-blk target (SPDK's vhost): QEMU virtual machines use
//! bdevs directly. The guest's virtio-blk queues live in its memory,
//! which QEMU shares with us over the vhost-user unix socket of a
//! *controller*; the queues are served from reactor pollers, with the
//! guest's buffers as the bdev I/O buffers, and the host kernel is not on
//! the data path.
//!
//! The model:
//!
//! * A [`VhostTarget`] holds the controllers of one application and the
//!   socket directory (`-S`). `vhost_create_blk_controller` opens a bdev
//!   and creates the socket `<dir>/<ctrlr>`; SPDK's RPCs drive it
//!   ([`rpc::register_rpcs`]), `save_config` writes them back
//!   ([`VhostTarget::config_json`]).
//! * Each controller has a control thread for the vhost-user messages
//!   (features, the memory table, ring set-up; one frontend at a time,
//!   and the next one when QEMU restarts) and one lightweight thread per
//!   core of its cpumask for the rings: ring `i` is a poller on thread
//!   `i % cores`, which sleeps on the ring's kick eventfd in interrupt
//!   mode. No OS thread per queue.
//! * The guest's memory, mapped from QEMU's fds, is registered with the
//!   bdev layer as external memory ([`bdevkit::dma::ExtMem`]): a read or
//!   write becomes one `BdevIo` whose segments are the guest's buffers
//!   (zero copy; the VFIO NVMe driver maps the same memory for DMA).
//! * Everything the guest wrote is checked before use: descriptor
//!   chains walk within the table and guest memory, a request fails with
//!   a virtio status (IOERR, UNSUPP) when it is malformed or not allowed
//!   (a write to a read-only controller), and a ring that cannot be
//!   walked is marked broken: it stops, the frontend is told on its error
//!   eventfd, and no other ring or controller notices.
//!
//! Not served: packed virtqueues (rust-vmm's `virtio-queue` serves split
//! rings; `packed_ring: true` is refused), live migration (no dirty log),
//! inflight tracking for backend crash recovery, telling a running guest
//! about a resize (it sees the new size on its next reset).
//!
//! ```
//! use bdevkit::bdev::{BdevManager, BdevOptions};
//! use bdevkit::thread::{CpuSet, Runtime, RuntimeOptions};
//! use bdevkit_vhost::{BlkControllerOpts, VhostTarget};
//!
//! let rt = Runtime::start(RuntimeOptions::interrupt(CpuSet::single(0)))?;
//! let mgr = BdevManager::new(BdevOptions::default());
//! bdevkit_null::register(&mgr);
//! let dir = tempfile::tempdir()?;
//! let target = VhostTarget::new(rt.handle(), mgr.clone());
//! target.set_socket_dir(dir.path());
//!
//! let t = target.clone();
//! rt.app_thread().run_sync(move || -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//!     bdevkit_null::create(&mgr, bdevkit_null::NullCreateParams::new("Null0", 512, 1024))?;
//!     let o = BlkControllerOpts {
//!         ctrlr: "vhost.0".into(),
//!         dev_name: "Null0".into(),
//!         ..BlkControllerOpts::default()
//!     };
//!     t.create_blk(&o)?;
//!     Ok(())
//! })?.map_err(|e| e.to_string())?;
//! // QEMU connects to this socket (vhost-user-blk-pci).
//! assert!(dir.path().join("vhost.0").exists());
//! let (tx, rx) = std::sync::mpsc::channel();
//! target.delete("vhost.0", move |r| tx.send(r.is_ok()).unwrap());
//! assert!(rx.recv()?);
//! rt.shutdown();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod blk;
mod chain;
mod control;
mod ctrlr;
mod error;
mod memory;
mod queue;
pub mod rpc;
mod session;
mod target;

pub use blk::BlkInfo;
pub use error::{Error, Result};
pub use memory::GuestMem;
pub use queue::Coalescing;
pub use target::{BlkControllerOpts, VhostTarget, DEFAULT_COALESCING, TRANSPORT};
