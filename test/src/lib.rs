//! Test support for bdevkit.
//!
//! * [`mod@env`]: a runtime in interrupt mode plus a bdev manager, with a way
//!   to run async test bodies on the app thread.
//! * [`conformance`]: checks every bdev module must pass (read after
//!   write, range checks, flush/unmap/write-zeroes, reset with I/O in
//!   flight, delete with open descriptors, config entry).
//! * [`verify`]: a multi-thread write/read/compare workload over the public
//!   API.
//! * [`daemon`]: start the real `bdev_tgt` on a private socket, call it
//!   with our client, `spdk-rpc` or `bdev_rpc`, stop it with a signal.
//! * [`mod@spdk_rpc`]: where SPDK's `spdk-rpc` client is (one lookup for
//!   every test that needs it; a missing client fails unless opted out).
//! * [`rpc`]: in-process RPC calls for module tests (a registry with the
//!   methods a test needs, a call that waits on the reactor).
//! * [`fixtures`]: malloc base bdevs created and deleted in one call, a
//!   virtual bdev module's setup over them, a read left in flight, a base
//!   removed under it.
//! * [`kernel`]: what the modules over kernel files (aio, uring) test the
//!   same way: temporary files, a loop device, a tiny tmpfs, shared
//!   scenarios and the per-I/O bench driver.
//! * [`sizes`]: I/O sizes 512 B … 1 MiB from aligned, unaligned and
//!   multi-segment buffers, read back and compared.
//! * [`steady`]: a counting global allocator and the steady-state I/O
//!   driver of the zero-allocation tests.
//! * [`prelude`]: what a module's tests import, in one glob.
//! * [`nvmf`]: an in-process NVMe/TCP target and a PDU-level test host.
#![warn(missing_docs)]

pub mod conformance;
pub mod daemon;
pub mod env;
pub mod fixtures;
pub mod kernel;
pub mod nvmf;
pub mod prelude;
pub mod rpc;
pub mod sizes;
pub mod spdk_rpc;
pub mod steady;
pub mod verify;

pub use env::{sleep_ms, TestEnv};
pub use fixtures::{
    contents, delete_malloc, fill, malloc, read_in_background, remove_base_under_read, OverMalloc,
};
