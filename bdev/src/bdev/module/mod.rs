//! The module face of the bdev layer: everything a bdev module implements
//! or uses, in one import (`use bdevkit::bdev::module::{...}`).
//!
//! * What a module implements: [`BdevModule`] (one per module crate) and
//!   [`BdevOps`] (one per bdev, with its per-thread channel type).
//! * Serving an I/O: [`ModuleIo`], the module's side of a [`BdevIo`] —
//!   its data segments, completing it exactly once (never inside
//!   `submit`), and building the child a virtual bdev sends to its base;
//!   [`CompletionQueue`] for I/O finished synchronously.
//! * Linking it into an app: [`ModuleDef`] (and [`LogFlag`]), the one
//!   constant a module crate exports.
//! * Memory backends (malloc, null): [`BackendModule`], the whole module
//!   of a backend whose bdevs recreate themselves in a saved config (its
//!   bdev type says how, [`Backend`]), and [`Geometry`], the block, metadata
//!   and DIF layout their params describe.
//! * Virtual bdevs: the building blocks in [`vbdev`], and the thread items
//!   a virtual bdev with per-channel state of its own uses ([`IoDevice`],
//!   [`IoChannel`], [`Thread`], [`Poller`], [`PollerStatus`]).
//! * DMA: [`add_registrar`] / [`MemoryRegistrar`] for drivers that map
//!   I/O buffers for a device.
//! * And the consumer-side items a module uses too (a virtual bdev is its
//!   base's consumer): [`Bdev`], [`BdevManager`], [`BdevChannel`],
//!   [`BdevProps`], [`IoStatus`], [`IoType`], ...
//!
//! `doc/writing-a-module.md` walks through `modules/passthru`, which uses
//! this module and nothing else of the bdev layer.

mod backend;
mod completion_queue;
mod def;
pub(crate) mod ops;
pub(crate) mod serve;
pub mod vbdev;

pub use backend::{Backend, BackendModule, Geometry};
pub use completion_queue::CompletionQueue;
pub use def::{LogFlag, ModuleDef};
pub use ops::{BdevOps, Done};
pub use serve::ModuleIo;

pub use crate::bdev::manager::BdevModule;
pub use crate::bdev::{
    Bdev, BdevChannel, BdevDesc, BdevEvent, BdevIo, BdevManager, BdevProps, ClaimType, Completion,
    IoCompletion, IoStatus, IoType, IoVec, NvmeCmd, SubmitError, ZoneAction, ZoneError,
    ZoneGeometry, ZoneInfo, ZoneState, ZoneType, ZONE_INFO_SIZE,
};
pub use crate::dma::{add_registrar, remove_registrar, DmaBuf, MemoryRegistrar, RegistrarId};
pub use crate::error::{BoxError, Error, Result};
pub use crate::thread::{IoChannel, IoDevice, Poller, PollerStatus, Thread, ThreadHandle};
