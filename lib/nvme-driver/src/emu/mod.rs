//! An in-process emulated NVMe controller behind the same PCI function
//! boundary as VFIO ([`EmuFunction`] implements
//! [`crate::bus::PciFunction`]): registers and doorbells in process memory,
//! queues and data in the driver's DMA memory, and a controller thread
//! that fetches commands, moves data through PRPs and SGLs and posts
//! completions with phase tags — so the driver's real PCIe code runs
//! against it.
//!
//! What it is for: fast driver tests in the normal test run; fault
//! injection ([`EmuController::inject`]: error statuses, commands that
//! never complete; [`EmuController::set_fatal`]: CSTS.CFS;
//! [`EmuController::remove`]: surprise removal, registers read all ones);
//! and measuring the driver's own cost per I/O with a *null* namespace
//! that completes at once without moving data.
//!
//! The controller thread polls the doorbells; when idle for a while it
//! parks, and a doorbell or register write wakes it (a flag check per
//! doorbell write). With [`EmuOptions::spin`] it never parks (benchmarks,
//! pinned to a core of its own) and a doorbell write is a plain store.
//! Each doorbell sits on a cache line of its own, and so does anything
//! the controller writes per command, so that a spinning controller and
//! the driver share only the lines they must (queue entries, the one
//! doorbell written). [`EmuController::start_inline`] makes a
//! controller without a thread, a device model that runs inside the
//! driver's register and doorbell writes (as a hypervisor runs one in the
//! vCPU thread that wrote): no hand-off between threads, which keeps
//! tests quick and steady on a busy machine.

mod cmds;
mod engine;
mod ioq;
mod sys;

use std::fmt;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use bdevkit_nvme_spec::Status;
use parking_lot::Mutex;

use crate::bus::PciFunction;
use crate::error::{Error, Result};
use crate::sys::{DmaMem, Doorbell, DoorbellSink};

/// Queues the emulated controller has (admin included).
pub const MAX_QUEUES: usize = 65;

/// What a namespace does with data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmuKind {
    /// Stores data in memory.
    Ram,
    /// Stores nothing; completes every command at once without touching
    /// the data (reads leave buffers as they were).
    Null,
}

/// One emulated namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmuNamespace {
    /// Namespace id (1-based).
    pub nsid: u32,
    /// Data kind.
    pub kind: EmuKind,
    /// Logical block size (512 or 4096).
    pub block_size: u32,
    /// Blocks.
    pub num_blocks: u64,
}

/// Controller options.
#[derive(Debug, Clone)]
pub struct EmuOptions {
    /// Serial number.
    pub serial: String,
    /// Model number.
    pub model: String,
    /// MDTS (2^mdts pages per command; 0 = no limit).
    pub mdts: u8,
    /// Report SGL support.
    pub sgl: bool,
    /// Report a volatile write cache (Flush).
    pub vwc: bool,
    /// Report fused Compare and Write.
    pub fused: bool,
    /// I/O queue pairs granted.
    pub io_queues: u16,
    /// Never park the controller thread (benchmarks).
    pub spin: bool,
    /// Pin the controller thread to this CPU.
    pub cpu: Option<usize>,
    /// Namespaces.
    pub namespaces: Vec<EmuNamespace>,
}

impl Default for EmuOptions {
    fn default() -> Self {
        EmuOptions {
            serial: "EMU0001".into(),
            model: "bdevkit emulated NVMe".into(),
            mdts: 7,
            sgl: true,
            vwc: true,
            fused: true,
            io_queues: 16,
            spin: false,
            cpu: None,
            namespaces: vec![EmuNamespace {
                nsid: 1,
                kind: EmuKind::Ram,
                block_size: 512,
                num_blocks: 8192,
            }],
        }
    }
}

/// What an injected fault does to the commands it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// Complete with this status instead of executing.
    Status(Status),
    /// Never complete (a command timeout); an Abort for it completes it
    /// with "aborted by request".
    Drop,
}

/// A fault for the next `count` commands matching `admin`/`opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// Admin queue (true) or I/O queues.
    pub admin: bool,
    /// Only this opcode (`None`: any).
    pub opcode: Option<u8>,
    /// Commands to hit.
    pub count: u32,
    /// What happens to them.
    pub action: FaultAction,
}

/// A value alone on its cache line (two lines: the adjacent-line
/// prefetcher moves pairs), so that writing it moves no other data
/// between cores.
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

pub(crate) struct Shared {
    name: String,
    regs: Box<[AtomicU32]>,
    /// Doorbell `i` (2 * qid: SQ tail; 2 * qid + 1: CQ head).
    doorbells: Box<[Padded<AtomicU32>]>,
    removed: AtomicBool,
    /// Bus Master Enable clear: the engine touches no host memory.
    bus_master_off: AtomicBool,
    /// The engine is inside a pass (it may be touching host memory).
    stepping: AtomicBool,
    fatal: AtomicBool,
    sleeping: AtomicBool,
    stop: AtomicBool,
    thread: OnceLock<std::thread::Thread>,
    faults: Mutex<Vec<Fault>>,
    faults_on: AtomicBool,
    ns_changes: Mutex<Vec<EmuNamespace>>,
    ns_pending: AtomicBool,
    /// A completion queue was full when the engine last looked: a head
    /// doorbell write must run it (otherwise such a write only stores).
    cq_wait: AtomicBool,
    /// Commands executed; written by the engine alone (per batch, before
    /// the batch's completions are posted).
    commands: Padded<AtomicU64>,
    /// Inline controller (no thread): its engine runs in `wake`.
    is_inline: bool,
    /// Spinning controller thread: nothing to wake.
    spin: bool,
    /// The engine of an inline controller. It holds an `Arc` of this:
    /// [`EmuController`]'s drop takes it out.
    inline: Mutex<Option<engine::Engine>>,
    /// An inline run is wanted (set by every waker; the thread running
    /// the engine loops until it finds it clear).
    kick: AtomicBool,
}

impl Shared {
    /// Runs an inline engine until it is idle and nobody asked for more.
    /// Whoever finds the engine busy leaves `kick` set for its runner.
    /// Never inlined: `bench/callgrind_io_path.sh` leaves the emulated
    /// device's instructions out by toggling collection in this function.
    #[inline(never)]
    fn run_inline(&self) {
        self.kick.store(true, Ordering::SeqCst);
        loop {
            let Some(mut g) = self.inline.try_lock() else {
                return;
            };
            let Some(e) = g.as_mut() else { return };
            while self.kick.swap(false, Ordering::SeqCst) {
                while e.step() == engine::Step::More {}
            }
            drop(g);
            if !self.kick.load(Ordering::SeqCst) {
                return;
            }
        }
    }

    fn wake(&self) {
        if self.is_inline {
            self.run_inline();
            return;
        }
        if self.spin {
            return;
        }
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }

    pub(crate) fn reg(&self, off: u32) -> u32 {
        self.regs
            .get(off as usize / 4)
            .map_or(0, |r| r.load(Ordering::Acquire))
    }

    pub(crate) fn set_reg(&self, off: u32, v: u32) {
        if let Some(r) = self.regs.get(off as usize / 4) {
            r.store(v, Ordering::Release);
        }
    }

    #[inline]
    pub(crate) fn doorbell(&self, i: usize) -> u32 {
        self.doorbells
            .get(i)
            .map_or(0, |d| d.0.load(Ordering::Acquire))
    }

    /// Takes a matching fault, if any.
    #[inline]
    pub(crate) fn fault(&self, admin: bool, opcode: u8) -> Option<FaultAction> {
        if !self.faults_on.load(Ordering::Relaxed) {
            return None;
        }
        self.take_fault(admin, opcode)
    }

    #[cold]
    #[inline(never)]
    fn take_fault(&self, admin: bool, opcode: u8) -> Option<FaultAction> {
        let mut f = self.faults.lock();
        let i = f
            .iter()
            .position(|x| x.admin == admin && x.opcode.is_none_or(|o| o == opcode))?;
        let action = f[i].action;
        f[i].count -= 1;
        if f[i].count == 0 {
            f.remove(i);
        }
        if f.is_empty() {
            self.faults_on.store(false, Ordering::Relaxed);
        }
        Some(action)
    }
}

impl DoorbellSink for Shared {
    #[inline]
    fn ring(&self, index: u32, value: u32) {
        let Some(d) = self.doorbells.get(index as usize) else {
            return;
        };
        if self.spin {
            d.0.store(value, Ordering::Release);
            return;
        }
        if !index.is_multiple_of(2) {
            // A CQ head only matters to an engine waiting for room; the
            // SeqCst store and load pair with the engine's in
            // `engine::cq_room` (one of the two sees the other's write).
            d.0.store(value, Ordering::SeqCst);
            if !self.cq_wait.load(Ordering::SeqCst) {
                return;
            }
        } else {
            d.0.store(value, Ordering::Release);
        }
        self.wake();
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmuShared")
            .field("name", &self.name)
            .finish()
    }
}

/// The emulated controller: owns its thread (or, inline, its engine);
/// dropping it stops the thread.
#[derive(Debug)]
pub struct EmuController {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl EmuController {
    fn shared(name: &str, is_inline: bool, spin: bool) -> Arc<Shared> {
        Arc::new(Shared {
            name: format!("emu:{name}"),
            regs: (0..1024).map(|_| AtomicU32::new(0)).collect(),
            doorbells: (0..2 * MAX_QUEUES)
                .map(|_| Padded(AtomicU32::new(0)))
                .collect(),
            removed: AtomicBool::new(false),
            bus_master_off: AtomicBool::new(false),
            stepping: AtomicBool::new(false),
            fatal: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            thread: OnceLock::new(),
            faults: Mutex::new(Vec::new()),
            faults_on: AtomicBool::new(false),
            ns_changes: Mutex::new(Vec::new()),
            ns_pending: AtomicBool::new(false),
            cq_wait: AtomicBool::new(false),
            commands: Padded(AtomicU64::new(0)),
            is_inline,
            spin,
            inline: Mutex::new(None),
            kick: AtomicBool::new(false),
        })
    }

    /// Starts a controller named `name` (its address is `emu:NAME`) with
    /// a thread of its own.
    pub fn start(name: &str, opts: EmuOptions) -> Result<EmuController> {
        let shared = Self::shared(name, false, opts.spin);
        let mut eng = engine::Engine::new(Arc::clone(&shared), &opts)?;
        let spin = opts.spin;
        let cpu = opts.cpu;
        let thread = std::thread::Builder::new()
            .name(format!("emu-{name}"))
            .spawn(move || {
                if let Some(c) = cpu {
                    crate::sys::pin_to_cpu(c);
                }
                eng.run(spin);
            })
            .map_err(Error::sys("spawning the emulated controller"))?;
        let _ = shared.thread.set(thread.thread().clone());
        Ok(EmuController {
            shared,
            thread: Some(thread),
        })
    }

    /// A controller named `name` without a thread: every register or
    /// doorbell write of the driver runs it until it has nothing left to
    /// do, in the writing thread, before the write returns (so a command
    /// has completed when its doorbell write returns). [`EmuOptions::spin`]
    /// and [`EmuOptions::cpu`] do not apply.
    pub fn start_inline(name: &str, opts: EmuOptions) -> Result<EmuController> {
        let shared = Self::shared(name, true, false);
        let eng = engine::Engine::new(Arc::clone(&shared), &opts)?;
        *shared.inline.lock() = Some(eng);
        shared.wake();
        Ok(EmuController {
            shared,
            thread: None,
        })
    }

    /// The PCI function the driver opens.
    #[must_use]
    pub fn function(&self) -> Arc<EmuFunction> {
        Arc::new(EmuFunction {
            shared: Arc::clone(&self.shared),
        })
    }

    /// Its address, `emu:NAME`.
    #[must_use]
    pub fn address(&self) -> &str {
        &self.shared.name
    }

    /// Applies `fault` to the next matching commands.
    pub fn inject(&self, fault: Fault) {
        if fault.count == 0 {
            return;
        }
        self.shared.faults.lock().push(fault);
        self.shared.faults_on.store(true, Ordering::Relaxed);
    }

    /// Sets CSTS.CFS and stops processing until the host resets
    /// (CC.EN = 0).
    pub fn set_fatal(&self) {
        self.shared.fatal.store(true, Ordering::Release);
        self.shared.wake();
    }

    /// Surprise removal: registers read all ones and nothing completes.
    pub fn remove(&self) {
        self.shared.removed.store(true, Ordering::SeqCst);
        // As a device that is gone: no pass of the engine after this.
        while self.shared.stepping.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
        self.shared.wake();
    }

    /// Adds (or replaces) a namespace and raises a namespace-change event.
    pub fn add_namespace(&self, ns: EmuNamespace) {
        self.shared.ns_changes.lock().push(ns);
        self.shared.ns_pending.store(true, Ordering::Release);
        self.shared.wake();
    }

    /// Commands executed so far.
    #[must_use]
    pub fn commands(&self) -> u64 {
        self.shared.commands.0.load(Ordering::Relaxed)
    }
}

impl Drop for EmuController {
    fn drop(&mut self) {
        // An inline engine holds the shared state: break the cycle.
        drop(self.shared.inline.lock().take());
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.shared.thread.get() {
            t.unpark();
        }
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

/// The emulated controller's PCI function.
#[derive(Debug)]
pub struct EmuFunction {
    shared: Arc<Shared>,
}

impl PciFunction for EmuFunction {
    fn address(&self) -> &str {
        &self.shared.name
    }

    fn read32(&self, off: u32) -> u32 {
        if self.shared.removed.load(Ordering::Acquire) {
            return u32::MAX;
        }
        self.shared.reg(off)
    }

    fn write32(&self, off: u32, v: u32) {
        if self.shared.removed.load(Ordering::Acquire) {
            return;
        }
        if off >= 0x1000 {
            let i = (off - 0x1000) / 4;
            self.shared.ring(i, v);
            return;
        }
        self.shared.set_reg(off, v);
        self.shared.wake();
    }

    fn doorbell(&self, off: u32) -> Doorbell {
        // DSTRD is 0: doorbell i sits at 0x1000 + 4 i.
        Doorbell::sink(
            Arc::clone(&self.shared) as Arc<dyn DoorbellSink>,
            off.saturating_sub(0x1000) / 4,
        )
    }

    fn alloc_dma(&self, len: usize) -> Result<DmaMem> {
        DmaMem::alloc(len, false).map_err(Error::sys("allocating DMA memory"))
    }

    #[inline]
    fn reaches(&self, _addr: usize, _len: usize) -> bool {
        true
    }

    fn reach_gate(&self) -> Option<&'static AtomicUsize> {
        // It reaches all of the process's memory, always.
        static NOTHING_UNREACHABLE: AtomicUsize = AtomicUsize::new(0);
        Some(&NOTHING_UNREACHABLE)
    }

    fn vendor_id(&self) -> u16 {
        0x1b36
    }

    /// Off: the engine makes no further pass, and the one under way (on
    /// its thread) ends before this returns.
    fn set_bus_master(&self, on: bool) {
        self.shared.bus_master_off.store(!on, Ordering::SeqCst);
        if !on {
            while self.shared.stepping.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
        }
    }
}
