//! The files and devices the kernel-file tests need: a zero-filled
//! temporary file, a loop device, a tiny tmpfs; each removed on drop.

use std::fs::{self, File, OpenOptions};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A zero-filled file, removed on drop.
#[derive(Debug)]
pub struct TempFile(pub PathBuf);

impl TempFile {
    /// A file of `size` bytes in `dir`, named `bdevkit-<tag>-<pid>-<n>`.
    ///
    /// # Panics
    /// When the file cannot be created.
    #[must_use]
    pub fn new(dir: &str, tag: &str, size: u64) -> TempFile {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = PathBuf::from(dir).join(format!("bdevkit-{tag}-{}-{n}", std::process::id()));
        File::create(&p)
            .and_then(|f| f.set_len(size))
            .unwrap_or_else(|e| panic!("create {}: {e}", p.display()));
        TempFile(p)
    }

    /// The path as a string.
    #[must_use]
    pub fn path(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }

    /// Sets the file's length (grows with zeroes or truncates).
    ///
    /// # Panics
    /// When the file cannot be opened or resized.
    pub fn set_len(&self, size: u64) {
        OpenOptions::new()
            .write(true)
            .open(&self.0)
            .and_then(|f| f.set_len(size))
            .unwrap_or_else(|e| panic!("resize {}: {e}", self.0.display()));
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// A loop device over a fresh tmpfs file; detached and removed on drop.
#[derive(Debug)]
pub struct LoopDevice {
    /// The device path (`/dev/loopN`).
    pub dev: String,
    file: PathBuf,
}

impl LoopDevice {
    /// A `size`-byte loop device with `sector`-byte logical sectors over a
    /// file named after `tag` (needs root and the loop driver).
    ///
    /// # Errors
    /// Why there is none (for the skip message).
    pub fn new(tag: &str, size: u64, sector: u32) -> Result<LoopDevice, String> {
        let file = PathBuf::from(format!(
            "/dev/shm/bdevkit-{tag}-loop-{}",
            std::process::id()
        ));
        File::create(&file)
            .and_then(|f| f.set_len(size))
            .map_err(|e| e.to_string())?;
        let out = Command::new("losetup")
            .args(["-f", "--show", "--sector-size", &sector.to_string()])
            .arg(&file)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            let _ = fs::remove_file(&file);
            return Err(format!(
                "losetup: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(LoopDevice { dev, file })
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        let _ = fs::remove_file(&self.file);
    }
}

/// A 64 KiB tmpfs mounted on a fresh directory; unmounted on drop.
#[derive(Debug)]
pub struct SmallTmpfs(pub PathBuf);

impl SmallTmpfs {
    /// Mounts it, the directory named after `tag` (needs root).
    ///
    /// # Errors
    /// Why it cannot be mounted (for the skip message).
    pub fn new(tag: &str) -> Result<SmallTmpfs, String> {
        let dir = std::env::temp_dir().join(format!("bdevkit-{tag}-enospc-{}", std::process::id()));
        fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&dir)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            let _ = fs::remove_dir(&dir);
            return Err(format!(
                "mount: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(SmallTmpfs(dir))
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = fs::remove_dir(&self.0);
    }
}
