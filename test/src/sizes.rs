//! I/O sizes and buffer layouts: writes 512 B … 1 MiB from buffers in
//! several layouts (page aligned; one segment that starts inside a page;
//! two or three segments that start and end inside pages), reads each
//! back into a buffer that starts inside a page, and compares. What a
//! driver must turn into PRP lists, SGLs or bounce buffers (and what the
//! bdev layer splits at the bdev's limits). Used by the nvme module's
//! tests against the emulated controller and by the `nvme_io_sizes`
//! example against QEMU's controller in the VM lane.

use bdevkit::bdev::{BdevChannel, BdevManager, IoStatus};
use bdevkit::dma::DmaBuf;

/// The sizes tried, in bytes.
pub const SIZES: [usize; 9] = [
    512,
    1024,
    4096,
    8192 + 512,
    65536,
    131_072 + 1536,
    262_144 - 512,
    524_288,
    1 << 20,
];

/// Bytes [`roundtrip`] writes (at most): every size in four layouts.
pub const SPAN_BYTES: usize = {
    let mut sum = 0;
    let mut i = 0;
    while i < SIZES.len() {
        sum += SIZES[i];
        i += 1;
    }
    4 * sum
};

/// A buffer of `len` bytes that does not start on a page boundary (a few
/// tries: the allocator decides where it goes).
fn unaligned(len: usize) -> Result<DmaBuf, String> {
    let mut keep = Vec::new();
    for _ in 0..16 {
        let b = DmaBuf::alloc(len, 4).map_err(|e| e.to_string())?;
        if !(b.as_ptr() as usize).is_multiple_of(4096) {
            return Ok(b);
        }
        keep.push(b);
    }
    Err(format!("no unaligned buffer of {len} bytes"))
}

fn page_offset(b: &DmaBuf) -> usize {
    b.as_ptr() as usize % 4096
}

fn data(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|j| u8::try_from((j * 31 + seed * 7 + j / 4096) % 253).unwrap_or(0))
        .collect()
}

/// `len` bytes of `src` as segments cut at `cuts` (byte offsets,
/// multiples of 4), each in an unaligned buffer.
fn segments(src: &[u8], cuts: &[usize]) -> Result<Vec<DmaBuf>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    for &end in cuts.iter().chain(std::iter::once(&src.len())) {
        let mut b = unaligned(end - at)?;
        b.copy_from_slice(&src[at..end]);
        out.push(b);
        at = end;
    }
    Ok(out)
}

async fn write_segs(
    ch: &BdevChannel,
    lba: u64,
    blocks: u64,
    segs: Vec<DmaBuf>,
) -> Result<(), String> {
    let mut io = ch.alloc_io_async().await;
    io.writev(lba, blocks, segs);
    let done = ch.submit_async(io).map_err(|e| e.error.to_string())?.await;
    match done.status() {
        IoStatus::Success => Ok(()),
        s => Err(format!("writev of {blocks} blocks at {lba}: {s:?}")),
    }
}

/// Runs the sweep on bdev `name` (sizes that are not a multiple of its
/// block size are left out; it writes [`SPAN_BYTES`] from block
/// `first_lba` on) and returns a line per size with the page offsets of
/// the buffers it used. Err on the first mismatch or failed I/O.
pub async fn roundtrip(
    mgr: &BdevManager,
    name: &str,
    first_lba: u64,
) -> Result<Vec<String>, String> {
    let desc = mgr.open(name, true, |_| {}).map_err(|e| e.to_string())?;
    let ch = desc.get_io_channel().map_err(|e| e.to_string())?;
    let bs = usize::try_from(desc.bdev().block_size()).map_err(|e| e.to_string())?;
    let span = (SPAN_BYTES / bs) as u64;
    if first_lba.saturating_add(span) > desc.bdev().num_blocks() {
        return Err(format!(
            "{name}: {span} blocks from {first_lba} on do not fit in its {} blocks",
            desc.bdev().num_blocks()
        ));
    }
    let mut report = Vec::new();
    let mut lba = first_lba;
    for (i, len) in SIZES.into_iter().enumerate() {
        if !len.is_multiple_of(bs) {
            continue;
        }
        let blocks = (len / bs) as u64;
        let expect = data(len, i);
        let half = (len / 2 / bs) * bs;
        let third = (len / 3 / bs) * bs;
        // Layouts: aligned; one unaligned segment; two; three (cuts on
        // block multiples, so that every segment is a whole number of
        // dwords and the halves start inside pages).
        let layouts: Vec<Vec<usize>> = vec![
            Vec::new(),
            Vec::new(),
            vec![half].into_iter().filter(|c| *c > 0).collect(),
            vec![third, 2 * third]
                .into_iter()
                .filter(|c| *c > 0)
                .collect(),
        ];
        let mut offsets = Vec::new();
        for (k, cuts) in layouts.iter().enumerate() {
            if k == 0 {
                let mut b = DmaBuf::alloc(len, 4096).map_err(|e| e.to_string())?;
                b.copy_from_slice(&expect);
                offsets.push(page_offset(&b));
                ch.write(lba, blocks, b)
                    .await
                    .map_err(|e| format!("write {len} aligned: {e:?}"))?;
            } else {
                let segs = segments(&expect, cuts)?;
                offsets.extend(segs.iter().map(page_offset));
                write_segs(&ch, lba, blocks, segs).await?;
            }
            let into = unaligned(len)?;
            offsets.push(page_offset(&into));
            let got = ch
                .read(lba, blocks, into)
                .await
                .map_err(|e| format!("read {len} (layout {k}): {e:?}"))?;
            if got[..] != expect[..] {
                let at = got.iter().zip(&expect).position(|(a, b)| a != b);
                return Err(format!(
                    "{name}: {len} bytes, layout {k} ({} segments): mismatch at byte {at:?}",
                    cuts.len() + 1
                ));
            }
            lba += blocks;
        }
        report.push(format!(
            "{len} bytes: 4 layouts ok, page offsets {offsets:?}"
        ));
    }
    Ok(report)
}
