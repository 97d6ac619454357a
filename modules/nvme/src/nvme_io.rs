//! A `BdevIo` as the NVMe driver sees it: its scratch words (namespace
//! id, retry count), its segments as a command's data, and the small
//! rules the channel applies to it (block range, passthrough direction,
//! what is worth a retry), and the command each I/O type becomes.

use bdevkit::bdev::module::{BdevIo, IoType, IoVec, ModuleIo, NvmeCmd};
use bdevkit_nvme_driver::{Data, Dir, Qpair, QueueTransport, Request, SubmitError};
use bdevkit_nvme_spec::io::{
    BlockRange, Compare, DatasetManagement, DsmRange, Flush, Read, Write, WriteZeroes,
};
use bdevkit_nvme_spec::zerocopy::IntoBytes;
use bdevkit_nvme_spec::{Command, Sqe, Status};

/// The scratch word of a `BdevIo` holding its namespace id.
pub(crate) const CTX_NSID: usize = 0;
/// The scratch word counting its retries.
pub(crate) const CTX_RETRIES: usize = 1;

/// A `BdevIo` in a queue pair slot: its segments are the command's data.
pub(crate) struct NvmeIo(pub(crate) BdevIo);

fn iovs(io: &BdevIo, d: Data) -> &[IoVec] {
    if d == Data::Aux {
        io.aux_iovs()
    } else {
        io.iovs()
    }
}

// SAFETY: the segments are those of the `BdevIo` this request owns: the
// bdev layer's buffers (pool buffers, or a consumer's memory lent under
// the bdev layer's own rules) stay valid while the I/O is in flight, which
// lasts until the driver hands the request back or drops it; while it is
// submitted nobody else touches its data (the bdev layer's contract for a
// submitted I/O). The driver is the only holder meanwhile.
unsafe impl Request for NvmeIo {
    #[inline]
    fn segment_count(&self, d: Data) -> usize {
        iovs(&self.0, d).len()
    }
    #[inline]
    fn segment(&self, d: Data, i: usize) -> (usize, usize) {
        let v = iovs(&self.0, d)[i];
        (v.base as usize, v.len)
    }
    #[inline]
    fn single_segment(&self, d: Data) -> Option<(usize, usize)> {
        match iovs(&self.0, d) {
            [v] => Some((v.base as usize, v.len)),
            _ => None,
        }
    }
    fn for_each_segment(&self, d: Data, f: &mut dyn FnMut(&[u8])) {
        if d == Data::Aux {
            // Compare-and-write data is at most one page (checked at
            // submission): copy it through the stack.
            let mut buf = [0u8; 4096];
            let n = self.0.copy_from_aux_iovs(&mut buf);
            f(&buf[..n]);
        } else {
            self.0.for_each_segment(f);
        }
    }
    fn for_each_segment_mut(&mut self, d: Data, f: &mut dyn FnMut(&mut [u8])) -> bool {
        d == Data::Main && self.0.for_each_segment_mut(f)
    }
}

/// A failed status worth another try (SPDK's rule): not DNR, not aborted
/// on request.
pub(crate) fn retryable(s: Status) -> bool {
    !s.dnr && (s.sct != 0 || s.sc != 0x07)
}

/// The blocks of `io` as one command's range: 1 to 65 536 blocks (one
/// comparison: it runs for every I/O). The last LBA needs no check: the
/// bdev layer has checked that the range lies inside the namespace.
#[inline]
pub(crate) fn range(io: &BdevIo) -> Option<BlockRange> {
    let nlb = u16::try_from(io.num_blocks().wrapping_sub(1)).ok()?;
    Some(BlockRange::from_raw(io.offset_blocks(), nlb))
}

/// The direction of a passthrough command's data (opcode bits 1:0).
pub(crate) fn passthru_dir(opcode: u8) -> Dir {
    if opcode & 1 == 1 {
        Dir::ToDevice
    } else {
        Dir::FromDevice
    }
}

/// Builds the command for `io` (any I/O type the queue takes) and queues
/// it on `qp`; the request comes back with the reason when the queue does
/// not take it.
pub(crate) fn submit_io<Q: QueueTransport>(
    qp: &mut Qpair<Q, NvmeIo>,
    nsid: u32,
    io: BdevIo,
) -> Result<u16, (NvmeIo, SubmitError)> {
    match io.io_type() {
        IoType::Read => match range(&io) {
            Some(r) => qp.submit(
                Read::new(nsid, r).to_sqe(0),
                Data::Main,
                Dir::FromDevice,
                NvmeIo(io),
            ),
            None => Err((NvmeIo(io), SubmitError::Invalid)),
        },
        IoType::Write => match range(&io) {
            Some(r) => qp.submit(
                Write::new(nsid, r).to_sqe(0),
                Data::Main,
                Dir::ToDevice,
                NvmeIo(io),
            ),
            None => Err((NvmeIo(io), SubmitError::Invalid)),
        },
        IoType::Compare => match range(&io) {
            Some(r) => qp.submit(
                Compare::new(nsid, r).to_sqe(0),
                Data::Main,
                Dir::ToDevice,
                NvmeIo(io),
            ),
            None => Err((NvmeIo(io), SubmitError::Invalid)),
        },
        IoType::WriteZeroes => match range(&io) {
            Some(r) => qp.submit(
                WriteZeroes::new(nsid, r).to_sqe(0),
                Data::None,
                Dir::ToDevice,
                NvmeIo(io),
            ),
            None => Err((NvmeIo(io), SubmitError::Invalid)),
        },
        IoType::Flush => qp.submit(
            Flush { nsid }.to_sqe(0),
            Data::None,
            Dir::ToDevice,
            NvmeIo(io),
        ),
        IoType::Unmap => match (
            DatasetManagement::deallocate(nsid, 1),
            u32::try_from(io.num_blocks()),
        ) {
            (Ok(d), Ok(n)) => {
                let slba = io.offset_blocks();
                let r = DsmRange::new(slba, n);
                qp.submit_with_page(
                    d.to_sqe(0),
                    16,
                    &mut |page| page.copy_from_slice(r.as_bytes()),
                    NvmeIo(io),
                )
            }
            _ => Err((NvmeIo(io), SubmitError::Invalid)),
        },
        IoType::CompareAndWrite => match range(&io) {
            Some(r) if io.iov_len() <= 4096 => qp
                .submit_fused(
                    Compare::new(nsid, r).to_sqe(0),
                    Write::new(nsid, r).to_sqe(0),
                    NvmeIo(io),
                )
                .map(|()| 0),
            _ => Err((NvmeIo(io), SubmitError::Invalid)),
        },
        IoType::NvmeIo => {
            let NvmeCmd { cdw } = *io.nvme_cmd();
            let mut sqe = Sqe::from_dwords(cdw);
            if sqe.nsid.get() == 0 {
                sqe.nsid.set(nsid);
            }
            let data = if io.iovs().is_empty() {
                Data::None
            } else {
                Data::Main
            };
            let dir = passthru_dir(sqe.opcode);
            qp.submit(sqe, data, dir, NvmeIo(io))
        }
        _ => Err((NvmeIo(io), SubmitError::Invalid)),
    }
}
