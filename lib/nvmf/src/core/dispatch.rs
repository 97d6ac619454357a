//! A received command, transport-neutral: where its data is (the
//! transport reads the SGL: [`QpTransport::setup_xfer`]; this file has the
//! rules every transport shares), then the fabrics commands (Connect,
//! Property Get/Set, Disconnect; Authentication Send/Receive in
//! `auth.rs`) and the admin commands; I/O commands go
//! to `exec_io.rs`.

use std::rc::Rc;

use bdevkit_nvme_spec::fabrics::{ConnectData, ConnectResponse, FabricsCommand};
use bdevkit_nvme_spec::opcode::{DataTransfer, FabricsType, FABRICS_OPCODE};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::zerocopy::FromBytes;
use bdevkit_nvme_spec::{Sqe, Status};

use super::auth::QueueAuth;
use super::qpair::{Assoc, Phase, QpInner, QpTransport, Qpair, Xfer};
use super::slot::{Slot, SlotState};
use super::view::Env;
use crate::admin::{AdminCtx, AdminResult};
use crate::ctrlr::MAX_AERS;

/// The data direction of `sqe`: bits 1:0 of the opcode, or of the
/// command type for fabrics commands.
pub(crate) fn direction(sqe: &Sqe) -> DataTransfer {
    if sqe.opcode == FABRICS_OPCODE {
        FabricsType::from_u8(sqe.fctype()).map_or(DataTransfer::None, FabricsType::data_transfer)
    } else {
        DataTransfer::of(sqe.opcode)
    }
}

/// The rules every transport shares for an SGL that is not its own
/// (called from [`QpTransport::setup_xfer`]): an in-capsule data block
/// (Data Block, subtype Offset: host-to-controller data within what the
/// capsule carried) sets `icd_off` and `xfer`; any other descriptor is
/// refused unless the command has no data at all.
pub(crate) fn common_xfer<R>(s: &mut Slot<R>, sgl: &SglDescriptor) -> Result<Xfer, Status> {
    use bdevkit_nvme_spec::sgl::{SglType, SGL_SUBTYPE_OFFSET};
    let len = sgl.length();
    if (sgl.kind(), sgl.subtype()) == (SglType::DataBlock, SGL_SUBTYPE_OFFSET) {
        if direction(&s.sqe) != DataTransfer::HostToController {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        let off = sgl.address.get();
        if off > u64::from(s.icd_len) {
            return Err(Status::SGL_OFFSET_INVALID.with_dnr());
        }
        let off = u32::try_from(off).unwrap_or(u32::MAX);
        if len > s.icd_len - off {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_dnr());
        }
        s.icd_off = off;
        s.xfer = len;
        return Ok(if len == 0 {
            Xfer::None
        } else {
            Xfer::InCapsule
        });
    }
    if direction(&s.sqe) == DataTransfer::None && len == 0 && s.icd_len == 0 {
        return Ok(Xfer::None);
    }
    Err(Status::SGL_DESCRIPTOR_TYPE_INVALID.with_dnr())
}

impl<T: QpTransport> QpInner<T> {
    /// A capsule (and its in-capsule data) arrived in `slot` (the
    /// transport calls this).
    pub(crate) fn on_capsule(&mut self, me: &Rc<Qpair<T>>, env: &Env, slot: u16) {
        let s = &self.slots[usize::from(slot)];
        if s.digest_error {
            self.respond(slot, Status::TRANSIENT_TRANSPORT_ERROR, 0, 0);
            return;
        }
        let sqe = s.sqe;
        if sqe.opcode == FABRICS_OPCODE {
            return self.fabrics(me, env, slot);
        }
        if self.auth.blocks() {
            return self.auth_required(slot);
        }
        match self.conn.as_ref().map(|a| a.qid) {
            None => self.respond(slot, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0, 0),
            Some(0) => self.admin(env, slot),
            Some(_) => self.io(me, slot),
        }
    }

    /// The data fetched for `slot` ([`QpInner::fetch_data`]) is all in
    /// its buffer (the transport calls this).
    pub(crate) fn on_data_received(&mut self, me: &Rc<Qpair<T>>, env: &Env, slot: u16) {
        let s = &mut self.slots[usize::from(slot)];
        s.state = SlotState::Exec;
        if s.digest_error {
            self.respond(slot, Status::TRANSIENT_TRANSPORT_ERROR, 0, 0);
            return;
        }
        let sqe = s.sqe;
        if sqe.opcode == FABRICS_OPCODE {
            return self.fabrics_exec(env, slot);
        }
        match self.conn.as_ref().map(|a| a.qid) {
            Some(0) => self.admin_exec(env, slot),
            Some(_) => self.io_submit(me, slot),
            None => self.respond(slot, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0, 0),
        }
    }

    fn max_xfer(&self) -> u32 {
        self.opts.max_io_size
    }

    /// Sets up a fabrics or admin command's data transfer: `true` when it
    /// can run now; otherwise it was answered (bad transfer) or its data
    /// is being fetched and it runs when that is in.
    fn data_ready(&mut self, slot: u16) -> bool {
        let max = self.max_xfer();
        let s = &mut self.slots[usize::from(slot)];
        let x = match T::setup_xfer(s, max) {
            Ok(x) => x,
            Err(st) => {
                self.respond(slot, st, 0, 0);
                return false;
            }
        };
        if x == Xfer::Fetch {
            let len = s.xfer as usize;
            s.ensure(len, true);
            self.fetch_data(slot);
            return false;
        }
        true
    }

    fn fabrics(&mut self, _me: &Rc<Qpair<T>>, env: &Env, slot: u16) {
        if self.data_ready(slot) {
            self.fabrics_exec(env, slot);
        }
    }

    fn fabrics_exec(&mut self, env: &Env, slot: u16) {
        let s = &self.slots[usize::from(slot)];
        let sqe = s.sqe;
        let Some(cmd) = FabricsCommand::decode(&sqe) else {
            return self.respond(slot, Status::INVALID_OPCODE.with_dnr(), 0, 0);
        };
        if self.auth.blocks() && !matches!(cmd, FabricsCommand::Auth(_)) {
            return self.auth_required(slot);
        }
        match cmd {
            FabricsCommand::Auth(a) => self.auth(env, slot, &a),
            FabricsCommand::Connect(c) => {
                if self.conn.is_some() {
                    return self.respond(slot, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0, 0);
                }
                let data = s.data().get(s.icd_off as usize..).unwrap_or(&[]);
                if (s.xfer as usize) < size_of::<ConnectData>() {
                    return self.respond(slot, Status::INVALID_FIELD.with_dnr(), 0, 0);
                }
                let Ok((cd, _)) = ConnectData::read_from_prefix(data) else {
                    return self.respond(slot, Status::INVALID_FIELD.with_dnr(), 0, 0);
                };
                self.connect(env, slot, &c, &cd);
            }
            FabricsCommand::PropertyGet(p) => {
                let Some(a) = self.conn.as_ref().filter(|a| a.qid == 0) else {
                    return self.respond(slot, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0, 0);
                };
                match a.ctrlr.property_get(p.size(), p.offset) {
                    Ok(v) => {
                        let lo = u32::try_from(v & 0xffff_ffff).unwrap_or(0);
                        let hi = u32::try_from(v >> 32).unwrap_or(0);
                        self.respond(slot, Status::SUCCESS, lo, hi);
                    }
                    Err(st) => self.respond(slot, st, 0, 0),
                }
            }
            FabricsCommand::PropertySet(p) => {
                let Some(a) = self.conn.as_ref().filter(|a| a.qid == 0) else {
                    return self.respond(slot, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0, 0);
                };
                match a.ctrlr.property_set(p.size(), p.offset, p.value) {
                    Ok(_) => self.respond(slot, Status::SUCCESS, 0, 0),
                    Err(st) => self.respond(slot, st, 0, 0),
                }
            }
            FabricsCommand::Disconnect(_) => match self.conn.as_ref().map(|a| a.qid) {
                Some(q) if q != 0 => {
                    self.respond(slot, Status::SUCCESS, 0, 0);
                    self.begin_close("disconnect", true);
                }
                _ => self.respond(slot, Status::INVALID_QUEUE_TYPE.with_dnr(), 0, 0),
            },
            FabricsCommand::Other(_) => self.respond(slot, Status::INVALID_OPCODE.with_dnr(), 0, 0),
        }
    }

    fn connect(
        &mut self,
        env: &Env,
        slot: u16,
        c: &bdevkit_nvme_spec::fabrics::Connect,
        cd: &ConnectData,
    ) {
        if let Some(st) = self.secure_refusal(cd) {
            return self.respond(slot, st, 0, 0);
        }
        let r = env.core.connect(&self.via, c, cd, &env.thread);
        let (ctrlr, view, opts) = match r {
            Err((st, dw0)) => return self.respond(slot, st, dw0, 0),
            Ok(Ok(a)) => (a.ctrlr, None, a.opts),
            Ok(Err(io)) => {
                let view = env.view(io.ctrlr.subsys_id, &io.namespaces);
                (io.ctrlr, Some(view), io.opts)
            }
        };
        let entries = c.sqsize + 1;
        let admin = c.qid == 0;
        // The slot table for the whole queue: I/O queue slots get an
        // in-capsule buffer each, once (larger transfers borrow from the
        // transport's shared pool).
        let n = usize::from(entries);
        let icd = opts.in_capsule_data_size as usize;
        let icd_buf = || -> Result<Option<bdevkit::dma::DmaBuf>, ()> {
            if admin || icd == 0 {
                return Ok(None);
            }
            bdevkit::dma::DmaBuf::new(icd).map(Some).map_err(|_| ())
        };
        let mut ok = true;
        let mut made = 0u64;
        while self.slots.len() < n {
            let Ok(b) = icd_buf() else {
                ok = false;
                break;
            };
            made += u64::from(b.is_some());
            self.free
                .push(u16::try_from(self.slots.len()).unwrap_or(u16::MAX));
            self.slots.push(Slot::new(b));
        }
        if ok && self.slots[usize::from(slot)].icd.is_none() {
            match icd_buf() {
                Ok(b) => {
                    made += u64::from(b.is_some());
                    self.slots[usize::from(slot)].icd = b;
                }
                Err(()) => ok = false,
            }
        }
        let bytes = made * u64::from(opts.in_capsule_data_size);
        self.icd_bytes += bytes;
        self.bufs.pool().account_icd(bytes, true);
        if !ok {
            tracing::error!(peer = %self.peer, "out of memory for queue buffers");
            if admin {
                env.core.remove_ctrlr(&ctrlr);
            } else {
                ctrlr.release_qid(c.qid);
            }
            return self.respond(slot, Status::INTERNAL_ERROR, 0, 0);
        }
        self.tp.connected(n);
        self.aers.reserve(MAX_AERS);
        self.io_wait.reserve(n);
        self.sq_entries = entries;
        self.icd_limit = if admin {
            crate::opts::ADMIN_IN_CAPSULE_DATA_SIZE
        } else {
            opts.in_capsule_data_size
        };
        let cntlid = ctrlr.cntlid;
        self.opts = opts;
        if admin {
            ctrlr.keep_alive();
        }
        let auth = env.core.auth_required(&ctrlr.subnqn, &ctrlr.hostnqn);
        tracing::info!(peer = %self.peer, qid = c.qid, cntlid, sq_entries = entries,
            authenticate = auth, "queue connected");
        self.conn = Some(Assoc {
            qid: c.qid,
            ctrlr,
            view,
        });
        // AUTHREQ.ATR: the host authenticates the queue before using it.
        let authreq = if auth {
            self.auth = QueueAuth::Pending(None);
            self.auth_since = bdevkit::clock::ticks();
            0b10
        } else {
            0
        };
        let dw0 = ConnectResponse { cntlid, authreq }.to_dword();
        self.respond(slot, Status::SUCCESS, dw0, 0);
    }

    /// A command on a queue that has not authenticated yet (SPDK's
    /// answer: Authentication Required, command specific).
    fn auth_required(&mut self, slot: u16) {
        let opcode = self.slots[usize::from(slot)].sqe.opcode;
        let qid = self.conn.as_ref().map_or(0, |a| a.qid);
        tracing::warn!(peer = %self.peer, qid, opcode, "command before authentication");
        self.respond(slot, Status::AUTHENTICATION_REQUIRED, 0, 0);
    }

    /// A Connect over a secure channel names the host and subsystem its
    /// PSK authenticated, or is refused (Connect Invalid Host); so is a
    /// plain connection on a secure listener (the transport lets none
    /// through).
    fn secure_refusal(&self, cd: &ConnectData) -> Option<Status> {
        let id = self.tp.secure_identity();
        if id.is_none() && !self.via.secure_channel {
            return None;
        }
        let (hostnqn, subnqn) = (cd.hostnqn(), cd.subnqn());
        match id {
            Some((h, s)) if h == hostnqn && s == subnqn => None,
            other => {
                tracing::warn!(
                    peer = %self.peer,
                    %hostnqn,
                    %subnqn,
                    tls_identity = ?other,
                    "connect refused: its NQNs are not those of the TLS PSK identity"
                );
                Some(Status::CONNECT_INVALID_HOST.with_dnr())
            }
        }
    }

    fn admin(&mut self, env: &Env, slot: u16) {
        if self.slots[usize::from(slot)].sqe.fuse() != bdevkit_nvme_spec::cmd::Fuse::Normal {
            // No fused admin commands (SPDK's answer).
            return self.respond(slot, Status::INVALID_FIELD.with_dnr(), 0, 0);
        }
        if self.data_ready(slot) {
            self.admin_exec(env, slot);
        }
    }

    fn admin_exec(&mut self, env: &Env, slot: u16) {
        let Some(a) = &self.conn else { return };
        let ctrlr = std::sync::Arc::clone(&a.ctrlr);
        let s = &self.slots[usize::from(slot)];
        let sqe = s.sqe;
        let send_len = if direction(&sqe) == DataTransfer::ControllerToHost {
            s.xfer
        } else {
            0
        };
        let input = s.in_capsule();
        let ctx = AdminCtx {
            core: &env.core,
            ctrlr: &ctrlr,
            opts: &self.opts,
            via: &self.via,
        };
        match ctx.execute(&sqe, input) {
            AdminResult::Done { status, dw0, data } => {
                if status.is_success() && send_len > 0 && !data.is_empty() {
                    let n = data.len().min(send_len as usize);
                    let s = &mut self.slots[usize::from(slot)];
                    s.vec.clear();
                    s.vec.extend_from_slice(&data[..n]);
                    self.send_data(slot, u32::try_from(n).unwrap_or(0), dw0);
                } else {
                    self.respond(slot, status, dw0, 0);
                }
            }
            AdminResult::Aer => {
                if self.aers.len() >= MAX_AERS {
                    return self.respond(slot, Status::AER_LIMIT_EXCEEDED.with_dnr(), 0, 0);
                }
                self.slots[usize::from(slot)].state = SlotState::Aer;
                self.aers.push(slot);
                self.deliver_events();
            }
            AdminResult::Abort { sqid, cid } => {
                let hit = (sqid == 0)
                    .then(|| {
                        self.aers
                            .iter()
                            .position(|&a| self.slots[usize::from(a)].cid() == cid)
                    })
                    .flatten();
                match hit {
                    Some(i) => {
                        let aer = self.aers.remove(i);
                        self.respond(aer, Status::ABORTED_BY_REQUEST, 0, 0);
                        self.respond(slot, Status::SUCCESS, 0, 0);
                    }
                    // Not aborted (bit 0 of dword 0): the command runs to
                    // its end.
                    None => self.respond(slot, Status::SUCCESS, 1, 0),
                }
            }
        }
        if matches!(self.phase, Phase::Closing { .. }) {
            self.aers.clear();
        }
    }
}
