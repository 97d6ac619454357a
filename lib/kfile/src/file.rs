//! Opening the backing file or block device, and its geometry (block
//! size, number of blocks, the bdev properties that follow from them).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};

use bdevkit::bdev::module::BdevProps;

use crate::error::{Error, Result};
use crate::sys;

/// What the backing file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    Regular,
    /// A block device.
    Block,
}

/// An opened backing file.
#[derive(Debug)]
pub struct Backing {
    /// The open file.
    pub file: File,
    /// What it is.
    pub kind: Kind,
    /// Opened with `O_DIRECT`.
    pub direct: bool,
    /// Size in bytes.
    pub size: u64,
    /// Logical block size reported by the device (0 for regular files).
    pub detected_block_size: u32,
    /// A block device, or a file on a file system with a backing device
    /// (not tmpfs and other memory file systems, whose device number has
    /// major 0).
    pub device_backed: bool,
}

/// Block size and size in blocks of a bdev over a backing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Block size in bytes (a power of two, >= 512).
    pub block_size: u32,
    /// log2 of `block_size`.
    pub block_shift: u32,
    /// Size in blocks (> 0).
    pub num_blocks: u64,
}

/// Opens `path` with `O_DIRECT`, or buffered when the file system refuses
/// `O_DIRECT` (logged, as SPDK does). `O_NONBLOCK` during `open` keeps a
/// FIFO from blocking the reactor; it is cleared again (io_uring would
/// turn it into `EAGAIN` completions).
///
/// # Errors
/// [`Error::Open`] with open's error, [`Error::Size`] when the file's type
/// or size cannot be read, [`Error::IsDirectory`], and
/// [`Error::UnsupportedFileType`] for anything but a regular file or a
/// block device.
pub fn open(path: &str, readonly: bool) -> Result<Backing> {
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

impl Backing {
    /// The geometry of a bdev over this file (at `path`) with block size
    /// `requested` (0 = auto, see [`choose_block_size`]).
    ///
    /// # Errors
    /// [`Error::InvalidBlockSize`], [`Error::SizeNotMultiple`] when the
    /// size is not a multiple of the block size, [`Error::Empty`].
    pub fn geometry(&self, path: &str, requested: u32) -> Result<Geometry> {
        let block_size = choose_block_size(requested, self.detected_block_size)?;
        if !self.size.is_multiple_of(u64::from(block_size)) {
            return Err(Error::SizeNotMultiple {
                path: path.to_string(),
                size: self.size,
                block_size,
            });
        }
        let num_blocks = self.size / u64::from(block_size);
        if num_blocks == 0 {
            return Err(Error::Empty(path.to_string()));
        }
        Ok(Geometry {
            block_size,
            block_shift: block_size.trailing_zeros(),
            num_blocks,
        })
    }
}

/// Current size in bytes of an open backing file.
///
/// # Errors
/// What `BLKGETSIZE64` or `fstat` report.
pub fn size(file: &File, kind: Kind) -> io::Result<u64> {
    match kind {
        Kind::Block => sys::blockdev_geometry(file).map(|(s, _)| s),
        Kind::Regular => file.metadata().map(|m| m.len()),
    }
}

/// The block size to use: `requested` (0 = auto: the device's, or 512 for
/// files), which must be a power of two, >= 512 and >= the device's.
///
/// # Errors
/// [`Error::InvalidBlockSize`].
pub fn choose_block_size(requested: u32, detected: u32) -> Result<u32> {
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

/// The properties of bdev `name` over a kernel file: the geometry,
/// buffers aligned to the block size (what `O_DIRECT` needs; the bdev
/// layer bounces others), a volatile write cache (flush is a real
/// `fdatasync`), and at most `IOV_MAX` segments per request (the kernel
/// refuses longer iovec arrays).
#[must_use]
pub fn props(name: &str, product_name: &str, g: Geometry) -> BdevProps {
    let mut props = BdevProps::new(name, product_name, g.block_size, g.num_blocks);
    props.required_alignment = u8::try_from(g.block_shift).unwrap_or(12);
    props.write_cache = true;
    // IOV_MAX: the kernel refuses longer iovec arrays.
    props.max_num_segments = 1024;
    props
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

    #[test]
    fn geometry_of_files() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("bdevkit-kfile-geo-{}", std::process::id()));
        let p = path.to_string_lossy().into_owned();
        File::create(&path).unwrap().set_len(1000).unwrap();
        let b = open(&p, true).unwrap();
        assert_eq!(
            (b.kind, b.size, b.detected_block_size),
            (Kind::Regular, 1000, 0)
        );
        let e = b.geometry(&p, 0).unwrap_err();
        assert!(matches!(
            e,
            Error::SizeNotMultiple {
                size: 1000,
                block_size: 512,
                ..
            }
        ));
        assert_eq!(e.errno(), libc::EINVAL);
        File::create(&path).unwrap().set_len(8192).unwrap();
        let b = open(&p, false).unwrap();
        let g = b.geometry(&p, 4096).unwrap();
        assert_eq!((g.block_size, g.block_shift, g.num_blocks), (4096, 12, 2));
        assert_eq!(props("k", "K", g).required_alignment, 12);
        File::create(&path).unwrap();
        let b = open(&p, false).unwrap();
        assert!(matches!(b.geometry(&p, 0), Err(Error::Empty(_))));
        std::fs::remove_file(&path).unwrap();
        let e = open(&p, false).unwrap_err();
        assert_eq!(e.errno(), libc::ENOENT);
        assert_eq!(
            open(&dir.to_string_lossy(), true).unwrap_err().errno(),
            libc::EISDIR
        );
    }
}
