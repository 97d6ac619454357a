//! One bdev per active namespace: `<ctrlr>n<nsid>`.

use std::sync::Arc;

use bdevkit::bdev::module::{BdevIo, BdevOps, BoxError, IoType};
use bdevkit::thread::IoChannel;
use nvme_driver::Namespace;
use nvme_spec::identify::IdentifyController;
use serde_json::Value;

use crate::channel::CtrlrChannel;
use crate::ctrlr::NvmeCtrlr;

/// A namespace's bdev.
#[derive(Debug)]
pub struct NvmeBdev {
    ctrlr: Arc<NvmeCtrlr>,
    nsid: u32,
    flush: bool,
    write_zeroes: bool,
    unmap: bool,
    compare: bool,
    compare_and_write: bool,
    shared: bool,
}

/// A bdev channel: this thread's queue pair of the controller.
#[derive(Debug)]
pub struct NvmeChannel {
    ch: IoChannel<CtrlrChannel>,
}

impl NvmeBdev {
    pub(crate) fn new(ctrlr: Arc<NvmeCtrlr>, ns: &Namespace, id: &IdentifyController) -> NvmeBdev {
        let enable_flush = ctrlr.options().enable_flush;
        NvmeBdev {
            nsid: ns.id,
            flush: id.volatile_write_cache() || enable_flush,
            write_zeroes: id.supports_write_zeroes(),
            unmap: id.supports_dsm(),
            compare: id.supports_compare(),
            compare_and_write: id.supports_compare() && id.fuses.get() & 1 != 0,
            shared: ns.data.nmic & 1 != 0,
            ctrlr,
        }
    }

    /// The namespace id.
    #[must_use]
    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// The controller.
    #[must_use]
    pub fn ctrlr(&self) -> &Arc<NvmeCtrlr> {
        &self.ctrlr
    }
}

impl BdevOps for NvmeBdev {
    type Channel = NvmeChannel;

    fn create_channel(&self) -> Result<NvmeChannel, BoxError> {
        Ok(NvmeChannel {
            ch: self.ctrlr.device().get_channel()?,
        })
    }

    #[inline]
    fn submit(&self, ch: &NvmeChannel, io: BdevIo) {
        ch.ch.inner.submit(self.nsid, io);
    }

    fn io_type_supported(&self, t: IoType) -> bool {
        match t {
            IoType::Read
            | IoType::Write
            | IoType::Reset
            | IoType::Abort
            | IoType::NvmeIo
            | IoType::NvmeAdmin => true,
            IoType::Flush => self.flush,
            IoType::WriteZeroes => self.write_zeroes,
            IoType::Unmap => self.unmap,
            IoType::Compare => self.compare,
            IoType::CompareAndWrite => self.compare_and_write,
            _ => false,
        }
    }

    fn dump_info_json(&self) -> Value {
        self.ctrlr.bdev_json(self.nsid, self.shared)
    }
}
