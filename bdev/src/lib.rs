//! # bdevkit
//!
//! A block device framework in the spirit of SPDK's bdev layer.
//!
//! * [`thread`]: reactors (one pinned OS thread per core), lightweight
//!   threads with message queues and pollers, and per-thread I/O channels.
//! * [`bdev`]: the bdev interface: registry, descriptors, claims, examine,
//!   pooled `BdevIo`, splitting, QoS, statistics; the module traits.
//! * [`dma`]: aligned I/O buffers and the DMA registration hook.
//! * [`clock`]: the tick source used for statistics and timers.
#![warn(missing_docs)]

pub mod bdev;
pub mod clock;
pub mod dma;
pub mod error;
pub mod os;
pub mod thread;

pub use error::{Error, Result};
