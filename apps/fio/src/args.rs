//! What the C shim tells the engine about a job and an I/O, as plain Rust
//! values (no fio structure reaches the Rust side).

use std::path::PathBuf;

/// An I/O's operation, as the shim maps fio's directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `DDIR_READ`.
    Read,
    /// `DDIR_WRITE`.
    Write,
    /// `DDIR_TRIM`: an unmap.
    Trim,
    /// `DDIR_SYNC`, `DDIR_DATASYNC` (the whole bdev) and
    /// `DDIR_SYNC_FILE_RANGE` (a range): a flush.
    Flush,
}

impl Op {
    /// From the shim's `enum bk_op`; `None` for what the engine does not do.
    #[must_use]
    pub fn from_raw(raw: i32) -> Option<Op> {
        match raw {
            0 => Some(Op::Read),
            1 => Some(Op::Write),
            2 => Some(Op::Trim),
            3 => Some(Op::Flush),
            _ => None,
        }
    }

    /// fio's word for it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Trim => "trim",
            Op::Flush => "sync",
        }
    }
}

/// A job, as its setup and init see it.
#[derive(Debug, Clone, Default)]
pub struct JobArgs {
    /// The job's name.
    pub job: String,
    /// `bdevkit_conf` (or its alias `spdk_json_conf`).
    pub conf: Option<PathBuf>,
    /// `bdevkit_reactor_mask`.
    pub reactor_mask: Option<String>,
    /// The job's files: bdev names.
    pub files: Vec<String>,
    /// `iodepth`.
    pub iodepth: usize,
    /// `thread=1`.
    pub use_thread: bool,
    /// `zonemode=zbd`.
    pub zbd: bool,
    /// `create_serialize` (fio's default): setup runs on fio's main thread
    /// before the job's thread calls init.
    pub create_serialize: bool,
    /// The job writes or trims (its bdevs open writable).
    pub writes: bool,
    /// Every I/O size the job may use, with its operation.
    pub sizes: Vec<(Op, u64)>,
}
