//! Bdevs: the generic block device interface.
//!
//! Consumers open a bdev by name ([`BdevManager::open`]) and get a
//! per-thread [`BdevChannel`] from the descriptor, then allocate, fill and
//! submit [`BdevIo`]s on it; completions run on the submitting thread.
//! Modules implement [`BdevOps`] (and a [`BdevModule`]) and register bdevs
//! with [`BdevManager::register_bdev`]; virtual bdev modules (bdevs on
//! other bdevs) share the building blocks in [`vbdev`].
//!
//! For every module the core checks ranges and permissions, splits I/O on
//! the bdev's limits, emulates write zeroes, bounces misaligned buffers,
//! retries NOMEM completions, applies QoS, runs the reset sequence and
//! keeps statistics. `BdevIo`s come from a bounded pool with a per-thread
//! cache: no heap allocation per I/O in steady state.

mod async_io;
mod channel;
mod completion_queue;
pub mod histogram;
mod io;
mod manager;
mod module;
pub mod qos;
mod reset;
pub mod split;
pub mod stats;
mod types;
pub mod vbdev;

pub use async_io::{IoFailure, IoFuture};
pub use channel::{BdevChannel, SubmitError};
pub use completion_queue::CompletionQueue;
pub use histogram::Histogram;
pub use io::{BdevIo, Completion, IoCompletion, IoVec};
pub use manager::{Bdev, BdevDesc, BdevManager, BdevOptions, QueueDepthStats};
pub use module::{BdevModule, BdevOps, Done};
pub use stats::{IoStat, ResetMode};
pub use types::{BdevEvent, BdevProps, ClaimType, IoStatus, IoType, NvmeCmd};
pub use vbdev::{BaseBdev, BaseEvents, BaseLink, VbdevConfig, VbdevConfigs};

#[cfg(test)]
mod tests;
