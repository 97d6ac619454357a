//! The unix socket listener and its lock file.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use mio::net::UnixListener;

use crate::Error;

/// `sun_path` is 108 bytes including the terminating NUL.
const SUN_PATH_MAX: usize = 107;

/// The unix listener with its lock file; dropping it removes both files.
pub(super) struct UnixSide {
    pub(super) listener: Option<UnixListener>,
    pub(super) path: PathBuf,
    lock_path: PathBuf,
    socket_created: bool,
    // Held (locked) until after the files are removed in `drop`.
    _lock: File,
}

impl Drop for UnixSide {
    fn drop(&mut self) {
        self.listener = None;
        if self.socket_created {
            if let Err(e) = fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "remove rpc socket");
            }
        }
        if let Err(e) = fs::remove_file(&self.lock_path) {
            tracing::warn!(path = %self.lock_path.display(), error = %e, "remove rpc lock file");
        }
    }
}

pub(super) fn bind_unix(path: &Path) -> Result<UnixSide, Error> {
    let mut lock_os = path.as_os_str().to_owned();
    lock_os.push(".lock");
    let lock_path = PathBuf::from(lock_os);
    let len = lock_path.as_os_str().len();
    if len > SUN_PATH_MAX {
        return Err(Error::BindPathTooLong {
            path: path.into(),
            len,
            max: SUN_PATH_MAX,
        });
    }
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|source| Error::BindLock {
            path: lock_path.clone(),
            source,
        })?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Err(Error::BindInUse { path: path.into() }),
        Err(fs::TryLockError::Error(source)) => {
            return Err(Error::BindLock {
                path: lock_path,
                source,
            })
        }
    }
    // From here on the guard owns the lock: any failure removes the lock file again.
    let mut side = UnixSide {
        listener: None,
        path: path.into(),
        lock_path,
        socket_created: false,
        _lock: lock,
    };
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            fs::remove_file(path).map_err(|source| Error::BindRemoveStale {
                path: path.into(),
                source,
            })?;
            tracing::info!(path = %path.display(), "removed stale rpc socket");
        }
        Ok(_) => return Err(Error::BindNotSocket { path: path.into() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(Error::BindRemoveStale {
                path: path.into(),
                source,
            })
        }
    }
    let listener = UnixListener::bind(path).map_err(|source| Error::BindUnix {
        path: path.into(),
        source,
    })?;
    side.socket_created = true;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(|source| {
        Error::BindUnix {
            path: path.into(),
            source,
        }
    })?;
    side.listener = Some(listener);
    Ok(side)
}
