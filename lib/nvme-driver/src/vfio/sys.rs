//! VFIO ioctls (container/group API, linux/vfio.h through `vfio-bindings`)
//! and PCI config space access: the VFIO transport's only unsafe code.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use vfio_bindings::bindings::vfio::{
    vfio_group_status, vfio_iommu_type1_dma_map, vfio_iommu_type1_dma_unmap, vfio_iommu_type1_info,
    vfio_region_info, VFIO_BASE, VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE, VFIO_TYPE,
};

/// `_IO(VFIO_TYPE, VFIO_BASE + n)`: VFIO's ioctls carry no size or
/// direction bits.
const fn io(n: u32) -> libc::c_ulong {
    ((VFIO_TYPE as libc::c_ulong) << 8) | (VFIO_BASE + n) as libc::c_ulong
}

pub(super) const GET_API_VERSION: libc::c_ulong = io(0);
pub(super) const CHECK_EXTENSION: libc::c_ulong = io(1);
pub(super) const SET_IOMMU: libc::c_ulong = io(2);
const GROUP_GET_STATUS: libc::c_ulong = io(3);
const GROUP_SET_CONTAINER: libc::c_ulong = io(4);
const GROUP_GET_DEVICE_FD: libc::c_ulong = io(6);
const DEVICE_GET_REGION_INFO: libc::c_ulong = io(8);
const IOMMU_GET_INFO: libc::c_ulong = io(12);
const IOMMU_MAP_DMA: libc::c_ulong = io(13);
const IOMMU_UNMAP_DMA: libc::c_ulong = io(14);

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn argsz<T>() -> u32 {
    u32::try_from(size_of::<T>()).expect("invariant: VFIO structs are small")
}

/// An ioctl whose argument is a plain integer.
pub(super) fn ioctl_val(
    fd: &File,
    req: libc::c_ulong,
    arg: libc::c_ulong,
) -> io::Result<libc::c_int> {
    // SAFETY: `fd` is an open VFIO fd; these requests take an integer
    // argument and touch no user memory.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), req, arg) })
}

/// VFIO_GROUP_GET_STATUS: the group's flags.
pub(super) fn group_flags(group: &File) -> io::Result<u32> {
    let mut st = vfio_group_status {
        argsz: argsz::<vfio_group_status>(),
        flags: 0,
    };
    // SAFETY: `st` is a valid vfio_group_status with argsz set; the kernel
    // writes at most argsz bytes into it.
    check(unsafe { libc::ioctl(group.as_raw_fd(), GROUP_GET_STATUS, &mut st) })?;
    Ok(st.flags)
}

/// VFIO_GROUP_SET_CONTAINER.
pub(super) fn group_set_container(group: &File, container: &File) -> io::Result<()> {
    let fd: libc::c_int = container.as_raw_fd();
    // SAFETY: the request reads one int (the container fd) from the pointer.
    check(unsafe { libc::ioctl(group.as_raw_fd(), GROUP_SET_CONTAINER, &fd) })?;
    Ok(())
}

/// VFIO_GROUP_GET_DEVICE_FD for the device named `bdf`.
pub(super) fn group_device(group: &File, bdf: &str) -> io::Result<File> {
    let name = CString::new(bdf).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: the request reads a NUL-terminated string from the pointer.
    let fd = check(unsafe { libc::ioctl(group.as_raw_fd(), GROUP_GET_DEVICE_FD, name.as_ptr()) })?;
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// VFIO_DEVICE_GET_REGION_INFO: (size, offset, flags) of region `index`.
pub(super) fn region_info(dev: &File, index: u32) -> io::Result<(u64, u64, u32)> {
    let mut ri = vfio_region_info {
        argsz: argsz::<vfio_region_info>(),
        flags: 0,
        index,
        cap_offset: 0,
        size: 0,
        offset: 0,
    };
    // SAFETY: `ri` is a valid vfio_region_info with argsz set.
    check(unsafe { libc::ioctl(dev.as_raw_fd(), DEVICE_GET_REGION_INFO, &mut ri) })?;
    Ok((ri.size, ri.offset, ri.flags))
}

/// The valid IOVA ranges of the container's IOMMU (inclusive ends), from
/// VFIO_IOMMU_GET_INFO's capability chain; empty when not reported.
pub(super) fn iova_ranges(container: &File) -> io::Result<Vec<(u64, u64)>> {
    use vfio_bindings::bindings::vfio::{
        vfio_info_cap_header, vfio_iommu_type1_info_cap_iova_range, vfio_iova_range,
        VFIO_IOMMU_INFO_CAPS, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE,
    };
    let mut head = vfio_iommu_type1_info {
        argsz: argsz::<vfio_iommu_type1_info>(),
        ..Default::default()
    };
    // SAFETY: `head` is a valid vfio_iommu_type1_info with argsz set; the
    // kernel fills at most argsz bytes and reports the size it needs.
    check(unsafe { libc::ioctl(container.as_raw_fd(), IOMMU_GET_INFO, &mut head) })?;
    if head.flags & VFIO_IOMMU_INFO_CAPS == 0
        || head.argsz as usize <= size_of::<vfio_iommu_type1_info>()
    {
        return Ok(Vec::new());
    }
    let len = head.argsz as usize;
    // u64 words keep the buffer 8-byte aligned for the structs read from it.
    let mut buf = vec![0u64; len.div_ceil(8)];
    let bytes = buf.as_mut_ptr().cast::<u8>();
    // SAFETY: the buffer holds `len` bytes, is 8-byte aligned, and starts
    // with a vfio_iommu_type1_info whose argsz says how much room there is.
    unsafe {
        let info = bytes.cast::<vfio_iommu_type1_info>();
        (*info).argsz = u32::try_from(len).unwrap_or(u32::MAX);
        check(libc::ioctl(container.as_raw_fd(), IOMMU_GET_INFO, info))?;
    }
    // SAFETY: read back the header the kernel filled.
    let cap_offset = unsafe { (*bytes.cast::<vfio_iommu_type1_info>()).cap_offset } as usize;
    let mut out = Vec::new();
    let mut off = cap_offset;
    while off != 0 && off + size_of::<vfio_info_cap_header>() <= len {
        // SAFETY: `off` is inside the buffer (checked) and capability
        // headers are 4-byte aligned within it.
        let h = unsafe { std::ptr::read_unaligned(bytes.add(off).cast::<vfio_info_cap_header>()) };
        if u32::from(h.id) == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE
            && off + size_of::<vfio_iommu_type1_info_cap_iova_range>() <= len
        {
            // SAFETY: in bounds (checked just above).
            let cap = unsafe {
                std::ptr::read_unaligned(
                    bytes
                        .add(off)
                        .cast::<vfio_iommu_type1_info_cap_iova_range>(),
                )
            };
            let first = off + size_of::<vfio_iommu_type1_info_cap_iova_range>();
            for i in 0..cap.nr_iovas as usize {
                let at = first + i * size_of::<vfio_iova_range>();
                if at + size_of::<vfio_iova_range>() > len {
                    break;
                }
                // SAFETY: in bounds (checked).
                let r =
                    unsafe { std::ptr::read_unaligned(bytes.add(at).cast::<vfio_iova_range>()) };
                out.push((r.start, r.end));
            }
        }
        off = h.next as usize;
    }
    Ok(out)
}

/// VFIO_IOMMU_MAP_DMA: the device reaches `[vaddr, vaddr + size)` at `iova`.
pub(super) fn map_dma(container: &File, vaddr: u64, iova: u64, size: u64) -> io::Result<()> {
    let m = vfio_iommu_type1_dma_map {
        argsz: argsz::<vfio_iommu_type1_dma_map>(),
        flags: VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
        vaddr,
        iova,
        size,
    };
    // SAFETY: `m` is a valid map request; the kernel pins the pages of a
    // range our process owns (the caller keeps it mapped until unmap_dma).
    check(unsafe { libc::ioctl(container.as_raw_fd(), IOMMU_MAP_DMA, &m) })?;
    Ok(())
}

/// VFIO_IOMMU_UNMAP_DMA of a range mapped with [`map_dma`].
pub(super) fn unmap_dma(container: &File, iova: u64, size: u64) -> io::Result<()> {
    let mut u = vfio_iommu_type1_dma_unmap {
        argsz: argsz::<vfio_iommu_type1_dma_unmap>(),
        flags: 0,
        iova,
        size,
        ..Default::default()
    };
    // SAFETY: `u` is a valid unmap request.
    check(unsafe { libc::ioctl(container.as_raw_fd(), IOMMU_UNMAP_DMA, &mut u) })?;
    Ok(())
}

/// Reads `buf.len()` bytes of config space at `off` (region offset
/// `base`): plain pread on the device fd.
pub(super) fn config_read(dev: &File, base: u64, off: u64, buf: &mut [u8]) -> io::Result<()> {
    dev.read_exact_at(buf, base + off)
}

/// Writes config space.
pub(super) fn config_write(dev: &File, base: u64, off: u64, buf: &[u8]) -> io::Result<()> {
    dev.write_all_at(buf, base + off)
}
