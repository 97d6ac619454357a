//! What an NVMe namespace is, as the bdev sees it, from its Identify data
//! (Identify Controller, Identify Namespace and, where the controller has
//! it, the NVM command set specific Identify Controller): the block size
//! and count, the transfer limits and the optional commands. Plain
//! arithmetic, no I/O: `sys` reads the data, this file decides.

use bdevkit_nvme_spec::identify::{
    DeallocatedRead, IdentifyController, IdentifyNamespace, NvmIdentifyController,
};
use bdevkit_nvme_spec::io::{DsmRange, MAX_BLOCKS_PER_COMMAND};

use crate::error::{Error, Result};

/// Dataset Management ranges an in-flight slot holds: the most ranges one
/// unmap sends. One range already covers 2^32 - 1 blocks, more than one
/// bdev unmap (`max_unmap` is 32 bits), so several are needed only where
/// the controller limits the range size (DMRSL).
pub(crate) const SLOT_RANGES: usize = 16;

/// The transfer limit SPDK and xNVMe assume when MDTS is 0 (no limit).
const DEFAULT_MAX_TRANSFER: u64 = 1 << 20;

/// Minimum memory page size exponent assumed for MDTS and WZSL
/// (CAP.MPSMIN, which the kernel does not expose: 0 = 4 KiB pages, what
/// Linux itself uses for NVMe).
const MPSMIN: u8 = 0;

/// How an unmap becomes Dataset Management ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DsmLimits {
    /// Ranges per command (1..=[`SLOT_RANGES`]).
    pub(crate) ranges: u32,
    /// Blocks per range (at least 1).
    pub(crate) range_blocks: u32,
    /// Blocks per command (DMSL; `u64::MAX` when not reported).
    pub(crate) total_blocks: u64,
}

impl DsmLimits {
    /// From the controller's limits (`None` = not reported).
    fn new(ranges: Option<u32>, range_blocks: Option<u32>, total: Option<u64>) -> Self {
        let slot = u32::try_from(SLOT_RANGES).expect("invariant: SLOT_RANGES is small");
        DsmLimits {
            ranges: ranges.unwrap_or(256).clamp(1, slot),
            range_blocks: range_blocks.unwrap_or(u32::MAX).max(1),
            total_blocks: total.unwrap_or(u64::MAX).max(1),
        }
    }

    /// The largest unmap, in blocks, one command covers (the bdev's
    /// `max_unmap`; the bdev layer splits larger ones).
    pub(crate) fn max_unmap(&self) -> u32 {
        let by_ranges = u64::from(self.ranges) * u64::from(self.range_blocks);
        let max = by_ranges.min(self.total_blocks).min(u64::from(u32::MAX));
        u32::try_from(max).expect("invariant: clamped to u32")
    }

    /// Writes the ranges that deallocate `blocks` blocks from `slba` into
    /// `out` and returns how many; `None` when they do not fit (more than
    /// [`DsmLimits::max_unmap`] blocks, or `out` too short): the bdev layer
    /// never sends such an unmap.
    pub(crate) fn split(&self, slba: u64, blocks: u64, out: &mut [DsmRange]) -> Option<usize> {
        if blocks == 0 || blocks > u64::from(self.max_unmap()) {
            return None;
        }
        let step = u64::from(self.range_blocks);
        let n = usize::try_from(blocks.div_ceil(step)).ok()?;
        if n > out.len() || n > self.ranges as usize {
            return None;
        }
        let mut lba = slba;
        let mut left = blocks;
        for r in &mut out[..n] {
            let len = left.min(step);
            *r = DsmRange::new(lba, u32::try_from(len).ok()?);
            lba = lba.checked_add(len)?;
            left -= len;
        }
        Some(n)
    }
}

/// Limits the kernel adds to the controller's own (from sysfs, when the
/// namespace has a block device there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct KernelLimits {
    /// `max_hw_sectors_kb` in bytes.
    pub(crate) max_transfer: Option<u64>,
    /// `max_segments`.
    pub(crate) max_segments: Option<u32>,
}

/// The namespace as the bdev serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Namespace {
    /// Namespace id.
    pub(crate) nsid: u32,
    /// Logical block size in bytes (a power of two, at least 512).
    pub(crate) block_size: u32,
    /// Size in blocks (NSZE).
    pub(crate) num_blocks: u64,
    /// Largest read or write, in blocks (at least 1).
    pub(crate) max_rw_blocks: u32,
    /// Most data segments of one command (0 = no limit known).
    pub(crate) max_segments: u32,
    /// Largest Write Zeroes in blocks; 0 = Write Zeroes not supported.
    pub(crate) max_write_zeroes: u32,
    /// Dataset Management (deallocate) limits; `None` = not supported.
    pub(crate) dsm: Option<DsmLimits>,
    /// Compare is supported.
    pub(crate) compare: bool,
    /// A volatile write cache is present: flush sends NVMe Flush.
    pub(crate) volatile_write_cache: bool,
    /// What deallocated blocks read back as.
    pub(crate) deallocated_read: DeallocatedRead,
    /// Serial number (trimmed).
    pub(crate) serial: String,
    /// Model number (trimmed).
    pub(crate) model: String,
}

impl Namespace {
    /// The namespace `nsid` from its controller's and its own Identify
    /// data (`nvm`: the NVM command set specific controller data, `None`
    /// where the controller lacks it) and the kernel's limits.
    ///
    /// # Errors
    /// [`Error::UnsupportedFormat`] for an LBA format the bdev cannot
    /// serve (LBADS below 9, metadata), [`Error::EmptyNamespace`] for
    /// NSZE 0 (an inactive namespace).
    pub(crate) fn from_identify(
        nsid: u32,
        ctrl: &IdentifyController,
        ns: &IdentifyNamespace,
        nvm: Option<&NvmIdentifyController>,
        kernel: KernelLimits,
    ) -> Result<Namespace> {
        let block_size = ns.lba_size().ok_or_else(|| {
            Error::UnsupportedFormat(format!(
                "LBA data size 2^{} is below 512 bytes",
                ns.lba_format().lbads
            ))
        })?;
        if ns.metadata_size() != 0 {
            return Err(Error::UnsupportedFormat(format!(
                "{} metadata bytes per block",
                ns.metadata_size()
            )));
        }
        let num_blocks = ns.nsze.get();
        if num_blocks == 0 {
            return Err(Error::EmptyNamespace(nsid));
        }
        let bs = u64::from(block_size);
        let mut transfer = ctrl
            .max_transfer_bytes(MPSMIN)
            .unwrap_or(DEFAULT_MAX_TRANSFER);
        if let Some(k) = kernel.max_transfer {
            transfer = transfer.min(k);
        }
        let max_rw_blocks = blocks_within(transfer, bs);
        let max_write_zeroes = if ctrl.supports_write_zeroes() {
            match nvm.and_then(|n| n.write_zeroes_max_bytes(MPSMIN)) {
                Some(b) => blocks_within(b, bs),
                None => MAX_BLOCKS_PER_COMMAND,
            }
        } else {
            0
        };
        let dsm = ctrl.supports_dsm().then(|| {
            DsmLimits::new(
                nvm.and_then(NvmIdentifyController::dsm_max_ranges),
                nvm.and_then(NvmIdentifyController::dsm_max_range_blocks),
                nvm.and_then(NvmIdentifyController::dsm_max_blocks),
            )
        });
        Ok(Namespace {
            nsid,
            block_size,
            num_blocks,
            max_rw_blocks,
            max_segments: kernel.max_segments.unwrap_or(0),
            max_write_zeroes,
            dsm,
            compare: ctrl.supports_compare(),
            volatile_write_cache: ctrl.volatile_write_cache(),
            deallocated_read: ns.deallocated_read_value(),
            serial: ctrl.serial().trim().to_string(),
            model: ctrl.model().trim().to_string(),
        })
    }
}

/// Whole blocks of `bs` bytes in `bytes`, within what one command's NLB
/// can say (1..=65536).
fn blocks_within(bytes: u64, bs: u64) -> u32 {
    let blocks = (bytes / bs).clamp(1, u64::from(MAX_BLOCKS_PER_COMMAND));
    u32::try_from(blocks).expect("invariant: clamped to 65536")
}

#[cfg(test)]
mod tests {
    use bdevkit_nvme_spec::identify::LbaFormat;
    use bdevkit_nvme_spec::zerocopy::FromBytes;
    use proptest::prelude::*;

    use super::*;

    /// Bytes nvme-spec captured from QEMU's emulated controller (the one
    /// the VM lane runs against).
    fn fixture(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/../../lib/nvme-spec/tests/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn qemu_namespace() {
        let ctrl = IdentifyController::read_from_bytes(&fixture("qemu-id-ctrl.bin")).unwrap();
        let ns = IdentifyNamespace::read_from_bytes(&fixture("qemu-id-ns.bin")).unwrap();
        let nvm = NvmIdentifyController::read_from_bytes(&fixture("qemu-id-ctrl-nvm.bin")).unwrap();
        let n =
            Namespace::from_identify(1, &ctrl, &ns, Some(&nvm), KernelLimits::default()).unwrap();
        assert_eq!((n.block_size, n.num_blocks), (512, 524_288));
        // MDTS 7 with 4 KiB pages: 512 KiB.
        assert_eq!(n.max_rw_blocks, 1024);
        // ONCS has Write Zeroes, DSM and Compare; WZSL 0 = no limit.
        assert_eq!(n.max_write_zeroes, 65_536);
        assert!(n.compare && n.volatile_write_cache);
        // DMRL 255 (we send at most 16), DMRSL 4194303, DMSL 1069547265.
        let d = n.dsm.unwrap();
        assert_eq!((d.ranges, d.range_blocks), (16, 4_194_303));
        assert_eq!(d.max_unmap(), 16 * 4_194_303);
        assert_eq!(n.deallocated_read, DeallocatedRead::Zeroes);
        assert_eq!(
            (n.serial.as_str(), n.model.as_str()),
            ("deadbeef", "QEMU NVMe Ctrl")
        );
        // Without the NVM command set data: no limits but the command's.
        let n = Namespace::from_identify(1, &ctrl, &ns, None, KernelLimits::default()).unwrap();
        assert_eq!(n.dsm.unwrap().max_unmap(), u32::MAX);
        // The kernel's limits win where lower.
        let k = KernelLimits {
            max_transfer: Some(128 << 10),
            max_segments: Some(33),
        };
        let n = Namespace::from_identify(1, &ctrl, &ns, Some(&nvm), k).unwrap();
        assert_eq!((n.max_rw_blocks, n.max_segments), (256, 33));
    }

    #[test]
    fn formats_the_bdev_cannot_serve() {
        let ctrl = IdentifyController::default();
        let mut ns = IdentifyNamespace::default();
        ns.nsze.set(100);
        ns.lbaf[0] = LbaFormat::new(9, 8);
        let e = Namespace::from_identify(1, &ctrl, &ns, None, KernelLimits::default());
        assert!(matches!(e, Err(Error::UnsupportedFormat(_))), "{e:?}");
        ns.lbaf[0] = LbaFormat::new(8, 0);
        let e = Namespace::from_identify(1, &ctrl, &ns, None, KernelLimits::default());
        assert!(matches!(e, Err(Error::UnsupportedFormat(_))), "{e:?}");
        ns.lbaf[0] = LbaFormat::new(12, 0);
        ns.nsze.set(0);
        let e = Namespace::from_identify(7, &ctrl, &ns, None, KernelLimits::default());
        assert!(matches!(e, Err(Error::EmptyNamespace(7))), "{e:?}");
        ns.nsze.set(8);
        // No optional commands, MDTS 0: 1 MiB of 4 KiB blocks.
        let n = Namespace::from_identify(7, &ctrl, &ns, None, KernelLimits::default()).unwrap();
        assert_eq!((n.block_size, n.max_rw_blocks), (4096, 256));
        assert_eq!((n.max_write_zeroes, n.dsm, n.compare), (0, None, false));
        assert!(!n.volatile_write_cache);
    }

    proptest! {
        /// Any unmap up to the limit becomes ranges that cover it exactly,
        /// in order, each within the range size; anything larger is refused.
        #[test]
        fn dsm_split_covers_the_unmap(
            slba in 0u64..1 << 48,
            blocks in 1u64..1 << 34,
            ranges in proptest::option::of(1u32..=300),
            range_blocks in proptest::option::of(1u32..=1 << 24),
            total in proptest::option::of(1u64..1 << 36),
        ) {
            let l = DsmLimits::new(ranges, range_blocks, total);
            prop_assert!(l.ranges >= 1 && l.ranges as usize <= SLOT_RANGES);
            let mut out = [DsmRange::default(); SLOT_RANGES];
            match l.split(slba, blocks, &mut out) {
                None => prop_assert!(blocks > u64::from(l.max_unmap())),
                Some(n) => {
                    prop_assert!(blocks <= u64::from(l.max_unmap()));
                    prop_assert!(n >= 1 && n <= l.ranges as usize);
                    let mut next = slba;
                    for r in &out[..n] {
                        prop_assert_eq!(r.slba.get(), next);
                        let len = r.nlb.get();
                        prop_assert!(len >= 1 && len <= l.range_blocks);
                        next += u64::from(len);
                    }
                    prop_assert_eq!(next, slba + blocks);
                }
            }
        }

        /// The transfer limit is whole blocks, 1..=65536, never above the bytes.
        #[test]
        fn transfer_limit_in_blocks(bytes in 1u64..1 << 40, shift in 9u32..16) {
            let bs = 1u64 << shift;
            let b = u64::from(blocks_within(bytes, bs));
            prop_assert!((1..=65_536).contains(&b));
            prop_assert!(b * bs <= bytes.max(bs));
        }
    }
}
