//! Request slots: one per submission queue entry, allocated when the
//! queue connects and reused for every command after that. A slot holds
//! the command, its data buffer, where it is in its life (the state
//! machine below, the same for every transport) and, in `tp`, what its
//! transport keeps per request (for TCP the PDU headers it sends: C2HData
//! or R2T, CapsuleResp, with digests and padding).
//!
//! On I/O queues a slot owns an in-capsule buffer of
//! `in_capsule_data_size` (a [`DmaBuf`]): in-capsule data lands there, and
//! so does any transfer that fits (a 4 KiB read or an R2T write). A
//! larger transfer borrows a shared buffer of `max_io_size` from the
//! transport's pool (`pool.rs`) for the command's life. Either moves into
//! the bdev I/O and back. Nothing here allocates after the slot table is
//! built (admin queues excepted: their data is a `Vec` sized per command).

use bdevkit::dma::DmaBuf;
use bdevkit_nvme_spec::cmd::Fuse;
use bdevkit_nvme_spec::{Sqe, Status};

/// Where a slot is. The core moves a slot between these states; its
/// transport reads them (a data PDU for a slot that does not await data
/// is a protocol error) and sets `Capsule` when a command arrives (through
/// [`Slot::start`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotState {
    /// Unused.
    Free,
    /// Its capsule (header and in-capsule data) is being received.
    Capsule,
    /// Its host data is being fetched (TCP: R2T sent, waiting for H2CData).
    AwaitData,
    /// Executing (bdev I/O in flight, or queued for a `BdevIo`).
    Exec,
    /// Waiting for a shared data buffer.
    BufWait,
    /// Half of a fused pair with its data in, waiting for the other half.
    Held,
    /// An Asynchronous Event Request waiting for an event.
    Aer,
    /// Its answer (data, response) is with the transport to send; the
    /// transport frees the slot (`release_slot`) once it is sent.
    Tx,
}

/// One request slot; `R` is its transport's part.
#[derive(Debug)]
pub(crate) struct Slot<R> {
    pub state: SlotState,
    pub sqe: Sqe,
    /// I/O queue in-capsule buffer (`None` while a bdev I/O owns it).
    pub icd: Option<DmaBuf>,
    /// A shared buffer lent for the command (`None` while a bdev I/O owns it).
    pub pool: Option<DmaBuf>,
    /// The command's data is in a shared buffer (`pool`, or the bdev I/O's).
    pub uses_pool: bool,
    /// Waiting for a buffer to fetch data (R2T), not to submit a read.
    pub fetch_after_buf: bool,
    /// Admin queue (and pre-Connect) data.
    pub vec: Vec<u8>,
    /// Data of the command, bytes (the SGL length).
    pub xfer: u32,
    /// Bytes of PDU data the capsule carried.
    pub icd_len: u32,
    /// Offset of the command's data in the received in-capsule data.
    pub icd_off: u32,
    /// The transport could not move the command's data intact (TCP: a
    /// data digest did not match): fail the command with Transient
    /// Transport Error.
    pub digest_error: bool,
    /// Bdev I/Os of this command still in flight (DSM ranges).
    pub children: u32,
    /// Status of the command so far (the first failure of its children).
    pub status: Status,
    /// Its fused operation (`Normal` once answered).
    pub fuse: Fuse,
    /// The other half of its fused pair.
    pub pair: Option<u16>,
    /// Set: the fused command fails with this when it would run.
    pub fused_abort: Option<Status>,
    /// What the transport keeps for this request.
    pub tp: R,
}

impl<R: Default> Slot<R> {
    /// A free slot; `icd` is its in-capsule buffer (I/O queues).
    pub fn new(icd: Option<DmaBuf>) -> Slot<R> {
        Slot {
            state: SlotState::Free,
            sqe: Sqe::default(),
            icd,
            pool: None,
            uses_pool: false,
            fetch_after_buf: false,
            vec: Vec::new(),
            xfer: 0,
            icd_len: 0,
            icd_off: 0,
            digest_error: false,
            children: 0,
            status: Status::SUCCESS,
            fuse: Fuse::Normal,
            pair: None,
            fused_abort: None,
            tp: R::default(),
        }
    }
}

impl<R> Slot<R> {
    /// Readies the slot for a new command (the transport readies `tp`).
    pub fn start(&mut self, sqe: Sqe, icd_len: u32) {
        self.state = SlotState::Capsule;
        self.sqe = sqe;
        self.xfer = 0;
        self.icd_len = icd_len;
        self.icd_off = 0;
        self.digest_error = false;
        self.children = 0;
        self.status = Status::SUCCESS;
        self.fuse = Fuse::Normal;
        self.pair = None;
        self.fused_abort = None;
        self.vec.clear();
    }

    /// Command id.
    pub fn cid(&self) -> u16 {
        self.sqe.cid.get()
    }

    /// Makes room for `len` bytes of data (admin queues grow their vector;
    /// I/O queues have their fixed buffers). `false` if it cannot hold them.
    pub fn ensure(&mut self, len: usize, admin: bool) -> bool {
        if admin {
            if self.vec.len() < len {
                self.vec.resize(len, 0);
            }
            true
        } else {
            self.data().len() >= len
        }
    }

    /// Whether a transfer of `len` bytes fits in the in-capsule buffer.
    pub fn fits_icd(&self, len: u32) -> bool {
        self.icd.as_ref().is_some_and(|d| d.len() >= len as usize)
    }

    /// The data buffer: the shared one lent for the command, else the
    /// in-capsule one, else (admin queues) the vector.
    pub fn data(&self) -> &[u8] {
        if self.uses_pool {
            return self.pool.as_ref().map_or(&[], |d| d.as_slice());
        }
        match &self.icd {
            Some(d) => d.as_slice(),
            None => &self.vec,
        }
    }

    /// The data buffer, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        if self.uses_pool {
            return self.pool.as_mut().map_or(&mut [], |d| d.as_mut_slice());
        }
        match &mut self.icd {
            Some(d) => d.as_mut_slice(),
            None => &mut self.vec,
        }
    }

    /// Takes the command's data buffer for a bdev I/O.
    pub fn take_data_buf(&mut self) -> Option<DmaBuf> {
        if self.uses_pool {
            self.pool.take()
        } else {
            self.icd.take()
        }
    }

    /// Puts a buffer back from a bdev I/O.
    pub fn restore_data_buf(&mut self, b: DmaBuf) {
        let to = if self.uses_pool {
            &mut self.pool
        } else {
            &mut self.icd
        };
        if to.is_none() {
            *to = Some(b);
        }
    }

    /// The command's data received in its capsule.
    pub fn in_capsule(&self) -> &[u8] {
        let off = self.icd_off as usize;
        self.data()
            .get(off..off + self.xfer as usize)
            .unwrap_or(&[])
    }
}
