//! Opening the backing file or block device and reading its geometry.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};

use crate::error::{Error, Result};
use crate::sys;

/// What the backing file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A regular file.
    Regular,
    /// A block device.
    Block,
}

/// An opened backing file.
#[derive(Debug)]
pub(crate) struct Backing {
    pub(crate) file: File,
    pub(crate) kind: Kind,
    /// Opened with `O_DIRECT`.
    pub(crate) direct: bool,
    /// Size in bytes.
    pub(crate) size: u64,
    /// Logical block size reported by the device (0 for regular files).
    pub(crate) detected_block_size: u32,
    /// A block device, or a file on a file system with a backing device
    /// (not tmpfs and other memory file systems, whose device number has
    /// major 0).
    pub(crate) device_backed: bool,
}

/// Opens `path` with `O_DIRECT`, or buffered when the file system refuses
/// `O_DIRECT` (logged, as SPDK does). `O_NONBLOCK` during `open` keeps a
/// FIFO from blocking the reactor; it is cleared again.
pub(crate) fn open(path: &str, readonly: bool) -> Result<Backing> {
    let try_open = |direct: bool| {
        let mut flags = libc::O_NONBLOCK;
        if direct {
            flags |= libc::O_DIRECT;
        }
        OpenOptions::new()
            .read(true)
            .write(!readonly)
            .custom_flags(flags)
            .open(path)
    };
    let open_err = |source: io::Error| Error::Open {
        path: path.to_string(),
        source,
    };
    let (file, direct) = match try_open(true) {
        Ok(f) => (f, true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            tracing::info!(path, "O_DIRECT not supported; falling back to buffered I/O");
            (try_open(false).map_err(open_err)?, false)
        }
        Err(e) => return Err(open_err(e)),
    };
    sys::clear_nonblock(&file).map_err(open_err)?;
    let size_err = |source: io::Error| Error::Size {
        path: path.to_string(),
        source,
    };
    let meta = file.metadata().map_err(size_err)?;
    let ft = meta.file_type();
    let (kind, size, detected_block_size) = if ft.is_block_device() {
        let (size, bs) = sys::blockdev_geometry(&file).map_err(size_err)?;
        (Kind::Block, size, bs)
    } else if ft.is_file() {
        (Kind::Regular, meta.len(), 0)
    } else if ft.is_dir() {
        return Err(Error::IsDirectory(path.to_string()));
    } else {
        return Err(Error::UnsupportedFileType(path.to_string()));
    };
    let device_backed = kind == Kind::Block || libc::major(meta.dev()) != 0;
    Ok(Backing {
        file,
        kind,
        direct,
        size,
        detected_block_size,
        device_backed,
    })
}

/// Current size in bytes of an open backing file.
pub(crate) fn size(file: &File, kind: Kind) -> io::Result<u64> {
    match kind {
        Kind::Block => sys::blockdev_geometry(file).map(|(s, _)| s),
        Kind::Regular => file.metadata().map(|m| m.len()),
    }
}

/// The block size to use: `requested` (0 = auto: the device's, or 512 for
/// files), which must be a power of two, >= 512 and >= the device's.
pub(crate) fn choose_block_size(requested: u32, detected: u32) -> Result<u32> {
    let bs = if requested == 0 {
        detected.max(512)
    } else {
        requested
    };
    if bs < 512 || !bs.is_power_of_two() || bs < detected {
        return Err(Error::InvalidBlockSize {
            block_size: requested,
            detected,
        });
    }
    Ok(bs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_rules() {
        assert_eq!(choose_block_size(0, 0).unwrap(), 512);
        assert_eq!(choose_block_size(0, 4096).unwrap(), 4096);
        assert_eq!(choose_block_size(4096, 512).unwrap(), 4096);
        assert!(choose_block_size(256, 0).is_err());
        assert!(choose_block_size(1536, 0).is_err());
        assert!(choose_block_size(512, 4096).is_err());
    }
}
