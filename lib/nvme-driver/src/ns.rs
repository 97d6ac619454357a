//! Namespaces: the active namespace list, Identify Namespace and the
//! namespace identification descriptors (UUID, NGUID, EUI-64) of each,
//! read through an admin-command function the controller hands in.

use std::collections::BTreeMap;
use std::fmt;

use bdevkit_nvme_spec::admin::Identify;
use bdevkit_nvme_spec::identify::{
    parse_ns_id_descriptors, IdentifyNamespace, NamespaceList, NsIdDescriptor,
};
use bdevkit_nvme_spec::regs::Vs;
use bdevkit_nvme_spec::zerocopy::FromBytes;
use bdevkit_nvme_spec::{Command, Sqe};

use crate::error::{Error, Result};

/// Runs an admin command returning `len` bytes of data (or its error).
pub(crate) type ExecData<'a> = &'a dyn Fn(Sqe, usize) -> Result<Vec<u8>>;

/// What identifies a namespace globally, as the controller reports it
/// (descriptor list first, Identify Namespace's NGUID/EUI64 fields
/// otherwise). Stable across attaches and resets of the same namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NsIds {
    /// UUID (RFC 4122 byte order).
    pub uuid: Option<[u8; 16]>,
    /// Namespace globally unique identifier.
    pub nguid: Option<[u8; 16]>,
    /// IEEE EUI-64.
    pub eui64: Option<[u8; 8]>,
}

impl NsIds {
    fn from_descriptors(descs: &[NsIdDescriptor]) -> NsIds {
        let mut ids = NsIds::default();
        for d in descs {
            match d {
                NsIdDescriptor::Uuid(u) if *u != [0; 16] => ids.uuid = Some(*u),
                NsIdDescriptor::Nguid(n) if *n != [0; 16] => ids.nguid = Some(*n),
                NsIdDescriptor::Eui64(e) if *e != [0; 8] => ids.eui64 = Some(*e),
                _ => {}
            }
        }
        ids
    }

    /// Fills what the descriptors lacked from Identify Namespace.
    fn or_identify(mut self, data: &IdentifyNamespace) -> NsIds {
        if self.nguid.is_none() && data.nguid != [0; 16] {
            self.nguid = Some(data.nguid);
        }
        if self.eui64.is_none() && data.eui64 != [0; 8] {
            self.eui64 = Some(data.eui64);
        }
        self
    }
}

/// One active namespace.
#[derive(Clone)]
pub struct Namespace {
    /// Namespace id.
    pub id: u32,
    /// Identify Namespace data.
    pub data: Box<IdentifyNamespace>,
    /// Logical block size (data bytes).
    pub block_size: u32,
    /// Blocks (NSZE).
    pub num_blocks: u64,
    /// Its global identifiers.
    pub ids: NsIds,
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Namespace")
            .field("id", &self.id)
            .field("block_size", &self.block_size)
            .field("num_blocks", &self.num_blocks)
            .field("ids", &self.ids)
            .finish()
    }
}

/// The active namespace ids: the Active Namespace ID list (NVMe 1.1+),
/// else 1..=NN.
fn active_ids(exec: ExecData<'_>, vs: Vs, nn: u32) -> Result<Vec<u32>> {
    if vs.0 < Vs::new(1, 1, 0).0 {
        return Ok((1..=nn).collect());
    }
    let mut ids = Vec::new();
    let mut after = 0;
    loop {
        let b = exec(Identify::active_ns_list(after).to_sqe(0), 4096)?;
        let list = NamespaceList::read_from_bytes(&b[..])
            .map_err(|_| Error::Unsupported("short namespace list".into()))?;
        let page: Vec<u32> = list.iter().collect();
        ids.extend_from_slice(&page);
        match page.last() {
            // A full page: there may be more after its last id.
            Some(&last) if page.len() == 1024 => after = last,
            _ => break,
        }
    }
    Ok(ids)
}

/// Reads every active namespace (Identify Namespace, descriptors);
/// namespaces without a usable LBA format or of size 0 are left out.
pub(crate) fn scan(exec: ExecData<'_>, vs: Vs, nn: u32) -> Result<BTreeMap<u32, Namespace>> {
    let mut namespaces = BTreeMap::new();
    for id in active_ids(exec, vs, nn)? {
        let b = exec(Identify::namespace(id).to_sqe(0), 4096)?;
        let data = IdentifyNamespace::read_from_bytes(&b[..])
            .map(Box::new)
            .map_err(|_| Error::Unsupported("short namespace data".into()))?;
        let num_blocks = data.nsze.get();
        let Some(block_size) = data.lba_size() else {
            continue;
        };
        if num_blocks == 0 {
            continue;
        }
        // Descriptors are NVMe 1.3; an older controller refuses the CNS.
        let descs = if vs.0 >= Vs::new(1, 3, 0).0 {
            exec(Identify::ns_id_descriptors(id).to_sqe(0), 4096)
                .map(|b| parse_ns_id_descriptors(&b))
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let ids = NsIds::from_descriptors(&descs).or_identify(&data);
        namespaces.insert(
            id,
            Namespace {
                id,
                data,
                block_size,
                num_blocks,
                ids,
            },
        );
    }
    Ok(namespaces)
}
