//! The target's state and the rules that only need it: transports (their
//! options and buffer pools), subsystems, hosts, the Connect checks
//! (SPDK's `nvmf_ctrlr_cmd_connect` order and status codes), and the
//! discovery log page. Reaching the poll groups (namespace channels,
//! queue pairs) and the transports themselves is `service/`'s job, above
//! this file.

use std::sync::Arc;

use bdevkit::bdev::BdevManager;
use bdevkit::thread::ThreadHandle;
use bdevkit_nvme_spec::discovery::{self, build_discovery_log, DiscoveryLogEntry};
use bdevkit_nvme_spec::fabrics::{
    validate_nqn, Connect, ConnectData, ConnectInvalidParameter, ADMIN_QID, CNTLID_DYNAMIC,
    DISCOVERY_NQN,
};
use bdevkit_nvme_spec::Status;
use parking_lot::Mutex;

use crate::addr::{DiscoverFn, ListenAddr};
use crate::core::pool::BufPool;
use crate::ctrlr::{Controller, CtrlParams, DeathCause};
use crate::opts::{filter, TargetConf, TransportOpts};
use crate::subsystem::{Namespace, Subsystem};

/// Byte offsets of Connect fields, for Connect Invalid Parameters
/// (SPDK's `offsetof` of the command and data structures).
mod field {
    /// Command: QID (dword 10 bits 31:16).
    pub const QID: u16 = 42;
    /// Command: SQSIZE (dword 11 bits 15:0).
    pub const SQSIZE: u16 = 44;
    /// Data: CNTLID.
    pub const CNTLID: u16 = 16;
    /// Data: SUBNQN.
    pub const SUBNQN: u16 = 256;
    /// Data: HOSTNQN.
    pub const HOSTNQN: u16 = 512;
}

/// A listening socket shared by the subsystems that listen on it.
#[derive(Debug)]
pub(crate) struct Port {
    pub addr: ListenAddr,
    /// Subsystems listening here.
    pub users: usize,
    /// Port id in discovery log entries.
    pub id: u16,
}

/// A created transport as the target's state knows it.
#[derive(Debug)]
pub(crate) struct TransportRecord {
    /// Its type (the registry's spelling).
    pub name: &'static str,
    pub opts: TransportOpts,
    /// Its shared data buffers.
    pub pool: Arc<BufPool>,
    /// Its listeners' discovery log entries.
    pub discover: DiscoverFn,
}

/// A discovery referral (`nvmf_discovery_add_referral`): an entry of the
/// discovery log pointing at another port.
#[derive(Debug, Clone)]
pub(crate) struct Referral {
    pub addr: ListenAddr,
    /// The referred subsystem (the discovery NQN: another discovery service).
    pub subnqn: String,
    /// The entry's TREQ says a secure channel is required.
    pub secure_channel: bool,
    /// The discovery log entry of its transport (`addr.trtype`'s).
    pub discover: DiscoverFn,
}

impl Referral {
    /// Whether it names the same referral as `addr` and `subnqn` (SPDK
    /// compares the transport id: address and subsystem).
    pub fn is(&self, addr: &ListenAddr, subnqn: &str) -> bool {
        self.addr.same(addr) && self.subnqn == subnqn
    }

    /// Its discovery log entry (SPDK's: port id 0, ASQSZ 0).
    fn entry(&self) -> Option<DiscoveryLogEntry> {
        let subtype = if self.subnqn == DISCOVERY_NQN {
            discovery::subtype::DISCOVERY_REFERRAL
        } else {
            discovery::subtype::NVME
        };
        let mut e = (self.discover)(subtype, &self.subnqn, &self.addr, 0)?;
        e.asqsz.set(0);
        e.treq = if self.secure_channel {
            discovery::treq::SECURE_CHANNEL_REQUIRED
        } else {
            discovery::treq::SECURE_CHANNEL_NOT_REQUIRED
        };
        Some(e)
    }
}

/// Everything the control plane changes.
#[derive(Debug)]
pub(crate) struct TargetState {
    pub conf: TargetConf,
    /// The transports created, in creation order (one per type).
    pub transports: Vec<TransportRecord>,
    /// The discovery subsystem first, then the NVM subsystems in creation order.
    pub subsystems: Vec<Subsystem>,
    pub next_subsys_id: u32,
    pub discovery_genctr: u64,
    pub ports: Vec<Port>,
    pub next_port_id: u16,
    /// Discovery referrals, the newest first (SPDK's order).
    pub referrals: Vec<Referral>,
}

impl TargetState {
    /// The subsystem `nqn` (`discovery` names the discovery subsystem, as
    /// in SPDK's RPCs).
    pub fn find(&self, nqn: &str) -> Option<&Subsystem> {
        let nqn = if nqn == "discovery" {
            DISCOVERY_NQN
        } else {
            nqn
        };
        self.subsystems.iter().find(|s| s.nqn == nqn)
    }

    /// Mutable [`TargetState::find`].
    pub fn find_mut(&mut self, nqn: &str) -> Option<&mut Subsystem> {
        let nqn = if nqn == "discovery" {
            DISCOVERY_NQN
        } else {
            nqn
        };
        self.subsystems.iter_mut().find(|s| s.nqn == nqn)
    }

    /// The subsystem with id `id`.
    pub fn by_id(&self, id: u32) -> Option<&Subsystem> {
        self.subsystems.iter().find(|s| s.id == id)
    }

    /// Mutable [`TargetState::by_id`].
    pub fn by_id_mut(&mut self, id: u32) -> Option<&mut Subsystem> {
        self.subsystems.iter_mut().find(|s| s.id == id)
    }

    /// The transport of type `trtype` (any case), if created.
    pub fn transport(&self, trtype: &str) -> Option<&TransportRecord> {
        self.transports
            .iter()
            .find(|t| t.name.eq_ignore_ascii_case(trtype))
    }

    /// The options of transport `trtype`, or defaults (no transport:
    /// nothing connects through it).
    pub fn opts_for(&self, trtype: &str) -> TransportOpts {
        self.transport(trtype)
            .map(|t| t.opts.clone())
            .unwrap_or_default()
    }

    /// The discovery log changed: bump the generation counter and tell the
    /// discovery controllers that asked for notices.
    pub fn discovery_changed(&mut self) {
        self.discovery_genctr += 1;
        if let Some(d) = self.subsystems.iter().find(|s| s.discovery) {
            for c in &d.ctrlrs {
                c.discovery_changed();
            }
        }
    }
}

/// What an admin queue's Connect made.
#[derive(Debug)]
pub(crate) struct AdminConnected {
    pub ctrlr: Arc<Controller>,
    pub opts: TransportOpts,
}

/// What an I/O queue's Connect joined.
#[derive(Debug)]
pub(crate) struct IoConnected {
    pub ctrlr: Arc<Controller>,
    /// The subsystem's namespaces now (the poll group opens channels).
    pub namespaces: Vec<Arc<Namespace>>,
    pub opts: TransportOpts,
}

/// A refused Connect: the status and completion dword 0.
pub(crate) type Refused = (Status, u32);

fn invalid_cmd(offset: u16) -> Refused {
    (
        Status::CONNECT_INVALID_PARAMETERS.with_dnr(),
        ConnectInvalidParameter {
            in_data: false,
            offset,
        }
        .to_dword(),
    )
}

fn invalid_data(offset: u16) -> Refused {
    (
        Status::CONNECT_INVALID_PARAMETERS.with_dnr(),
        ConnectInvalidParameter {
            in_data: true,
            offset,
        }
        .to_dword(),
    )
}

/// The target's shared core: state behind one lock (control and admin
/// paths only) and the bdev layer.
#[derive(Debug)]
pub(crate) struct Core {
    pub state: Mutex<TargetState>,
    pub mgr: BdevManager,
    /// Host PSKs and the TLS server config of `secure_channel` listeners.
    pub tls: crate::tls::TlsKeys,
    /// The last DH-HMAC-CHAP challenge's sequence number (SPDK starts it
    /// at a random value and counts up; never 0).
    auth_seqnum: std::sync::atomic::AtomicU32,
}

impl Core {
    pub fn new(mgr: BdevManager) -> Core {
        let mut state = TargetState {
            conf: TargetConf::default(),
            transports: Vec::new(),
            subsystems: Vec::new(),
            next_subsys_id: 1,
            discovery_genctr: 0,
            ports: Vec::new(),
            next_port_id: 0,
            referrals: Vec::new(),
        };
        state
            .subsystems
            .push(Subsystem::new(0, DISCOVERY_NQN, true));
        Core {
            state: Mutex::new(state),
            mgr,
            tls: crate::tls::TlsKeys::default(),
            auth_seqnum: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// The sequence number of a new DH-HMAC-CHAP challenge.
    pub fn auth_seqnum(&self, _subnqn: &str) -> u32 {
        use std::sync::atomic::Ordering;
        let mut cur = self.auth_seqnum.load(Ordering::Relaxed);
        loop {
            let base = if cur == 0 {
                bdevkit_nvme_auth::random_seqnum().unwrap_or(1)
            } else {
                cur
            };
            let next = base.wrapping_add(1).max(1);
            match self
                .auth_seqnum
                .compare_exchange(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(now) => cur = now,
            }
        }
    }

    /// Whether `hostnqn` must authenticate its queues to `subnqn` (it has
    /// a DH-HMAC-CHAP key there).
    pub fn auth_required(&self, subnqn: &str, hostnqn: &str) -> bool {
        let st = self.state.lock();
        st.subsystems
            .iter()
            .find(|s| s.nqn == subnqn)
            .is_some_and(|s| s.host_dhchap(hostnqn).is_some())
    }

    /// What a queue of `hostnqn` on `subnqn` authenticates with now: its
    /// keys read from the keyring, the digests and groups of
    /// `nvmf_set_config`. `Err` (for the log; never key material) when
    /// the host has no key or a key cannot be read.
    pub fn dhchap_config(
        &self,
        subnqn: &str,
        hostnqn: &str,
    ) -> std::result::Result<bdevkit_nvme_auth::CtrlConfig, String> {
        let (keys, hashes, groups) = {
            let st = self.state.lock();
            let keys = st
                .subsystems
                .iter()
                .find(|s| s.nqn == subnqn)
                .and_then(|s| s.host_dhchap(hostnqn))
                .cloned()
                .ok_or_else(|| "the host has no DH-HMAC-CHAP key".to_string())?;
            (
                keys,
                bdevkit_nvme_auth::parse_hashes(st.conf.dhchap_digests.iter().map(String::as_str)),
                bdevkit_nvme_auth::parse_groups(st.conf.dhchap_dhgroups.iter().map(String::as_str)),
            )
        };
        let read =
            |k: &bdevkit_keyring::KeyRef| k.secret().map_err(|e| format!("key {}: {e}", k.name()));
        Ok(bdevkit_nvme_auth::CtrlConfig {
            hostnqn: hostnqn.into(),
            subnqn: subnqn.into(),
            key: read(&keys.key)?,
            ctrl_key: keys.ctrlr_key.as_ref().map(read).transpose()?,
            hashes: hashes.map_err(|e| e.to_string())?,
            groups: groups.map_err(|e| e.to_string())?,
        })
    }

    /// The common Connect checks (subsystem, format, host), then the
    /// admin or I/O queue rules. `thread` is the queue pair's thread.
    pub fn connect(
        &self,
        via: &ListenAddr,
        cmd: &Connect,
        data: &ConnectData,
        thread: &ThreadHandle,
    ) -> Result<Result<AdminConnected, IoConnected>, Refused> {
        let subnqn = data.subnqn();
        let hostnqn = data.hostnqn();
        let mut st = self.state.lock();
        let opts = st.opts_for(via.trtype);
        let discovery_nqn = subnqn == DISCOVERY_NQN;
        let Some(sub) = st.subsystems.iter_mut().find(|s| s.nqn == subnqn) else {
            tracing::info!(%subnqn, %hostnqn, "connect to an unknown subsystem");
            return Err(invalid_data(field::SUBNQN));
        };
        if cmd.recfmt != 0 {
            return Err((Status::CONNECT_INCOMPATIBLE_FORMAT.with_dnr(), 0));
        }
        if cmd.sqsize == 0 {
            return Err(invalid_cmd(field::SQSIZE));
        }
        let depth_limit = if cmd.qid == ADMIN_QID {
            opts.max_aq_depth
        } else {
            u32::from(opts.max_queue_depth)
        };
        if u32::from(cmd.sqsize) >= depth_limit {
            return Err(invalid_cmd(field::SQSIZE));
        }
        if validate_nqn(&hostnqn).is_err() {
            return Err(invalid_data(field::HOSTNQN));
        }
        if !sub.host_allowed(&hostnqn) || !sub.listener_allowed(via) {
            tracing::warn!(%subnqn, %hostnqn, listener = %via, "host not allowed to connect");
            return Err((Status::CONNECT_INVALID_HOST.with_dnr(), 0));
        }
        if cmd.qid == ADMIN_QID {
            if data.cntlid.get() != CNTLID_DYNAMIC {
                return Err(invalid_data(field::CNTLID));
            }
            let Some(cntlid) = sub.alloc_cntlid() else {
                return Err((Status::CONNECT_CONTROLLER_BUSY, 0));
            };
            let kato = if discovery_nqn {
                cmd.kato_ms
            } else {
                opts.effective_kato(cmd.kato_ms)
            };
            let ctrlr = Arc::new(Controller::new(
                CtrlParams {
                    cntlid,
                    subsys_id: sub.id,
                    subnqn: sub.nqn.clone(),
                    hostnqn: hostnqn.into_owned(),
                    hostid: data.hostid,
                    discovery: sub.discovery,
                    listen: via.clone(),
                    kato_ms: kato,
                    admin_thread: thread.clone(),
                },
                &opts,
            ));
            sub.ctrlrs.push(Arc::clone(&ctrlr));
            tracing::info!(
                subnqn = %sub.nqn,
                hostnqn = %ctrlr.hostnqn,
                cntlid,
                kato_ms = ctrlr.kato_ms(),
                "controller created"
            );
            return Ok(Ok(AdminConnected { ctrlr, opts }));
        }
        let Some(ctrlr) = sub
            .ctrlrs
            .iter()
            .find(|c| c.cntlid == data.cntlid.get())
            .cloned()
        else {
            return Err(invalid_data(field::CNTLID));
        };
        if ctrlr.hostnqn != hostnqn {
            return Err(invalid_data(field::HOSTNQN));
        }
        if ctrlr.discovery || ctrlr.is_dead() || !ctrlr.enabled() {
            return Err(invalid_cmd(field::QID));
        }
        match ctrlr.claim_qid(cmd.qid) {
            Ok(()) => {}
            Err(false) => return Err((Status::INVALID_QUEUE_ID.with_dnr(), 0)),
            Err(true) => return Err(invalid_cmd(field::QID)),
        }
        ctrlr.add_thread(thread.clone());
        let namespaces = sub.namespaces.values().cloned().collect();
        Ok(Err(IoConnected {
            ctrlr,
            namespaces,
            opts,
        }))
    }

    /// Forgets a controller whose admin queue is gone.
    pub fn remove_ctrlr(&self, c: &Arc<Controller>) {
        let mut st = self.state.lock();
        if let Some(s) = st.by_id_mut(c.subsys_id) {
            s.ctrlrs.retain(|x| !Arc::ptr_eq(x, c));
        }
        drop(st);
        c.kill(DeathCause::AdminGone);
    }

    /// The discovery log page for `hostnqn`, who asked through `via`:
    /// every listener of every NVM subsystem the host may use (and of the
    /// discovery subsystem, as "current discovery subsystem" entries),
    /// filtered by the target's discovery filter.
    pub fn discovery_log(&self, hostnqn: &str, via: &ListenAddr) -> Vec<u8> {
        let st = self.state.lock();
        let filt = st.conf.discovery_filter;
        let matches = |l: &ListenAddr| {
            (filt & filter::ADDRESS == 0
                || (l.adrfam == via.adrfam && l.traddr.eq_ignore_ascii_case(&via.traddr)))
                && (filt & filter::SVCID == 0 || l.trsvcid == via.trsvcid)
        };
        let mut entries = Vec::new();
        for s in &st.subsystems {
            if !s.host_allowed(hostnqn) {
                continue;
            }
            for l in s.listeners.iter().filter(|l| matches(l)) {
                // A listener's transport exists (listeners need one).
                let Some(t) = st.transport(l.trtype) else {
                    continue;
                };
                let portid = st.ports.iter().find(|p| p.addr.same(l)).map_or(0, |p| p.id);
                let subtype = if s.discovery {
                    discovery::subtype::CURRENT_DISCOVERY
                } else {
                    discovery::subtype::NVME
                };
                let Some(mut e) = (t.discover)(subtype, &s.nqn, l, portid) else {
                    continue;
                };
                e.asqsz
                    .set(u16::try_from(t.opts.max_aq_depth).unwrap_or(u16::MAX));
                e.treq = if l.secure_channel {
                    discovery::treq::SECURE_CHANNEL_REQUIRED
                } else {
                    discovery::treq::SECURE_CHANNEL_NOT_REQUIRED
                };
                if s.discovery {
                    e.eflags.set(
                        discovery::eflags::DUPLICATE_INFO
                            | discovery::eflags::PERSISTENT_CONNECTION,
                    );
                }
                entries.push(e);
            }
        }
        // Every host sees the referrals (SPDK's RPC adds them for any host).
        entries.extend(st.referrals.iter().filter_map(Referral::entry));
        build_discovery_log(st.discovery_genctr, &entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bdevkit::thread::{CpuSet, Runtime, RuntimeOptions};
    use bdevkit_nvme_spec::discovery::parse_discovery_log;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
    const SUB: &str = "nqn.2016-06.io.spdk:cnode1";

    /// The TCP transport's discovery entries, as the registry has them.
    fn discover() -> DiscoverFn {
        crate::transport::find(crate::opts::TRTYPE_TCP)
            .unwrap()
            .listener_discover
    }

    fn addr(port: u16) -> ListenAddr {
        ListenAddr::of_socket(
            crate::opts::TRTYPE_TCP,
            format!("127.0.0.1:{port}").parse().unwrap(),
        )
    }

    fn core() -> Core {
        let c = Core::new(BdevManager::default());
        {
            let mut st = c.state.lock();
            st.transports.push(TransportRecord {
                name: crate::opts::TRTYPE_TCP,
                opts: TransportOpts::default(),
                pool: BufPool::new(4096, 1, 0),
                discover: discover(),
            });
            let mut s = Subsystem::new(1, SUB, false);
            s.listeners.push(addr(4420));
            st.subsystems.push(s);
            st.ports.push(Port {
                addr: addr(4420),
                users: 1,
                id: 0,
            });
        }
        c
    }

    fn data(sub: &str, cntlid: u16) -> ConnectData {
        ConnectData::new([7; 16], cntlid, sub, HOST).unwrap()
    }

    #[test]
    fn connect_rules() {
        let rt = Runtime::start(RuntimeOptions::interrupt(CpuSet::single(0))).unwrap();
        let t = rt.app_thread();
        let c = core();
        let adm = Connect::new(0, 32, 5000);
        // Unknown subsystem, then a host not allowed.
        let e = c
            .connect(
                &addr(4420),
                &adm,
                &data("nqn.2016-06.io.spdk:x", 0xffff),
                &t,
            )
            .unwrap_err();
        assert!(e.0.is(Status::CONNECT_INVALID_PARAMETERS));
        assert_eq!(ConnectInvalidParameter::from_dword(e.1).offset, 256);
        let e = c
            .connect(&addr(4420), &adm, &data(SUB, 0xffff), &t)
            .unwrap_err();
        assert!(e.0.is(Status::CONNECT_INVALID_HOST));
        c.state.lock().find_mut(SUB).unwrap().allow_any_host = true;
        // Wrong listener.
        let e = c
            .connect(&addr(4421), &adm, &data(SUB, 0xffff), &t)
            .unwrap_err();
        assert!(e.0.is(Status::CONNECT_INVALID_HOST));
        // Static controller id, zero SQSIZE.
        assert!(c.connect(&addr(4420), &adm, &data(SUB, 1), &t).is_err());
        assert!(c
            .connect(&addr(4420), &Connect::new(0, 1, 0), &data(SUB, 0xffff), &t)
            .is_err());
        let ok = c
            .connect(&addr(4420), &adm, &data(SUB, 0xffff), &t)
            .unwrap()
            .unwrap();
        assert_eq!(ok.ctrlr.cntlid, 1);
        assert_eq!(ok.ctrlr.kato_ms(), 10_000);
        // I/O queue before CC.EN, then after.
        let io = Connect::new(1, 128, 0);
        assert!(c.connect(&addr(4420), &io, &data(SUB, 1), &t).is_err());
        ok.ctrlr
            .property_set(
                Some(bdevkit_nvme_spec::regs::PropertySize::Four),
                0x14,
                u64::from(bdevkit_nvme_spec::regs::Cc::enabled(0).0),
            )
            .unwrap();
        let got = c
            .connect(&addr(4420), &io, &data(SUB, 1), &t)
            .unwrap()
            .unwrap_err();
        assert!(Arc::ptr_eq(&got.ctrlr, &ok.ctrlr));
        // The same qid twice, a qid beyond the limit, an unknown cntlid.
        assert!(c.connect(&addr(4420), &io, &data(SUB, 1), &t).is_err());
        let e = c
            .connect(&addr(4420), &Connect::new(200, 128, 0), &data(SUB, 1), &t)
            .unwrap_err();
        assert!(e.0.is(Status::INVALID_QUEUE_ID));
        assert!(c
            .connect(&addr(4420), &Connect::new(2, 129, 0), &data(SUB, 1), &t)
            .is_err());
        assert!(c
            .connect(&addr(4420), &Connect::new(2, 128, 0), &data(SUB, 9), &t)
            .is_err());
        // The discovery subsystem answers on any listener.
        let d = c
            .connect(
                &addr(4999),
                &Connect::new(0, 32, 0),
                &data(DISCOVERY_NQN, 0xffff),
                &t,
            )
            .unwrap()
            .unwrap();
        assert!(d.ctrlr.discovery);
        c.remove_ctrlr(&ok.ctrlr);
        assert!(ok.ctrlr.is_dead());
        rt.shutdown();
    }

    #[test]
    fn discovery_log_lists_allowed_subsystems() {
        let c = core();
        let log = c.discovery_log(HOST, &addr(4420));
        assert_eq!(parse_discovery_log(&log).unwrap().entries.len(), 0);
        c.state
            .lock()
            .find_mut(SUB)
            .unwrap()
            .hosts
            .push(HOST.into());
        let log = c.discovery_log(HOST, &addr(8009));
        let l = parse_discovery_log(&log).unwrap();
        assert_eq!(l.entries.len(), 1);
        assert_eq!(l.entries[0].subnqn(), SUB);
        assert_eq!(l.entries[0].trsvcid(), "4420");
        // With an svcid filter the host asking on 8009 sees nothing.
        c.state.lock().conf.discovery_filter = filter::SVCID;
        let log = c.discovery_log(HOST, &addr(8009));
        assert_eq!(parse_discovery_log(&log).unwrap().entries.len(), 0);
    }

    /// Referrals follow the subsystems' entries, for every host: to
    /// another discovery service (subtype 1) or to a subsystem (2).
    #[test]
    fn discovery_log_lists_referrals() {
        let c = core();
        {
            let mut st = c.state.lock();
            st.referrals.push(Referral {
                addr: addr(4430),
                subnqn: DISCOVERY_NQN.into(),
                secure_channel: false,
                discover: discover(),
            });
            st.referrals.push(Referral {
                addr: addr(4431),
                subnqn: SUB.into(),
                secure_channel: true,
                discover: discover(),
            });
        }
        let log = c.discovery_log("nqn.2014-08.org.nvmexpress:uuid:other", &addr(8009));
        let l = parse_discovery_log(&log).unwrap();
        assert_eq!(l.entries.len(), 2);
        let (a, b) = (&l.entries[0], &l.entries[1]);
        assert_eq!(
            (a.subtype, a.subnqn().as_ref(), a.trsvcid().as_ref()),
            (
                discovery::subtype::DISCOVERY_REFERRAL,
                DISCOVERY_NQN,
                "4430"
            )
        );
        assert_eq!(a.treq, discovery::treq::SECURE_CHANNEL_NOT_REQUIRED);
        assert_eq!(
            (b.subtype, b.subnqn().as_ref()),
            (discovery::subtype::NVME, SUB)
        );
        assert_eq!(b.treq, discovery::treq::SECURE_CHANNEL_REQUIRED);
        assert!(c.state.lock().referrals[0].is(&addr(4430), DISCOVERY_NQN));
        assert!(!c.state.lock().referrals[0].is(&addr(4430), SUB));
    }
}
