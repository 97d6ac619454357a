//! Identify data: the controller, a namespace, the NVM command set
//! specific controller data, namespace id lists and namespace
//! identification descriptors.
//!
//! The 4096-byte structures are read in place from the Identify data
//! buffer (`IdentifyController::ref_from_bytes(&buf)`, or
//! `read_from_bytes` for a copy) and built by a target from
//! `Default::default()` (all zeroes) plus the setters for string fields.
//! Multi-byte fields are little-endian byte-order types: `.get()` and
//! `.set(v)`. Helpers answer the questions the drivers ask: block size,
//! transfer limit, which optional commands exist.

mod ctrl;
mod list;
mod ns;

pub use ctrl::{cntrltype, oacs, oncs, IdentifyController, PowerStateDescriptor, SglSupport};
pub use list::{
    nidt, parse_ns_id_descriptors, write_ns_id_descriptors, NamespaceList, NsIdDescriptor,
    NS_LIST_ENTRIES,
};
pub use ns::{nsfeat, DeallocatedRead, IdentifyNamespace, LbaFormat, NvmIdentifyController};
