//! What an NVMe/TCP queue pair sends, as the core asks: response capsules,
//! C2HData (with the SUCCESS flag when allowed, saving the response), R2Ts,
//! and the flush of the send queue in as few `writev`s as the socket
//! takes. A slot is released once its last PDU has left.

use std::rc::Rc;

use bdevkit_nvme_spec::tcp::{self, DataHeader};
use bdevkit_nvme_spec::Cqe;

use super::conn::{Sock, TxItem, TxKind};
use super::qpair::{AfterTx, Qp, TcpQpair, TcpReq};
use crate::core::qpair::{QpInner, Sent};
use crate::core::slot::Slot;

impl<S: Sock> TcpQpair<S> {
    /// Queues the response capsule of `slot`.
    pub(crate) fn queue_resp(&mut self, s: &mut Slot<TcpReq>, slot: u16, cqe: &Cqe) -> bool {
        match tcp::build_capsule_resp(&mut s.tp.resp, cqe, &self.txcfg) {
            Ok(n) => s.tp.resp_len = u8::try_from(n).unwrap_or(0),
            Err(_) => return false,
        }
        s.tp.after_tx = AfterTx::Free;
        s.tp.tx_parts += 1;
        self.tx.push(TxItem {
            kind: TxKind::Resp,
            slot,
        });
        true
    }

    /// Queues `len` bytes of the slot's buffer as C2HData, with the
    /// SUCCESS flag in place of a response when SPDK's rule allows
    /// (`c2h_success` on and the response carries nothing but success).
    pub(crate) fn queue_c2h(
        &mut self,
        s: &mut Slot<TcpReq>,
        slot: u16,
        len: u32,
        dw0: u32,
    ) -> Sent {
        let success = self.c2h_success && dw0 == 0;
        let txcfg = self.txcfg;
        let h = DataHeader {
            cccid: s.cid(),
            ttag: 0,
            datao: 0,
            datal: len,
            last: true,
            success,
        };
        match tcp::build_c2h_data(&mut s.tp.hdr, &h, &txcfg) {
            Ok(n) => s.tp.hdr_len = u8::try_from(n).unwrap_or(0),
            Err(_) => return Sent::Failed,
        }
        s.tp.c2h_len = len;
        if txcfg.digests.data {
            let d = tcp::data_digest(s.data().get(..len as usize).unwrap_or(&[]));
            s.tp.ddgst = d.to_le_bytes();
        }
        s.tp.after_tx = AfterTx::Free;
        s.tp.tx_parts += 1;
        self.tx.push(TxItem {
            kind: TxKind::Data,
            slot,
        });
        if success {
            Sent::Answered
        } else {
            Sent::NeedsResponse
        }
    }

    /// Asks the host for the slot's data (one R2T for all of it).
    pub(crate) fn queue_r2t(&mut self, s: &mut Slot<TcpReq>, slot: u16) -> bool {
        let (cid, xfer) = (s.cid(), s.xfer);
        match tcp::build_r2t(&mut s.tp.hdr, cid, slot, 0, xfer, &self.txcfg) {
            Ok(n) => s.tp.hdr_len = u8::try_from(n).unwrap_or(0),
            Err(_) => return false,
        }
        s.tp.c2h_len = 0;
        s.tp.h2c_done = 0;
        s.tp.after_tx = AfterTx::Keep;
        s.tp.tx_parts += 1;
        self.tx.push(TxItem {
            kind: TxKind::Data,
            slot,
        });
        true
    }
}

impl<S: Sock + 'static> QpInner<TcpQpair<S>> {
    /// Sends what is queued; frees the slots whose last PDU left.
    pub(crate) fn flush_tx(&mut self, me: &Rc<Qp<S>>) -> bool {
        if self.tp.tx.is_empty() || self.tp.tx_blocked {
            return false;
        }
        let digests = self.tp.txcfg.digests;
        let QpInner { tp, slots, .. } = self;
        let TcpQpair {
            sock,
            tx,
            ctl,
            ctl_len,
            retired,
            ..
        } = tp;
        let parts = |item: TxItem| -> [&[u8]; 3] {
            match item.kind {
                TxKind::Control => {
                    let i = usize::from(item.slot).min(1);
                    [&ctl[i][..ctl_len[i]], &[], &[]]
                }
                TxKind::Resp => {
                    let s = &slots[usize::from(item.slot)];
                    [&s.tp.resp[..usize::from(s.tp.resp_len)], &[], &[]]
                }
                TxKind::Data => data_parts(&slots[usize::from(item.slot)], digests.data),
            }
        };
        let r = tx.flush(sock, parts, retired);
        let busy = !self.tp.retired.is_empty();
        let retired = std::mem::take(&mut self.tp.retired);
        for item in &retired {
            if item.kind == TxKind::Control {
                continue;
            }
            let s = &mut self.slots[usize::from(item.slot)];
            s.tp.tx_parts = s.tp.tx_parts.saturating_sub(1);
            if s.tp.tx_parts == 0 && s.tp.after_tx == AfterTx::Free {
                self.release_slot(item.slot);
            }
        }
        let mut retired = retired;
        retired.clear();
        self.tp.retired = retired;
        match r {
            Ok(true) => {}
            Ok(false) => self.tp.tx_blocked = true,
            Err(e) => {
                tracing::debug!(peer = %self.peer, error = %e, "send failed");
                self.tp.tx_blocked = true;
                if !self.closing() {
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
fn data_parts(s: &Slot<TcpReq>, ddgst: bool) -> [&[u8]; 3] {
    let hdr = &s.tp.hdr[..usize::from(s.tp.hdr_len)];
    if s.tp.c2h_len == 0 {
        return [hdr, &[], &[]];
    }
    let data = s.data().get(..s.tp.c2h_len as usize).unwrap_or(&[]);
    let dg: &[u8] = if ddgst { &s.tp.ddgst } else { &[] };
    [hdr, data, dg]
}
