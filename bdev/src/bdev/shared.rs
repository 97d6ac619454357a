//! What the I/O path knows of a bdev: its name, properties, size, the I/O
//! types its module serves, and the per-bdev state the channels fold into
//! or share (statistics of gone channels, histogram settings, QoS, the
//! reset flag). The registry-level bdev (`bdev.rs`) holds one of these and
//! every channel of the bdev shares it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::histogram::HistState;
use super::quota::QosState;
use super::stats::IoStat;
use super::types::{BdevProps, IoType};

pub(crate) struct BdevShared {
    pub(crate) name: String,
    pub(crate) props: BdevProps,
    pub(crate) num_blocks: AtomicU64,
    /// I/O types the module serves, as a mask of [`IoType::bit`].
    pub(crate) supported: u32,
    /// Statistics of channels that are gone.
    pub(crate) folded_stat: Mutex<IoStat>,
    pub(crate) hist: Mutex<HistState>,
    pub(crate) qos: QosState,
    pub(crate) reset_in_progress: AtomicBool,
}

impl BdevShared {
    pub(crate) fn new(props: BdevProps, supported: u32) -> Self {
        BdevShared {
            name: props.name.clone(),
            num_blocks: AtomicU64::new(props.num_blocks),
            props,
            supported,
            folded_stat: Mutex::new(IoStat::default()),
            hist: Mutex::new(HistState::default()),
            qos: QosState::default(),
            reset_in_progress: AtomicBool::new(false),
        }
    }

    /// Whether the bdev serves `io_type` (write zeroes is emulated where
    /// writes are served).
    #[inline]
    pub(crate) fn supports(&self, io_type: IoType) -> bool {
        self.supported & io_type.bit() != 0
            || (io_type == IoType::WriteZeroes && self.supported & IoType::Write.bit() != 0)
    }

    /// Whether the module itself serves `io_type` (no emulation).
    #[inline]
    pub(crate) fn module_supports(&self, io_type: IoType) -> bool {
        self.supported & io_type.bit() != 0
    }

    #[inline]
    pub(crate) fn num_blocks(&self) -> u64 {
        self.num_blocks.load(Ordering::Acquire)
    }
}
