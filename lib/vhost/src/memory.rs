//! A VM's memory as the frontend shared it (`VHOST_USER_SET_MEM_TABLE`):
//! its regions mapped from the fds it sent, registered with the bdev
//! layer as external memory (zero copy, and mapped for DMA by the VFIO
//! NVMe driver), and the two translations the data path needs — the
//! frontend's virtual addresses of the rings to guest physical
//! addresses, and guest buffers to host segments.
//!
//! The guest writes this memory at any time, so nothing here (or in the
//! crate) makes a Rust reference into it: the rings, request headers and
//! status bytes go through vm-memory's checked, volatile accessors, and
//! data buffers become raw segments that the bdev layer checks again
//! against the registered regions. This file holds the crate's only
//! `unsafe`: the registration.

use std::fs::File;
use std::sync::Arc;

use bdevkit::dma::ExtMem;
use vm_memory::{
    FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
    GuestRegionMmap,
};

/// One region of the table: where the guest, the frontend and we see it.
#[derive(Debug, Clone, Copy)]
struct Region {
    gpa: u64,
    len: u64,
    /// The frontend's virtual address (SET_VRING_ADDR speaks in these).
    user_addr: u64,
    /// Our mapping of it.
    hva: usize,
}

/// Most regions a table may have (QEMU sends at most 8 with fds).
pub(crate) const MAX_REGIONS: usize = 8;

/// A region of the frontend's table, as the protocol describes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RegionDesc {
    /// Guest physical address.
    pub gpa: u64,
    /// Size in bytes.
    pub len: u64,
    /// The frontend's virtual address.
    pub user_addr: u64,
    /// Offset of the region in the fd.
    pub mmap_offset: u64,
}

/// The guest's memory, mapped.
pub struct GuestMem {
    mem: GuestMemoryMmap,
    ext: Arc<ExtMem>,
    regions: Vec<Region>,
}

impl std::fmt::Debug for GuestMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestMem")
            .field("regions", &self.regions)
            .finish_non_exhaustive()
    }
}

/// Why a memory table was refused.
#[derive(Debug, thiserror::Error)]
pub enum MemError {
    /// No region, too many, fds missing, or overlapping guest ranges.
    #[error("invalid memory table")]
    Table,
    /// A region could not be mapped.
    #[error("could not map guest memory")]
    Map(#[source] vm_memory::mmap::FromRangesError),
    /// The bdev layer refused the mapping as external memory.
    #[error("could not register guest memory")]
    Register(#[source] bdevkit::dma::DmaError),
}

impl GuestMem {
    /// Maps `regions` from `files` (one per region, in order) and
    /// registers them.
    pub(crate) fn map(regions: &[RegionDesc], files: Vec<File>) -> Result<GuestMem, MemError> {
        if regions.is_empty() || regions.len() > MAX_REGIONS || files.len() != regions.len() {
            return Err(MemError::Table);
        }
        let mut mapped = Vec::with_capacity(regions.len());
        for (r, f) in regions.iter().zip(files) {
            let len = usize::try_from(r.len).map_err(|_| MemError::Table)?;
            r.gpa.checked_add(r.len).ok_or(MemError::Table)?;
            r.user_addr.checked_add(r.len).ok_or(MemError::Table)?;
            let region = GuestRegionMmap::from_range(
                GuestAddress(r.gpa),
                len,
                Some(FileOffset::new(f, r.mmap_offset)),
            )
            .map_err(MemError::Map)?;
            mapped.push(region);
        }
        let mem = GuestMemoryMmap::from_regions(mapped).map_err(|_| MemError::Table)?;
        let mut table = Vec::with_capacity(regions.len());
        for r in regions {
            let g = mem
                .find_region(GuestAddress(r.gpa))
                .ok_or(MemError::Table)?;
            let hva = g
                .get_host_address(vm_memory::MemoryRegionAddress(0))
                .map_err(|_| MemError::Table)?;
            table.push(Region {
                gpa: r.gpa,
                len: r.len,
                user_addr: r.user_addr,
                hva: hva as usize,
            });
        }
        let spans: Vec<(*mut u8, usize)> = table
            .iter()
            .map(|r| (r.hva as *mut u8, usize::try_from(r.len).unwrap_or(0)))
            .collect();
        let owner = mem.clone();
        // SAFETY: `owner` holds the mappings vm-memory made of each
        // region (`GuestRegionMmap` unmaps on drop), read-write and shared,
        // over exactly `r.len` bytes at `r.hva` (the region's host address
        // and length); they stay mapped while the ExtMem keeps `owner`.
        // No Rust reference to their bytes exists: this crate reaches
        // guest memory only through vm-memory's volatile accessors and as
        // raw segments of bdev I/O, and the guest itself is another
        // process.
        #[allow(unsafe_code)]
        let ext = unsafe { ExtMem::new(&spans, Box::new(owner)) }.map_err(MemError::Register)?;
        Ok(GuestMem {
            mem,
            ext,
            regions: table,
        })
    }

    /// vm-memory's view (rings, headers, status bytes).
    pub(crate) fn mem(&self) -> &GuestMemoryMmap {
        &self.mem
    }

    /// The registered memory, for bdev I/O built on it.
    pub(crate) fn ext(&self) -> &Arc<ExtMem> {
        &self.ext
    }

    /// The guest physical address of the frontend's virtual address
    /// `va`, if a region holds `[va, va + len)`.
    pub(crate) fn va_to_gpa(&self, va: u64, len: u64) -> Option<u64> {
        let end = va.checked_add(len)?;
        self.regions
            .iter()
            .find(|r| va >= r.user_addr && end <= r.user_addr + r.len)
            .map(|r| r.gpa + (va - r.user_addr))
    }

    /// Calls `f(hva, len)` for the host pieces of the guest range
    /// `[gpa, gpa + len)` (one per region it spans, in order); false, with
    /// `f` perhaps called for a first part, when some of it is not guest
    /// memory.
    #[inline]
    pub(crate) fn to_host(
        &self,
        gpa: u64,
        len: u32,
        mut f: impl FnMut(usize, usize) -> bool,
    ) -> bool {
        let mut at = gpa;
        let mut left = u64::from(len);
        while left > 0 {
            let Some(r) = self
                .regions
                .iter()
                .find(|r| at >= r.gpa && at - r.gpa < r.len)
            else {
                return false;
            };
            let off = at - r.gpa;
            let n = left.min(r.len - off);
            let (Ok(off), Ok(n_us)) = (usize::try_from(off), usize::try_from(n)) else {
                return false;
            };
            if !f(r.hva + off, n_us) {
                return false;
            }
            at += n;
            left -= n;
        }
        true
    }
}
