//! Submission on an NVMe/TCP queue: a command goes into the send buffer
//! as a capsule (with its write data in it when it fits), or waits in the
//! queue while it connects; larger write data is staged in the slot's
//! buffer for R2T, read data lands there.

use bdevkit_nvme_spec::tcp::DataDigest;
use bdevkit_nvme_spec::Sqe;

use super::TcpQueue;
use crate::transport::{Data, Dir, Release, Request, SubmitError};

fn data_len(req: &dyn Request, data: Data) -> usize {
    if data == Data::None {
        return 0;
    }
    (0..req.segment_count(data))
        .map(|i| req.segment(data, i).1)
        .sum()
}

impl TcpQueue {
    /// `submit`'s work (not inlined).
    pub(super) fn submit_cmd(
        &mut self,
        slot: u16,
        mut sqe: Sqe,
        req: &dyn Request,
        data: Data,
        dir: Dir,
    ) -> std::result::Result<Release, SubmitError> {
        if self.sock.is_none() {
            return Err(SubmitError::Disconnected);
        }
        if slot >= self.depth {
            return Err(SubmitError::Invalid);
        }
        let len = data_len(req, data);
        if len > self.max_data {
            return Err(SubmitError::Invalid);
        }
        let len32 = u32::try_from(len).map_err(|_| SubmitError::Invalid)?;
        // While connecting, the command waits in the queue (its write data
        // in the slot's buffer) and goes out once the queue is ready.
        let connecting = self.conn.is_some();
        let in_capsule = !connecting && dir == Dir::ToDevice && len > 0 && len <= self.icd_max;
        if !connecting && !self.push_capsule(&mut sqe, len32, in_capsule) {
            return Err(SubmitError::Invalid);
        }
        let tx = self.tx;
        let s = &mut self.slots[usize::from(slot)];
        s.busy = true;
        s.completed = false;
        s.bad_digest = false;
        s.got = 0;
        s.len = len;
        s.from_dev = dir == Dir::FromDevice && len > 0;
        s.in_capsule = in_capsule;
        if in_capsule {
            let mut digest = DataDigest::new();
            let out = &mut self.out;
            req.for_each_segment(data, &mut |seg| {
                out.extend_from_slice(seg);
                digest.update(seg);
            });
            if tx.digests.data {
                out.extend_from_slice(&digest.finish().to_le_bytes());
            }
        } else if len > 0 {
            if s.buf.len() < len {
                s.buf.resize(len, 0);
            }
            if dir == Dir::ToDevice {
                let mut at = 0;
                let buf = &mut s.buf;
                req.for_each_segment(data, &mut |seg| {
                    buf[at..at + seg.len()].copy_from_slice(seg);
                    at += seg.len();
                });
            }
        }
        if let Some(c) = self.conn.as_mut() {
            c.held.push_back((slot, sqe));
        }
        // The slot's state is reset, and read data copied, at release.
        Ok(Release::Needed)
    }
}
