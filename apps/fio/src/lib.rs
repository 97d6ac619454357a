//! # bdevkit-fio
//!
//! A fio ioengine for bdevkit: `fio --ioengine=external:libbdevkit_fio.so
//! --bdevkit_conf=bdevs.json --filename=Malloc0 --thread=1 ...` runs fio's
//! jobs on the bdevs of an SPDK-format JSON config, as SPDK's `spdk_bdev`
//! engine does (`LD_PRELOAD=libbdevkit_fio.so fio --ioengine=bdevkit ...`
//! works too, and `spdk_json_conf` is accepted for `bdevkit_conf`). See
//! doc/fio.md.
//!
//! ## Model
//!
//! * **ABI.** fio's engine structure changes between releases, so the
//!   crate does not mirror it: `csrc/engine.c`, compiled by `build.rs`
//!   against the headers of the installed fio (`FIO_SRC`, or the cache
//!   `scripts/fetch-fio-src.sh` fills), fills `struct ioengine_ops` and
//!   forwards each hook to an `extern "C"` function of [`ffi`] with plain
//!   arguments (an io_u's direction, offset, buffer, length; an opaque
//!   io_u pointer; the job pointer fio keeps in `td->io_ops_data`). At
//!   load the shim compares the running fio's `fio_version_string` with
//!   the version it was built for and refuses another, naming both.
//!   Without headers the crate still builds; the library then says so.
//! * **Runtime.** The first job's setup starts the framework's app
//!   ([`bdevkit_app::App`]: the config's bdevs, the default modules, one
//!   reactor in interrupt mode for the control path); the last job's
//!   cleanup shuts it down (bdevs unregistered, reactor stopped), see
//!   `global`.
//! * **Threads, no handoff.** fio calls `queue`, `getevents` and `event`
//!   on each job's own thread, so that thread *hosts* the job's bdevkit
//!   lightweight thread ([`bdevkit::thread::EmbeddedThread`]): the job's
//!   bdev channels live on it, `queue` submits into them directly, and
//!   `getevents` polls it, running the modules' pollers and completions
//!   inline (as SPDK's engine polls its `spdk_thread`). No I/O crosses an
//!   OS thread: no queue, no lock, no wake-up on the I/O path, and no
//!   allocation per I/O (see `job`). Jobs must therefore be threads
//!   (`thread=1`); forked jobs are refused.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod args;
mod error;
#[expect(
    unsafe_code,
    reason = "the C boundary with fio: the crate's one unsafe module"
)]
pub mod ffi;
mod global;
mod job;
mod logging;
mod zbd;
