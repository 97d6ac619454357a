//! virtio-blk: what the device offers (features, configuration space)
//! and what one walked chain asks for — its header, data and status
//! buffers (any layout: the header is the chain's first 16 device-readable
//! bytes, the status its last device-writable byte), checked against the
//! bdev, with the virtio status a bad request fails with.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_F_BLK_SIZE, VIRTIO_BLK_F_DISCARD, VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_MQ,
    VIRTIO_BLK_F_RO, VIRTIO_BLK_F_SEG_MAX, VIRTIO_BLK_F_SIZE_MAX, VIRTIO_BLK_F_TOPOLOGY,
    VIRTIO_BLK_F_WRITE_ZEROES, VIRTIO_BLK_ID_BYTES, VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_UNSUPP,
    VIRTIO_BLK_T_DISCARD, VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN,
    VIRTIO_BLK_T_OUT, VIRTIO_BLK_T_WRITE_ZEROES, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP,
};
use virtio_bindings::virtio_config::{VIRTIO_F_ANY_LAYOUT, VIRTIO_F_VERSION_1};
use virtio_bindings::virtio_ring::VIRTIO_RING_F_INDIRECT_DESC;
use vm_memory::{Bytes, GuestAddress, GuestMemory, Permissions};

use crate::chain::{Chain, Desc, MAX_DESCS};

/// `VHOST_USER_F_PROTOCOL_FEATURES`.
pub(crate) const VHOST_USER_F_PROTOCOL_FEATURES: u64 = 1 << 30;

/// Status byte: done.
pub(crate) const S_OK: u8 = 0;
/// Status byte: failed.
pub(crate) const S_IOERR: u8 = 1;
const _: () = assert!(VIRTIO_BLK_S_IOERR == 1);
/// Status byte: not supported (or malformed, as SPDK answers).
pub(crate) const S_UNSUPP: u8 = 2;
const _: () = assert!(VIRTIO_BLK_S_UNSUPP == 2);

/// Bytes of the request header (`struct virtio_blk_outhdr`).
const HDR_LEN: usize = 16;
/// Bytes of the configuration space we fill (`struct virtio_blk_config`
/// up to `write_zeroes_may_unmap`).
pub(crate) const CONFIG_LEN: usize = 60;
/// Largest data buffer (`size_max`, SPDK's for bdevs without alignment
/// needs) and most data buffers per request (`seg_max`: SPDK's 129 iovecs
/// less header, status and one for a region boundary).
const SIZE_MAX: u32 = 131_072;
const SEG_MAX: u32 = 126;
const _: () = assert!(MAX_DESCS == 126 + 3);
/// Largest discard and write zeroes (16 MiB, as SPDK), one range each.
const MAX_RANGE_SECTORS: u32 = 32_768;

/// What the device is: the bdev as the guest sees it. Shared by the
/// controller's threads (the size follows a resize; a hot-removed bdev
/// reads as empty).
#[derive(Debug)]
pub struct BlkInfo {
    /// GET_ID's answer: the bdev's name, padded with spaces.
    pub(crate) id: [u8; VIRTIO_BLK_ID_BYTES as usize],
    /// Writes fail (`VIRTIO_BLK_F_RO`).
    pub(crate) readonly: bool,
    pub(crate) block_size: u32,
    pub(crate) num_blocks: AtomicU64,
    pub(crate) flush: bool,
    pub(crate) unmap: bool,
    pub(crate) write_zeroes: bool,
    pub(crate) removed: AtomicBool,
}

impl BlkInfo {
    /// The info of a bdev named `name`.
    pub(crate) fn new(
        name: &str,
        readonly: bool,
        block_size: u32,
        num_blocks: u64,
        (flush, unmap, write_zeroes): (bool, bool, bool),
    ) -> BlkInfo {
        let mut id = [b' '; VIRTIO_BLK_ID_BYTES as usize];
        for (d, s) in id.iter_mut().zip(name.bytes()) {
            *d = s;
        }
        BlkInfo {
            id,
            readonly,
            block_size,
            num_blocks: AtomicU64::new(num_blocks),
            flush,
            unmap,
            write_zeroes,
            removed: AtomicBool::new(false),
        }
    }

    /// The virtio features the device offers (SPDK's set less live
    /// migration's dirty log, which is not served: no `LOG_ALL`).
    pub(crate) fn features(&self) -> u64 {
        let bit = |b: u32| 1u64 << b;
        let mut f = bit(VIRTIO_F_VERSION_1)
            | bit(VIRTIO_RING_F_INDIRECT_DESC)
            | bit(VIRTIO_F_ANY_LAYOUT)
            | VHOST_USER_F_PROTOCOL_FEATURES
            | bit(VIRTIO_BLK_F_SIZE_MAX)
            | bit(VIRTIO_BLK_F_SEG_MAX)
            | bit(VIRTIO_BLK_F_BLK_SIZE)
            | bit(VIRTIO_BLK_F_TOPOLOGY)
            | bit(VIRTIO_BLK_F_MQ);
        if self.flush {
            f |= bit(VIRTIO_BLK_F_FLUSH);
        }
        if self.unmap {
            f |= bit(VIRTIO_BLK_F_DISCARD);
        }
        if self.write_zeroes {
            f |= bit(VIRTIO_BLK_F_WRITE_ZEROES);
        }
        if self.readonly {
            f |= bit(VIRTIO_BLK_F_RO);
        }
        f
    }

    /// `struct virtio_blk_config` (little endian), as SPDK fills it; a
    /// removed bdev shows size 0 (the guest then has no disk, and a VM
    /// reboot does not fail on it).
    pub(crate) fn config(&self, num_queues: u16) -> [u8; CONFIG_LEN] {
        let mut c = [0u8; CONFIG_LEN];
        let put =
            |c: &mut [u8; CONFIG_LEN], at: usize, v: &[u8]| c[at..at + v.len()].copy_from_slice(v);
        let removed = self.removed.load(Ordering::Acquire);
        let (bs, blocks) = if removed {
            (0, 0)
        } else {
            (self.block_size, self.num_blocks.load(Ordering::Acquire))
        };
        let capacity = blocks.saturating_mul(u64::from(bs)) / 512;
        put(&mut c, 0, &capacity.to_le_bytes());
        if !removed {
            put(&mut c, 8, &SIZE_MAX.to_le_bytes());
            put(&mut c, 12, &SEG_MAX.to_le_bytes());
        }
        put(&mut c, 20, &bs.to_le_bytes());
        // Topology: minimum I/O size one block.
        put(&mut c, 26, &1u16.to_le_bytes());
        put(&mut c, 34, &num_queues.to_le_bytes());
        if self.unmap && !removed {
            put(&mut c, 36, &MAX_RANGE_SECTORS.to_le_bytes());
            put(&mut c, 40, &1u32.to_le_bytes());
            put(&mut c, 44, &(bs / 512).to_le_bytes());
        }
        if self.write_zeroes && !removed {
            put(&mut c, 48, &MAX_RANGE_SECTORS.to_le_bytes());
            put(&mut c, 52, &1u32.to_le_bytes());
        }
        c
    }
}

/// What a request asks for. Data are the chain's descriptors `[from, to)`
/// after the header and status were cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Req {
    /// Read `num_blocks` at `offset_blocks` into the data buffers.
    Read {
        offset_blocks: u64,
        num_blocks: u64,
        data: (usize, usize),
        bytes: u32,
    },
    /// Write from the data buffers.
    Write {
        offset_blocks: u64,
        num_blocks: u64,
        data: (usize, usize),
    },
    /// Flush the whole bdev.
    Flush,
    /// Deallocate a range.
    Unmap { offset_blocks: u64, num_blocks: u64 },
    /// Zero a range.
    WriteZeroes { offset_blocks: u64, num_blocks: u64 },
    /// The device id into the data buffers.
    GetId { data: (usize, usize) },
}

/// A request read from a chain: where its status goes, and what it asks
/// for or the status it fails with at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parsed {
    /// Guest address of the status byte.
    pub status_gpa: u64,
    /// The request, or the status to answer with now.
    pub req: Result<Req, u8>,
}

/// The status byte of a chain: its last device-writable byte, in guest
/// memory. `None`: the chain has nowhere to put one.
pub(crate) fn status_of<M: GuestMemory>(mem: &M, last: &Desc) -> Option<u64> {
    if !last.write || last.len == 0 {
        return None;
    }
    let gpa = last.gpa.checked_add(u64::from(last.len) - 1)?;
    mem.check_range(GuestAddress(gpa), 1, Permissions::Write)
        .then_some(gpa)
}

/// Reads the request of `chain` (walked); trims its header and status
/// off the descriptors in place. `None` when there is no status byte.
pub(crate) fn parse<M: GuestMemory>(chain: &mut Chain, mem: &M, info: &BlkInfo) -> Option<Parsed> {
    let descs = chain.descs_mut();
    let last = descs.last_mut()?;
    let status_gpa = status_of(mem, last)?;
    last.len -= 1;
    let req = request(descs, mem, info);
    Some(Parsed { status_gpa, req })
}

fn request<M: GuestMemory>(descs: &mut [Desc], mem: &M, info: &BlkInfo) -> Result<Req, u8> {
    // The header: the first 16 bytes, device-readable.
    let mut hdr = [0u8; HDR_LEN];
    let mut got = 0;
    let mut from = 0;
    while got < HDR_LEN {
        let d = descs.get_mut(from).ok_or(S_UNSUPP)?;
        if d.write {
            return Err(S_UNSUPP);
        }
        let n = (HDR_LEN - got).min(d.len as usize);
        mem.read_slice(&mut hdr[got..got + n], GuestAddress(d.gpa))
            .map_err(|_| S_IOERR)?;
        got += n;
        d.gpa += n as u64;
        d.len -= u32::try_from(n).unwrap_or(0);
        if d.len == 0 {
            from += 1;
        }
    }
    // The status byte was cut off the last buffer: drop it if empty.
    let mut to = descs.len();
    if to > from && descs[to - 1].len == 0 {
        to -= 1;
    }
    let data = (from, to);
    let bytes: u64 = descs[from..to].iter().map(|d| u64::from(d.len)).sum();
    let kind = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    let sector = u64::from_le_bytes([
        hdr[8], hdr[9], hdr[10], hdr[11], hdr[12], hdr[13], hdr[14], hdr[15],
    ]);
    match kind {
        VIRTIO_BLK_T_IN | VIRTIO_BLK_T_OUT => {
            let write = kind == VIRTIO_BLK_T_OUT;
            if bytes == 0 || !bytes.is_multiple_of(512) {
                return Err(S_UNSUPP);
            }
            // The device writes a read's buffers and only reads a write's.
            if descs[from..to]
                .iter()
                .any(|d| d.write == write || d.len == 0)
            {
                return Err(S_IOERR);
            }
            if write && info.readonly {
                return Err(S_IOERR);
            }
            let (offset_blocks, num_blocks) = range(info, sector, bytes)?;
            Ok(if write {
                Req::Write {
                    offset_blocks,
                    num_blocks,
                    data,
                }
            } else {
                Req::Read {
                    offset_blocks,
                    num_blocks,
                    data,
                    bytes: u32::try_from(bytes).map_err(|_| S_IOERR)?,
                }
            })
        }
        VIRTIO_BLK_T_FLUSH => {
            if sector != 0 {
                return Err(S_IOERR);
            }
            if !info.flush {
                return Err(S_UNSUPP);
            }
            Ok(Req::Flush)
        }
        VIRTIO_BLK_T_GET_ID => {
            if bytes == 0 || descs[from..to].iter().any(|d| !d.write) {
                return Err(S_UNSUPP);
            }
            Ok(Req::GetId { data })
        }
        VIRTIO_BLK_T_DISCARD | VIRTIO_BLK_T_WRITE_ZEROES => {
            let discard = kind == VIRTIO_BLK_T_DISCARD;
            if discard && !info.unmap || !discard && !info.write_zeroes {
                return Err(S_UNSUPP);
            }
            if info.readonly {
                return Err(S_IOERR);
            }
            // One range of 16 bytes: sector, num_sectors, flags.
            let mut seg = [0u8; 16];
            if bytes != 16 || gather(mem, &descs[from..to], &mut seg).is_none() {
                return Err(S_IOERR);
            }
            let start = u64::from_le_bytes([
                seg[0], seg[1], seg[2], seg[3], seg[4], seg[5], seg[6], seg[7],
            ]);
            let sectors = u32::from_le_bytes([seg[8], seg[9], seg[10], seg[11]]);
            let flags = u32::from_le_bytes([seg[12], seg[13], seg[14], seg[15]]);
            // The unmap flag means something for write zeroes only (SPDK
            // ignores it there, as may a device).
            if discard && flags & VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP != 0 {
                return Err(S_UNSUPP);
            }
            let (offset_blocks, num_blocks) = range(info, start, u64::from(sectors) * 512)?;
            Ok(if discard {
                Req::Unmap {
                    offset_blocks,
                    num_blocks,
                }
            } else {
                Req::WriteZeroes {
                    offset_blocks,
                    num_blocks,
                }
            })
        }
        _ => Err(S_UNSUPP),
    }
}

/// The blocks of `bytes` at 512-byte `sector`: whole blocks inside the
/// bdev, else IOERR.
fn range(info: &BlkInfo, sector: u64, bytes: u64) -> Result<(u64, u64), u8> {
    let bs = u64::from(info.block_size);
    let off = sector.checked_mul(512).ok_or(S_IOERR)?;
    if bs == 0 || !off.is_multiple_of(bs) || !bytes.is_multiple_of(bs) || bytes == 0 {
        return Err(S_IOERR);
    }
    let (first, n) = (off / bs, bytes / bs);
    let end = first.checked_add(n).ok_or(S_IOERR)?;
    if end > info.num_blocks.load(Ordering::Acquire) {
        return Err(S_IOERR);
    }
    Ok((first, n))
}

/// Copies the bytes of `descs` into `out` (exactly as many); `None` when
/// a buffer is outside guest memory or the sizes differ.
fn gather<M: GuestMemory>(mem: &M, descs: &[Desc], out: &mut [u8]) -> Option<()> {
    let mut at = 0;
    for d in descs {
        let n = d.len as usize;
        let dst = out.get_mut(at..at + n)?;
        mem.read_slice(dst, GuestAddress(d.gpa)).ok()?;
        at += n;
    }
    (at == out.len()).then_some(())
}

/// Writes the device id into the data buffers of a GET_ID; the bytes
/// written (`None`: a buffer outside guest memory).
pub(crate) fn write_id<M: GuestMemory>(mem: &M, descs: &[Desc], id: &[u8]) -> Option<u32> {
    let mut at = 0;
    for d in descs {
        if at >= id.len() {
            break;
        }
        let n = (d.len as usize).min(id.len() - at);
        mem.write_slice(&id[at..at + n], GuestAddress(d.gpa)).ok()?;
        at += n;
    }
    u32::try_from(at).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::tests::{mem, put};

    const N: u16 = 1;
    const W: u16 = 2;

    fn info() -> BlkInfo {
        BlkInfo::new("Malloc0", false, 512, 1024, (true, true, true))
    }

    fn hdr(m: &vm_memory::GuestMemoryMmap, at: u64, kind: u32, sector: u64) {
        m.write_obj(kind.to_le(), GuestAddress(at)).unwrap();
        m.write_obj(sector.to_le(), GuestAddress(at + 8)).unwrap();
    }

    /// A chain header (0x1000), data (0x2000, `len`, `flags`), status
    /// (0x3000), walked and parsed.
    fn one(kind: u32, sector: u64, len: u32, flags: u16, info: &BlkInfo) -> Option<Parsed> {
        let m = mem();
        hdr(&m, 0x1000, kind, sector);
        put(&m, 0, 0, 0x1000, 16, N, 1);
        put(&m, 0, 1, 0x2000, len, N | flags, 2);
        put(&m, 0, 2, 0x3000, 1, W, 0);
        let mut c = Chain::default();
        c.walk(&m, 0, 8, 0).unwrap();
        parse(&mut c, &m, info)
    }

    #[test]
    fn reads_and_writes_parse_to_blocks() {
        let p = one(VIRTIO_BLK_T_IN, 8, 4096, W, &info()).unwrap();
        assert_eq!(p.status_gpa, 0x3000);
        assert_eq!(
            p.req,
            Ok(Req::Read {
                offset_blocks: 8,
                num_blocks: 8,
                data: (1, 2),
                bytes: 4096
            })
        );
        let p = one(VIRTIO_BLK_T_OUT, 0, 512, 0, &info()).unwrap();
        assert_eq!(
            p.req,
            Ok(Req::Write {
                offset_blocks: 0,
                num_blocks: 1,
                data: (1, 2)
            })
        );
    }

    #[test]
    fn bad_requests_fail_with_a_status() {
        let i = info();
        // Past the end, not whole sectors, wrong buffer direction.
        assert_eq!(
            one(VIRTIO_BLK_T_IN, 1020, 4096, W, &i).unwrap().req,
            Err(S_IOERR)
        );
        assert_eq!(
            one(VIRTIO_BLK_T_IN, 0, 100, W, &i).unwrap().req,
            Err(S_UNSUPP)
        );
        assert_eq!(
            one(VIRTIO_BLK_T_IN, 0, 512, 0, &i).unwrap().req,
            Err(S_IOERR)
        );
        assert_eq!(
            one(VIRTIO_BLK_T_OUT, u64::MAX / 256, 512, 0, &i)
                .unwrap()
                .req,
            Err(S_IOERR)
        );
        assert_eq!(one(99, 0, 512, 0, &i).unwrap().req, Err(S_UNSUPP));
        let ro = BlkInfo::new("r", true, 512, 1024, (true, true, true));
        assert_eq!(
            one(VIRTIO_BLK_T_OUT, 0, 512, 0, &ro).unwrap().req,
            Err(S_IOERR)
        );
        // A 4 KiB bdev takes only whole blocks.
        let big = BlkInfo::new("b", false, 4096, 64, (false, false, false));
        assert_eq!(
            one(VIRTIO_BLK_T_IN, 1, 4096, W, &big).unwrap().req,
            Err(S_IOERR)
        );
        assert_eq!(
            one(VIRTIO_BLK_T_FLUSH, 0, 512, 0, &big).unwrap().req,
            Err(S_UNSUPP)
        );
    }

    #[test]
    fn short_header_and_missing_status() {
        let m = mem();
        // Eight bytes of header and then the status.
        put(&m, 0, 0, 0x1000, 8, N, 1);
        put(&m, 0, 1, 0x3000, 1, W, 0);
        let mut c = Chain::default();
        c.walk(&m, 0, 8, 0).unwrap();
        assert_eq!(parse(&mut c, &m, &info()).unwrap().req, Err(S_UNSUPP));
        // No writable last byte: nowhere to answer.
        put(&m, 0, 1, 0x3000, 1, 0, 0);
        c.walk(&m, 0, 8, 0).unwrap();
        assert!(parse(&mut c, &m, &info()).is_none());
        // A status byte outside guest memory.
        put(&m, 0, 1, 1 << 20, 1, W, 0);
        c.walk(&m, 0, 8, 0).unwrap();
        assert!(parse(&mut c, &m, &info()).is_none());
    }

    #[test]
    fn header_data_and_status_in_one_buffer_each_way() {
        // Any layout: header and data in one readable buffer, status alone.
        let m = mem();
        hdr(&m, 0x1000, VIRTIO_BLK_T_OUT, 2);
        put(&m, 0, 0, 0x1000, 16 + 1024, N, 1);
        put(&m, 0, 1, 0x3000, 1, W, 0);
        let mut c = Chain::default();
        c.walk(&m, 0, 8, 0).unwrap();
        let p = parse(&mut c, &m, &info()).unwrap();
        assert_eq!(
            p.req,
            Ok(Req::Write {
                offset_blocks: 2,
                num_blocks: 2,
                data: (0, 1)
            })
        );
        assert_eq!(
            c.descs()[0],
            Desc {
                gpa: 0x1010,
                len: 1024,
                write: false
            }
        );
    }

    #[test]
    fn config_space_says_size_and_limits() {
        let c = info().config(2);
        assert_eq!(u64::from_le_bytes(c[0..8].try_into().unwrap()), 1024);
        assert_eq!(u32::from_le_bytes(c[20..24].try_into().unwrap()), 512);
        assert_eq!(u16::from_le_bytes(c[34..36].try_into().unwrap()), 2);
        let i = info();
        i.removed.store(true, Ordering::Release);
        assert!(i.config(1)[0..24].iter().all(|b| *b == 0));
    }
}
