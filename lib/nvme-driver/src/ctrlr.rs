//! The controller: bring-up within CAP.TO, Identify, namespaces, features,
//! the admin queue (synchronous for set-up, asynchronous with callbacks
//! for everything else), asynchronous events, keep-alive where the
//! transport needs it, reset and shutdown. Transport independent.
//!
//! Threads: [`Controller::attach`], [`Controller::disable`],
//! [`Controller::enable`] and [`Controller::shutdown`] wait for the
//! controller (bounded by CAP.TO) and run on a helper thread, never a
//! reactor. [`Controller::poll_admin`] runs from a poller (the adapter's
//! admin poller). The admin queue sits behind a mutex: it is the control
//! path, shared by every thread that sends admin commands; I/O queue
//! pairs never touch it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bdevkit_nvme_spec::admin::{AsyncEventRequest, GetLogPage, Identify, KeepAlive, SetFeatures};
use bdevkit_nvme_spec::features::{AsyncEventConfig, Feature, KeepAliveTimer, NumberOfQueues};
use bdevkit_nvme_spec::identify::IdentifyController;
use bdevkit_nvme_spec::log::{lid, AsyncEvent};
use bdevkit_nvme_spec::regs::{offset, Cap, Cc, Csts, Vs};
use bdevkit_nvme_spec::zerocopy::{FromBytes, FromZeros};
use bdevkit_nvme_spec::{Command, Cqe, Sqe, Status};
use parking_lot::{Mutex, RwLock};

pub use crate::admin::AdminCallback;
use crate::admin::{vet_admin, AdminQueue};
use crate::error::{Error, Result};
pub use crate::ns::{Namespace, NsIds};
use crate::qpair::Qpair;
use crate::sys::DmaMem;
use crate::transport::{AdminExec, QueueTransport, Request, Transport};

/// What a controller is doing (SPDK's `bdev_nvme_get_controllers` states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Serving I/O.
    Enabled = 0,
    /// Being reset.
    Resetting = 1,
    /// Reset failed; nothing works until the next reset.
    Failed = 2,
    /// Removed (registers read all ones) or detached.
    Removed = 3,
}

impl State {
    fn from_u8(v: u8) -> State {
        match v {
            0 => State::Enabled,
            1 => State::Resetting,
            2 => State::Failed,
            _ => State::Removed,
        }
    }

    /// SPDK's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            State::Enabled => "enabled",
            State::Resetting => "resetting",
            State::Failed => "failed",
            State::Removed => "deleting",
        }
    }
}

/// Bring-up and queue options.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// Admin queue entries.
    pub admin_entries: u16,
    /// Entries per I/O queue (capped by CAP.MQES).
    pub io_entries: u16,
    /// I/O queues to ask for.
    pub num_io_queues: u32,
    /// Keep alive timeout for transports that need it (0 = none).
    pub keep_alive_timeout_ms: u32,
    /// Bound on one synchronous admin command.
    pub admin_timeout: Duration,
    /// Asynchronous Event Requests kept outstanding.
    pub aer_count: u8,
    /// A discovery controller (NVMe-oF): no I/O queues and no namespaces;
    /// its asynchronous events are Discovery Log Page Change notices
    /// (read the log with [`crate::discovery::read_log`]).
    pub discovery: bool,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            admin_entries: 32,
            io_entries: 256,
            num_io_queues: 64,
            keep_alive_timeout_ms: 10_000,
            admin_timeout: Duration::from_secs(10),
            aer_count: 1,
            discovery: false,
        }
    }
}

/// What `poll_admin` found out about the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Fine.
    Ok,
    /// CSTS.CFS: needs a reset.
    Fatal,
    /// Registers read all ones: the device is gone.
    Removed,
}

/// Called with each asynchronous event (on the thread polling the admin
/// queue); a namespace change has already been rescanned.
pub type EventHandler = Box<dyn Fn(AsyncEvent) + Send + Sync>;

#[derive(Default)]
struct Info {
    ctrlr: Option<Box<IdentifyController>>,
    namespaces: BTreeMap<u32, Namespace>,
}

/// One NVMe controller over transport `T`.
pub struct Controller<T: Transport> {
    t: T,
    opts: ControllerOptions,
    cap: Cap,
    vs: Vs,
    admin: AdminQueue<T::Queue>,
    info: RwLock<Info>,
    state: AtomicU8,
    /// Times the controller was stopped from touching host memory
    /// (disabled, or bus mastering off): a queue pair that connected
    /// before the last stop may hand its requests back.
    stops: Arc<AtomicU64>,
    io_queues: Mutex<Vec<bool>>,
    handler: Mutex<Option<EventHandler>>,
    me: Weak<Controller<T>>,
    aer_armed: AtomicBool,
}

impl<T: Transport> fmt::Debug for Controller<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("transport", &self.t)
            .field("state", &self.state())
            .finish()
    }
}

fn ok(c: &Cqe, opcode: u8) -> Result<()> {
    let s = c.status();
    if s.is_success() {
        Ok(())
    } else {
        Err(Error::Command { opcode, status: s })
    }
}

/// Waits on the helper thread between register reads (never a reactor).
fn pause() {
    std::thread::park_timeout(Duration::from_micros(200));
}

impl<T: Transport> Controller<T> {
    /// Brings the controller up on `t`: reset, enable within CAP.TO,
    /// Identify, queue count, namespaces, asynchronous events. Blocks:
    /// call on a helper thread.
    pub fn attach(t: T, opts: ControllerOptions) -> Result<Arc<Self>> {
        let admin = AdminQueue::new();
        let fabrics = t.is_fabrics();
        let (cap, vs) = if fabrics {
            // The admin queue comes first: registers are properties on it.
            admin.install(t.admin_queue(opts.admin_entries)?);
            let cap = admin.property_get(offset::CAP, opts.admin_timeout)?;
            let vs = admin.property_get(offset::VS, opts.admin_timeout)?;
            (Cap(cap), Vs(u32::try_from(vs & 0xffff_ffff).unwrap_or(0)))
        } else {
            (
                Cap(t.read_reg64(offset::CAP)?),
                Vs(t.read_reg32(offset::VS)?),
            )
        };
        if cap.0 == u64::MAX {
            return Err(Error::Removed);
        }
        if cap.css() & Cap::CSS_NVM == 0 {
            return Err(Error::Unsupported("no NVM command set".into()));
        }
        if cap.mpsmin() != 0 {
            return Err(Error::Unsupported(format!(
                "minimum memory page size {} bytes",
                cap.min_page_size()
            )));
        }
        let c = Arc::new_cyclic(|me| Controller {
            t,
            opts,
            cap,
            vs,
            admin,
            info: RwLock::new(Info::default()),
            state: AtomicU8::new(State::Resetting as u8),
            stops: Arc::new(AtomicU64::new(0)),
            io_queues: Mutex::new(Vec::new()),
            handler: Mutex::new(None),
            me: me.clone(),
            aer_armed: AtomicBool::new(false),
        });
        // A new fabrics association starts disabled.
        if !fabrics {
            c.disable()?;
        }
        c.enable()?;
        tracing::info!(
            trtype = c.t.trtype(),
            traddr = c.t.traddr(),
            "NVMe controller attached"
        );
        Ok(c)
    }

    /// Reads a 32-bit register (a property on fabrics).
    fn reg32(&self, off: u32) -> Result<u32> {
        if self.t.is_fabrics() {
            let v = self.admin.property_get(off, self.opts.admin_timeout)?;
            Ok(u32::try_from(v & 0xffff_ffff).unwrap_or(0))
        } else {
            self.t.read_reg32(off)
        }
    }

    /// Writes a 32-bit register (a property on fabrics).
    fn set_reg32(&self, off: u32, v: u32) -> Result<()> {
        if self.t.is_fabrics() {
            self.admin
                .property_set(off, u64::from(v), self.opts.admin_timeout)
        } else {
            self.t.write_reg32(off, v)
        }
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.t
    }

    /// The options it was attached with.
    pub fn options(&self) -> &ControllerOptions {
        &self.opts
    }

    /// CAP.
    pub fn cap(&self) -> Cap {
        self.cap
    }

    /// VS.
    pub fn version(&self) -> Vs {
        self.vs
    }

    /// The current state.
    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Sets the state (the adapter drives resets and removal).
    pub fn set_state(&self, s: State) {
        self.state.store(s as u8, Ordering::Release);
    }

    /// Identify Controller data.
    pub fn identify(&self) -> Box<IdentifyController> {
        self.info
            .read()
            .ctrlr
            .clone()
            .unwrap_or_else(IdentifyController::new_box_zeroed_or_panic)
    }

    /// The active namespaces.
    pub fn namespaces(&self) -> Vec<Namespace> {
        self.info.read().namespaces.values().cloned().collect()
    }

    /// Installs the asynchronous event handler.
    pub fn set_event_handler(&self, h: EventHandler) {
        *self.handler.lock() = Some(h);
    }

    /// Largest transfer per command in bytes: MDTS, capped by what one
    /// command's data pointer describes.
    pub fn max_transfer_bytes(&self) -> usize {
        let t = self.t.max_data_bytes();
        let mdts = self
            .info
            .read()
            .ctrlr
            .as_ref()
            .and_then(|c| c.max_transfer_bytes(self.cap.mpsmin()))
            .and_then(|b| usize::try_from(b).ok())
            .unwrap_or(1 << 20);
        mdts.min(t)
    }

    /// Entries per I/O queue.
    pub fn io_entries(&self) -> u16 {
        let mq = self.cap.max_queue_entries();
        u16::try_from(u32::from(self.opts.io_entries).min(mq)).unwrap_or(u16::MAX)
    }

    /// Reads CSTS: removed, fatal or fine.
    /// On fabrics no property is read (that is a round trip): a lost
    /// admin connection is fatal (a reset connects again).
    pub fn health(&self) -> Health {
        if self.t.is_fabrics() {
            return if self.admin.alive() {
                Health::Ok
            } else {
                Health::Fatal
            };
        }
        match self.t.read_reg32(offset::CSTS).map(Csts) {
            Ok(c) if c.is_all_ones() => Health::Removed,
            Ok(c) if c.cfs() => Health::Fatal,
            Ok(_) => Health::Ok,
            Err(_) => Health::Removed,
        }
    }

    fn wait_ready(&self, want: bool, what: &'static str) -> Result<()> {
        let limit = Duration::from_millis(u64::from(self.cap.timeout_ms().max(500)));
        let start = Instant::now();
        loop {
            let csts = Csts(self.reg32(offset::CSTS)?);
            if csts.is_all_ones() {
                return Err(Error::Removed);
            }
            if csts.rdy() == want {
                return Ok(());
            }
            if want && csts.cfs() {
                return Err(Error::Fatal);
            }
            if start.elapsed() > limit {
                return Err(Error::Timeout(what));
            }
            pause();
        }
    }

    /// Disables the controller (CC.EN = 0, waits for CSTS.RDY = 0 within
    /// CAP.TO): every queue and every command in flight is gone, and the
    /// controller no longer touches host memory. Outstanding admin
    /// commands complete with "aborted, SQ deletion". Blocks.
    pub fn disable(&self) -> Result<()> {
        self.aer_armed.store(false, Ordering::Release);
        if self.t.is_fabrics() {
            // Best effort: a lost connection ends the association anyway,
            // and dropping the admin queue (below) closes it.
            if let Err(e) = self.clear_enable() {
                tracing::debug!(error = %e, "fabrics controller not disabled cleanly");
            }
        } else if let Err(e) = self.clear_enable() {
            // It did not stop (or is gone): it must not touch the memory
            // of the commands handed back below, so it loses bus mastering.
            self.t.set_dma(false);
            self.stops.fetch_add(1, Ordering::AcqRel);
            self.admin.abort_all();
            return Err(e);
        }
        self.stops.fetch_add(1, Ordering::AcqRel);
        self.admin.abort_all();
        Ok(())
    }

    fn clear_enable(&self) -> Result<()> {
        let cc = Cc(self.reg32(offset::CC)?);
        if cc.0 == u32::MAX {
            return Err(Error::Removed);
        }
        let csts = Csts(self.reg32(offset::CSTS)?);
        if cc.en() {
            self.set_reg32(offset::CC, cc.with_en(false).0)?;
        }
        if cc.en() || csts.rdy() {
            self.wait_ready(false, "CSTS.RDY = 0")?;
        }
        Ok(())
    }

    /// Enables the controller and initialises it: admin queue, CC.EN = 1
    /// within CAP.TO, Identify, queue count, namespaces, asynchronous
    /// events, keep alive. After a reset the I/O queue owners reconnect
    /// their queues. Blocks.
    pub fn enable(&self) -> Result<()> {
        self.set_state(State::Resetting);
        // Back after a disable that had to stop it by force.
        self.t.set_dma(true);
        if !(self.t.is_fabrics() && self.admin.alive()) {
            let q = self.t.admin_queue(self.opts.admin_entries)?;
            self.admin.install(q);
        }
        self.set_reg32(offset::CC, Cc::enabled(0).0)?;
        self.wait_ready(true, "CSTS.RDY = 1")?;
        self.init()?;
        self.set_state(State::Enabled);
        Ok(())
    }

    fn init(&self) -> Result<()> {
        let (_, id) = self.exec_data(Identify::controller().to_sqe(0), 4096)?;
        let ctrlr = IdentifyController::read_from_bytes(&id[..])
            .map(Box::new)
            .map_err(|_| Error::Unsupported("short Identify data".into()))?;
        self.t.set_sgl_support(ctrlr.sgl_support());
        self.t.set_controller_data(&ctrlr);
        let nn = ctrlr.nn.get();
        let aerl = ctrlr.aerl;
        self.info.write().ctrlr = Some(ctrlr);

        if self.opts.discovery {
            // No queue count, no namespaces (a discovery controller has
            // neither); its events are discovery log changes.
            return self.init_events(AsyncEventConfig::DISCOVERY_LOG_CHANGE, aerl);
        }
        let want = self.opts.num_io_queues.clamp(1, 0xfffe);
        let nq = NumberOfQueues::from_counts(want, want).expect("invariant: clamped to 1..=0xfffe");
        let c = self.exec(SetFeatures::of(&nq).to_sqe(0))?;
        ok(&c, SetFeatures::OPCODE)?;
        let got = NumberOfQueues::from_dword(c.dw0.get());
        let n = got.sq_count().min(got.cq_count()).min(want);
        {
            let mut qs = self.io_queues.lock();
            let n = usize::try_from(n).unwrap_or(1);
            if qs.len() != n {
                *qs = vec![false; n];
            }
        }
        self.rescan(nn)?;
        self.init_events(AsyncEventConfig::NAMESPACE_ATTRIBUTE, aerl)
    }

    /// Asynchronous event configuration `aec`, keep alive, then `aerl` + 1
    /// (at most `aer_count`) Asynchronous Event Requests.
    fn init_events(&self, aec: u32, aerl: u8) -> Result<()> {
        let aec = AsyncEventConfig(aec);
        if let Err(e) = self
            .exec(SetFeatures::of(&aec).to_sqe(0))
            .and_then(|c| ok(&c, 0x09))
        {
            tracing::debug!(error = %e, "async event configuration not accepted");
        }
        if self.t.needs_keep_alive() && self.opts.keep_alive_timeout_ms > 0 {
            let kato = KeepAliveTimer {
                kato_ms: self.opts.keep_alive_timeout_ms,
            };
            ok(&self.exec(SetFeatures::of(&kato).to_sqe(0))?, 0x09)?;
        }
        for _ in 0..self.opts.aer_count.min(aerl.saturating_add(1)).max(1) {
            self.submit_aer();
        }
        self.aer_armed.store(true, Ordering::Release);
        Ok(())
    }

    /// Reads the active namespaces and each one's Identify data.
    fn rescan(&self, nn: u32) -> Result<()> {
        let exec = |sqe: Sqe, len: usize| self.exec_data(sqe, len).map(|(_, b)| b);
        let namespaces = crate::ns::scan(&exec, self.vs, nn)?;
        self.info.write().namespaces = namespaces;
        Ok(())
    }

    /// Reads the namespaces again (after a namespace-change event).
    /// Blocks on admin commands.
    pub fn rescan_namespaces(&self) -> Result<()> {
        let nn = self.info.read().ctrlr.as_ref().map_or(0, |c| c.nn.get());
        self.rescan(nn)
    }

    fn submit_aer(&self) {
        let me = self.me.clone();
        self.submit_admin(
            AsyncEventRequest.to_sqe(0),
            None,
            Box::new(move |st, dw0, _| {
                if let Some(c) = me.upgrade() {
                    c.aer_done(st, dw0);
                }
            }),
        );
    }

    fn aer_done(&self, st: Status, dw0: u32) {
        if !st.is_success() {
            // Aborted by a reset or a disable: the next enable arms again.
            return;
        }
        let ev = AsyncEvent::from_dword(dw0);
        let me = self.me.clone();
        // Reading the log page clears the event; then the rescan (on a
        // helper thread: it waits on admin commands) and the handler.
        let log = GetLogPage::new(ev.lid, u32::MAX, 4096)
            .map(|g| g.to_sqe(0))
            .unwrap_or_else(|_| Sqe::new(0x02, 0, 0));
        let buf = self.t.alloc_buffer(4096).ok();
        self.submit_admin(
            log,
            buf.map(|b| (b, 4096)),
            Box::new(move |_, _, _| {
                let Some(c) = me.upgrade() else { return };
                let spawned =
                    std::thread::Builder::new()
                        .name("nvme-aer".into())
                        .spawn(move || {
                            if ev.lid == lid::CHANGED_NS_LIST {
                                if let Err(e) = c.rescan_namespaces() {
                                    tracing::warn!(error = %e, "namespace rescan failed");
                                }
                            }
                            if let Some(h) = c.handler.lock().as_ref() {
                                h(ev);
                            }
                            if c.aer_armed.load(Ordering::Acquire) {
                                c.submit_aer();
                            }
                        });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "cannot start the event thread");
                }
            }),
        );
    }

    /// Sends an admin command; `cb` gets its status, dword 0 and the data
    /// buffer, from [`Controller::poll_admin`] (or at once, with an error
    /// status, when the admin queue is down).
    ///
    /// The command may move data only through `buf` (driver-allocated DMA
    /// memory): the data pointer is set from it, or cleared, and the
    /// metadata pointer is cleared. Commands that would point the
    /// controller at host memory any other way, or take over what the
    /// driver owns, complete at once with "invalid command opcode" or
    /// "invalid field": I/O queue creation and deletion, Doorbell Buffer
    /// Config, Set Features Host Memory Buffer, fabrics and vendor
    /// specific commands (whose fields the driver cannot vet).
    pub fn submit_admin(&self, sqe: Sqe, buf: Option<(DmaMem, usize)>, cb: AdminCallback) {
        match vet_admin(sqe, buf.is_some()) {
            Ok(sqe) => self.admin.submit(sqe, buf, cb),
            Err(status) => cb(status, 0, buf.map(|b| b.0)),
        }
    }

    /// Polls the admin queue: completions run their callbacks, keep-alive
    /// goes out when due, and the controller's health comes back. Never
    /// waits (skips the poll if another thread holds the queue) and does
    /// not allocate.
    pub fn poll_admin(&self) -> Health {
        let keep_alive = (self.t.needs_keep_alive() && self.opts.keep_alive_timeout_ms > 0)
            .then(|| Duration::from_millis(u64::from(self.opts.keep_alive_timeout_ms / 2)));
        if self.admin.poll(keep_alive) {
            self.submit_admin(KeepAlive.to_sqe(0), None, Box::new(|_, _, _| {}));
        }
        self.health()
    }

    /// The admin queue's wake-up descriptor and whether it needs polling
    /// anyway (see [`crate::QueueTransport::wake_fd`]), for an owner that sleeps
    /// between [`Controller::poll_admin`] calls; `None` while another
    /// thread drives the queue, or between associations.
    #[must_use]
    pub fn admin_wake(&self) -> Option<(Option<(std::os::fd::RawFd, u64)>, bool)> {
        self.admin.wake()
    }

    /// Runs an admin command without data and waits for it (bounded by
    /// the admin timeout), checking for removal and fatal status
    /// meanwhile. Vetted as [`Controller::submit_admin`] vets (a refused
    /// command is `InvalidArg`).
    pub fn exec(&self, sqe: Sqe) -> Result<Cqe> {
        let sqe = vet_admin(sqe, false).map_err(refused)?;
        self.exec_with(sqe, None).map(|(c, _)| c)
    }

    /// The driver's own admin commands (queue creation among them).
    fn exec_raw(&self, sqe: Sqe) -> Result<Cqe> {
        self.exec_with(sqe, None).map(|(c, _)| c)
    }

    /// Runs an admin command returning `len` bytes of data (vetted as
    /// [`Controller::exec`]).
    pub fn exec_data(&self, sqe: Sqe, len: usize) -> Result<(Cqe, Vec<u8>)> {
        let sqe = vet_admin(sqe, true).map_err(refused)?;
        let buf = self.t.alloc_buffer(len)?;
        let opcode = sqe.opcode;
        let (c, buf) = self.exec_with(sqe, Some((buf, len)))?;
        ok(&c, opcode)?;
        let mut out = vec![0u8; len];
        if let Some(b) = buf {
            b.read_bytes(0, &mut out);
        }
        Ok((c, out))
    }

    fn exec_with(&self, sqe: Sqe, buf: Option<(DmaMem, usize)>) -> Result<(Cqe, Option<DmaMem>)> {
        let check = || match self.health() {
            Health::Removed => Err(Error::Removed),
            Health::Fatal => Err(Error::Fatal),
            Health::Ok => Ok(()),
        };
        self.admin.exec(sqe, buf, self.opts.admin_timeout, &check)
    }

    fn alloc_qid(&self) -> Result<u16> {
        let mut qs = self.io_queues.lock();
        let i = qs
            .iter()
            .position(|used| !used)
            .ok_or_else(|| Error::Unsupported("no I/O queue left".into()))?;
        qs[i] = true;
        u16::try_from(i + 1).map_err(|_| Error::Busy)
    }

    fn free_qid(&self, qid: u16) {
        if let Some(u) = self.io_queues.lock().get_mut(usize::from(qid) - 1) {
            *u = false;
        }
    }

    /// A new I/O queue pair (waits for the admin commands that create it;
    /// quick: no controller timeout involved).
    pub fn create_io_qpair<C: Request>(&self) -> Result<Qpair<T::Queue, C>> {
        if self.state() != State::Enabled {
            return Err(Error::Busy);
        }
        let qid = self.alloc_qid()?;
        match self
            .t
            .connect_io_queue(qid, self.io_entries(), &mut SyncAdmin(self))
        {
            Ok(q) => {
                let mut qp = Qpair::new(q);
                qp.watch_stops(&self.stops);
                Ok(qp)
            }
            Err(e) => {
                self.free_qid(qid);
                Err(e)
            }
        }
    }

    /// Connects `qp` again after a reset (empty).
    pub fn reconnect_io_qpair<C: Request>(&self, qp: &mut Qpair<T::Queue, C>) -> Result<()> {
        if qp.is_retired() {
            return Err(Error::InvalidArg("the queue pair was deleted".into()));
        }
        self.t
            .reconnect_io_queue(qp.transport_mut(), &mut SyncAdmin(self))?;
        qp.watch_stops(&self.stops);
        qp.set_connected(true);
        Ok(())
    }

    /// Deletes `qp` (its commands must be finished or failed).
    pub fn delete_io_qpair<C: Request>(&self, mut qp: Qpair<T::Queue, C>) {
        self.retire_io_qpair(&mut qp);
    }

    /// [`Controller::delete_io_qpair`] for a queue pair its owner keeps
    /// (in place, to spare an `Option` on its I/O path): deleted on the
    /// controller and its queue id freed; from then on it is disconnected
    /// for good (submissions refused, no reconnect) and its memory goes
    /// when it is dropped. A second call does nothing.
    pub fn retire_io_qpair<C: Request>(&self, qp: &mut Qpair<T::Queue, C>) {
        if qp.is_retired() {
            return;
        }
        qp.retire();
        let qid = qp.transport().qid();
        let mut deleted = false;
        if self.state() == State::Enabled {
            match self
                .t
                .disconnect_io_queue(qp.transport_mut(), &mut SyncAdmin(self))
            {
                Ok(()) => deleted = true,
                Err(e) if self.t.uses_dma() => {
                    // The controller may still work on the queue's
                    // commands: it stops touching host memory altogether
                    // (a controller that cannot delete a queue is broken;
                    // a reset brings it back).
                    tracing::warn!(qid, error = %e,
                        "I/O queue deletion failed: controller stopped from DMA");
                    self.t.set_dma(false);
                    self.stops.fetch_add(1, Ordering::AcqRel);
                    self.set_state(State::Failed);
                }
                Err(e) => tracing::debug!(qid, error = %e, "I/O queue deletion failed"),
            }
        }
        // Its commands are out of the controller's reach: deleted there,
        // a transport without DMA, or the controller stopped since the
        // queue connected (a disable; a removed controller is disabled
        // by whoever saw it go).
        if deleted || !self.t.uses_dma() || qp.stopped_since_connect() {
            qp.set_quiesced();
        }
        // What the queue holds on the transport (a fabrics connection)
        // goes now, as it would with the queue pair dropped.
        qp.transport_mut().clear();
        self.free_qid(qid);
    }

    /// Normal shutdown (CC.SHN, waits for SHST complete within CAP.TO),
    /// then disable. Blocks.
    pub fn shutdown(&self) -> Result<()> {
        self.aer_armed.store(false, Ordering::Release);
        let cc = Cc(self.reg32(offset::CC)?);
        if cc.0 == u32::MAX {
            return Err(Error::Removed);
        }
        if cc.en() {
            self.set_reg32(offset::CC, cc.with_shn(Cc::SHN_NORMAL).0)?;
            let start = Instant::now();
            let limit = Duration::from_millis(u64::from(self.cap.timeout_ms().max(500)));
            loop {
                let csts = Csts(self.reg32(offset::CSTS)?);
                if csts.is_all_ones() {
                    return Err(Error::Removed);
                }
                if csts.shst() == Csts::SHST_COMPLETE {
                    break;
                }
                if start.elapsed() > limit {
                    tracing::warn!(
                        traddr = self.t.traddr(),
                        "shutdown did not complete in time"
                    );
                    break;
                }
                pause();
            }
        }
        self.disable()
    }
}

/// Synchronous admin execution for transports setting up queues.
struct SyncAdmin<'a, T: Transport>(&'a Controller<T>);

impl<T: Transport> AdminExec for SyncAdmin<'_, T> {
    fn exec(&mut self, sqe: Sqe) -> Result<Cqe> {
        self.0.exec_raw(sqe)
    }
}

fn refused(s: Status) -> Error {
    Error::InvalidArg(format!("admin command refused: {s}"))
}

trait BoxZeroed {
    fn new_box_zeroed_or_panic() -> Box<Self>;
}

impl BoxZeroed for IdentifyController {
    fn new_box_zeroed_or_panic() -> Box<Self> {
        Box::new(IdentifyController::new_zeroed())
    }
}
