//! PCIe over VFIO, with the container/group API (what Debian kernels have;
//! SPDK uses only this model): one process-wide container, type 1 v2
//! IOMMU, every device's group attached to it, BAR0 mapped, bus mastering
//! on.
//!
//! **DMA model.** IOVA = virtual address. Memory is mapped once per
//! buffer region, never per I/O: the queue pairs' own memory when it is
//! allocated ([`PciFunction::alloc_dma`]), and the I/O buffers of the bdev
//! layer through its registration hook, which calls
//! [`register_memory`]/[`unregister_memory`] for every `DmaBuf` (the nvme
//! bdev module installs that hook). Registered ranges are tracked by page
//! with a user count, since two small buffers can share a page and VFIO
//! refuses overlapping mappings. A range that cannot be mapped (outside
//! the IOMMU's IOVA window, pinning refused) is remembered as unreachable:
//! [`PciFunction::reaches`] is one atomic load while there is none, and
//! queue pairs bounce data from unreachable memory. Registrations made
//! before any device is open are mapped when the first one is.

mod sys;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use vfio_bindings::bindings::vfio::{
    VFIO_TYPE1v2_IOMMU, VFIO_API_VERSION, VFIO_GROUP_FLAGS_VIABLE, VFIO_PCI_BAR0_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_REGION_INFO_FLAG_MMAP,
};

use crate::bus::PciFunction;
use crate::error::{Error, Result};
use crate::sys::{DmaMem, Doorbell, Mmio, HUGE_PAGE, PAGE};

#[derive(Debug)]
struct Region {
    end: usize,
    users: u32,
    mapped: bool,
}

#[derive(Debug, Default)]
struct State {
    container: Option<Arc<File>>,
    /// Whether the IOMMU is set (a group is attached).
    iommu: bool,
    ranges: Vec<(u64, u64)>,
    /// Registered memory by first page, non-overlapping.
    regions: BTreeMap<usize, Region>,
    /// Groups attached, by number.
    groups: BTreeMap<u32, Arc<File>>,
    users: usize,
    /// Counts the times the IOMMU went away with its mappings (the last
    /// group closed): an unmap for memory mapped before then is void.
    generation: u64,
}

static STATE: Mutex<State> = Mutex::new(State {
    container: None,
    iommu: false,
    ranges: Vec::new(),
    regions: BTreeMap::new(),
    groups: BTreeMap::new(),
    users: 0,
    generation: 0,
});
/// Registered ranges that the device cannot reach.
static UNREACHABLE: AtomicUsize = AtomicUsize::new(0);

/// The first pages of the regions that overlap `[p0, p1)`, in order.
/// Regions do not overlap each other, so only the last one starting at or
/// below `p0` can reach into the range from the left: O(log n + k), not a
/// walk over every region below `p1` (which made registering n buffers
/// quadratic).
fn overlapping(regions: &BTreeMap<usize, Region>, p0: usize, p1: usize) -> Vec<usize> {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let left = regions
        .range((Unbounded, Included(p0)))
        .next_back()
        .filter(|(_, r)| r.end > p0)
        .map(|(s, _)| *s);
    let mut out: Vec<usize> = left.into_iter().collect();
    if p1 > p0 {
        out.extend(regions.range((Excluded(p0), Excluded(p1))).map(|(s, _)| *s));
    }
    out
}

fn in_window(ranges: &[(u64, u64)], start: u64, len: u64) -> bool {
    ranges.is_empty()
        || ranges
            .iter()
            .any(|&(s, e)| start >= s && start.checked_add(len - 1).is_some_and(|l| l <= e))
}

fn map_region(st: &State, start: usize, end: usize) -> bool {
    let Some(c) = st.container.as_ref().filter(|_| st.iommu) else {
        return false;
    };
    let (s, len) = (start as u64, (end - start) as u64);
    if !in_window(&st.ranges, s, len) {
        return false;
    }
    match sys::map_dma(c, s, s, len) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(addr = start, len, error = %e, "VFIO DMA map failed; that memory is bounced");
            false
        }
    }
}

/// The bdev layer's buffer `[addr, addr + len)` became live: maps the
/// pages it covers that are not mapped yet (IOVA = address).
pub fn register_memory(addr: usize, len: usize) {
    if len == 0 {
        return;
    }
    let p0 = addr & !(PAGE - 1);
    let p1 = (addr + len).div_ceil(PAGE) * PAGE;
    let mut st = STATE.lock();
    let mut cur = p0;
    let overlapping = overlapping(&st.regions, p0, p1);
    let mut new = Vec::new();
    for s in overlapping {
        if s > cur {
            new.push((cur, s));
        }
        let r = st.regions.get_mut(&s).expect("invariant: listed above");
        r.users += 1;
        cur = cur.max(r.end);
    }
    if cur < p1 {
        new.push((cur, p1));
    }
    for (s, e) in new {
        let mapped = map_region(&st, s, e);
        if !mapped {
            UNREACHABLE.fetch_add(1, Ordering::Relaxed);
        }
        st.regions.insert(
            s,
            Region {
                end: e,
                users: 1,
                mapped,
            },
        );
    }
}

/// The buffer `[addr, addr + len)` is about to be freed: unmaps the pages
/// no other live buffer uses.
pub fn unregister_memory(addr: usize, len: usize) {
    if len == 0 {
        return;
    }
    let p0 = addr & !(PAGE - 1);
    let p1 = (addr + len).div_ceil(PAGE) * PAGE;
    let mut st = STATE.lock();
    let overlapping = overlapping(&st.regions, p0, p1);
    for s in overlapping {
        let r = st.regions.get_mut(&s).expect("invariant: listed above");
        r.users -= 1;
        if r.users > 0 {
            continue;
        }
        let r = st.regions.remove(&s).expect("invariant: present");
        if r.mapped {
            if let Some(c) = st.container.as_ref().filter(|_| st.iommu) {
                if let Err(e) = sys::unmap_dma(c, s as u64, (r.end - s) as u64) {
                    tracing::warn!(addr = s, error = %e, "VFIO DMA unmap failed");
                }
            }
        } else {
            UNREACHABLE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn reachable_slow(addr: usize, len: usize) -> bool {
    let st = STATE.lock();
    let end = addr + len;
    let mut cur = addr;
    for s in overlapping(&st.regions, addr, end) {
        let r = &st.regions[&s];
        if s > cur || !r.mapped {
            return false;
        }
        cur = r.end;
        if cur >= end {
            return true;
        }
    }
    cur >= end
}

fn open_rw(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(Error::sys("opening a VFIO file"))
}

/// Opens (once) the container and attaches `group` to it.
fn attach_group(group_no: u32) -> Result<(Arc<File>, Arc<File>)> {
    let mut st = STATE.lock();
    if st.container.is_none() {
        let c = open_rw(Path::new("/dev/vfio/vfio"))?;
        let v = sys::ioctl_val(&c, sys::GET_API_VERSION, 0)
            .map_err(Error::sys("VFIO_GET_API_VERSION"))?;
        if u32::try_from(v).ok() != Some(VFIO_API_VERSION) {
            return Err(Error::Unsupported(format!("VFIO API version {v}")));
        }
        let t = sys::ioctl_val(&c, sys::CHECK_EXTENSION, VFIO_TYPE1v2_IOMMU.into())
            .map_err(Error::sys("VFIO_CHECK_EXTENSION"))?;
        if t != 1 {
            return Err(Error::Unsupported(
                "no VFIO type 1 v2 IOMMU (modprobe vfio_iommu_type1)".into(),
            ));
        }
        st.container = Some(Arc::new(c));
    }
    let container = Arc::clone(st.container.as_ref().expect("invariant: opened above"));
    let group = match st.groups.get(&group_no) {
        Some(g) => Arc::clone(g),
        None => {
            let g = open_rw(Path::new(&format!("/dev/vfio/{group_no}")))?;
            let flags = sys::group_flags(&g).map_err(Error::sys("VFIO_GROUP_GET_STATUS"))?;
            if flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
                return Err(Error::NoDevice(format!(
                    "IOMMU group {group_no} is not viable (bind every device of it to vfio-pci)"
                )));
            }
            sys::group_set_container(&g, &container)
                .map_err(Error::sys("VFIO_GROUP_SET_CONTAINER"))?;
            let g = Arc::new(g);
            st.groups.insert(group_no, Arc::clone(&g));
            g
        }
    };
    if !st.iommu {
        sys::ioctl_val(&container, sys::SET_IOMMU, VFIO_TYPE1v2_IOMMU.into())
            .map_err(Error::sys("VFIO_SET_IOMMU"))?;
        st.iommu = true;
        st.ranges = sys::iova_ranges(&container).unwrap_or_default();
        // Map what was registered before the IOMMU existed.
        let pending: Vec<(usize, usize)> = st
            .regions
            .iter()
            .filter(|(_, r)| !r.mapped)
            .map(|(s, r)| (*s, r.end))
            .collect();
        for (s, e) in pending {
            if map_region(&st, s, e) {
                if let Some(r) = st.regions.get_mut(&s) {
                    r.mapped = true;
                }
                UNREACHABLE.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
    st.users += 1;
    Ok((container, group))
}

fn detach_group(group_no: u32) {
    let mut st = STATE.lock();
    st.users -= 1;
    if st.users == 0 {
        // Closing the last group unsets the IOMMU and drops every mapping.
        st.groups.remove(&group_no);
        st.groups.clear();
        st.iommu = false;
        st.generation += 1;
        let mut lost = 0;
        for r in st.regions.values_mut() {
            if r.mapped {
                r.mapped = false;
                lost += 1;
            }
        }
        UNREACHABLE.fetch_add(lost, Ordering::Relaxed);
    }
}

/// The IOMMU group of PCI device `bdf`.
fn group_of(bdf: &str) -> Result<u32> {
    let link = fs::read_link(format!("/sys/bus/pci/devices/{bdf}/iommu_group"))
        .map_err(|_| Error::NoDevice(format!("{bdf}: no IOMMU group (is an IOMMU enabled?)")))?;
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| Error::NoDevice(format!("{bdf}: unreadable IOMMU group")))
}

/// Whether `bdf` is bound to vfio-pci.
#[must_use]
pub fn bound_to_vfio(bdf: &str) -> bool {
    fs::read_link(format!("/sys/bus/pci/devices/{bdf}/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n == "vfio-pci"))
        .unwrap_or(false)
}

/// NVMe functions (class 0x0108) bound to vfio-pci, by address.
#[must_use]
pub fn nvme_devices() -> Vec<String> {
    let Ok(rd) = fs::read_dir("/sys/bus/pci/devices") else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|bdf| {
            fs::read_to_string(format!("/sys/bus/pci/devices/{bdf}/class"))
                .map(|c| c.trim().starts_with("0x0108"))
                .unwrap_or(false)
        })
        .filter(|bdf| bound_to_vfio(bdf))
        .collect();
    v.sort();
    v
}

/// A PCI NVMe function opened through VFIO.
#[derive(Debug)]
pub struct VfioFunction {
    bdf: String,
    group_no: u32,
    // Field order is drop order: the register window and the device fd
    // go before the group reference.
    bar: Arc<Mmio>,
    /// The device (its config space sets Bus Master Enable).
    device: File,
    /// Offset of the config space region in `device`.
    cfg_off: u64,
    _group: Arc<File>,
    container: Arc<File>,
    vendor: u16,
}

impl VfioFunction {
    /// Opens `bdf` (bound to vfio-pci): group, container, device, BAR0,
    /// bus mastering.
    pub fn open(bdf: &str) -> Result<Arc<VfioFunction>> {
        if !Path::new(&format!("/sys/bus/pci/devices/{bdf}")).exists() {
            return Err(Error::NoDevice(bdf.to_string()));
        }
        if !bound_to_vfio(bdf) {
            return Err(Error::NoDevice(format!(
                "{bdf} is not bound to vfio-pci (scripts/setup.sh)"
            )));
        }
        let group_no = group_of(bdf)?;
        let (container, group) = attach_group(group_no)?;
        match Self::open_device(bdf, group_no, container, group) {
            Ok(f) => Ok(f),
            Err(e) => {
                detach_group(group_no);
                Err(e)
            }
        }
    }

    fn open_device(
        bdf: &str,
        group_no: u32,
        container: Arc<File>,
        group: Arc<File>,
    ) -> Result<Arc<VfioFunction>> {
        let dev = sys::group_device(&group, bdf).map_err(Error::sys("VFIO_GROUP_GET_DEVICE_FD"))?;
        let (_, cfg_off, _) = sys::region_info(&dev, VFIO_PCI_CONFIG_REGION_INDEX)
            .map_err(Error::sys("VFIO_DEVICE_GET_REGION_INFO (config)"))?;
        let mut ids = [0u8; 4];
        sys::config_read(&dev, cfg_off, 0, &mut ids)
            .map_err(Error::sys("reading PCI config space"))?;
        let vendor = u16::from_le_bytes([ids[0], ids[1]]);
        let mut cmd = [0u8; 2];
        sys::config_read(&dev, cfg_off, 4, &mut cmd).map_err(Error::sys("reading PCI command"))?;
        let c = u16::from_le_bytes(cmd) | 0x6;
        sys::config_write(&dev, cfg_off, 4, &c.to_le_bytes())
            .map_err(Error::sys("enabling bus mastering"))?;
        let (size, off, flags) = sys::region_info(&dev, VFIO_PCI_BAR0_REGION_INDEX)
            .map_err(Error::sys("VFIO_DEVICE_GET_REGION_INFO (BAR0)"))?;
        if flags & VFIO_REGION_INFO_FLAG_MMAP == 0 {
            return Err(Error::Unsupported(format!("{bdf}: BAR0 cannot be mapped")));
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&dev);
        let len = usize::try_from(size).unwrap_or(0x2000);
        let bar = Mmio::map(fd, off, len)
            .or_else(|_| Mmio::map(fd, off, 0x2000))
            .map_err(Error::sys("mapping BAR0"))?;
        tracing::info!(
            bdf,
            group = group_no,
            vendor = format_args!("{vendor:#06x}"),
            "VFIO device open"
        );
        Ok(Arc::new(VfioFunction {
            bdf: bdf.to_string(),
            group_no,
            bar: Arc::new(bar),
            device: dev,
            cfg_off,
            _group: group,
            container,
            vendor,
        }))
    }
}

impl Drop for VfioFunction {
    fn drop(&mut self) {
        detach_group(self.group_no);
    }
}

impl PciFunction for VfioFunction {
    fn address(&self) -> &str {
        &self.bdf
    }

    fn read32(&self, off: u32) -> u32 {
        self.bar.read32(off)
    }

    fn write32(&self, off: u32, v: u32) {
        self.bar.write32(off, v);
    }

    fn doorbell(&self, off: u32) -> Doorbell {
        self.bar.doorbell(off)
    }

    fn alloc_dma(&self, len: usize) -> Result<DmaMem> {
        let mut m = DmaMem::alloc(len, len >= HUGE_PAGE / 2)
            .map_err(Error::sys("allocating DMA memory"))?;
        let (va, l) = (m.vaddr() as u64, m.len() as u64);
        sys::map_dma(&self.container, va, va, l).map_err(Error::sys("VFIO_IOMMU_MAP_DMA"))?;
        let c = Arc::clone(&self.container);
        let generation = STATE.lock().generation;
        m.set_mapping(
            va,
            Box::new(move |iova, len| {
                // Memory that outlives the last group (a queue freed after
                // its controller) lost its mapping with the IOMMU.
                let st = STATE.lock();
                if !st.iommu || st.generation != generation {
                    return;
                }
                if let Err(e) = sys::unmap_dma(&c, iova, len as u64) {
                    tracing::warn!(error = %e, "VFIO DMA unmap failed");
                }
            }),
        );
        Ok(m)
    }

    #[inline]
    fn reaches(&self, addr: usize, len: usize) -> bool {
        UNREACHABLE.load(Ordering::Relaxed) == 0 || reachable_slow(addr, len)
    }

    fn reach_gate(&self) -> Option<&'static AtomicUsize> {
        Some(&UNREACHABLE)
    }

    fn vendor_id(&self) -> u16 {
        self.vendor
    }

    fn set_bus_master(&self, on: bool) {
        let mut cmd = [0u8; 2];
        let r = sys::config_read(&self.device, self.cfg_off, 4, &mut cmd).and_then(|()| {
            let c = u16::from_le_bytes(cmd);
            let c = if on { c | 0x4 } else { c & !0x4 };
            sys::config_write(&self.device, self.cfg_off, 4, &c.to_le_bytes())
        });
        match r {
            Ok(()) => tracing::debug!(bdf = %self.bdf, on, "bus mastering set"),
            Err(e) => tracing::warn!(bdf = %self.bdf, on, error = %e, "cannot set bus mastering"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(end: usize) -> Region {
        Region {
            end,
            users: 1,
            mapped: true,
        }
    }

    #[test]
    fn overlapping_finds_the_region_reaching_in_from_the_left_and_those_inside() {
        let mut m = BTreeMap::new();
        for (s, e) in [(0, 4096), (8192, 16384), (16384, 20480), (40960, 45056)] {
            m.insert(s, region(e));
        }
        assert_eq!(overlapping(&m, 4096, 8192), Vec::<usize>::new());
        assert_eq!(overlapping(&m, 12288, 16384), vec![8192]);
        assert_eq!(overlapping(&m, 12288, 20480), vec![8192, 16384]);
        assert_eq!(overlapping(&m, 8192, 45056), vec![8192, 16384, 40960]);
        assert_eq!(overlapping(&m, 0, 4096), vec![0]);
        assert_eq!(overlapping(&m, 45056, 49152), Vec::<usize>::new());
        assert_eq!(overlapping(&m, 12288, 12288), vec![8192]);
    }
}
