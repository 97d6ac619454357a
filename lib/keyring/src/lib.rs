//! The keyring: named keys, each read from a file when it is used, as
//! SPDK's `keyring_file` module keeps them (`keyring_file_add_key`,
//! `keyring_file_remove_key`, `keyring_get_keys`).
//!
//! A key is a name and an absolute path. Adding it checks that the file
//! exists, belongs to this process's user and is not readable or writable
//! by anyone else (mode `0600` or stricter, SPDK's rule); every use reads
//! the file again with the same checks, so a key rotated on disk is the
//! one used next. The key material never leaves this crate other than
//! parsed into a [`Secret`] or [`TlsPsk`] for the protocol code: it
//! appears in no log, error, RPC result or saved config (which records
//! names and paths).
//!
//! A removed key stays usable by those who hold it (a [`KeyRef`], as
//! SPDK's reference count) and is listed as `removed` until they let go.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod rpc;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bdevkit_nvme_auth::{Secret, TlsPsk};
use parking_lot::Mutex;
use serde_json::{json, Value};
use zeroize::Zeroizing;

/// The module name SPDK shows for these keys.
pub const MODULE: &str = "keyring_file";
/// Largest key file read (a DHHC-1 secret of 64 bytes is 103 characters).
const MAX_KEY_FILE: u64 = 4096;

/// What fails here. Messages name keys and paths, never key material.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A key of that name exists.
    #[error("key '{0}' already exists")]
    Exists(String),
    /// No key of that name.
    #[error("key '{0}' does not exist")]
    NoKey(String),
    /// A name SPDK refuses (empty, or naming a keyring: `ring:name`).
    #[error("invalid key name '{0}'")]
    Name(String),
    /// A relative path.
    #[error("non-absolute paths are not allowed: {0}")]
    Relative(PathBuf),
    /// The file's mode or owner lets others read it.
    #[error("invalid permissions of key file '{path}': {why}")]
    Permissions {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The file cannot be read.
    #[error("could not read key file '{path}'")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file's content is not a key of the kind asked for.
    #[error("key '{name}' is not a valid {kind}")]
    Format {
        /// The key.
        name: String,
        /// What it should be.
        kind: &'static str,
        /// Why (no key material).
        #[source]
        source: bdevkit_nvme_auth::Error,
    },
}

impl Error {
    /// The errno SPDK answers with (positive).
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::Exists(_) => libc::EEXIST,
            Error::NoKey(_) => libc::ENOKEY,
            Error::Name(_) | Error::Format { .. } => libc::EINVAL,
            Error::Relative(_) | Error::Permissions { .. } => libc::EPERM,
            Error::Read { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

/// SPDK's checks of a key file: absolute, this user's, no access for
/// group or others; its size.
fn check_path(path: &Path) -> Result<u64, Error> {
    if !path.is_absolute() {
        return Err(Error::Relative(path.to_path_buf()));
    }
    let md = std::fs::metadata(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if md.mode() & 0o077 != 0 {
        return Err(Error::Permissions {
            path: path.to_path_buf(),
            why: format!(
                "0{:o}, required 0{:o}",
                md.mode() & 0o777,
                md.mode() & 0o700
            ),
        });
    }
    let uid = current_uid();
    if md.uid() != uid {
        return Err(Error::Permissions {
            path: path.to_path_buf(),
            why: format!("owner {}, must be {uid}", md.uid()),
        });
    }
    Ok(md.len())
}

fn current_uid() -> u32 {
    // The owner of this process's /proc entry is its user (avoids an
    // unsafe getuid() call in a crate that forbids unsafe code).
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
}

#[derive(Debug)]
struct KeyEntry {
    name: String,
    path: PathBuf,
    removed: Mutex<bool>,
}

/// A held key: usable until dropped, even if the key is removed meanwhile.
#[derive(Debug, Clone)]
pub struct KeyRef(Arc<KeyEntry>);

impl KeyRef {
    /// The key's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The file's content, read now (with the permission checks).
    ///
    /// # Errors
    /// As [`Keyring::add_file_key`]'s checks, or the read failing.
    pub fn read(&self) -> Result<Zeroizing<String>, Error> {
        let size = check_path(&self.0.path)?;
        if size > MAX_KEY_FILE {
            return Err(Error::Read {
                path: self.0.path.clone(),
                source: std::io::Error::other("key file too large"),
            });
        }
        let bytes = Zeroizing::new(std::fs::read(&self.0.path).map_err(|source| Error::Read {
            path: self.0.path.clone(),
            source,
        })?);
        let text = std::str::from_utf8(&bytes).map_err(|_| Error::Read {
            path: self.0.path.clone(),
            source: std::io::Error::other("key file is not text"),
        })?;
        Ok(Zeroizing::new(text.trim().to_string()))
    }

    /// The key as a DH-HMAC-CHAP secret (`DHHC-1:...`).
    ///
    /// # Errors
    /// [`Error::Format`] when it is not one, or the read failing.
    pub fn secret(&self) -> Result<Secret, Error> {
        Secret::parse(&self.read()?).map_err(|source| Error::Format {
            name: self.0.name.clone(),
            kind: "DH-HMAC-CHAP key",
            source,
        })
    }

    /// The key as a TLS PSK (`NVMeTLSkey-1:...`).
    ///
    /// # Errors
    /// [`Error::Format`] when it is not one, or the read failing.
    pub fn tls_psk(&self) -> Result<TlsPsk, Error> {
        TlsPsk::parse(&self.read()?).map_err(|source| Error::Format {
            name: self.0.name.clone(),
            kind: "TLS PSK",
            source,
        })
    }
}

/// An application's keys.
#[derive(Debug, Default)]
pub struct Keyring {
    keys: Mutex<Vec<Arc<KeyEntry>>>,
    /// Removed keys still held somewhere.
    removed: Mutex<Vec<std::sync::Weak<KeyEntry>>>,
}

impl Keyring {
    /// An empty keyring.
    #[must_use]
    pub fn new() -> Keyring {
        Keyring::default()
    }

    /// `keyring_file_add_key`: adds key `name` read from `path`.
    ///
    /// # Errors
    /// `EEXIST` a key of that name; `EINVAL` a bad name; `EPERM` a
    /// relative path or a file others may read; the stat's errno.
    pub fn add_file_key(&self, name: &str, path: &Path) -> Result<(), Error> {
        if name.is_empty() || name.find(':').is_some_and(|i| i > 0) {
            return Err(Error::Name(name.to_string()));
        }
        check_path(path)?;
        let mut keys = self.keys.lock();
        if keys.iter().any(|k| k.name == name) {
            return Err(Error::Exists(name.to_string()));
        }
        keys.push(Arc::new(KeyEntry {
            name: name.to_string(),
            path: path.to_path_buf(),
            removed: Mutex::new(false),
        }));
        tracing::info!(key = name, path = %path.display(), "key added");
        Ok(())
    }

    /// `keyring_file_remove_key`.
    ///
    /// # Errors
    /// `ENOKEY` when there is no such key.
    pub fn remove_key(&self, name: &str) -> Result<(), Error> {
        let mut keys = self.keys.lock();
        let i = keys
            .iter()
            .position(|k| k.name == name)
            .ok_or_else(|| Error::NoKey(name.to_string()))?;
        let k = keys.remove(i);
        *k.removed.lock() = true;
        self.removed.lock().push(Arc::downgrade(&k));
        tracing::info!(key = name, "key removed");
        Ok(())
    }

    /// The key called `name`, held.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<KeyRef> {
        self.keys
            .lock()
            .iter()
            .find(|k| k.name == name)
            .map(|k| KeyRef(Arc::clone(k)))
    }

    /// `keyring_get_keys`: every key (and removed ones still held), as
    /// SPDK lists them: name, module, removed, probed, refcnt, path.
    #[must_use]
    pub fn keys_json(&self) -> Vec<Value> {
        let mut out: Vec<Value> = self
            .keys
            .lock()
            .iter()
            .map(|k| {
                json!({"name": k.name, "module": MODULE, "removed": false, "probed": false,
                    "refcnt": Arc::strong_count(k), "path": k.path.display().to_string()})
            })
            .collect();
        let mut removed = self.removed.lock();
        removed.retain(|w| w.strong_count() > 0);
        out.extend(
            removed
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .map(|k| {
                    json!({"name": k.name, "module": MODULE, "removed": true, "probed": false,
                "refcnt": Arc::strong_count(&k) - 1})
                }),
        );
        out
    }

    /// The `keyring` section of a saved config: one
    /// `keyring_file_add_key` per key (names and paths only).
    #[must_use]
    pub fn config_json(&self) -> Vec<Value> {
        self.keys
            .lock()
            .iter()
            .map(|k| {
                json!({"method": "keyring_file_add_key",
                    "params": {"name": k.name, "path": k.path.display().to_string()}})
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn key_file(dir: &Path, name: &str, body: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn keys_are_added_checked_listed_removed_and_saved_without_material() {
        let d = tempfile::tempdir().unwrap();
        let secret = Secret::generate(32, None).unwrap().to_interchange();
        let good = key_file(d.path(), "k0", &format!("{secret}\n"), 0o600);
        let open = key_file(d.path(), "k1", &secret, 0o644);
        let kr = Keyring::new();
        kr.add_file_key("key0", &good).unwrap();
        assert_eq!(
            kr.add_file_key("key0", &good).unwrap_err().errno(),
            libc::EEXIST
        );
        assert_eq!(
            kr.add_file_key("key1", &open).unwrap_err().errno(),
            libc::EPERM
        );
        assert_eq!(
            kr.add_file_key("key2", Path::new("relative"))
                .unwrap_err()
                .errno(),
            libc::EPERM
        );
        assert_eq!(
            kr.add_file_key("key3", &d.path().join("none"))
                .unwrap_err()
                .errno(),
            libc::ENOENT
        );
        assert_eq!(
            kr.add_file_key("ring:key", &good).unwrap_err().errno(),
            libc::EINVAL
        );
        let held = kr.get("key0").unwrap();
        assert_eq!(held.secret().unwrap().to_interchange(), secret);
        assert!(held.tls_psk().is_err(), "not a PSK");
        let listed = serde_json::to_string(&kr.keys_json()).unwrap();
        let saved = serde_json::to_string(&kr.config_json()).unwrap();
        for text in [&listed, &saved] {
            assert!(!text.contains(&secret[10..30]), "key material in {text}");
        }
        assert!(saved.contains("keyring_file_add_key") && saved.contains("k0"));
        kr.remove_key("key0").unwrap();
        assert_eq!(kr.remove_key("key0").unwrap_err().errno(), libc::ENOKEY);
        assert!(kr.get("key0").is_none());
        let l = kr.keys_json();
        assert_eq!(l[0]["removed"], true, "still held");
        assert!(held.secret().is_ok(), "a held key stays usable");
        drop(held);
        assert!(kr.keys_json().is_empty());
        // A key file made readable after it was added is refused at use.
        kr.add_file_key("key4", &good).unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(
            kr.get("key4").unwrap().read().unwrap_err().errno(),
            libc::EPERM
        );
    }
}
