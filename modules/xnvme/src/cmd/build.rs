//! A bdev I/O as the NVMe command the kernel sends for it (`struct
//! nvme_uring_cmd`, built from the spec crate's typed commands), and an
//! io_uring_cmd completion as the I/O's status. Plain values in and out,
//! no I/O and no memory: the ring (`bdevkit_kfile`'s
//! [`CmdRing::prep_cmd`](bdevkit_kfile::ring::Ring::prep_cmd)) attaches
//! the data pointer once the I/O sits in its slot.

use bdevkit::bdev::module::{IoStatus, IoType};
use bdevkit_kfile::ring::{Data, Dest, NvmeCommand};
use bdevkit_nvme_spec::io::{
    BlockRange, Compare, DatasetManagement, DsmRange, Flush, Read, Write, WriteZeroes,
};
use bdevkit_nvme_spec::linux::NvmeUringCmd;
use bdevkit_nvme_spec::{Command, Sqe, Status};

use super::geometry::{DsmLimits, SLOT_RANGES};

/// A command ready for its slot: [`NvmeCommand`] (its data pointer is
/// set by the ring).
pub(crate) type Built = NvmeCommand;

/// What the builder knows about the bdev's namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NsParams {
    /// Namespace id.
    pub(crate) nsid: u32,
    /// Volatile write cache present: flush sends NVMe Flush.
    pub(crate) flush: bool,
    /// Dataset Management limits (`None`: no unmap).
    pub(crate) dsm: Option<DsmLimits>,
}

/// The request fields of an I/O the builder reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    /// Type.
    pub(crate) io_type: IoType,
    /// First block.
    pub(crate) offset_blocks: u64,
    /// Blocks.
    pub(crate) num_blocks: u64,
    /// The passthrough command (nvme_io, nvme_admin).
    pub(crate) nvme_cmd: &'a [u32; 16],
}

/// What becomes of an I/O that is not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotSent {
    /// Complete it with this status (a bad request; `ENOTSUP` for a type
    /// the bdev does not serve).
    Fail(IoStatus),
    /// Nothing to send: complete it successfully (a flush without a
    /// volatile write cache: the data is on media already).
    Done,
}

/// The FUSE bits of a command's flags: what the caller of a passthrough
/// may ask for (the kernel refuses fused commands with `EINVAL`). PSDT is
/// the kernel's: it builds the data pointer.
const FUSE_MASK: u8 = 0x3;

/// The NVMe command for `r` on the namespace `ns`; the DSM ranges of an
/// unmap go into `ranges`.
///
/// # Errors
/// [`NotSent`] for an I/O that needs no command or cannot have one.
pub(crate) fn build(
    r: &Request<'_>,
    ns: &NsParams,
    ranges: &mut [DsmRange; SLOT_RANGES],
) -> Result<Built, NotSent> {
    let range = || {
        let n = u32::try_from(r.num_blocks).map_err(|_| einval())?;
        BlockRange::new(r.offset_blocks, n).map_err(|_| einval())
    };
    let io = |sqe: Sqe, data| Built {
        cmd: NvmeUringCmd::from_sqe(&sqe, 0, 0),
        dest: Dest::Namespace,
        data,
        wants_cdw0: false,
    };
    let nsid = ns.nsid;
    Ok(match r.io_type {
        IoType::Read => io(Read::new(nsid, range()?).to_sqe(0), Data::Segments),
        IoType::Write => io(Write::new(nsid, range()?).to_sqe(0), Data::Segments),
        IoType::Compare => io(Compare::new(nsid, range()?).to_sqe(0), Data::Segments),
        IoType::WriteZeroes => io(WriteZeroes::new(nsid, range()?).to_sqe(0), Data::None),
        IoType::Flush if ns.flush => io(Flush { nsid }.to_sqe(0), Data::None),
        IoType::Flush => return Err(NotSent::Done),
        IoType::Unmap => {
            let limits = ns
                .dsm
                .ok_or(NotSent::Fail(IoStatus::Errno(libc::ENOTSUP)))?;
            let n = limits
                .split(r.offset_blocks, r.num_blocks, ranges)
                .ok_or_else(einval)?;
            let dsm = DatasetManagement::deallocate(nsid, n).map_err(|_| einval())?;
            io(dsm.to_sqe(0), Data::Ranges(n))
        }
        IoType::NvmeIo | IoType::NvmeAdmin => {
            let admin = r.io_type == IoType::NvmeAdmin;
            let mut sqe = Sqe::from_dwords(*r.nvme_cmd);
            sqe.flags &= FUSE_MASK;
            if !admin {
                // The bdev is one namespace: I/O commands go to it (the
                // kernel refuses any other nsid on this device).
                sqe.nsid.set(nsid);
            }
            Built {
                cmd: NvmeUringCmd::from_sqe(&sqe, 0, 0),
                dest: if admin {
                    Dest::Controller
                } else {
                    Dest::Namespace
                },
                data: Data::Segments,
                wants_cdw0: true,
            }
        }
        _ => return Err(NotSent::Fail(IoStatus::Errno(libc::ENOTSUP))),
    })
}

fn einval() -> NotSent {
    NotSent::Fail(IoStatus::Errno(libc::EINVAL))
}

/// The status of an I/O whose io_uring_cmd completed with `res`: 0 is
/// success, a positive value the NVMe status field (kept as the bdev
/// layer's NVMe status, [`IoStatus::from_nvme`]), a negative one an errno:
/// `EAGAIN`/`EBUSY`/`ENOMEM`/`EINTR` (no request, no tag) make the bdev
/// layer retry (`NoMem`, as SPDK's bdev_xnvme), `ECANCELED` is an abort.
pub(crate) fn status_of(res: i32) -> IoStatus {
    match Status::from_uring_res(res) {
        Ok(s) if s.is_success() => IoStatus::Success,
        Ok(s) => IoStatus::from_nvme(s.sct, s.sc),
        Err(libc::EAGAIN | libc::EBUSY | libc::ENOMEM | libc::EINTR) => IoStatus::NoMem,
        Err(libc::ECANCELED) => IoStatus::Aborted,
        Err(errno) => IoStatus::Errno(errno),
    }
}

#[cfg(test)]
mod tests {
    use bdevkit_nvme_spec::admin::Identify;
    use bdevkit_nvme_spec::io::IoCommand;
    use proptest::prelude::*;

    use super::*;

    const NS: NsParams = NsParams {
        nsid: 3,
        flush: true,
        dsm: Some(DsmLimits {
            ranges: 4,
            range_blocks: 1000,
            total_blocks: u64::MAX,
        }),
    };
    const NO_CMD: [u32; 16] = [0; 16];

    fn req(io_type: IoType, offset_blocks: u64, num_blocks: u64) -> Request<'static> {
        Request {
            io_type,
            offset_blocks,
            num_blocks,
            nvme_cmd: &NO_CMD,
        }
    }

    fn built(r: &Request<'_>, ns: &NsParams) -> Result<(Built, [DsmRange; SLOT_RANGES]), NotSent> {
        let mut ranges = [DsmRange::default(); SLOT_RANGES];
        build(r, ns, &mut ranges).map(|b| (b, ranges))
    }

    proptest! {
        /// Any LBA range a bdev sends becomes the matching command of the
        /// bdev's namespace, and decodes back to the same range.
        #[test]
        fn lba_commands_keep_the_range(slba in 0u64..1 << 47, n in 1u64..=65_536, which in 0usize..4) {
            let t = [IoType::Read, IoType::Write, IoType::Compare, IoType::WriteZeroes][which];
            let (b, _) = built(&req(t, slba, n), &NS).unwrap();
            prop_assert_eq!(b.dest, Dest::Namespace);
            prop_assert!(!b.wants_cdw0);
            let sqe = b.cmd.to_sqe(0);
            let (nsid, range, data) = match IoCommand::decode(&sqe) {
                IoCommand::Read(c) => (c.nsid, c.range, Data::Segments),
                IoCommand::Write(c) => (c.nsid, c.range, Data::Segments),
                IoCommand::Compare(c) => (c.nsid, c.range, Data::Segments),
                IoCommand::WriteZeroes(c) => (c.nsid, c.range, Data::None),
                other => panic!("{other:?}"),
            };
            prop_assert_eq!((nsid, range.slba(), u64::from(range.num_blocks())), (3, slba, n));
            prop_assert_eq!(b.data, data);
            prop_assert_eq!((b.cmd.addr, b.cmd.data_len, b.cmd.flags), (0, 0, 0));
        }

        /// An unmap becomes Dataset Management (deallocate) over ranges
        /// that cover it, within the limits; a larger one is refused.
        #[test]
        fn unmap_becomes_dsm(slba in 0u64..1 << 40, n in 1u64..6000) {
            match built(&req(IoType::Unmap, slba, n), &NS) {
                Err(e) => {
                    prop_assert!(n > 4000);
                    prop_assert_eq!(e, NotSent::Fail(IoStatus::Errno(libc::EINVAL)));
                }
                Ok((b, ranges)) => {
                    let Data::Ranges(k) = b.data else { panic!("{:?}", b.data) };
                    let IoCommand::DatasetManagement(d) = IoCommand::decode(&b.cmd.to_sqe(0)) else {
                        panic!("not DSM")
                    };
                    prop_assert_eq!((d.nsid, d.num_ranges(), d.attributes.ad), (3, k, true));
                    let total: u64 = ranges[..k].iter().map(|r| u64::from(r.nlb.get())).sum();
                    prop_assert_eq!((ranges[0].slba.get(), total), (slba, n));
                }
            }
        }

        /// Positive results are NVMe status fields, kept as such.
        #[test]
        fn nvme_status_reaches_the_io(sct in 0u8..8, sc: u8, dnr: bool, more: bool) {
            let mut s = Status::new(sct, sc);
            if dnr { s = s.with_dnr(); }
            if more { s = s.with_more(); }
            let res = i32::from(s.to_field());
            prop_assert_eq!(status_of(res), IoStatus::from_nvme(sct, sc));
        }
    }

    #[test]
    fn out_of_range_requests_are_refused() {
        let e = NotSent::Fail(IoStatus::Errno(libc::EINVAL));
        assert_eq!(built(&req(IoType::Read, 0, 65_537), &NS).unwrap_err(), e);
        assert_eq!(built(&req(IoType::Write, 0, 0), &NS).unwrap_err(), e);
        assert_eq!(built(&req(IoType::Read, u64::MAX, 2), &NS).unwrap_err(), e);
        assert_eq!(built(&req(IoType::Unmap, 0, 0), &NS).unwrap_err(), e);
    }

    #[test]
    fn flush_unmap_and_unsupported_types() {
        let (b, _) = built(&req(IoType::Flush, 0, 0), &NS).unwrap();
        assert_eq!((b.cmd.opcode, b.cmd.nsid, b.data), (0x00, 3, Data::None));
        let no_cache = NsParams {
            flush: false,
            dsm: None,
            ..NS
        };
        assert_eq!(
            built(&req(IoType::Flush, 0, 0), &no_cache).unwrap_err(),
            NotSent::Done
        );
        let enotsup = NotSent::Fail(IoStatus::Errno(libc::ENOTSUP));
        assert_eq!(
            built(&req(IoType::Unmap, 0, 8), &no_cache).unwrap_err(),
            enotsup
        );
        for t in [
            IoType::Reset,
            IoType::Abort,
            IoType::Copy,
            IoType::CompareAndWrite,
        ] {
            assert_eq!(built(&req(t, 0, 8), &NS).unwrap_err(), enotsup, "{t:?}");
        }
    }

    #[test]
    fn passthrough_commands() {
        // An I/O command goes to the bdev's namespace whatever its nsid,
        // keeps its dwords, loses its PSDT and CID (the kernel's).
        let mut dw = Read::new(99, BlockRange::new(77, 8).unwrap())
            .to_sqe(0xabcd)
            .to_dwords();
        dw[0] |= 0xc0 << 8;
        let r = Request {
            io_type: IoType::NvmeIo,
            offset_blocks: 0,
            num_blocks: 0,
            nvme_cmd: &dw,
        };
        let (b, _) = built(&r, &NS).unwrap();
        assert_eq!(
            (b.dest, b.data, b.wants_cdw0),
            (Dest::Namespace, Data::Segments, true)
        );
        assert_eq!((b.cmd.opcode, b.cmd.flags, b.cmd.nsid), (0x02, 0, 3));
        assert_eq!((b.cmd.cdw10, b.cmd.cdw12), (77, 7));
        // Fused bits stay (the kernel refuses them: EINVAL reaches the I/O).
        let mut fused = dw;
        fused[0] |= 1 << 8;
        let r2 = Request {
            nvme_cmd: &fused,
            ..r
        };
        assert_eq!(built(&r2, &NS).unwrap().0.cmd.flags, 1);
        // An admin command goes to the controller, nsid untouched.
        let dw = Identify::controller().to_sqe(5).to_dwords();
        let r = Request {
            io_type: IoType::NvmeAdmin,
            nvme_cmd: &dw,
            ..r
        };
        let (b, _) = built(&r, &NS).unwrap();
        assert_eq!(
            (b.dest, b.cmd.opcode, b.cmd.nsid, b.cmd.cdw10),
            (Dest::Controller, 0x06, 0, 1)
        );
    }

    #[test]
    fn completion_results() {
        assert_eq!(status_of(0), IoStatus::Success);
        // DNR + Invalid Opcode, what QEMU answers an unknown command.
        assert_eq!(status_of(0x4001), IoStatus::Nvme { sct: 0, sc: 1 });
        // Compare Failure (media errors 0x85) is a miscompare.
        assert_eq!(status_of(0x285), IoStatus::Miscompare);
        assert_eq!(status_of(0x280 | 0x81), IoStatus::Nvme { sct: 2, sc: 0x81 });
        assert_eq!(status_of(-libc::EINVAL), IoStatus::Errno(libc::EINVAL));
        assert_eq!(status_of(-libc::EAGAIN), IoStatus::NoMem);
        assert_eq!(status_of(-libc::EBUSY), IoStatus::NoMem);
        assert_eq!(status_of(-libc::ECANCELED), IoStatus::Aborted);
        assert_eq!(status_of(i32::MIN), IoStatus::Errno(libc::EIO));
    }
}
