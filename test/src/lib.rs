//! Test support for bdevkit.
//!
//! * [`mod@env`]: a runtime in interrupt mode plus a bdev manager, with a way
//!   to run async test bodies on the app thread.
//! * [`conformance`]: checks every bdev module must pass (read after
//!   write, range checks, flush/unmap/write-zeroes, reset with I/O in
//!   flight, delete with open descriptors, config entry).
//! * [`verify`]: a multi-thread write/read/compare workload over the public
//!   API.
#![warn(missing_docs)]

pub mod conformance;
pub mod env;
pub mod verify;

pub use env::{sleep_ms, TestEnv};
