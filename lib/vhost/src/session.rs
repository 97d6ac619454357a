//! One frontend's session: the vhost-user messages (the backend side of
//! the protocol, as rust-vmm's `vhost` crate decodes them) and the rings
//! they set up, started on the controller's threads and stopped again.
//!
//! A ring runs once it has addresses, a kick eventfd and the guest's
//! memory, and is enabled (`SET_VRING_ENABLE`; with protocol features
//! negotiated rings start disabled). `GET_VRING_BASE` stops it: its
//! requests finish first, so the base it answers covers everything the
//! device consumed. A new memory table or call eventfd restarts running
//! rings around the change. Every message runs on the control thread.

use std::fs::File;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserConfigFlags, VhostUserInflight,
    VhostUserLog, VhostUserMemoryRegion, VhostUserProtocolFeatures, VhostUserShMemConfig,
    VhostUserSharedMsg, VhostUserSingleMemoryRegion, VhostUserVringAddrFlags, VhostUserVringState,
};
use vhost::vhost_user::{Error, GpuBackend, Result, VhostUserBackendReqHandlerMut};
use vhost::VhostUserMemoryRegionBase;

use crate::blk::VHOST_USER_F_PROTOCOL_FEATURES;
use crate::ctrlr::Controller;
use crate::memory::{GuestMem, RegionDesc};
use crate::queue::{QueueStart, Queues};

/// Rings a controller serves at most (SPDK's `SPDK_VHOST_MAX_VQUEUES`;
/// the kick and call messages carry an 8-bit index).
pub(crate) const MAX_QUEUES: usize = 256;
/// Largest ring (SPDK's `SPDK_VHOST_MAX_VQ_SIZE`).
const MAX_RING: u32 = 1024;
/// How long a ring's stop waits for its requests (SPDK gives 4 s; a bdev
/// that takes longer is broken, and the memory stays mapped for it).
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A ring as the frontend set it up.
#[derive(Debug, Default)]
struct Vring {
    size: u16,
    /// The frontend's virtual addresses.
    addrs: Option<(u64, u64, u64)>,
    base: u16,
    kick: Option<File>,
    call: Option<File>,
    err: Option<File>,
    enabled: bool,
    running: bool,
    in_flight: Arc<AtomicU32>,
}

/// The backend of one connection.
pub(crate) struct Session {
    c: Arc<Controller>,
    owned: bool,
    features: u64,
    protocol: u64,
    mem: Option<Arc<GuestMem>>,
    vrings: Vec<Vring>,
}

fn bad(why: &'static str) -> Error {
    Error::InvalidOperation(why)
}

impl Session {
    pub(crate) fn new(c: Arc<Controller>) -> Session {
        Session {
            c,
            owned: false,
            features: 0,
            protocol: 0,
            mem: None,
            vrings: (0..MAX_QUEUES).map(|_| Vring::default()).collect(),
        }
    }

    fn vring(&mut self, index: u32) -> Result<&mut Vring> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.vrings.get_mut(i))
            .ok_or(Error::InvalidParam)
    }

    fn protocol_features() -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::CONFIG | VhostUserProtocolFeatures::MQ
    }

    /// Starts ring `i` if it can run and is not running.
    fn try_start(&mut self, i: usize) {
        let Some(mem) = self.mem.clone() else { return };
        let v = &self.vrings[i];
        let (Some((d, u, a)), Some(kick)) = (v.addrs, v.kick.as_ref()) else {
            return;
        };
        if v.running || !v.enabled || v.size == 0 {
            return;
        }
        let n = u64::from(v.size);
        let gpas = (
            mem.va_to_gpa(d, 16 * n),
            mem.va_to_gpa(a, 6 + 2 * n),
            mem.va_to_gpa(u, 6 + 8 * n),
        );
        let (Some(desc), Some(avail), Some(used)) = gpas else {
            tracing::warn!(ctrlr = %self.c.name, queue = i, "ring addresses outside guest memory");
            return;
        };
        let clone = |f: &Option<File>| f.as_ref().and_then(|f| f.try_clone().ok());
        let Ok(kick) = kick.try_clone() else { return };
        let Ok(index) = u16::try_from(i) else { return };
        let start = QueueStart {
            index,
            size: v.size,
            desc,
            avail,
            used,
            next_avail: v.base,
            kick,
            call: clone(&v.call),
            err: clone(&v.err),
            mem,
            info: Arc::clone(&self.c.info),
            bdev: self.c.desc.lock().clone(),
            coalescing: *self.c.coalescing.lock(),
            in_flight: Arc::clone(&v.in_flight),
            interrupt: self.c.interrupt,
        };
        let thread = &self.c.threads[i % self.c.threads.len()];
        let dev = self.c.queues.clone();
        let (tx, rx) = mpsc::channel();
        let sent = thread.send_msg(move || {
            let r = dev
                .get_channel()
                .map_err(|e| e.to_string())
                .and_then(|ch| Queues::start(&ch, start));
            let _ = tx.send(r);
        });
        match sent.ok().and_then(|()| rx.recv_timeout(STOP_TIMEOUT).ok()) {
            Some(Ok(())) => {
                self.vrings[i].running = true;
                tracing::debug!(ctrlr = %self.c.name, queue = i, "ring started");
            }
            Some(Err(e)) => {
                tracing::warn!(ctrlr = %self.c.name, queue = i, error = %e, "ring not started");
            }
            None => tracing::warn!(ctrlr = %self.c.name, queue = i, "ring start got no answer"),
        }
        self.publish();
    }

    /// Stops ring `i` if running (its requests finish first) and keeps
    /// where it stopped.
    fn stop(&mut self, i: usize) {
        if !self.vrings[i].running {
            return;
        }
        let thread = &self.c.threads[i % self.c.threads.len()];
        let dev = self.c.queues.clone();
        let (tx, rx) = mpsc::channel();
        let index = u16::try_from(i).unwrap_or(u16::MAX);
        let sent = thread.send_msg(move || {
            if let Ok(ch) = dev.get_channel() {
                ch.stop(index, tx);
            }
        });
        match sent.ok().map(|()| rx.recv_timeout(STOP_TIMEOUT)) {
            Some(Ok(base)) => self.vrings[i].base = base,
            Some(Err(mpsc::RecvTimeoutError::Timeout)) => {
                tracing::error!(ctrlr = %self.c.name, queue = i, "ring stop timed out: requests still in flight");
            }
            _ => {}
        }
        self.vrings[i].running = false;
        self.publish();
    }

    fn restart_running(&mut self, f: impl FnOnce(&mut Session)) {
        let running: Vec<usize> = (0..MAX_QUEUES)
            .filter(|&i| self.vrings[i].running)
            .collect();
        for &i in &running {
            self.stop(i);
        }
        f(self);
        for i in running {
            self.try_start(i);
        }
    }

    /// Updates what `vhost_get_controllers` shows.
    fn publish(&self) {
        if let Some(s) = self.c.session.lock().as_mut() {
            s.started = self.vrings.iter().any(|v| v.running);
            let set: Vec<&Vring> = self.vrings.iter().filter(|v| v.addrs.is_some()).collect();
            s.max_queues = u32::try_from(set.len()).unwrap_or(u32::MAX);
            s.in_flight = set.iter().map(|v| Arc::clone(&v.in_flight)).collect();
        }
    }

    /// The frontend went: every ring stops, the memory goes with the last
    /// of their I/O.
    pub(crate) fn disconnect(&mut self) {
        for i in 0..MAX_QUEUES {
            self.stop(i);
        }
        self.mem = None;
    }
}

impl VhostUserBackendReqHandlerMut for Session {
    fn set_owner(&mut self) -> Result<()> {
        if self.owned {
            return Err(bad("already owned"));
        }
        self.owned = true;
        Ok(())
    }

    fn reset_owner(&mut self) -> Result<()> {
        self.disconnect();
        self.owned = false;
        self.features = 0;
        Ok(())
    }

    fn reset_device(&mut self) -> Result<()> {
        self.disconnect();
        self.vrings = (0..MAX_QUEUES).map(|_| Vring::default()).collect();
        self.features = 0;
        Ok(())
    }

    fn get_features(&mut self) -> Result<u64> {
        Ok(self.c.info.features())
    }

    fn set_features(&mut self, features: u64) -> Result<()> {
        if features & !self.c.info.features() != 0 {
            return Err(Error::InvalidParam);
        }
        self.features = features;
        // Without protocol features rings are enabled from the start.
        if features & VHOST_USER_F_PROTOCOL_FEATURES == 0 {
            for v in &mut self.vrings {
                v.enabled = true;
            }
        }
        Ok(())
    }

    fn set_mem_table(
        &mut self,
        ctx: &[VhostUserMemoryRegion],
        files: Vec<File>,
        _postcopy_listening: Option<bool>,
    ) -> Result<Option<Vec<VhostUserMemoryRegionBase>>> {
        let regions: Vec<RegionDesc> = ctx
            .iter()
            .map(|r| RegionDesc {
                gpa: r.guest_phys_addr,
                len: r.memory_size,
                user_addr: r.user_addr,
                mmap_offset: r.mmap_offset,
            })
            .collect();
        let mem = GuestMem::map(&regions, files).map_err(|e| {
            tracing::warn!(ctrlr = %self.c.name, error = %e, "memory table refused");
            Error::InvalidParam
        })?;
        tracing::debug!(ctrlr = %self.c.name, regions = regions.len(), "memory table");
        self.restart_running(|s| s.mem = Some(Arc::new(mem)));
        Ok(None)
    }

    fn set_vring_num(&mut self, index: u32, num: u32) -> Result<()> {
        if num == 0 || num > MAX_RING || !num.is_power_of_two() {
            return Err(Error::InvalidParam);
        }
        let v = self.vring(index)?;
        if v.running {
            return Err(bad("ring is running"));
        }
        v.size = u16::try_from(num).map_err(|_| Error::InvalidParam)?;
        Ok(())
    }

    fn set_vring_addr(
        &mut self,
        index: u32,
        _flags: VhostUserVringAddrFlags,
        descriptor: u64,
        used: u64,
        available: u64,
        _log: u64,
    ) -> Result<()> {
        let v = self.vring(index)?;
        if v.running {
            return Err(bad("ring is running"));
        }
        v.addrs = Some((descriptor, used, available));
        self.publish();
        Ok(())
    }

    fn set_vring_base(&mut self, index: u32, base: u32) -> Result<()> {
        let v = self.vring(index)?;
        if v.running {
            return Err(bad("ring is running"));
        }
        v.base = u16::try_from(base).map_err(|_| Error::InvalidParam)?;
        Ok(())
    }

    fn get_vring_base(&mut self, index: u32) -> Result<VhostUserVringState> {
        self.vring(index)?;
        let i = usize::try_from(index).map_err(|_| Error::InvalidParam)?;
        self.stop(i);
        // Stopped until the next kick eventfd.
        let v = &mut self.vrings[i];
        v.kick = None;
        Ok(VhostUserVringState::new(index, u32::from(v.base)))
    }

    fn set_vring_kick(&mut self, index: u8, fd: Option<File>) -> Result<()> {
        let i = usize::from(index);
        self.vring(u32::from(index))?;
        self.stop(i);
        // No fd means a polled ring; ours are kicked or polled alike, so
        // a ring without one runs once it has one.
        self.vrings[i].kick = fd;
        self.try_start(i);
        Ok(())
    }

    fn set_vring_call(&mut self, index: u8, fd: Option<File>) -> Result<()> {
        let i = usize::from(index);
        self.vring(u32::from(index))?;
        let running = self.vrings[i].running;
        self.stop(i);
        self.vrings[i].call = fd;
        if running {
            self.try_start(i);
        }
        Ok(())
    }

    fn set_vring_err(&mut self, index: u8, fd: Option<File>) -> Result<()> {
        let i = usize::from(index);
        self.vring(u32::from(index))?.err = fd;
        if self.vrings[i].running {
            self.stop(i);
            self.try_start(i);
        }
        Ok(())
    }

    fn get_protocol_features(&mut self) -> Result<VhostUserProtocolFeatures> {
        Ok(Self::protocol_features())
    }

    fn set_protocol_features(&mut self, features: u64) -> Result<()> {
        // REPLY_ACK is the library's own.
        let ours = Self::protocol_features() | VhostUserProtocolFeatures::REPLY_ACK;
        if features & !ours.bits() != 0 {
            return Err(Error::InvalidParam);
        }
        self.protocol = features;
        Ok(())
    }

    fn get_queue_num(&mut self) -> Result<u64> {
        Ok(MAX_QUEUES as u64)
    }

    fn set_vring_enable(&mut self, index: u32, enable: bool) -> Result<()> {
        let i = usize::try_from(index).map_err(|_| Error::InvalidParam)?;
        self.vring(index)?.enabled = enable;
        if enable {
            self.try_start(i);
        } else {
            self.stop(i);
        }
        Ok(())
    }

    fn get_config(
        &mut self,
        offset: u32,
        size: u32,
        _flags: VhostUserConfigFlags,
    ) -> Result<Vec<u8>> {
        let cfg = self
            .c
            .info
            .config(u16::try_from(MAX_QUEUES).unwrap_or(u16::MAX));
        let (off, size) = (offset as usize, size as usize);
        let mut out = vec![0u8; size];
        if let Some(src) = cfg.get(off..) {
            let n = src.len().min(size);
            out[..n].copy_from_slice(&src[..n]);
        }
        Ok(out)
    }

    fn set_config(
        &mut self,
        _offset: u32,
        _buf: &[u8],
        _flags: VhostUserConfigFlags,
    ) -> Result<()> {
        // Writeback cache mode (the only writable field) is not offered.
        Err(bad("configuration space is read-only"))
    }

    fn set_gpu_socket(&mut self, _gpu_backend: GpuBackend) -> Result<()> {
        Err(bad("not a gpu"))
    }

    fn get_shared_object(&mut self, _uuid: VhostUserSharedMsg) -> Result<File> {
        Err(bad("no shared objects"))
    }

    fn get_inflight_fd(
        &mut self,
        _inflight: &VhostUserInflight,
    ) -> Result<(VhostUserInflight, File)> {
        Err(bad("no inflight tracking"))
    }

    fn set_inflight_fd(&mut self, _inflight: &VhostUserInflight, _file: File) -> Result<()> {
        Err(bad("no inflight tracking"))
    }

    fn get_max_mem_slots(&mut self) -> Result<u64> {
        Err(bad("memory slots are not configurable"))
    }

    fn add_mem_region(
        &mut self,
        _region: &VhostUserSingleMemoryRegion,
        _fd: File,
        _postcopy_listening: Option<bool>,
    ) -> Result<Option<VhostUserMemoryRegionBase>> {
        Err(bad("memory slots are not configurable"))
    }

    fn remove_mem_region(&mut self, _region: &VhostUserSingleMemoryRegion) -> Result<()> {
        Err(bad("memory slots are not configurable"))
    }

    fn set_device_state_fd(
        &mut self,
        _direction: VhostTransferStateDirection,
        _phase: VhostTransferStatePhase,
        _fd: File,
    ) -> Result<Option<File>> {
        Err(bad("no live migration"))
    }

    fn check_device_state(&mut self) -> Result<()> {
        Err(bad("no live migration"))
    }

    fn get_shmem_config(&mut self) -> Result<VhostUserShMemConfig> {
        Err(bad("no shared memory regions"))
    }

    fn set_log_base(&mut self, _log: &VhostUserLog, _file: File) -> Result<()> {
        Err(bad("no live migration"))
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("ctrlr", &self.c.name)
            .field("features", &self.features)
            .finish_non_exhaustive()
    }
}

/// A ring in flight count, for the RPC.
pub(crate) fn in_flight(counts: &[Arc<AtomicU32>]) -> u32 {
    counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
}
