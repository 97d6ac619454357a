//! What can stop a job before its first I/O: each message is what fio
//! prints (after `bdevkit: `), so it names the job, the option or bdev at
//! fault and what to do.

use std::path::PathBuf;

/// A job's setup or init failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// fio would fork the job into a process of its own, where bdevkit's
    /// reactors (threads of this process) do not exist.
    #[error(
        "job {job}: fio jobs must run as threads with the bdevkit engine: add thread=1 (--thread)"
    )]
    NotThreads {
        /// The job.
        job: String,
    },
    /// A job that writes a zoned bdev without `zonemode=zbd`: fio would
    /// write anywhere, and the bdev fails every write off a write pointer.
    #[error(
        "job {job}: bdev {bdev} is zoned (written only at its zones' write pointers): \
         add zonemode=zbd (--zonemode=zbd) so that fio writes it zone by zone"
    )]
    ZonedWithoutZbd {
        /// The job.
        job: String,
        /// The zoned bdev.
        bdev: String,
    },
    /// No `bdevkit_conf` (nor `spdk_json_conf`).
    #[error(
        "job {job}: no bdev config: give bdevkit_conf=FILE \
         (--bdevkit_conf=FILE; SPDK's spdk_json_conf is accepted too)"
    )]
    NoConfig {
        /// The job.
        job: String,
    },
    /// A job names another config than the one the bdev layer runs.
    #[error(
        "job {job}: bdevkit_conf={asked} differs from {running}, which the bdev layer \
         was started with: every job of a fio run uses the same config"
    )]
    OtherConfig {
        /// The job.
        job: String,
        /// Its config.
        asked: PathBuf,
        /// The running one.
        running: PathBuf,
    },
    /// `bdevkit_reactor_mask` does not parse.
    #[error("job {job}: bdevkit_reactor_mask={mask}: {reason}")]
    Mask {
        /// The job.
        job: String,
        /// The value given.
        mask: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The app framework did not start (the config did not load, a core
    /// is unavailable, ...).
    #[error("job {job}: cannot start bdevkit with config {conf}: {reason}")]
    Start {
        /// The job.
        job: String,
        /// The config.
        conf: PathBuf,
        /// The framework's error chain.
        reason: String,
    },
    /// The job has no file.
    #[error("job {job}: no bdev to run on: name them with filename=BDEV[:BDEV...]")]
    NoFiles {
        /// The job.
        job: String,
    },
    /// A file name that is no bdev of the config.
    #[error("job {job}: no bdev named {name:?} in {conf} (its bdevs: {known})")]
    NoBdev {
        /// The job.
        job: String,
        /// The name asked for.
        name: String,
        /// The config.
        conf: PathBuf,
        /// The bdevs there are, comma-separated.
        known: String,
    },
    /// An I/O size that is not a whole number of blocks.
    #[error(
        "job {job}: {op} size {bytes} (bs/bsrange/bssplit) is not a multiple of \
         the block size {block_size} of bdev {bdev}"
    )]
    BlockSize {
        /// The job.
        job: String,
        /// `read`, `write` or `trim`.
        op: &'static str,
        /// The size.
        bytes: u64,
        /// The bdev.
        bdev: String,
        /// Its block size.
        block_size: u32,
    },
    /// Opening a bdev or its channel failed.
    #[error("job {job}: open bdev {bdev}: {reason}")]
    Open {
        /// The job.
        job: String,
        /// The bdev.
        bdev: String,
        /// Why.
        reason: String,
    },
    /// The job's lightweight thread could not be made.
    #[error("job {job}: create the job's bdevkit thread: {reason}")]
    Thread {
        /// The job.
        job: String,
        /// Why.
        reason: String,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
