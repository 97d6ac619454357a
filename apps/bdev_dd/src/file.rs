//! The file sides of a copy: opening (spdk_dd's flags and modes), what the
//! plan needs to know (size, block size), where an input file has data
//! (`--sparse`), and the output file's final length. Called from the main
//! thread, never from a reactor: these are blocking calls.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::plan::{DataMap, Side};

/// The block size of a regular file opened `direct`: the alignment of
/// offsets and lengths most file systems take (those with 4 KiB logical
/// blocks want `--bs` and offsets in 4 KiB; the kernel says `EINVAL`).
pub const DIRECT_FILE_BLOCK: u64 = 512;

/// What kind of file a side is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    Regular,
    /// A block device.
    Block,
    /// A character device (`/dev/zero`, `/dev/null`, ...).
    Char,
}

/// An open file side.
#[derive(Debug)]
pub struct FileSide {
    /// The open file (positioned I/O only).
    pub file: File,
    /// Its path, for messages.
    pub path: PathBuf,
    /// What it is.
    pub kind: Kind,
    /// Size and block size, as the plan sees them.
    pub side: Side,
}

/// An OS error as spdk_dd prints it: `strerror` text only.
pub fn strerror(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

fn open_failed(path: &Path, e: &io::Error) -> anyhow::Error {
    anyhow::anyhow!("Could not open file {}: {}", path.display(), strerror(e))
}

/// Refuses what cannot be read or written at an offset (before `open`,
/// which would block on a FIFO).
fn check_type(path: &Path) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(m) => {
            let t = m.file_type();
            if t.is_dir() {
                return Err(open_failed(
                    path,
                    &io::Error::from_raw_os_error(libc::EISDIR),
                ));
            }
            if t.is_fifo() || t.is_socket() {
                bail!(
                    "Could not open file {}: a FIFO or socket cannot be read or written at an offset",
                    path.display()
                );
            }
            Ok(())
        }
        // Opening says it better (or creates the output).
        Err(_) => Ok(()),
    }
}

fn describe(file: File, path: &Path, flags: i32, input: bool) -> Result<FileSide> {
    let meta = file.metadata().map_err(|e| open_failed(path, &e))?;
    let t = meta.file_type();
    let direct = flags & libc::O_DIRECT != 0;
    let (kind, size, block_size) = if t.is_block_device() {
        let (size, bs) = bdevkit_kfile::blockdev_geometry(&file).map_err(|e| {
            anyhow::anyhow!("{}: block device size: {}", path.display(), strerror(&e))
        })?;
        (Kind::Block, Some(size), u64::from(bs.max(1)))
    } else if t.is_file() {
        // An output file grows to whatever the copy writes.
        let size = input.then_some(meta.len());
        let bs = if direct { DIRECT_FILE_BLOCK } else { 1 };
        (Kind::Regular, size, bs)
    } else {
        (Kind::Char, None, 1)
    };
    Ok(FileSide {
        file,
        path: path.to_path_buf(),
        kind,
        side: Side { size, block_size },
    })
}

/// Opens an input file with `flags` (`--iflag`).
///
/// # Errors
/// spdk_dd's "Could not open file PATH: REASON"; FIFOs and sockets.
pub fn open_input(path: &Path, flags: i32) -> Result<FileSide> {
    check_type(path)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| open_failed(path, &e))?;
    describe(file, path, flags, true)
}

/// Opens (creates, mode 0600 as spdk_dd) an output file with `flags`
/// (`--oflag`). A regular file is truncated later, by [`FileSide::truncate`],
/// once the copy has been checked: a refused copy leaves it as it was.
///
/// # Errors
/// As [`open_input`].
pub fn open_output(path: &Path, flags: i32) -> Result<FileSide> {
    check_type(path)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| open_failed(path, &e))?;
    describe(file, path, flags, false)
}

impl FileSide {
    /// Truncates a regular output file (spdk_dd opens it `O_TRUNC`).
    ///
    /// # Errors
    /// What `ftruncate` says.
    pub fn truncate(&self) -> Result<()> {
        if self.kind == Kind::Regular {
            self.file.set_len(0).map_err(|e| {
                anyhow::anyhow!(
                    "Could not truncate {}: {}",
                    self.path.display(),
                    strerror(&e)
                )
            })?;
        }
        Ok(())
    }

    /// Gives a regular output file its final length `end`: holes at the
    /// end (`--sparse`) become part of it, and a last write rounded up to
    /// the block size (`direct`) is cut back.
    ///
    /// # Errors
    /// What `fstat` or `ftruncate` say.
    pub fn finish_output(&self, end: u64) -> Result<()> {
        if self.kind != Kind::Regular {
            return Ok(());
        }
        let fail = |e: io::Error| {
            anyhow::anyhow!(
                "Could not truncate output file for finalize: {}: {}",
                self.path.display(),
                strerror(&e)
            )
        };
        let len = self.file.metadata().map_err(fail)?.len();
        if len != end {
            self.file.set_len(end).map_err(fail)?;
        }
        Ok(())
    }

    /// Where a regular input file holds data in `[start, end)`; `None`
    /// when it cannot tell (not a regular file, or a file system without
    /// `SEEK_DATA`): then everything counts as data.
    ///
    /// # Errors
    /// What `lseek` says, but for "cannot tell".
    pub fn data_map(&self, start: u64, end: u64) -> Result<Option<DataMap>> {
        if self.kind != Kind::Regular {
            return Ok(None);
        }
        let mut ranges = Vec::new();
        let mut pos = start;
        while pos < end {
            let data = match bdevkit_kfile::seek_data(&self.file, pos) {
                Ok(Some(d)) => d,
                Ok(None) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(None),
                Err(e) => bail!(
                    "Could not seek input file for data: {}: {}",
                    self.path.display(),
                    strerror(&e)
                ),
            };
            if data >= end {
                break;
            }
            let hole = bdevkit_kfile::seek_hole(&self.file, data).map_err(|e| {
                anyhow::anyhow!(
                    "Could not seek input file for hole: {}: {}",
                    self.path.display(),
                    strerror(&e)
                )
            })?;
            ranges.push((data, hole.min(end)));
            pos = hole;
        }
        Ok(Some(DataMap::new(ranges)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("bdev_dd-file-{}-{name}", std::process::id()))
    }

    #[test]
    fn sides_of_each_kind() {
        let p = tmp("regular");
        std::fs::write(&p, vec![7u8; 10_000]).unwrap();
        let f = open_input(&p, 0).unwrap();
        assert_eq!(f.kind, Kind::Regular);
        assert_eq!(
            f.side,
            Side {
                size: Some(10_000),
                block_size: 1
            }
        );
        let o = open_output(&p, 0).unwrap();
        assert_eq!(
            o.side,
            Side {
                size: None,
                block_size: 1
            }
        );
        // Not truncated until asked.
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 10_000);
        o.truncate().unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
        o.finish_output(5000).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 5000);
        std::fs::remove_file(&p).unwrap();

        let z = open_input(Path::new("/dev/zero"), 0).unwrap();
        assert_eq!((z.kind, z.side.size), (Kind::Char, None));
    }

    #[test]
    fn open_errors_read_like_spdk_dd() {
        let e = open_input(Path::new("/nonexistent/bdev_dd"), 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Could not open file /nonexistent/bdev_dd: No such file or directory"
        );
        let e = open_input(&std::env::temp_dir(), 0).unwrap_err();
        assert!(e.to_string().ends_with(": Is a directory"), "{e}");
        let e = open_output(Path::new("/nonexistent/dir/out"), 0).unwrap_err();
        assert!(e.to_string().starts_with("Could not open file"), "{e}");
    }

    #[test]
    fn data_map_of_a_sparse_file() {
        let p = tmp("sparse");
        let f = std::fs::File::create(&p).unwrap();
        f.write_all_at(&[1u8; 4096], 64 << 10).unwrap();
        f.set_len(1 << 20).unwrap();
        let s = open_input(&p, 0).unwrap();
        std::fs::remove_file(&p).unwrap();
        let Some(m) = s.data_map(0, 1 << 20).unwrap() else {
            println!("file system cannot tell holes; skipped");
            return;
        };
        if m.ranges() == [(0, 1 << 20)] {
            println!("file system reports no holes; skipped");
            return;
        }
        assert!(m.has_data(64 << 10, (64 << 10) + 1));
        assert!(!m.has_data(0, 64 << 10));
        assert!(!m.has_data(68 << 10, 1 << 20));
        // A window after the data: nothing.
        assert_eq!(
            s.data_map(128 << 10, 1 << 20).unwrap().unwrap().ranges(),
            &[]
        );
    }
}
