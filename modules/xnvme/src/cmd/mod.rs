//! The `io_uring_cmd` mechanism: NVMe commands through the kernel's
//! io_uring passthrough on the namespace's generic char device
//! (`/dev/ngXnY`), admin commands on the controller's (`/dev/nvmeX`).
//!
//! Creation (blocking, on the app thread; never on the I/O path): open the
//! char device, its namespace id (`NVME_IOCTL_ID`), Identify Controller,
//! Identify Namespace and the NVM command set Identify Controller through
//! `NVME_IOCTL_ADMIN_CMD` ([`geometry`] turns them into the bdev's
//! geometry and limits), the kernel's limits from sysfs, the controller's
//! char device for admin passthrough, and whether the namespace serves
//! polled I/O (for `conserve_cpu` false).

pub(crate) mod build;
pub(crate) mod engine;
pub(crate) mod geometry;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use bdevkit::bdev::module::{BdevIo, BdevOps, BdevProps, BoxError, IoStatus, IoType};
use bdevkit::dma::DmaBuf;
use bdevkit::thread::{IoChannel, IoDevice};
use bdevkit_nvme_spec::admin::Identify;
use bdevkit_nvme_spec::identify::{
    DeallocatedRead, IdentifyController, IdentifyNamespace, NvmIdentifyController,
};
use bdevkit_nvme_spec::zerocopy::FromBytes;
use bdevkit_nvme_spec::Command;
use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::sys;
use build::NsParams;
use engine::{CmdGroup, Files, Target, PLAIN, POLLED};
use geometry::{KernelLimits, Namespace};

/// Log2 of the buffer alignment: NVMe wants dword-aligned data pointers
/// (the kernel bounces anything else).
const ALIGNMENT_SHIFT: u8 = 2;

/// An `io_uring_cmd` bdev: the namespace's files and what Identify said.
#[derive(Debug)]
pub struct CmdBdev {
    ns_file: File,
    ctrl_file: Option<File>,
    ctrl_path: Option<PathBuf>,
    ns: Namespace,
    polled: bool,
    spin: bool,
    groups: IoDevice<CmdGroup>,
}

impl CmdBdev {
    /// Opens the namespace at `path` and reads what the bdev needs
    /// (blocking). `conserve_cpu` false asks for polled I/O (`IOPOLL` when
    /// the namespace has poll queues, probed) and keeps the poller spinning
    /// while I/O is out; true lets an interrupt-mode reactor sleep.
    ///
    /// # Errors
    /// [`Error::Open`], [`Error::NotCharDevice`] (a block device or a
    /// file), [`Error::NotNvme`], the Identify failures, and what
    /// [`Namespace::from_identify`] refuses.
    pub(crate) fn open(
        path: &str,
        conserve_cpu: bool,
        groups: IoDevice<CmdGroup>,
    ) -> Result<CmdBdev> {
        let open_err = |source| Error::Open {
            path: path.to_string(),
            source,
        };
        let ns_file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(open_err)?;
        let meta = ns_file.metadata().map_err(open_err)?;
        let ft = meta.file_type();
        if !ft.is_char_device() {
            let what = if ft.is_block_device() {
                "a block device"
            } else if ft.is_dir() {
                "a directory"
            } else {
                "not a char device"
            };
            return Err(Error::NotCharDevice {
                path: path.to_string(),
                what,
            });
        }
        let nsid = sys::namespace_id(ns_file.as_raw_fd()).map_err(|source| Error::NotNvme {
            path: path.to_string(),
            source,
        })?;
        let fd = ns_file.as_raw_fd();
        let ctrl = identify::<IdentifyController>(fd, &Identify::controller(), "controller")?;
        let idns = identify::<IdentifyNamespace>(fd, &Identify::namespace(nsid), "namespace")?;
        let nvm = match identify::<NvmIdentifyController>(
            fd,
            &Identify::nvm_controller(),
            "NVM controller",
        ) {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::info!(path, error = %e, "no NVM command set controller data; DSM and Write Zeroes limits unknown");
                None
            }
        };
        let sysfs = Sysfs::of(meta.rdev());
        let ns = Namespace::from_identify(nsid, &ctrl, &idns, nvm.as_ref(), sysfs.limits())?;
        let (ctrl_file, ctrl_path) = match sysfs.controller() {
            Some(p) => match OpenOptions::new().read(true).write(true).open(&p) {
                Ok(f) => (Some(f), Some(p)),
                Err(e) => {
                    tracing::info!(path, controller = %p.display(), error = %e, "controller char device unavailable; no nvme_admin passthrough");
                    (None, None)
                }
            },
            None => {
                tracing::info!(
                    path,
                    "controller char device not found; no nvme_admin passthrough"
                );
                (None, None)
            }
        };
        let polled = !conserve_cpu && polled_io(&ns_file, &ns, &sysfs, path);
        Ok(CmdBdev {
            ns_file,
            ctrl_file,
            ctrl_path,
            ns,
            polled,
            spin: !conserve_cpu,
            groups,
        })
    }

    /// The bdev's properties (named `name`).
    pub(crate) fn props(&self, name: &str, product: &str) -> BdevProps {
        let n = &self.ns;
        let mut p = BdevProps::new(name, product, n.block_size, n.num_blocks);
        p.max_rw_size = n.max_rw_blocks;
        p.max_num_segments = n.max_segments;
        p.max_write_zeroes = n.max_write_zeroes;
        p.max_unmap = n.dsm.map_or(0, |d| d.max_unmap());
        p.write_cache = n.volatile_write_cache;
        p.required_alignment = ALIGNMENT_SHIFT;
        p
    }

    /// Namespace id.
    #[must_use]
    pub fn nsid(&self) -> u32 {
        self.ns.nsid
    }

    /// Whether the bdev's I/O goes through the threads' `IOPOLL` rings.
    #[must_use]
    pub fn is_polled(&self) -> bool {
        self.polled
    }

    /// The controller's serial number, from Identify.
    #[must_use]
    pub fn serial(&self) -> &str {
        &self.ns.serial
    }

    /// What the bdev adds to its `driver_specific` info.
    pub(crate) fn details(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("nsid".into(), json!(self.ns.nsid));
        let ctrl = self.ctrl_path.as_ref().map(|p| p.display().to_string());
        m.insert("controller".into(), json!(ctrl));
        m.insert("iopoll".into(), json!(self.polled));
        m.insert("serial_number".into(), json!(self.ns.serial));
        m.insert("model_number".into(), json!(self.ns.model));
        let dealloc = match self.ns.deallocated_read {
            DeallocatedRead::Zeroes => "zeroes",
            DeallocatedRead::Ones => "ones",
            DeallocatedRead::NotReported | DeallocatedRead::Reserved(_) => "not reported",
        };
        m.insert("deallocated_read".into(), json!(dealloc));
        m
    }

    fn params(&self) -> NsParams {
        NsParams {
            nsid: self.ns.nsid,
            flush: self.ns.volatile_write_cache,
            dsm: self.ns.dsm,
        }
    }
}

/// Per-thread channel of an `io_uring_cmd` bdev: the thread's group and
/// the bdev's place in it.
#[derive(Debug)]
pub struct CmdChannel {
    group: IoChannel<CmdGroup>,
    target: Target,
    spin: bool,
}

impl Drop for CmdChannel {
    fn drop(&mut self) {
        engine::detach(&self.group, self.target.ring, self.spin);
    }
}

impl BdevOps for CmdBdev {
    type Channel = CmdChannel;

    fn create_channel(&self) -> std::result::Result<CmdChannel, BoxError> {
        let group = self.groups.get_channel()?;
        let ring = engine::attach(&group, self.polled, self.spin);
        debug_assert!(ring == PLAIN || ring == POLLED);
        let target = Target {
            ns: self.params(),
            files: Files {
                ns: self.ns_file.as_raw_fd(),
                ctrl: self.ctrl_file.as_ref().map(AsRawFd::as_raw_fd),
            },
            ring,
        };
        Ok(CmdChannel {
            group,
            target,
            spin: self.spin,
        })
    }

    #[inline]
    fn submit(&self, ch: &CmdChannel, io: BdevIo) {
        ch.group.queue(io, ch.target);
    }

    fn io_type_supported(&self, io_type: IoType) -> bool {
        let n = &self.ns;
        match io_type {
            IoType::Read | IoType::Write | IoType::Flush | IoType::NvmeIo => true,
            IoType::WriteZeroes => n.max_write_zeroes > 0,
            IoType::Unmap => n.dsm.is_some(),
            IoType::Compare => n.compare,
            IoType::NvmeAdmin => self.ctrl_file.is_some(),
            _ => false,
        }
    }
}

/// Identify data of type `T` (one of the 4096-byte structures) from
/// command `id` on `fd`.
fn identify<T: FromBytes>(fd: i32, id: &Identify, what: &'static str) -> Result<T> {
    let io_err = |source| Error::IdentifyIo { what, source };
    let mut buf = DmaBuf::alloc(4096, 4096)
        .map_err(|_| io_err(io::Error::from_raw_os_error(libc::ENOMEM)))?;
    buf.fill(0);
    let r = sys::admin_cmd(fd, &id.to_sqe(0), Some(&mut buf)).map_err(io_err)?;
    if r.status != 0 {
        return Err(Error::IdentifyStatus {
            what,
            status: r.status,
        });
    }
    T::read_from_bytes(&buf[..]).map_err(|_| io_err(io::Error::from_raw_os_error(libc::EINVAL)))
}

/// Whether the bdev uses polled I/O: the namespace's queue polls (sysfs
/// `io_poll`, where the namespace has a block device) and a polled read
/// completes on an `IOPOLL` ring. Falls back, with an `info!` line, where
/// not (SPDK's bdev_xnvme fails the I/O there instead).
fn polled_io(f: &File, ns: &Namespace, sysfs: &Sysfs, path: &str) -> bool {
    if sysfs.io_poll() == Some(false) {
        tracing::info!(
            path,
            "namespace has no poll queues (nvme poll_queues=0); polling the plain ring"
        );
        return false;
    }
    let probe = bdevkit_kfile::ring::probe_iopoll_nvme(f.as_raw_fd(), ns.nsid, ns.block_size)
        .and_then(|res| match build::status_of(res) {
            IoStatus::Success => Ok(()),
            IoStatus::Errno(e) => Err(io::Error::from_raw_os_error(e)),
            other => Err(io::Error::other(format!("polled read failed: {other:?}"))),
        });
    match probe {
        Ok(()) => true,
        Err(e) => {
            tracing::info!(path, error = %e, "polled passthrough I/O not supported; polling the plain ring");
            false
        }
    }
}

/// What sysfs says about a namespace's char device.
#[derive(Debug)]
struct Sysfs {
    /// `/sys/dev/char/MAJ:MIN` resolved (`.../nvme-generic/ngXnY`).
    dev: Option<PathBuf>,
}

impl Sysfs {
    fn of(rdev: u64) -> Sysfs {
        let link = format!("/sys/dev/char/{}:{}", libc::major(rdev), libc::minor(rdev));
        Sysfs {
            dev: std::fs::canonicalize(link).ok(),
        }
    }

    /// The namespace's block device directory (`/sys/block/nvmeXnY`): the
    /// generic device `ngXnY` is named after it.
    fn block(&self) -> Option<PathBuf> {
        let name = self.dev.as_ref()?.file_name()?.to_str()?;
        let rest = name.strip_prefix("ng")?;
        let p = Path::new("/sys/block").join(format!("nvme{rest}"));
        p.exists().then_some(p)
    }

    fn queue_attr(&self, attr: &str) -> Option<u64> {
        let p = self.block()?.join("queue").join(attr);
        std::fs::read_to_string(p).ok()?.trim().parse().ok()
    }

    fn limits(&self) -> KernelLimits {
        KernelLimits {
            max_transfer: self.queue_attr("max_hw_sectors_kb").map(|kb| kb * 1024),
            max_segments: self
                .queue_attr("max_segments")
                .and_then(|n| u32::try_from(n).ok()),
        }
    }

    fn io_poll(&self) -> Option<bool> {
        self.queue_attr("io_poll").map(|v| v != 0)
    }

    /// The controller's char device. The generic device's parent in sysfs
    /// is the controller (`nvmeX`), or with native multipath the NVMe
    /// subsystem (`nvme-subsysN`), whose controllers are its `nvmeX`
    /// entries (the first one with a node in `/dev`: admin commands reach
    /// the subsystem's namespaces through any of them).
    fn controller(&self) -> Option<PathBuf> {
        let parent = std::fs::canonicalize(self.dev.as_ref()?.join("device")).ok()?;
        let name = parent.file_name()?.to_str()?;
        if is_controller_name(name) {
            let p = Path::new("/dev").join(name);
            return p.exists().then_some(p);
        }
        let mut names: Vec<String> = std::fs::read_dir(&parent)
            .ok()?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| is_controller_name(n))
            .collect();
        names.sort();
        names
            .into_iter()
            .map(|n| Path::new("/dev").join(n))
            .find(|p| p.exists())
    }
}

/// `nvme` followed by digits: a controller's name.
fn is_controller_name(name: &str) -> bool {
    name.strip_prefix("nvme")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_names() {
        assert!(is_controller_name("nvme0") && is_controller_name("nvme12"));
        for n in ["nvme", "nvme0n1", "nvme-subsys0", "ng0n1", "nvme0c0n1"] {
            assert!(!is_controller_name(n), "{n}");
        }
    }
}
