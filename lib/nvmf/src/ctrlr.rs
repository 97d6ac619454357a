//! A controller: what one host's admin Connect creates in a subsystem
//! (dynamic controller model). It is shared by the controller's queue
//! pairs, which may live on different poll group threads, and by the
//! control plane (AENs from namespace changes, `nvmf_subsystem_get_*`),
//! so its mutable state sits behind a lock that only admin-path code
//! takes; the I/O path reads nothing of it but one atomic flag
//! ([`Controller::needs_attention`]).
//!
//! Properties (CAP, VS, CC, CSTS), features, asynchronous events with
//! SPDK's masking (an event type stays masked until its log page is
//! read), the changed namespace list, keep alive and the dead flag that
//! tears every queue pair of the controller down live here.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use bdevkit::clock;
use bdevkit::thread::ThreadHandle;
use bdevkit_nvme_spec::features::AsyncEventConfig;
use bdevkit_nvme_spec::identify::NamespaceList;
use bdevkit_nvme_spec::log::AsyncEvent;
use bdevkit_nvme_spec::regs::{offset, property_size, Cap, Cc, Csts, PropertySize, Vs};
use bdevkit_nvme_spec::Status;
use parking_lot::Mutex;

use crate::addr::ListenAddr;
use crate::opts::TransportOpts;

/// The version this target reports (VS and Identify VER). 1.3 keeps the
/// Linux host from asking for the NVMe 2.0 command set specific Identify
/// structures this target does not build.
pub const VERSION: Vs = Vs::V1_3;
/// Most Asynchronous Event Requests outstanding (AERL + 1, SPDK's 4).
pub const MAX_AERS: usize = 4;
/// Keep alive timeout of a discovery controller whose host gave none
/// (SPDK's 2 minutes).
pub const DISCOVERY_KATO_MS: u32 = 120_000;
/// CAP.TO, 500 ms units: how long a host waits for CSTS.RDY.
const CAP_TO: u64 = 30;
/// Largest changed namespace list before it overflows.
const CHANGED_NS_MAX: usize = 1024;

/// Why a controller was torn down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeathCause {
    /// Its admin queue disconnected.
    AdminGone,
    /// The keep alive timer expired.
    KeepAlive,
    /// The subsystem, its listener or the host's access was removed, or
    /// the target stops.
    Removed,
}

/// Mutable controller state (admin path only).
#[derive(Debug)]
pub(crate) struct CtrlState {
    pub cc: Cc,
    pub csts: Csts,
    /// Asynchronous Event Configuration.
    pub aec: u32,
    /// Volatile write cache enabled.
    pub wce: bool,
    /// Whether Number of Queues was set (it may be set once, before I/O queues).
    pub queues_set: bool,
    /// I/O queue ids in use.
    pub io_qids: Vec<bool>,
    /// Threads holding the controller's queue pairs (woken on events).
    pub threads: Vec<ThreadHandle>,
    /// Events waiting for an Asynchronous Event Request.
    pub events: VecDeque<u32>,
    /// Namespace attribute notices are masked until log 04h is read.
    pub ns_aen_masked: bool,
    /// Discovery log change notices are masked until log 70h is read.
    pub disc_aen_masked: bool,
    /// Namespaces changed since the host last read log 04h.
    pub changed_ns: Vec<u32>,
    /// The changed list overflowed.
    pub changed_overflow: bool,
    /// Values of the features stored as given (arbitration, power
    /// management, ... indexed by FID).
    pub plain_features: [u32; 32],
}

/// One controller.
#[derive(Debug)]
pub struct Controller {
    /// Controller id.
    pub cntlid: u16,
    /// The subsystem's id in the target.
    pub subsys_id: u32,
    /// The subsystem's NQN.
    pub subnqn: String,
    /// The host's NQN.
    pub hostnqn: String,
    /// The host identifier from Connect.
    pub hostid: [u8; 16],
    /// A discovery controller.
    pub discovery: bool,
    /// The listener the admin queue connected through.
    pub listen: ListenAddr,
    /// Most I/O queues.
    pub max_io_qpairs: u16,
    /// CAP, built once.
    cap: Cap,
    kato_ms: AtomicU32,
    last_keep_alive: AtomicU64,
    attention: AtomicBool,
    dead: AtomicBool,
    pub(crate) state: Mutex<CtrlState>,
}

/// What a controller is created from.
#[derive(Debug, Clone)]
pub(crate) struct CtrlParams {
    pub cntlid: u16,
    pub subsys_id: u32,
    pub subnqn: String,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    pub discovery: bool,
    pub listen: ListenAddr,
    pub kato_ms: u32,
    pub admin_thread: ThreadHandle,
}

impl Controller {
    pub(crate) fn new(p: CtrlParams, opts: &TransportOpts) -> Controller {
        let mqes = u64::from(opts.max_queue_depth.saturating_sub(1));
        // MQES, CQR, TO, CSS = NVM; MPSMIN = MPSMAX = 0 (4 KiB).
        let cap = Cap(mqes | (1 << 16) | (CAP_TO << 24) | (u64::from(Cap::CSS_NVM) << 37));
        let mut aec = AsyncEventConfig::NAMESPACE_ATTRIBUTE;
        let mut kato = p.kato_ms;
        if p.discovery {
            aec = 0;
            if kato == 0 {
                kato = DISCOVERY_KATO_MS;
            } else {
                aec = AsyncEventConfig::DISCOVERY_LOG_CHANGE;
            }
        }
        Controller {
            cntlid: p.cntlid,
            subsys_id: p.subsys_id,
            subnqn: p.subnqn,
            hostnqn: p.hostnqn,
            hostid: p.hostid,
            discovery: p.discovery,
            listen: p.listen,
            max_io_qpairs: opts.max_io_qpairs_per_ctrlr,
            cap,
            kato_ms: AtomicU32::new(kato),
            last_keep_alive: AtomicU64::new(clock::ticks()),
            attention: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            state: Mutex::new(CtrlState {
                cc: Cc(0),
                csts: Csts(0),
                aec,
                wce: true,
                queues_set: false,
                io_qids: vec![false; usize::from(opts.max_io_qpairs_per_ctrlr) + 1],
                threads: vec![p.admin_thread],
                events: VecDeque::new(),
                ns_aen_masked: false,
                disc_aen_masked: false,
                changed_ns: Vec::new(),
                changed_overflow: false,
                plain_features: [0; 32],
            }),
        }
    }

    /// Whether a queue pair of this controller must look at it: an event
    /// for an outstanding AER, or the controller died. One atomic load.
    #[inline]
    #[must_use]
    pub fn needs_attention(&self) -> bool {
        self.attention.load(Ordering::Acquire)
    }

    /// Clears the attention flag (the admin queue took the events).
    pub(crate) fn clear_attention(&self) {
        if !self.is_dead() {
            self.attention.store(false, Ordering::Release);
        }
    }

    /// Whether the controller was torn down.
    #[must_use]
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Tears the controller down: CSTS.CFS for a keep alive expiry, and
    /// every queue pair disconnects (draining its I/O). Idempotent.
    pub fn kill(&self, cause: DeathCause) {
        if self.dead.swap(true, Ordering::AcqRel) {
            return;
        }
        let threads = {
            let mut st = self.state.lock();
            if cause == DeathCause::KeepAlive {
                st.csts = Csts::new(st.csts.rdy(), true, st.csts.shst());
            }
            st.threads.clone()
        };
        match cause {
            DeathCause::KeepAlive => tracing::warn!(
                cntlid = self.cntlid,
                subnqn = %self.subnqn,
                hostnqn = %self.hostnqn,
                "keep alive timeout: disconnecting the host's controller"
            ),
            DeathCause::AdminGone | DeathCause::Removed => tracing::info!(
                cntlid = self.cntlid,
                subnqn = %self.subnqn,
                hostnqn = %self.hostnqn,
                ?cause,
                "controller torn down"
            ),
        }
        self.attention.store(true, Ordering::Release);
        wake(&threads);
    }

    /// The keep alive timeout in ms (0: none).
    #[must_use]
    pub fn kato_ms(&self) -> u32 {
        self.kato_ms.load(Ordering::Relaxed)
    }

    pub(crate) fn set_kato_ms(&self, ms: u32) {
        self.kato_ms.store(ms, Ordering::Relaxed);
        self.keep_alive();
    }

    /// Restarts the keep alive timer.
    pub fn keep_alive(&self) {
        self.last_keep_alive
            .store(clock::ticks(), Ordering::Relaxed);
    }

    /// Whether the keep alive timer expired at `now` (ticks).
    #[must_use]
    pub fn keep_alive_expired(&self, now: u64) -> bool {
        let kato = self.kato_ms();
        if kato == 0 {
            return false;
        }
        let last = self.last_keep_alive.load(Ordering::Relaxed);
        now.saturating_sub(last) > clock::us_to_ticks(u64::from(kato) * 1000)
    }

    /// Registers the thread of a new queue pair (woken on events).
    pub(crate) fn add_thread(&self, t: ThreadHandle) {
        let mut st = self.state.lock();
        if !st.threads.contains(&t) {
            st.threads.push(t);
        }
    }

    /// Takes I/O queue `qid`; `Err(false)` out of range, `Err(true)` in use.
    pub(crate) fn claim_qid(&self, qid: u16) -> Result<(), bool> {
        let mut st = self.state.lock();
        match st.io_qids.get_mut(usize::from(qid)) {
            None => Err(false),
            Some(true) => Err(true),
            Some(slot) => {
                *slot = true;
                Ok(())
            }
        }
    }

    /// Releases I/O queue `qid`.
    pub(crate) fn release_qid(&self, qid: u16) {
        if let Some(s) = self.state.lock().io_qids.get_mut(usize::from(qid)) {
            *s = false;
        }
    }

    /// I/O queues connected now.
    #[must_use]
    pub fn io_qpair_count(&self) -> u32 {
        let n = self.state.lock().io_qids.iter().filter(|b| **b).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Whether CC.EN is set.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.state.lock().cc.en()
    }

    /// Queues an asynchronous event when `aec_bit` is enabled and its
    /// type is not masked; wakes the admin queue's thread.
    fn post_event(&self, aec_bit: u32, ev: AsyncEvent, masked: fn(&mut CtrlState) -> &mut bool) {
        let threads = {
            let mut st = self.state.lock();
            if st.aec & aec_bit == 0 || *masked(&mut st) {
                return;
            }
            *masked(&mut st) = true;
            st.events.push_back(ev.to_dword());
            st.threads.clone()
        };
        self.attention.store(true, Ordering::Release);
        wake(&threads);
    }

    /// Namespace `nsid` was added, removed or resized: it joins the
    /// changed namespace list and a Namespace Attribute Changed notice is
    /// posted (unless masked or disabled).
    pub fn ns_changed(&self, nsid: u32) {
        {
            let mut st = self.state.lock();
            if !st.changed_ns.contains(&nsid) {
                if st.changed_ns.len() >= CHANGED_NS_MAX {
                    st.changed_overflow = true;
                } else {
                    st.changed_ns.push(nsid);
                    st.changed_ns.sort_unstable();
                }
            }
        }
        self.post_event(
            AsyncEventConfig::NAMESPACE_ATTRIBUTE,
            AsyncEvent::ns_changed(),
            |st| &mut st.ns_aen_masked,
        );
    }

    /// The discovery log changed (discovery controllers).
    pub fn discovery_changed(&self) {
        let ev = AsyncEvent {
            kind: bdevkit_nvme_spec::log::event_type::NOTICE,
            info: bdevkit_nvme_spec::log::notice::DISCOVERY_LOG_CHANGE,
            lid: bdevkit_nvme_spec::log::lid::DISCOVERY,
        };
        self.post_event(AsyncEventConfig::DISCOVERY_LOG_CHANGE, ev, |st| {
            &mut st.disc_aen_masked
        });
    }

    /// The next queued event (completion dword 0 of an AER).
    pub(crate) fn take_event(&self) -> Option<u32> {
        self.state.lock().events.pop_front()
    }

    /// Log page 04h: the changed namespace list; cleared (and the notice
    /// unmasked) unless `rae`.
    pub(crate) fn changed_ns_log(&self, rae: bool) -> NamespaceList {
        let mut st = self.state.lock();
        let list = if st.changed_overflow {
            NamespaceList::from_ids([0xffff_ffff])
        } else {
            NamespaceList::from_ids(st.changed_ns.iter().copied())
        };
        if !rae {
            st.changed_ns.clear();
            st.changed_overflow = false;
            st.ns_aen_masked = false;
        }
        list
    }

    /// Log page 70h was read: discovery notices unmasked unless `rae`.
    pub(crate) fn discovery_log_read(&self, rae: bool) {
        if !rae {
            self.state.lock().disc_aen_masked = false;
        }
    }

    /// Property Get: the value, or Invalid Field.
    pub(crate) fn property_get(&self, size: Option<PropertySize>, off: u32) -> Result<u64, Status> {
        let want = property_size(off).ok_or(Status::INVALID_FIELD.with_dnr())?;
        if size != Some(want) {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        let st = self.state.lock();
        Ok(match off {
            offset::CAP => self.cap.0,
            offset::VS => u64::from(VERSION.0),
            offset::CC => u64::from(st.cc.0),
            offset::CSTS => u64::from(st.csts.0),
            // NSSR, NSSD read as 0 (subsystem reset not supported); CRTO
            // repeats CAP.TO.
            offset::CRTO => CAP_TO,
            _ => 0,
        })
    }

    /// Property Set: only CC is writable. Returns whether the controller
    /// was disabled or shut down (its I/O queues go then).
    pub(crate) fn property_set(
        &self,
        size: Option<PropertySize>,
        off: u32,
        value: u64,
    ) -> Result<bool, Status> {
        if off != offset::CC || size != Some(PropertySize::Four) {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        let cc = Cc(u32::try_from(value & 0xffff_ffff).unwrap_or(0));
        let mut st = self.state.lock();
        let old = st.cc;
        let bad_entry_sizes =
            cc.iosqes() != 6 || cc.iocqes() != 4 || cc.css() != Cc::CSS_NVM || cc.mps() != 0;
        if cc.en() && !old.en() && bad_entry_sizes {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        let mut stopped = false;
        if cc.shn() != Cc::SHN_NONE && old.shn() == Cc::SHN_NONE {
            st.csts = Csts::new(st.csts.rdy(), st.csts.cfs(), Csts::SHST_COMPLETE);
            stopped = true;
        } else if cc.shn() == Cc::SHN_NONE {
            st.csts = Csts::new(st.csts.rdy(), st.csts.cfs(), Csts::SHST_NORMAL);
        }
        if cc.en() != old.en() {
            st.csts = Csts::new(cc.en(), st.csts.cfs(), st.csts.shst());
            stopped |= !cc.en();
        }
        st.cc = cc;
        Ok(stopped)
    }
}

/// Wakes `threads` (an empty message makes a sleeping reactor run its
/// pollers).
fn wake(threads: &[ThreadHandle]) {
    for t in threads {
        let _ = t.send_msg(|| {});
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bdevkit::thread::{CpuSet, Runtime, RuntimeOptions};

    fn ctrl(discovery: bool, kato: u32) -> (Runtime, Controller) {
        let rt = Runtime::start(RuntimeOptions::interrupt(CpuSet::single(0))).unwrap();
        let addr =
            ListenAddr::of_socket(crate::opts::TRTYPE_TCP, "127.0.0.1:4420".parse().unwrap());
        let c = Controller::new(
            CtrlParams {
                cntlid: 1,
                subsys_id: 1,
                subnqn: "nqn.2016-06.io.spdk:cnode1".into(),
                hostnqn: "nqn.2014-08.org.nvmexpress:uuid:0".into(),
                hostid: [0; 16],
                discovery,
                listen: addr,
                kato_ms: kato,
                admin_thread: rt.app_thread(),
            },
            &TransportOpts::default(),
        );
        (rt, c)
    }

    #[test]
    fn properties() {
        let (rt, c) = ctrl(false, 10_000);
        let cap = Cap(c
            .property_get(Some(PropertySize::Eight), offset::CAP)
            .unwrap());
        assert_eq!(cap.max_queue_entries(), 128);
        assert!(cap.cqr());
        assert_eq!(cap.css() & Cap::CSS_NVM, Cap::CSS_NVM);
        assert_eq!(
            c.property_get(Some(PropertySize::Four), offset::VS),
            Ok(u64::from(VERSION.0))
        );
        // Wrong size, unknown offset, read-only property.
        assert!(c
            .property_get(Some(PropertySize::Four), offset::CAP)
            .is_err());
        assert!(c.property_get(Some(PropertySize::Four), 0x24).is_err());
        assert!(c
            .property_set(Some(PropertySize::Four), offset::CSTS, 1)
            .is_err());
        // Enable: RDY follows.
        let en = u64::from(Cc::enabled(0).0);
        assert_eq!(
            c.property_set(Some(PropertySize::Four), offset::CC, en),
            Ok(false)
        );
        let csts = Csts(
            u32::try_from(
                c.property_get(Some(PropertySize::Four), offset::CSTS)
                    .unwrap(),
            )
            .unwrap(),
        );
        assert!(csts.rdy());
        // Shutdown: SHST complete.
        let shn = u64::from(Cc::enabled(0).with_shn(Cc::SHN_NORMAL).0);
        assert_eq!(
            c.property_set(Some(PropertySize::Four), offset::CC, shn),
            Ok(true)
        );
        let csts = Csts(
            u32::try_from(
                c.property_get(Some(PropertySize::Four), offset::CSTS)
                    .unwrap(),
            )
            .unwrap(),
        );
        assert_eq!(csts.shst(), Csts::SHST_COMPLETE);
        // A bad entry size is refused.
        let bad = u64::from(Cc::enabled(0).with_iosqes(5).0);
        let (rt2, c2) = ctrl(false, 0);
        assert!(c2
            .property_set(Some(PropertySize::Four), offset::CC, bad)
            .is_err());
        rt.shutdown();
        rt2.shutdown();
    }

    #[test]
    fn events_mask_until_log_read() {
        let (rt, c) = ctrl(false, 0);
        c.ns_changed(3);
        c.ns_changed(1);
        assert!(c.needs_attention());
        assert_eq!(c.take_event(), Some(AsyncEvent::ns_changed().to_dword()));
        assert_eq!(c.take_event(), None);
        let l = c.changed_ns_log(true);
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![1, 3]);
        let l = c.changed_ns_log(false);
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(c.changed_ns_log(false).iter().count(), 0);
        c.ns_changed(2);
        assert!(c.take_event().is_some());
        rt.shutdown();
    }

    #[test]
    fn discovery_keep_alive_and_death() {
        let (rt, c) = ctrl(true, 0);
        assert_eq!(c.kato_ms(), DISCOVERY_KATO_MS);
        // Discovery notices are off without a host KATO.
        c.discovery_changed();
        assert_eq!(c.take_event(), None);
        assert!(!c.keep_alive_expired(clock::ticks()));
        assert!(c.keep_alive_expired(clock::ticks() + clock::us_to_ticks(121_000_000)));
        c.kill(DeathCause::KeepAlive);
        assert!(c.is_dead() && c.needs_attention());
        c.clear_attention();
        assert!(c.needs_attention());
        rt.shutdown();
    }
}
