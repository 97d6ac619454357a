//! A `BdevIo` as the NVMe driver sees it: its scratch words (namespace
//! id, retry count), its segments as a command's data, and the small
//! rules the channel applies to it (block range, passthrough direction,
//! what is worth a retry).

use bdevkit::bdev::module::{BdevIo, IoVec, ModuleIo};
use nvme_driver::{Data, Dir, Request};
use nvme_spec::io::BlockRange;
use nvme_spec::Status;

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

impl Request for NvmeIo {
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

/// The blocks of `io` as one command's range: 1 to 65 536 blocks whose
/// last LBA fits in 64 bits (what `BlockRange::new` checks, in fewer
/// steps: it runs for every I/O).
#[inline]
pub(crate) fn range(io: &BdevIo) -> Option<BlockRange> {
    let nlb = u16::try_from(io.num_blocks().wrapping_sub(1)).ok()?;
    let slba = io.offset_blocks();
    slba.checked_add(u64::from(nlb))?;
    Some(BlockRange::from_raw(slba, nlb))
}

/// The direction of a passthrough command's data (opcode bits 1:0).
pub(crate) fn passthru_dir(opcode: u8) -> Dir {
    if opcode & 1 == 1 {
        Dir::ToDevice
    } else {
        Dir::FromDevice
    }
}
