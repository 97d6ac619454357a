//! # bdevkit-nvmf
//!
//! An NVMe-over-Fabrics target (SPDK's `lib/nvmf`), today over the
//! NVMe/TCP transport: any bdev becomes a namespace that the Linux
//! kernel's nvme-tcp host, nvme-cli and SPDK's initiator use. It reaches
//! bdevs only through the public bdev API (`bdevkit::bdev`) and speaks
//! the wire with the spec crate (`bdevkit_nvme_spec`: PDUs, commands,
//! Identify, log pages).
//!
//! # Model
//!
//! * A [`Target`] holds *subsystems* (the discovery subsystem and NVM
//!   subsystems), each with *namespaces* (bdevs opened for writing and
//!   claimed), a hosts allow-list and *listeners* (TCP addresses). A
//!   host's admin Connect creates a *controller* (dynamic model); its I/O
//!   queues connect to it. Namespace changes (RPC, bdev hot-remove,
//!   resize) reach the controllers as Namespace Attribute Changed events.
//! * **Transports**: a transport (`nvmf_create_transport -t TCP`, from the
//!   registry of transport types) listens, accepts and moves a command's
//!   bytes; the transport-neutral core decides what the command means.
//!   A new transport is a folder implementing the seam's traits and one
//!   line in the registry (`doc/nvmf.md`, "Transports").
//! * **Threads**: each transport's listeners are polled on the app thread;
//!   each accepted connection (a queue pair) belongs to one *poll group*,
//!   a lightweight thread per reactor core, which polls its connections
//!   (TCP: epoll, so an idle reactor sleeps in interrupt mode) and submits bdev
//!   I/O on its own channels. No locks and no allocation per command:
//!   request slots and their in-capsule buffers are made once per queue;
//!   larger transfers borrow from the transport's bounded pool of shared
//!   buffers (`num_shared_buffers` of `max_io_size`), waiting in order
//!   when it is dry.
//! * **Control plane**: SPDK's RPCs ([`rpc::register_rpcs`]) and the
//!   `nvmf` section of `save_config` ([`Target::config_json`]).
//!
//! ```no_run
//! use bdevkit::bdev::BdevManager;
//! use bdevkit::thread::{CpuSet, Runtime, RuntimeOptions};
//! use bdevkit_nvmf::{CreateSubsystemParams, ListenerParams, NamespaceParams, Target};
//!
//! let rt = Runtime::start(RuntimeOptions::interrupt(CpuSet::single(0)))?;
//! let mgr = BdevManager::default();
//! let target = Target::new(rt.handle(), mgr);
//! let t = target.clone();
//! rt.app_thread().run_sync(move || -> bdevkit_nvmf::Result<()> {
//!     t.start()?;
//!     t.create_transport(&bdevkit_nvmf::CreateTransportParams {
//!         trtype: "TCP".into(),
//!         ..Default::default()
//!     })?;
//!     let mut p = CreateSubsystemParams::new("nqn.2016-06.io.bdevkit:cnode1");
//!     p.allow_any_host = Some(true);
//!     t.create_subsystem(&p)?;
//!     // ... add a namespace over a bdev, then a listener
//!     t.add_ns("nqn.2016-06.io.bdevkit:cnode1", &NamespaceParams::new("Malloc0"), |r| {
//!         println!("nsid {r:?}");
//!     });
//!     Ok(())
//! })??;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What is and is not supported: see `doc/nvmf.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod addr;
mod admin;
mod core;
mod ctrlr;
mod error;
pub mod opts;
pub mod params;
pub mod rpc;
mod service;
mod subsystem;
mod target;
pub mod tcp;
mod tls;
mod transport;

pub use crate::core::pool::BufferStats;
pub use addr::{AdrFam, ListenAddr, ListenAddressParams};
pub use ctrlr::{Controller, DeathCause};
pub use error::{Error, Result};
pub use opts::{CreateTransportParams, SetConfigParams, TransportOpts};
pub use params::{
    CreateSubsystemParams, HostParams, ListenerParams, NamespaceParams, SetKeysParams,
};
pub use service::Target;
pub use subsystem::{HostDhchap, Namespace, Subsystem};
