//! Bdevs: the generic block device interface — the consumer face.
//!
//! Consumers open a bdev by name ([`BdevManager::open`]) and get a
//! per-thread [`BdevChannel`] from the descriptor, then allocate, fill and
//! submit [`BdevIo`]s on it; completions run on the submitting thread.
//! Modules implement the bdevs behind this interface with the module face,
//! [`module`] (one import for module authors).
//!
//! For every module the core checks ranges and permissions, splits I/O on
//! the bdev's limits, emulates write zeroes, bounces misaligned buffers,
//! retries NOMEM completions, applies QoS, runs the reset sequence and
//! keeps statistics. `BdevIo`s come from a bounded pool with a per-thread
//! cache: no heap allocation per I/O in steady state.
//!
//! Inside, the files are layers that import downward only: plain types
//! (`types`, `segments`, `split`, `stats`, `histogram`, `quota`), the pool,
//! the request and its channel (`io`), then the pipeline's stages
//! (`request`, `finish`, `bounce`, `dispatch`, `splitting`, `end`, `reset`,
//! `route`, `qos`, `check`, `channel`, `complete`), the module face, the
//! bdev and its descriptors, and the manager with its registry.

mod async_io;
#[expect(clippy::module_inception, reason = "the bdev handle in the bdev layer")]
mod bdev;
mod bdev_stats;
mod bounce;
mod channel;
mod check;
mod complete;
mod desc;
mod dispatch;
mod end;
mod finish;
pub mod histogram;
mod io;
mod manager;
pub mod module;
mod pool;
mod qos;
mod quota;
mod registry;
mod request;
mod reset;
mod route;
mod segments;
mod shared;
mod slot;
pub mod split;
mod splitting;
pub mod stats;
mod types;
pub mod zone;

pub use async_io::{IoFailure, IoFuture};
pub use bdev::Bdev;
pub use channel::{BdevChannel, SubmitError};
pub use desc::BdevDesc;
pub use histogram::{Histogram, HistogramOptions};
pub use io::{BdevIo, Completion, IoCompletion};
pub use manager::{BdevManager, BdevOptions};
pub use pool::IoWaitFn;
pub use registry::MAX_BDEV_NAME_LEN;
pub use segments::IoVec;
pub use stats::{IoStat, QueueDepthStats, ResetMode};
pub use types::{BdevEvent, BdevProps, ClaimType, IoStatus, IoType, NvmeCmd};
pub use zone::{
    ZoneAction, ZoneError, ZoneGeometry, ZoneInfo, ZoneState, ZoneType, ZONE_INFO_SIZE,
};

#[cfg(test)]
mod tests;
