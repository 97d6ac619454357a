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

/// The namespace of the UUIDs derived here from an EUI-64 (v5, SHA-1
/// name based): fixed, so that the same identifier always gives the same
/// UUID.
const UUID_NAMESPACE: Uuid = Uuid::from_u128(0x5d0c_62a4_1b3e_4b8f_9c2e_6f4b_7a1d_0e93);

/// SPDK's namespace of `generate_uuids` UUIDs (`nvme_generate_uuid`).
const SPDK_GENERATE_NAMESPACE: Uuid = Uuid::from_u128(0xedae_d2de_24bc_4b07_b559_f47e_cbe7_30fd);

/// A namespace bdev's UUID, stable across attaches and resets, as SPDK's
/// (`nvme_disk_create`): the namespace's NGUID (the same 16 bytes); else
/// its UUID; else, with `generate` (`bdev_nvme_set_options`
/// `generate_uuids`), SPDK's v5 UUID of the controller's serial number
/// field `sn` (up to its first NUL, trailing spaces included) followed by
/// the namespace id in decimal; else (ours) one derived from its EUI-64;
/// else none (the bdev layer makes a random one, as SPDK's).
pub(crate) fn ns_uuid(ns: &Namespace, sn: &[u8], generate: bool) -> Option<Uuid> {
    let ids = &ns.ids;
    if let Some(n) = ids.nguid {
        return Some(Uuid::from_bytes(n));
    }
    if let Some(u) = ids.uuid {
        return Some(Uuid::from_bytes(u));
    }
    if generate {
        let end = sn.iter().position(|&b| b == 0).unwrap_or(sn.len());
        let mut name = sn[..end].to_vec();
        name.extend_from_slice(ns.id.to_string().as_bytes());
        return Some(Uuid::new_v5(&SPDK_GENERATE_NAMESPACE, &name));
    }
    ids.eui64.map(|e| Uuid::new_v5(&UUID_NAMESPACE, &e))
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

#[cfg(test)]
mod tests {
    use super::*;
    use bdevkit_nvme_driver::NsIds;

    fn ns(ids: NsIds) -> Namespace {
        Namespace {
            id: 7,
            data: Box::default(),
            block_size: 512,
            num_blocks: 8,
            ids,
        }
    }

    /// SPDK's choice: the NGUID before the UUID; `generate_uuids`
    /// derives SPDK's UUID (v5 in SPDK's namespace of the 20-byte serial
    /// field and the nsid: the value SPDK's libuuid-based code gives).
    #[test]
    fn uuids_are_spdks() {
        let both = NsIds {
            uuid: Some([1; 16]),
            nguid: Some([2; 16]),
            eui64: None,
        };
        assert_eq!(
            ns_uuid(&ns(both), &[], false),
            Some(Uuid::from_bytes([2; 16]))
        );
        let uuid_only = NsIds {
            uuid: Some([1; 16]),
            ..NsIds::default()
        };
        assert_eq!(
            ns_uuid(&ns(uuid_only), &[], true),
            Some(Uuid::from_bytes([1; 16]))
        );
        assert_eq!(ns_uuid(&ns(NsIds::default()), &[], false), None);
        let sn = *b"SPDK00000000000001  ";
        assert_eq!(
            ns_uuid(&ns(NsIds::default()), &sn, true),
            Some(Uuid::from_u128(0xe083_a5ba_9f77_5a0a_b886_9125_b2bf_5fd5))
        );
        let mut nul = [0u8; 20];
        nul[..3].copy_from_slice(b"abc");
        assert_eq!(
            ns_uuid(&ns(NsIds::default()), &nul, true),
            Some(Uuid::new_v5(&SPDK_GENERATE_NAMESPACE, b"abc7"))
        );
    }
}
