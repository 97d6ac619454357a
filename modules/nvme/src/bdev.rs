//! One bdev per active namespace: `<ctrlr>n<nsid>`.

use std::sync::Arc;

use bdevkit::bdev::module::Done;
use bdevkit::bdev::module::{BdevIo, BdevOps, BoxError, IoType};
use bdevkit::thread::IoChannel;
use bdevkit_nvme_driver::Namespace;
use bdevkit_nvme_spec::identify::IdentifyController;
use serde_json::Value;
use uuid::Uuid;

use crate::multipath::{MpChannel, NsPaths};

/// The namespace of the UUIDs derived here (v5, SHA-1 name based): fixed,
/// so that the same identifier always gives the same UUID.
const UUID_NAMESPACE: Uuid = Uuid::from_u128(0x5d0c_62a4_1b3e_4b8f_9c2e_6f4b_7a1d_0e93);

/// A namespace bdev's UUID, stable across attaches and resets: the
/// namespace's UUID; else its NGUID (the same 16 bytes); else one derived
/// from its EUI-64; else, with `generate` (`bdev_nvme_set_options`
/// `generate_uuids`), one derived from the controller's serial number
/// and the namespace id; else none (the bdev layer makes a random one).
pub(crate) fn ns_uuid(ns: &Namespace, serial: &str, generate: bool) -> Option<Uuid> {
    let ids = &ns.ids;
    if let Some(u) = ids.uuid {
        return Some(Uuid::from_bytes(u));
    }
    if let Some(n) = ids.nguid {
        return Some(Uuid::from_bytes(n));
    }
    if let Some(e) = ids.eui64 {
        return Some(Uuid::new_v5(&UUID_NAMESPACE, &e));
    }
    generate.then(|| Uuid::new_v5(&UUID_NAMESPACE, format!("{serial}:{}", ns.id).as_bytes()))
}

/// A namespace's bdev, served by one controller or more (multipath).
#[derive(Debug)]
pub struct NvmeBdev {
    paths: Arc<NsPaths>,
    nsid: u32,
    flush: bool,
    write_zeroes: bool,
    unmap: bool,
    compare: bool,
    compare_and_write: bool,
    shared: bool,
}

/// A bdev channel: this thread's queue pair of each path.
#[derive(Debug)]
pub struct NvmeChannel {
    ch: IoChannel<MpChannel>,
}

impl NvmeBdev {
    /// The bdev of `ns` served by `paths`; `enable_flush` reports Flush
    /// without a write cache.
    pub(crate) fn new(
        paths: Arc<NsPaths>,
        ns: &Namespace,
        id: &IdentifyController,
        enable_flush: bool,
    ) -> NvmeBdev {
        NvmeBdev {
            paths,
            nsid: ns.id,
            flush: id.volatile_write_cache() || enable_flush,
            write_zeroes: id.supports_write_zeroes(),
            unmap: id.supports_dsm(),
            compare: id.supports_compare(),
            compare_and_write: id.supports_compare() && id.fuses.get() & 1 != 0,
            shared: ns.data.nmic & 1 != 0,
        }
    }

    /// The namespace id.
    #[must_use]
    pub fn nsid(&self) -> u32 {
        self.nsid
    }
}

impl BdevOps for NvmeBdev {
    type Channel = NvmeChannel;

    fn create_channel(&self) -> Result<NvmeChannel, BoxError> {
        Ok(NvmeChannel {
            ch: self.paths.device().get_channel()?,
        })
    }

    #[inline]
    fn submit(&self, ch: &NvmeChannel, io: BdevIo) {
        ch.ch.submit(io);
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
        self.paths.info_json(self.shared)
    }

    /// Its channels' io_device goes (every channel is gone by now).
    fn destruct(&self, done: Done) {
        self.paths.device().unregister(move || done.done());
    }
}
