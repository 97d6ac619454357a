//! The blobstore's error type: what failed, with an errno for RPC answers.

use crate::device::DeviceError;
use crate::BlobId;

/// Why a piece of metadata was rejected (corruption or an impossible value).
///
/// Decoders return this; the store wraps it with where it was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Corruption {
    /// The page's CRC-32C does not match its contents.
    #[error("bad crc")]
    BadCrc,
    /// The super block does not start with "SPDKBLOB".
    #[error("bad signature")]
    BadSignature,
    /// A field holds a value no valid store has.
    #[error("impossible {field}: {value}")]
    Impossible {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// A descriptor runs past the end of its page.
    #[error("descriptor of type {desc_type} overruns its page")]
    DescriptorOverrun {
        /// The descriptor type.
        desc_type: u8,
    },
    /// A descriptor's length does not fit its type.
    #[error("descriptor of type {desc_type} has bad length {length}")]
    DescriptorLength {
        /// The descriptor type.
        desc_type: u8,
        /// Its length field.
        length: u32,
    },
    /// A descriptor type that may reference clusters is not known (dirty
    /// recovery cannot account for it, as in SPDK).
    #[error("unknown descriptor type {0}")]
    UnknownDescriptor(u8),
    /// A page chain revisits a page.
    #[error("page chain loops at page {0}")]
    ChainCycle(u32),
    /// A page of a chain or an extent page is not what its referrer expects.
    #[error("page {page} does not belong here: {reason}")]
    WrongPage {
        /// The page index in the metadata region.
        page: u32,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A page index beyond the metadata region.
    #[error("page {0} beyond the metadata region")]
    PageOutOfRange(u64),
    /// A cluster outside the data area of the device.
    #[error("cluster {0} outside the data area")]
    ClusterOutOfRange(u64),
    /// A cluster referenced that the used-cluster mask says is free.
    #[error("cluster {0} not marked used")]
    ClusterNotMarked(u64),
    /// A metadata page referenced that the used-page mask says is free.
    #[error("page {0} not marked used")]
    PageNotMarked(u32),
    /// Both extent formats in one blob, or extents that do not add up.
    #[error("inconsistent extents: {0}")]
    Extents(&'static str),
    /// A mask page of the wrong type or length.
    #[error("bad mask: {0}")]
    Mask(&'static str),
}

/// Blobstore errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A device command failed.
    #[error("device {op} at block {offset_blocks} failed")]
    Device {
        /// The command: "read", "write", "unmap", "write_zeroes".
        op: &'static str,
        /// Where.
        offset_blocks: u64,
        /// The device's error.
        #[source]
        source: DeviceError,
    },
    /// The super block is not a valid blobstore super block.
    #[error("bad super block")]
    BadSuper(#[source] Corruption),
    /// The super block's version is not 1 to 3.
    #[error("unsupported blobstore version {0}")]
    UnsupportedVersion(u32),
    /// The store's bstype differs from the one asked for.
    #[error("blobstore type mismatch")]
    BstypeMismatch,
    /// The super block says the store is larger than the device.
    #[error("blobstore size {store_bytes} larger than the device ({device_bytes})")]
    SizeMismatch {
        /// Size in the super block.
        store_bytes: u64,
        /// Device size.
        device_bytes: u64,
    },
    /// A mask region read at a clean load is bad.
    #[error("bad {mask} mask")]
    BadMask {
        /// Which mask.
        mask: &'static str,
        /// What is wrong.
        #[source]
        reason: Corruption,
    },
    /// A blob's metadata is corrupt; the store does not load.
    #[error("corrupt metadata of blob {blob:#x} at page {page}")]
    CorruptBlob {
        /// The blob.
        blob: BlobId,
        /// The metadata page where it was found.
        page: u32,
        /// What is wrong.
        #[source]
        reason: Corruption,
    },
    /// Two blobs claim one cluster (or one metadata page).
    #[error("{what} {index} claimed by blobs {first:#x} and {second:#x}")]
    ClaimedTwice {
        /// "cluster" or "page".
        what: &'static str,
        /// Its index.
        index: u64,
        /// One owner.
        first: BlobId,
        /// The other.
        second: BlobId,
    },
    /// Bad options or arguments.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The device or the store's layout does not allow it (too small, block
    /// size, metadata page size).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// No free cluster left.
    #[error("no free clusters")]
    NoSpace,
    /// No free metadata page left.
    #[error("no free metadata pages")]
    NoMetadataSpace,
    /// No such blob.
    #[error("blob {0:#x} not found")]
    NotFound(BlobId),
    /// The blob is open, being deleted, or an operation is in progress.
    #[error("blob {0:#x} busy")]
    Busy(BlobId),
    /// Blobs are still open or operations in flight at unload.
    #[error("blobstore busy")]
    StoreBusy,
    /// The blob has invalid-flag bits this library does not know: it cannot
    /// be opened (SPDK's rule).
    #[error("blob {blob:#x} has unknown flags {flags:#x}")]
    UnknownFlags {
        /// The blob.
        blob: BlobId,
        /// Its invalid flags.
        flags: u64,
    },
    /// The blob's data or metadata is read-only.
    #[error("blob {0:#x} is read-only")]
    ReadOnly(BlobId),
    /// A cluster index past the blob's end.
    #[error("cluster {index} beyond the end of blob {blob:#x} ({num_clusters} clusters)")]
    OutOfRange {
        /// The blob.
        blob: BlobId,
        /// The index asked for.
        index: u64,
        /// The blob's size.
        num_clusters: u64,
    },
    /// An xattr does not fit in one metadata page.
    #[error("xattr too large")]
    XattrTooLarge,
    /// No such xattr.
    #[error("xattr not found")]
    XattrNotFound,
    /// The device cannot grow the store: no growth, or past what the
    /// used-cluster mask's room allows.
    #[error("cannot grow the blobstore")]
    CannotGrow,
    /// A metadata write failed earlier; the in-memory state may differ from
    /// the disk, so the store refuses further metadata changes (reload it).
    #[error("blobstore failed after a metadata write error")]
    Failed,
    /// The store was unloaded.
    #[error("blobstore unloaded")]
    Unloaded,
    /// The external snapshot is already the blob's parent (SPDK's EEXIST).
    #[error("blob {0:#x} already has this external snapshot as its parent")]
    AlreadyExternal(BlobId),
    /// The snapshot is already the blob's parent (SPDK's EEXIST).
    #[error("blob {blob:#x} already has parent {parent:#x}")]
    AlreadyParent {
        /// The blob.
        blob: BlobId,
        /// Its parent.
        parent: BlobId,
    },
    /// A snapshot with more than one clone cannot be deleted (SPDK's EBUSY).
    #[error("blob {0:#x} has more than one clone")]
    HasClones(BlobId),
}

impl Error {
    /// The errno for JSON-RPC answers and I/O statuses (SPDK's codes where
    /// SPDK has one for the case).
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::Device { source, .. } => source.errno(),
            Error::BadSuper(_)
            | Error::UnsupportedVersion(_)
            | Error::SizeMismatch { .. }
            | Error::BadMask { .. }
            | Error::CorruptBlob { .. }
            | Error::ClaimedTwice { .. } => libc::EILSEQ,
            Error::BstypeMismatch => libc::ENXIO,
            Error::InvalidArgument(_) | Error::UnknownFlags { .. } | Error::OutOfRange { .. } => {
                libc::EINVAL
            }
            Error::Unsupported(_) => libc::ENOTSUP,
            Error::NoSpace | Error::CannotGrow => libc::ENOSPC,
            // SPDK answers ENOMEM for both.
            Error::NoMetadataSpace | Error::XattrTooLarge => libc::ENOMEM,
            Error::NotFound(_) | Error::XattrNotFound => libc::ENOENT,
            Error::Busy(_) | Error::StoreBusy | Error::HasClones(_) => libc::EBUSY,
            Error::AlreadyParent { .. } | Error::AlreadyExternal(_) => libc::EEXIST,
            Error::ReadOnly(_) => libc::EPERM,
            Error::Failed => libc::EIO,
            Error::Unloaded => libc::ENODEV,
        }
    }

    /// Whether this is a device error (the store is then failed).
    #[must_use]
    pub fn is_device_error(&self) -> bool {
        matches!(self, Error::Device { .. })
    }
}

/// Blobstore result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_errnos() {
        let e = Error::NotFound(0x1_0000_0002);
        assert_eq!(e.to_string(), "blob 0x100000002 not found");
        assert_eq!(e.errno(), libc::ENOENT);
        let e = Error::CorruptBlob {
            blob: 1,
            page: 3,
            reason: Corruption::BadCrc,
        };
        assert_eq!(e.errno(), libc::EILSEQ);
        assert_eq!(
            std::error::Error::source(&e).map(|s| s.to_string()),
            Some("bad crc".into())
        );
        assert_eq!(Error::BstypeMismatch.errno(), libc::ENXIO);
    }
}
