//! The target: its controllers by name, the socket directory, and what
//! the RPCs do (SPDK's `vhost_create_blk_controller`,
//! `vhost_get_controllers`, `vhost_delete_controller`,
//! `vhost_controller_set_coalescing`, and the `vhost_blk` section of
//! `save_config`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bdevkit::bdev::{BdevEvent, BdevManager, IoType};
use bdevkit::thread::{CpuSet, RuntimeHandle, Thread};
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::blk::BlkInfo;
use crate::control::Parts;
use crate::ctrlr::Controller;
use crate::error::{Error, Result};
use crate::queue::Coalescing;
use crate::session::in_flight;

/// The one transport (SPDK's default, `VIRTIO_BLK_DEFAULT_TRANSPORT`).
pub const TRANSPORT: &str = "vhost_user_blk";
/// SPDK's default coalescing: off, threshold 60 000 IOPS.
pub const DEFAULT_COALESCING: Coalescing = Coalescing {
    delay_base_us: 0,
    iops_threshold: 60_000,
};

/// What `vhost_create_blk_controller` asks for.
#[derive(Debug, Clone, Default)]
pub struct BlkControllerOpts {
    /// Controller (and socket file) name.
    pub ctrlr: String,
    /// The bdev.
    pub dev_name: String,
    /// Cores of its queues (default: every core of the app).
    pub cpumask: Option<String>,
    /// `vhost_user_blk` (the default) is the only one.
    pub transport: Option<String>,
    /// The guest may not write.
    pub readonly: bool,
    /// Packed virtqueues: refused (split rings only).
    pub packed_ring: bool,
}

struct Inner {
    runtime: RuntimeHandle,
    mgr: BdevManager,
    socket_dir: Mutex<Option<PathBuf>>,
    ctrlrs: Mutex<BTreeMap<String, Arc<Controller>>>,
}

/// The vhost target of one application (SPDK's vhost library). Clone to
/// share.
#[derive(Clone)]
pub struct VhostTarget(Arc<Inner>);

impl std::fmt::Debug for VhostTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VhostTarget")
            .field("controllers", &self.0.ctrlrs.lock().len())
            .finish()
    }
}

impl VhostTarget {
    /// A target serving bdevs of `mgr` from the reactors of `runtime`.
    #[must_use]
    pub fn new(runtime: RuntimeHandle, mgr: BdevManager) -> VhostTarget {
        VhostTarget(Arc::new(Inner {
            runtime,
            mgr,
            socket_dir: Mutex::new(None),
            ctrlrs: Mutex::new(BTreeMap::new()),
        }))
    }

    /// The directory of the controllers' sockets (SPDK vhost's `-S`;
    /// default: the working directory at the first controller).
    pub fn set_socket_dir(&self, dir: impl Into<PathBuf>) {
        *self.0.socket_dir.lock() = Some(dir.into());
    }

    fn socket_path(&self, name: &str) -> Result<PathBuf> {
        let dir = match self.0.socket_dir.lock().clone() {
            Some(d) => d,
            None => std::env::current_dir().map_err(|_| Error::SocketPath(PathBuf::new()))?,
        };
        let path = dir.join(name);
        // A unix socket's path fits `sun_path` (108 bytes with its NUL).
        if name.is_empty() || name.contains('/') || path.as_os_str().len() >= 108 {
            return Err(Error::SocketPath(path));
        }
        Ok(path)
    }

    /// `vhost_create_blk_controller`: opens the bdev and listens on
    /// `<socket dir>/<ctrlr>`. Call on a reactor thread (the bdev's
    /// events arrive on it).
    pub fn create_blk(&self, o: &BlkControllerOpts) -> Result<()> {
        if let Some(t) = o.transport.as_deref() {
            if !t.eq_ignore_ascii_case(TRANSPORT) {
                return Err(Error::Transport(t.to_string()));
            }
        }
        if o.packed_ring {
            return Err(Error::NotSupported(
                "packed_ring (the virtqueue crate serves split rings only)",
            ));
        }
        let app = self.0.runtime.cpumask().clone();
        let cpumask = match o.cpumask.as_deref() {
            None => app.clone(),
            Some(s) => {
                let m: CpuSet = s.parse().map_err(|_| Error::CpuMask(s.to_string()))?;
                if m.is_empty() || m.iter().any(|c| !app.contains(c)) {
                    return Err(Error::CpuMask(s.to_string()));
                }
                m
            }
        };
        if self.0.ctrlrs.lock().contains_key(&o.ctrlr) {
            return Err(Error::Exists(o.ctrlr.clone()));
        }
        let socket = self.socket_path(&o.ctrlr)?;
        if std::fs::symlink_metadata(&socket).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            !m.file_type().is_socket()
        }) {
            return Err(Error::SocketPath(socket));
        }
        let weak = Arc::downgrade(&self.0);
        let name = o.ctrlr.clone();
        let desc = self
            .0
            .mgr
            .open(&o.dev_name, true, move |ev| {
                if let Some(inner) = weak.upgrade() {
                    VhostTarget(inner).bdev_event(&name, ev);
                }
            })
            .map_err(|source| Error::OpenBdev {
                bdev: o.dev_name.clone(),
                source,
            })?;
        let b = desc.bdev();
        let info = Arc::new(BlkInfo::new(
            b.name(),
            o.readonly,
            b.block_size(),
            b.num_blocks(),
            (
                b.supports(IoType::Flush),
                b.supports(IoType::Unmap),
                b.supports(IoType::WriteZeroes),
            ),
        ));
        let bdev_name = b.name().to_string();
        let mut threads = Vec::with_capacity(cpumask.len());
        for core in cpumask.iter() {
            let t = self
                .0
                .runtime
                .spawn_thread(
                    format!("vhost.{}.{core}", o.ctrlr),
                    Some(&CpuSet::single(core)),
                )
                .map_err(Error::Thread)?;
            threads.push(t);
        }
        let parts = Parts {
            name: o.ctrlr.clone(),
            bdev_name,
            readonly: o.readonly,
            cpumask,
            socket: socket.clone(),
            info,
            desc: Arc::new(desc),
            threads: threads.clone(),
            coalescing: DEFAULT_COALESCING,
            interrupt: self.0.runtime.interrupt_mode(),
        };
        let c = match Controller::start(parts) {
            Ok(c) => c,
            Err(source) => {
                exit_threads(&threads);
                return Err(Error::Listen {
                    path: socket,
                    source,
                });
            }
        };
        tracing::info!(ctrlr = %o.ctrlr, bdev = %o.dev_name, socket = ?c.socket, "vhost-blk controller created");
        self.0.ctrlrs.lock().insert(o.ctrlr.clone(), c);
        Ok(())
    }

    /// `vhost_delete_controller`: removes the controller once no frontend
    /// is connected (SPDK's delete waits for the VM to go too); `done`
    /// runs then, on another OS thread (the wait and the control thread's
    /// stop block, which reactors must not).
    pub fn delete(&self, name: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
        let Some(c) = self.0.ctrlrs.lock().get(name).cloned() else {
            return done(Err(Error::NoController(name.to_string())));
        };
        let inner = Arc::clone(&self.0);
        let spawned = std::thread::Builder::new()
            .name("vhost-delete".into())
            .spawn(move || {
                c.wait_disconnected();
                inner.ctrlrs.lock().remove(&c.name);
                c.shutdown();
                tracing::info!(ctrlr = %c.name, "vhost controller deleted");
                done(Ok(()));
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "vhost delete thread");
        }
    }

    /// `vhost_controller_set_coalescing` (SPDK's checks: the delay fits
    /// 32 bits of ticks, the threshold is at least 100 IOPS).
    pub fn set_coalescing(&self, name: &str, c: Coalescing) -> Result<()> {
        let ctrlr = self
            .0
            .ctrlrs
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::NoController(name.to_string()))?;
        let ticks = bdevkit::clock::us_to_ticks(u64::from(c.delay_base_us));
        if ticks >= u64::from(u32::MAX) || u64::from(c.iops_threshold) * 10 / 1000 == 0 {
            return Err(Error::Coalescing);
        }
        *ctrlr.coalescing.lock() = c;
        ctrlr
            .queues
            .for_each_channel(move |q| q.set_coalescing(c), || {});
        Ok(())
    }

    /// `vhost_get_controllers`: one controller or all, SPDK's shape.
    pub fn get_controllers(&self, name: Option<&str>) -> Result<Value> {
        let ctrlrs = self.0.ctrlrs.lock();
        let list: Vec<&Arc<Controller>> = match name {
            Some(n) => vec![ctrlrs
                .get(n)
                .ok_or_else(|| Error::NoController(n.to_string()))?],
            None => ctrlrs.values().collect(),
        };
        Ok(Value::Array(
            list.into_iter().map(|c| controller_json(c)).collect(),
        ))
    }

    /// The `vhost_blk` section of `save_config`: a create per controller
    /// whose bdev is there (by name), then its coalescing if set.
    #[must_use]
    pub fn config_json(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for c in self.0.ctrlrs.lock().values() {
            if c.desc.lock().is_none() {
                continue;
            }
            out.push(json!({
                "method": "vhost_create_blk_controller",
                "params": {
                    "ctrlr": c.name,
                    "dev_name": c.bdev_name,
                    "cpumask": c.cpumask.to_hex(),
                    "readonly": c.readonly,
                    "transport": TRANSPORT,
                }
            }));
            let co = *c.coalescing.lock();
            if co.delay_base_us != 0 {
                out.push(json!({
                    "method": "vhost_controller_set_coalescing",
                    "params": {
                        "ctrlr": c.name,
                        "delay_base_us": co.delay_base_us,
                        "iops_threshold": co.iops_threshold,
                    }
                }));
            }
        }
        out
    }

    /// Stops every controller (frontends disconnected, rings stopped,
    /// sockets removed); `done` runs on another OS thread afterwards.
    pub fn shutdown(&self, done: impl FnOnce() + Send + 'static) {
        let all: Vec<Arc<Controller>> = std::mem::take(&mut *self.0.ctrlrs.lock())
            .into_values()
            .collect();
        let spawned = std::thread::Builder::new()
            .name("vhost-fini".into())
            .spawn(move || {
                for c in all {
                    c.shutdown();
                }
                done();
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "vhost shutdown thread");
        }
    }

    /// The socket of controller `name`.
    #[must_use]
    pub fn socket(&self, name: &str) -> Option<PathBuf> {
        self.0.ctrlrs.lock().get(name).map(|c| c.socket.clone())
    }

    /// A bdev event for controller `name` (on the thread that opened it).
    fn bdev_event(&self, name: &str, ev: BdevEvent) {
        let Some(c) = self.0.ctrlrs.lock().get(name).cloned() else {
            return;
        };
        match ev {
            BdevEvent::Remove => {
                tracing::warn!(ctrlr = %name, "bdev hot-removed: every further request fails");
                c.info
                    .removed
                    .store(true, std::sync::atomic::Ordering::Release);
                let desc = c.desc.lock().take();
                c.queues
                    .for_each_channel(|q| q.bdev_gone(), move || drop(desc));
            }
            BdevEvent::Resize => {
                if let Some(d) = c.desc.lock().as_ref() {
                    c.info
                        .num_blocks
                        .store(d.bdev().num_blocks(), std::sync::atomic::Ordering::Release);
                }
            }
            BdevEvent::MediaManagement => {}
        }
    }
}

fn exit_threads(threads: &[bdevkit::thread::ThreadHandle]) {
    for t in threads {
        let _ = t.send_msg(|| {
            if let Some(t) = Thread::current() {
                t.exit();
            }
        });
    }
}

fn controller_json(c: &Controller) -> Value {
    let co = *c.coalescing.lock();
    let sessions: Vec<Value> = c
        .session
        .lock()
        .iter()
        .map(|s| {
            json!({
                "vid": s.vid,
                "id": s.id,
                "name": format!("{}s{}", c.name, s.vid),
                "started": s.started,
                "max_queues": s.max_queues,
                "inflight_task_cnt": in_flight(&s.in_flight),
            })
        })
        .collect();
    let bdev = if c.desc.lock().is_some() {
        Value::String(c.bdev_name.clone())
    } else {
        Value::Null
    };
    json!({
        "ctrlr": c.name,
        "cpumask": c.cpumask.to_string(),
        "delay_base_us": co.delay_base_us,
        "iops_threshold": co.iops_threshold,
        "socket": path_str(&c.socket),
        "sessions": sessions,
        "backend_specific": {
            "block": {
                "readonly": c.readonly,
                "bdev": bdev,
                "transport": TRANSPORT,
            }
        }
    })
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}
