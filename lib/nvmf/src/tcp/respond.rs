//! What a queue pair sends: response capsules, C2HData (with the SUCCESS
//! flag when allowed, saving the response), R2Ts, and the flush of the
//! send queue in as few `writev`s as the socket takes. A slot is freed
//! once its last PDU has left.

use std::rc::Rc;

use bdevkit_nvme_spec::cmd::Fuse;
use bdevkit_nvme_spec::tcp::{self, DataHeader};
use bdevkit_nvme_spec::{Cqe, Status};

use super::conn::{Sock, TxItem, TxKind};
use super::qpair::{Phase, QpInner, Qpair};
use super::slot::{AfterTx, Slot, SlotState};

impl<S: Sock + 'static> QpInner<S> {
    fn next_sqhd(&mut self) -> u16 {
        self.sqhd = if self.sqhd + 1 >= self.sq_entries {
            0
        } else {
            self.sqhd + 1
        };
        self.sqhd
    }

    /// Queues the response capsule of `slot` (a fused half answered on its
    /// own takes its other half with it: `fused.rs`).
    pub(crate) fn respond(&mut self, slot: u16, status: Status, dw0: u32, dw1: u32) {
        if self
            .slots
            .get(usize::from(slot))
            .is_some_and(|s| s.fuse != Fuse::Normal)
        {
            self.fused_answered(slot);
        }
        let sqhd = self.next_sqhd();
        let qid = self.conn.as_ref().map_or(0, |a| a.qid);
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            return;
        };
        let mut cqe = Cqe::new(s.cid(), status, dw0);
        cqe.dw1.set(dw1);
        cqe.sqhd.set(sqhd);
        cqe.sqid.set(qid);
        match tcp::build_capsule_resp(&mut s.resp, &cqe, &self.txcfg) {
            Ok(n) => s.resp_len = u8::try_from(n).unwrap_or(0),
            Err(_) => return,
        }
        s.state = SlotState::Tx;
        s.after_tx = AfterTx::Free;
        s.tx_parts += 1;
        self.tx.push(TxItem {
            kind: TxKind::Resp,
            slot,
        });
    }

    /// Queues `len` bytes of the slot's buffer as C2HData, then the
    /// response unless the SUCCESS flag may replace it (SPDK's rule:
    /// `c2h_success` on and the response carries nothing but success).
    pub(crate) fn send_data(&mut self, slot: u16, len: u32, dw0: u32) {
        let success = self.opts.c2h_success && dw0 == 0;
        let txcfg = self.txcfg;
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            return;
        };
        let h = DataHeader {
            cccid: s.cid(),
            ttag: 0,
            datao: 0,
            datal: len,
            last: true,
            success,
        };
        match tcp::build_c2h_data(&mut s.hdr, &h, &txcfg) {
            Ok(n) => s.hdr_len = u8::try_from(n).unwrap_or(0),
            Err(_) => return,
        }
        s.c2h_len = len;
        if txcfg.digests.data {
            let d = tcp::data_digest(s.data().get(..len as usize).unwrap_or(&[]));
            s.ddgst = d.to_le_bytes();
        }
        s.state = SlotState::Tx;
        s.after_tx = AfterTx::Free;
        s.tx_parts += 1;
        self.tx.push(TxItem {
            kind: TxKind::Data,
            slot,
        });
        if !success {
            self.respond(slot, Status::SUCCESS, dw0, 0);
        }
    }

    /// Asks the host for the slot's data (one R2T for all of it).
    pub(crate) fn send_r2t(&mut self, slot: u16) {
        let txcfg = self.txcfg;
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            return;
        };
        let (cid, xfer) = (s.cid(), s.xfer);
        let r = tcp::build_r2t(&mut s.hdr, cid, slot, 0, xfer, &txcfg);
        match r {
            Ok(n) => s.hdr_len = u8::try_from(n).unwrap_or(0),
            Err(_) => return,
        }
        s.c2h_len = 0;
        s.h2c_done = 0;
        s.state = SlotState::AwaitData;
        s.after_tx = AfterTx::Keep;
        s.tx_parts += 1;
        self.tx.push(TxItem {
            kind: TxKind::Data,
            slot,
        });
    }

    /// Sends what is queued; frees the slots whose last PDU left.
    pub(crate) fn flush_tx(&mut self, me: &Rc<Qpair<S>>) -> bool {
        if self.tx.is_empty() || self.tx_blocked {
            return false;
        }
        let digests = self.txcfg.digests;
        let QpInner {
            sock,
            tx,
            slots,
            ctl,
            ctl_len,
            retired,
            ..
        } = self;
        let parts = |item: TxItem| -> [&[u8]; 3] {
            match item.kind {
                TxKind::Control => {
                    let i = usize::from(item.slot).min(1);
                    [&ctl[i][..ctl_len[i]], &[], &[]]
                }
                TxKind::Resp => {
                    let s = &slots[usize::from(item.slot)];
                    [&s.resp[..usize::from(s.resp_len)], &[], &[]]
                }
                TxKind::Data => data_parts(&slots[usize::from(item.slot)], digests.data),
            }
        };
        let r = tx.flush(sock, parts, retired);
        let busy = !self.retired.is_empty();
        let retired = std::mem::take(&mut self.retired);
        for item in &retired {
            if item.kind == TxKind::Control {
                continue;
            }
            let s = &mut self.slots[usize::from(item.slot)];
            s.tx_parts = s.tx_parts.saturating_sub(1);
            if s.tx_parts == 0 && s.after_tx == AfterTx::Free {
                self.release_slot(item.slot);
            }
        }
        let mut retired = retired;
        retired.clear();
        self.retired = retired;
        match r {
            Ok(true) => {}
            Ok(false) => self.tx_blocked = true,
            Err(e) => {
                tracing::debug!(peer = %self.peer, error = %e, "send failed");
                self.tx_blocked = true;
                if !matches!(self.phase, Phase::Closing { .. }) {
                    self.begin_close("send error", false);
                }
                // Nothing more will go out: drop the queue's claims.
                me.kick.set(true);
            }
        }
        busy
    }
}

/// The pieces of a slot's data PDU: header (+digest, padding), data, digest.
fn data_parts(s: &Slot, ddgst: bool) -> [&[u8]; 3] {
    let hdr = &s.hdr[..usize::from(s.hdr_len)];
    if s.c2h_len == 0 {
        return [hdr, &[], &[]];
    }
    let data = s.data().get(..s.c2h_len as usize).unwrap_or(&[]);
    let dg: &[u8] = if ddgst { &s.ddgst } else { &[] };
    [hdr, data, dg]
}
