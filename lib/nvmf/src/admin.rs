//! Admin commands of a fabrics controller, transport independent: the
//! Identify structures, log pages and features this target serves and
//! their status codes (the set a Linux host and SPDK's initiator use;
//! SPDK's `lib/nvmf/ctrlr.c` values). The transport hands in the entry
//! and any host data, and gets back a status, dword 0 and the data to
//! return; Asynchronous Event Requests and Abort need the transport's
//! queue state and come back as such.

use std::sync::Arc;

use bdevkit_nvme_spec::admin::{
    cns, csi, AdminCommand, GetFeatures, GetLogPage, Identify, SetFeatures,
};
use bdevkit_nvme_spec::cmd::NSID_ALL;
use bdevkit_nvme_spec::features::{fid, AsyncEventConfig, Feature, NumberOfQueues};
use bdevkit_nvme_spec::identify::{
    cntrltype, oncs, write_ns_id_descriptors, IdentifyController, IdentifyNamespace, NamespaceList,
    NsIdDescriptor, NvmIdentifyController,
};
use bdevkit_nvme_spec::log::{copy_log_page, lid, SmartLog};
use bdevkit_nvme_spec::zerocopy::IntoBytes;
use bdevkit_nvme_spec::{Sqe, Status};

use crate::addr::ListenAddr;
use crate::ctrlr::{Controller, MAX_AERS, VERSION};
use crate::opts::TransportOpts;
use crate::subsystem::Namespace;
use crate::target::Core;

/// Error log entries (ELPE + 1, SPDK's 128).
const ERROR_LOG_ENTRIES: usize = 128;
/// Warning composite temperature threshold (NVMe 1.3d's recommended 343 K).
const WCTEMP: u16 = 0x0157;
/// Critical composite temperature threshold.
const CCTEMP: u16 = 0x0175;

/// How an admin command ended.
#[derive(Debug)]
pub(crate) enum AdminResult {
    /// Complete now with this status, dword 0 and controller-to-host data.
    Done {
        status: Status,
        dw0: u32,
        data: Vec<u8>,
    },
    /// An Asynchronous Event Request: held until an event (the transport
    /// enforces the limit of [`MAX_AERS`]).
    Aer,
    /// Abort the command `cid` of queue `sqid`.
    Abort { sqid: u16, cid: u16 },
}

fn done(status: Status) -> AdminResult {
    AdminResult::Done {
        status,
        dw0: 0,
        data: Vec::new(),
    }
}

fn ok_dw0(dw0: u32) -> AdminResult {
    AdminResult::Done {
        status: Status::SUCCESS,
        dw0,
        data: Vec::new(),
    }
}

fn ok_data(data: Vec<u8>) -> AdminResult {
    AdminResult::Done {
        status: Status::SUCCESS,
        dw0: 0,
        data,
    }
}

/// What an admin command sees.
#[derive(Debug)]
pub(crate) struct AdminCtx<'a> {
    pub core: &'a Core,
    pub ctrlr: &'a Controller,
    pub opts: &'a TransportOpts,
    /// The listener of the admin queue (discovery filtering).
    pub via: &'a ListenAddr,
}

/// The subsystem as Identify needs it (taken under the target's lock).
#[derive(Debug)]
struct Snapshot {
    serial: String,
    model: String,
    max_namespaces: u32,
    namespaces: Vec<Arc<Namespace>>,
    dmrsl: u32,
    wzsl: u8,
    crdt: [u16; 3],
}

impl AdminCtx<'_> {
    fn snapshot(&self) -> Option<Snapshot> {
        let st = self.core.state.lock();
        let s = st.by_id(self.ctrlr.subsys_id)?;
        Some(Snapshot {
            serial: s.serial_number.clone(),
            model: s.model_number.clone(),
            max_namespaces: s.max_namespaces,
            namespaces: s.namespaces.values().cloned().collect(),
            dmrsl: s.dmrsl,
            wzsl: s.wzsl,
            crdt: st.conf.crdt,
        })
    }

    /// Executes admin command `sqe`; `data_in` is what the host sent with it.
    pub fn execute(&self, sqe: &Sqe, data_in: &[u8]) -> AdminResult {
        if !self.ctrlr.enabled() {
            return done(Status::COMMAND_SEQUENCE_ERROR.with_dnr());
        }
        let disc = self.ctrlr.discovery;
        match AdminCommand::decode(sqe) {
            AdminCommand::Identify(id) => self.identify(&id),
            AdminCommand::GetLogPage(g) => self.get_log_page(&g),
            AdminCommand::GetFeatures(g) => self.get_features(&g),
            AdminCommand::SetFeatures(s) => self.set_features(&s, data_in),
            AdminCommand::KeepAlive => {
                self.ctrlr.keep_alive();
                done(Status::SUCCESS)
            }
            AdminCommand::AsyncEventRequest => AdminResult::Aer,
            AdminCommand::Abort(a) if !disc => AdminResult::Abort {
                sqid: a.sqid,
                cid: a.cid,
            },
            _ => done(Status::INVALID_OPCODE.with_dnr()),
        }
    }

    fn identify(&self, id: &Identify) -> AdminResult {
        if self.ctrlr.discovery {
            return match id.cns {
                cns::CONTROLLER => ok_data(self.identify_discovery().as_bytes().to_vec()),
                _ => done(Status::INVALID_FIELD.with_dnr()),
            };
        }
        let Some(snap) = self.snapshot() else {
            return done(Status::INTERNAL_ERROR);
        };
        match id.cns {
            cns::CONTROLLER => ok_data(self.identify_ctrlr(&snap).as_bytes().to_vec()),
            cns::NAMESPACE => {
                if id.nsid == NSID_ALL {
                    // Capabilities common to all namespaces: the one format.
                    let mut ns = IdentifyNamespace::default();
                    ns.set_single_format(9, 0);
                    return ok_data(ns.as_bytes().to_vec());
                }
                if id.nsid == 0 || id.nsid > snap.max_namespaces {
                    return done(Status::INVALID_NAMESPACE.with_dnr());
                }
                let data = match snap.namespaces.iter().find(|n| n.nsid == id.nsid) {
                    Some(n) => identify_ns(n),
                    // An inactive (allocated-free) id: all zeroes.
                    None => IdentifyNamespace::default(),
                };
                ok_data(data.as_bytes().to_vec())
            }
            cns::ACTIVE_NS_LIST => {
                if id.nsid >= 0xffff_fffe {
                    return done(Status::INVALID_NAMESPACE.with_dnr());
                }
                let ids = snap
                    .namespaces
                    .iter()
                    .map(|n| n.nsid)
                    .filter(|&n| n > id.nsid);
                ok_data(NamespaceList::from_ids(ids).as_bytes().to_vec())
            }
            cns::NS_ID_DESCRIPTORS => match snap.namespaces.iter().find(|n| n.nsid == id.nsid) {
                Some(n) => ok_data(ns_id_descriptors(n)),
                None => done(Status::INVALID_NAMESPACE.with_dnr()),
            },
            cns::CS_CONTROLLER if id.csi == csi::NVM => {
                let mut c = NvmIdentifyController {
                    wzsl: snap.wzsl,
                    ..NvmIdentifyController::default()
                };
                c.dmrsl.set(snap.dmrsl);
                ok_data(c.as_bytes().to_vec())
            }
            _ => done(Status::INVALID_FIELD.with_dnr()),
        }
    }

    fn common_ctrl(&self) -> IdentifyController {
        let o = self.opts;
        let c = self.ctrlr;
        let mut d = IdentifyController::default();
        let _ = d.set_firmware(env!("CARGO_PKG_VERSION"));
        d.mdts = u8::try_from((o.max_io_size / 4096).ilog2()).unwrap_or(0);
        d.cntlid.set(c.cntlid);
        d.ver.set(VERSION.0);
        d.aerl = u8::try_from(MAX_AERS - 1).unwrap_or(0);
        // LPA: extended data for Get Log Page (offsets).
        d.lpa = 1 << 2;
        d.elpe = u8::try_from(ERROR_LOG_ENTRIES - 1).unwrap_or(0);
        d.maxcmd.set(o.max_queue_depth);
        // SGL supported (no alignment), keyed data blocks, offsets.
        d.sgls.set(1 | (1 << 2) | (1 << 20));
        d.wctemp.set(WCTEMP);
        d.cctemp.set(CCTEMP);
        d.sqes = 0x66;
        d.cqes = 0x44;
        // Fabrics: command capsule of 64 + in-capsule bytes, 16-byte
        // response, data right after the entry, dynamic model, one SGL
        // descriptor, Disconnect supported.
        d.ioccsz.set((64 + o.in_capsule_data_size) / 16);
        d.iorcsz.set(1);
        d.msdbd = 1;
        d.ofcs.set(1);
        let _ = d.set_subnqn(&c.subnqn);
        d.kas.set(o.kas);
        d
    }

    fn identify_discovery(&self) -> IdentifyController {
        let mut d = self.common_ctrl();
        d.cntrltype = cntrltype::DISCOVERY;
        // Discovery log change notices.
        d.oaes.set(1 << 31);
        d
    }

    fn identify_ctrlr(&self, s: &Snapshot) -> IdentifyController {
        let mut d = self.common_ctrl();
        let _ = d.set_serial(&s.serial);
        let _ = d.set_model(&s.model);
        d.rab = 6;
        // Several ports, several controllers.
        d.cmic = 0b11;
        // Namespace attribute notices.
        d.oaes.set(1 << 8);
        // 128-bit host identifier.
        d.ctratt.set(1);
        d.cntrltype = cntrltype::IO;
        d.crdt = s
            .crdt
            .map(bdevkit_nvme_spec::zerocopy::little_endian::U16::new);
        d.acl = 3;
        // One firmware slot, read only.
        d.frmw = 0b11;
        d.nn.set(s.max_namespaces);
        let all = |t: bdevkit::bdev::IoType| s.namespaces.iter().all(|n| n.bdev.supports(t));
        use bdevkit::bdev::IoType;
        let mut bits = 0u16;
        if all(IoType::Compare) {
            bits |= oncs::COMPARE;
        }
        if all(IoType::Unmap) {
            bits |= oncs::DSM;
        }
        if all(IoType::WriteZeroes) {
            bits |= oncs::WRITE_ZEROES;
        }
        d.oncs.set(bits & !self.opts.masked_oncs);
        // Fused Compare and Write when every namespace's bdev has an
        // atomic compare-and-write (SPDK's rule), unless masked. Each half
        // runs from its slot's in-capsule buffer (it never waits for a
        // shared one while holding the other half's): ACWU, the largest
        // pair, is what fits there in the largest block size.
        let block = s
            .namespaces
            .iter()
            .map(|n| n.bdev.block_size())
            .max()
            .unwrap_or(512);
        let units = self.opts.in_capsule_data_size / block.max(1);
        let fuses = if all(IoType::CompareAndWrite) && units > 0 {
            crate::opts::FUSES_COMPARE_AND_WRITE & !self.opts.masked_fuses
        } else {
            0
        };
        d.fuses.set(fuses);
        if fuses != 0 {
            d.acwu.set(u16::try_from(units - 1).unwrap_or(u16::MAX));
        }
        // Volatile write cache present; flush with NSID FFFFFFFFh not supported.
        d.vwc = 1 | (0b10 << 1);
        d
    }

    fn get_log_page(&self, g: &GetLogPage) -> AdminResult {
        let len = g.len_bytes();
        if len > u64::from(self.opts.max_io_size) {
            return done(Status::INVALID_FIELD.with_dnr());
        }
        let Ok(len) = usize::try_from(len) else {
            return done(Status::INVALID_FIELD.with_dnr());
        };
        let page: Vec<u8> = match (self.ctrlr.discovery, g.lid) {
            (true, lid::DISCOVERY) => {
                let p = self.core.discovery_log(&self.ctrlr.hostnqn, self.via);
                self.ctrlr.discovery_log_read(g.rae);
                p
            }
            (false, lid::ERROR) => vec![0; ERROR_LOG_ENTRIES * 64],
            (false, lid::SMART) => {
                let mut s = SmartLog::default();
                s.temperature.set(WCTEMP - 20);
                s.avail_spare = 100;
                s.spare_thresh = 10;
                s.as_bytes().to_vec()
            }
            (false, lid::FIRMWARE_SLOT) => {
                let mut p = vec![0u8; 512];
                // Slot 1 active; its revision.
                p[0] = 1;
                let fr = env!("CARGO_PKG_VERSION").as_bytes();
                let n = fr.len().min(8);
                p[8..16].fill(b' ');
                p[8..8 + n].copy_from_slice(&fr[..n]);
                p
            }
            (false, lid::CHANGED_NS_LIST) => self.ctrlr.changed_ns_log(g.rae).as_bytes().to_vec(),
            _ => return done(Status::INVALID_LOG_PAGE.with_dnr()),
        };
        if g.ot || g.offset > page.len() as u64 {
            return done(Status::INVALID_FIELD.with_dnr());
        }
        let mut out = vec![0u8; len];
        copy_log_page(&page, g.offset, &mut out);
        ok_data(out)
    }

    fn get_features(&self, g: &GetFeatures) -> AdminResult {
        let c = self.ctrlr;
        let st = || c.state.lock();
        let disc = c.discovery;
        match g.fid {
            fid::KEEP_ALIVE_TIMER => ok_dw0(c.kato_ms()),
            fid::ASYNC_EVENT_CONFIG => ok_dw0(st().aec),
            _ if disc => done(Status::INVALID_FIELD.with_dnr()),
            fid::NUMBER_OF_QUEUES => ok_dw0(self.queues().to_dword()),
            fid::VOLATILE_WRITE_CACHE => ok_dw0(u32::from(st().wce)),
            fid::TEMPERATURE_THRESHOLD => {
                let v = st().plain_features[usize::from(fid::TEMPERATURE_THRESHOLD)];
                ok_dw0(if v == 0 { u32::from(WCTEMP) } else { v })
            }
            fid::INTERRUPT_VECTOR_CONFIG => ok_dw0((1 << 16) | (g.cdw11 & 0xffff)),
            fid::ARBITRATION
            | fid::POWER_MANAGEMENT
            | fid::ERROR_RECOVERY
            | fid::INTERRUPT_COALESCING
            | fid::WRITE_ATOMICITY => ok_dw0(st().plain_features[usize::from(g.fid)]),
            fid::HOST_IDENTIFIER => {
                if g.cdw11 & 1 == 0 {
                    return done(Status::INVALID_FIELD.with_dnr());
                }
                ok_data(c.hostid.to_vec())
            }
            _ => done(Status::INVALID_FIELD.with_dnr()),
        }
    }

    fn queues(&self) -> NumberOfQueues {
        let n = self.ctrlr.max_io_qpairs.saturating_sub(1);
        NumberOfQueues { nsqr: n, ncqr: n }
    }

    fn set_features(&self, s: &SetFeatures, _data_in: &[u8]) -> AdminResult {
        if s.save {
            return done(Status::FEATURE_NOT_SAVEABLE.with_dnr());
        }
        let c = self.ctrlr;
        let disc = c.discovery;
        match s.fid {
            fid::KEEP_ALIVE_TIMER => {
                let kato = bdevkit_nvme_spec::features::KeepAliveTimer::from_dword(s.cdw11).kato_ms;
                if kato == 0 {
                    return done(Status::KEEP_ALIVE_INVALID.with_dnr());
                }
                let eff = if disc {
                    kato
                } else {
                    self.opts.effective_kato(kato)
                };
                c.set_kato_ms(eff);
                done(Status::SUCCESS)
            }
            fid::ASYNC_EVENT_CONFIG => {
                let supported = if disc {
                    AsyncEventConfig::DISCOVERY_LOG_CHANGE
                } else {
                    AsyncEventConfig::NAMESPACE_ATTRIBUTE
                };
                c.state.lock().aec = s.cdw11 & supported;
                done(Status::SUCCESS)
            }
            _ if disc => done(Status::INVALID_FIELD.with_dnr()),
            fid::NUMBER_OF_QUEUES => {
                let req = NumberOfQueues::from_dword(s.cdw11);
                if req.nsqr == 0xffff || req.ncqr == 0xffff {
                    return done(Status::INVALID_FIELD.with_dnr());
                }
                let mut st = c.state.lock();
                if st.io_qids.iter().any(|b| *b) {
                    return done(Status::COMMAND_SEQUENCE_ERROR.with_dnr());
                }
                st.queues_set = true;
                drop(st);
                ok_dw0(self.queues().to_dword())
            }
            fid::VOLATILE_WRITE_CACHE => {
                c.state.lock().wce = s.cdw11 & 1 != 0;
                done(Status::SUCCESS)
            }
            fid::ARBITRATION
            | fid::POWER_MANAGEMENT
            | fid::TEMPERATURE_THRESHOLD
            | fid::ERROR_RECOVERY
            | fid::INTERRUPT_COALESCING
            | fid::WRITE_ATOMICITY => {
                c.state.lock().plain_features[usize::from(s.fid)] = s.cdw11;
                done(Status::SUCCESS)
            }
            fid::HOST_IDENTIFIER => done(Status::COMMAND_SEQUENCE_ERROR.with_dnr()),
            _ => done(Status::INVALID_FIELD.with_dnr()),
        }
    }
}

/// Identify Namespace of `n`.
fn identify_ns(n: &Namespace) -> IdentifyNamespace {
    let b = &n.bdev;
    let blocks = b.num_blocks();
    let mut d = IdentifyNamespace::default();
    d.nsze.set(blocks);
    d.ncap.set(blocks);
    d.nuse.set(blocks);
    let lbads = u8::try_from(n.block_size().ilog2()).unwrap_or(9);
    d.set_single_format(lbads, 0);
    // Shared: other controllers of the subsystem reach it too.
    d.nmic = 1;
    if let Ok(io) = u16::try_from(b.props().optimal_io_boundary) {
        d.noiob.set(io);
    }
    if let Some(g) = n.nguid {
        d.nguid = g;
    }
    if let Some(e) = n.eui64 {
        d.eui64 = e;
    }
    d
}

/// The namespace identification descriptors of `n` (4096 bytes).
fn ns_id_descriptors(n: &Namespace) -> Vec<u8> {
    let mut descs = Vec::with_capacity(4);
    if let Some(e) = n.eui64 {
        descs.push(NsIdDescriptor::Eui64(e));
    }
    if let Some(g) = n.nguid {
        descs.push(NsIdDescriptor::Nguid(g));
    }
    descs.push(NsIdDescriptor::Uuid(*n.uuid.as_bytes()));
    descs.push(NsIdDescriptor::Csi(csi::NVM));
    let mut buf = vec![0u8; bdevkit_nvme_spec::admin::IDENTIFY_DATA_LEN];
    // Four short descriptors always fit in 4096 bytes.
    let _ = write_ns_id_descriptors(&descs, &mut buf);
    buf
}
