//! Data pointers: PRP lists and SGLs built from a request's segments, and
//! the PRP walker a device (the emulated controller, the tests) uses to
//! read them back. Pure arithmetic, no memory access: entries go out
//! through a callback.
//!
//! PRP rules (NVMe base spec, 4.1.1): the first entry may start at any
//! dword-aligned offset of a page; every later entry is page aligned; PRP2
//! is the second page when two entries suffice, else the address of a
//! list (whose last entry chains to the next list when a page of entries
//! is not enough). So a segment may start off a page boundary only if it
//! comes first, and end off one only if it comes last; other layouts go
//! through an SGL (when the controller has them) or a bounce buffer.

use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::Status;

use crate::sys::PAGE;

const PAGE_U64: u64 = PAGE as u64;
const PAGE_MASK: u64 = PAGE_U64 - 1;
/// PRP entries in one list page.
pub const PRP_LIST_ENTRIES: usize = PAGE / 8;
/// SGL descriptors in one list page.
pub const SGL_LIST_ENTRIES: usize = PAGE / 16;

/// Why a layout cannot be described.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// An address is not dword aligned (never describable).
    Misaligned,
    /// PRPs cannot describe it (a gap inside a page), an SGL or a bounce
    /// buffer can.
    NotPrpShaped,
    /// More entries than one list page holds.
    TooLong,
}

/// Builds the PRP entries of `segs` (`(iova, len)` pairs, in order; empty
/// ones are skipped). Entries after the first go to `put(index, entry)`
/// (index 0 = PRP2's value when two entries suffice, else the first list
/// slot). Returns PRP1 and the number of entries; PRP2 is then 0 (one
/// entry), entry 1 (two), or the list's address (more).
pub fn build_prps(
    segs: impl Iterator<Item = (u64, usize)>,
    mut put: impl FnMut(usize, u64),
) -> Result<(u64, usize), LayoutError> {
    let mut prp1 = 0;
    let mut n = 0usize;
    let mut first = true;
    let mut prev_end_aligned = true;
    for (addr, len) in segs {
        if len == 0 {
            continue;
        }
        if addr & 3 != 0 {
            return Err(LayoutError::Misaligned);
        }
        if !first && (addr & PAGE_MASK != 0 || !prev_end_aligned) {
            return Err(LayoutError::NotPrpShaped);
        }
        let end = addr + len as u64;
        let mut a = addr;
        while a < end {
            if n == 0 {
                prp1 = a;
            } else {
                if n > PRP_LIST_ENTRIES {
                    return Err(LayoutError::TooLong);
                }
                put(n - 1, a);
            }
            n += 1;
            a = (a & !PAGE_MASK) + PAGE_U64;
        }
        prev_end_aligned = end & PAGE_MASK == 0;
        first = false;
    }
    Ok((prp1, n))
}

/// PRP1 and PRP2 of one contiguous segment that spans at most two pages
/// (the common 4 KiB I/O): no list needed. `None` when it needs a list, is
/// empty or is not dword aligned ([`build_prps`] then decides). Agrees
/// with [`build_prps`] wherever it answers (a proptest checks that).
#[inline]
#[must_use]
pub fn short_prps(addr: u64, len: usize) -> Option<(u64, u64)> {
    let off = addr & PAGE_MASK;
    let len = len as u64;
    // 1 ..= (the rest of the first page + one more page) bytes: a zero
    // length wraps to the top and is refused with the rest.
    if addr & 3 != 0 || len.wrapping_sub(1) >= 2 * PAGE_U64 - off {
        return None;
    }
    let prp2 = if off + len > PAGE_U64 {
        (addr | PAGE_MASK) + 1
    } else {
        0
    };
    Some((addr, prp2))
}

/// Builds SGL data block descriptors for `segs` into `put(index, desc)`;
/// returns their number. `dword` enforces the dword-granularity rule of
/// controllers that report SGLs with alignment.
pub fn build_sgl(
    segs: impl Iterator<Item = (u64, usize)>,
    dword: bool,
    mut put: impl FnMut(usize, SglDescriptor),
) -> Result<usize, LayoutError> {
    let mut n = 0;
    for (addr, len) in segs {
        if len == 0 {
            continue;
        }
        if dword && (addr & 3 != 0 || len & 3 != 0) {
            return Err(LayoutError::NotPrpShaped);
        }
        let l = u32::try_from(len).map_err(|_| LayoutError::TooLong)?;
        if n >= SGL_LIST_ENTRIES {
            return Err(LayoutError::TooLong);
        }
        put(n, SglDescriptor::data_block(addr, l));
        n += 1;
    }
    Ok(n)
}

/// Walks the PRPs of a command moving `len` bytes, as a device does:
/// `entry(iova)` reads one 8-byte list entry, `f(iova, len)` gets each
/// data chunk in order. Fails with the status a controller returns for a
/// malformed pointer.
pub fn walk_prps(
    prp1: u64,
    prp2: u64,
    len: usize,
    mut entry: impl FnMut(u64) -> u64,
    mut f: impl FnMut(u64, usize),
) -> Result<(), Status> {
    if len == 0 {
        return Ok(());
    }
    if prp1 & 3 != 0 {
        return Err(Status::PRP_OFFSET_INVALID);
    }
    let mut left = len as u64;
    let first = left.min(PAGE_U64 - (prp1 & PAGE_MASK));
    f(
        prp1,
        usize::try_from(first).expect("invariant: at most a page"),
    );
    left -= first;
    if left == 0 {
        return Ok(());
    }
    if left <= PAGE_U64 {
        if prp2 & PAGE_MASK != 0 {
            return Err(Status::PRP_OFFSET_INVALID);
        }
        f(
            prp2,
            usize::try_from(left).expect("invariant: at most a page"),
        );
        return Ok(());
    }
    if prp2 & 7 != 0 {
        return Err(Status::PRP_OFFSET_INVALID);
    }
    let mut list = prp2;
    loop {
        let in_page = (PAGE_U64 - (list & PAGE_MASK)) / 8;
        let needed = left.div_ceil(PAGE_U64);
        let usable = if needed > in_page {
            in_page - 1
        } else {
            needed
        };
        for i in 0..usable {
            let e = entry(list + i * 8);
            if e & PAGE_MASK != 0 {
                return Err(Status::PRP_OFFSET_INVALID);
            }
            let n = left.min(PAGE_U64);
            f(e, usize::try_from(n).expect("invariant: at most a page"));
            left -= n;
        }
        if left == 0 {
            return Ok(());
        }
        list = entry(list + usable * 8);
        if list & 7 != 0 {
            return Err(Status::PRP_OFFSET_INVALID);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Builds, then walks back through a fake list page; returns the
    /// chunks the walk saw.
    fn roundtrip(segs: &[(u64, usize)]) -> Result<Vec<(u64, usize)>, LayoutError> {
        let list_iova = 0x7000_0000_0000u64;
        let mut list: HashMap<u64, u64> = HashMap::new();
        let (prp1, n) = build_prps(segs.iter().copied(), |i, e| {
            list.insert(list_iova + i as u64 * 8, e);
        })?;
        let prp2 = match n {
            0 | 1 => 0,
            2 => list[&list_iova],
            _ => list_iova,
        };
        let len: usize = segs.iter().map(|s| s.1).sum();
        let mut got = Vec::new();
        walk_prps(
            prp1,
            prp2,
            len,
            |a| *list.get(&a).expect("walker read outside the list"),
            |a, l| got.push((a, l)),
        )
        .expect("walk");
        Ok(got)
    }

    /// The bytes as a list of (address, len) merged into maximal runs.
    fn runs(chunks: &[(u64, usize)]) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for &(a, l) in chunks {
            if l == 0 {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.0 + last.1 == a => last.1 += l as u64,
                _ => out.push((a, l as u64)),
            }
        }
        out
    }

    #[test]
    fn one_two_and_many_entries() {
        assert_eq!(
            roundtrip(&[(0x1000_0200, 512)]).unwrap(),
            vec![(0x1000_0200, 512)]
        );
        let two = roundtrip(&[(0x1000_0e00, 1024)]).unwrap();
        assert_eq!(two, vec![(0x1000_0e00, 512), (0x1000_1000, 512)]);
        let many = roundtrip(&[(0x2000_0000, 5 * PAGE)]).unwrap();
        assert_eq!(many.len(), 5);
        assert!(build_prps([(0x1001, 512)].into_iter(), |_, _| {}).is_err());
        assert_eq!(
            build_prps([(0x1000, 512), (0x3000, 512)].into_iter(), |_, _| {}),
            Err(LayoutError::NotPrpShaped)
        );
        assert_eq!(
            build_prps(
                [(0x1000, (PRP_LIST_ENTRIES + 2) * PAGE)].into_iter(),
                |_, _| {}
            ),
            Err(LayoutError::TooLong)
        );
        // Exactly one full list page after PRP1 needs no chain.
        assert!(roundtrip(&[(0x10_0000, (PRP_LIST_ENTRIES + 1) * PAGE)]).is_ok());
    }

    #[test]
    fn walker_follows_chained_lists() {
        // A list that starts 16 bytes before the end of its page: one entry,
        // then the chain pointer.
        let mut mem: HashMap<u64, u64> = HashMap::new();
        mem.insert(0x5ff0, 0xa000);
        mem.insert(0x5ff8, 0x9000);
        mem.insert(0x9000, 0xb000);
        mem.insert(0x9008, 0xc000);
        let mut got = Vec::new();
        walk_prps(
            0x1000,
            0x5ff0,
            4 * PAGE,
            |a| mem[&a],
            |a, l| got.push((a, l)),
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                (0x1000, PAGE),
                (0xa000, PAGE),
                (0xb000, PAGE),
                (0xc000, PAGE)
            ]
        );
        assert_eq!(
            walk_prps(0x1002, 0, 8, |_| 0, |_, _| {}),
            Err(Status::PRP_OFFSET_INVALID)
        );
    }

    /// A buffer layout the bdev layer can hand over and PRPs can describe:
    /// a first segment starting at any dword offset, later ones page
    /// aligned, every segment but the last ending on a page boundary.
    fn prp_layout() -> impl Strategy<Value = Vec<(u64, usize)>> {
        (
            0u64..1024,
            prop::collection::vec((1u64..64, 1usize..6), 1..6),
            0usize..PAGE / 4,
        )
            .prop_map(|(first_off_dw, pages, tail_dw)| {
                let mut v = Vec::new();
                let n = pages.len();
                for (i, (region, npages)) in pages.into_iter().enumerate() {
                    let base = region * 0x10_0000;
                    let start = if i == 0 {
                        base + first_off_dw * 4
                    } else {
                        base
                    };
                    let mut end = base + (npages as u64) * PAGE_U64;
                    if i == n - 1 && tail_dw > 0 {
                        end = end - PAGE_U64 + (tail_dw as u64) * 4;
                        end = end.max(start + 4);
                    }
                    v.push((start, usize::try_from(end - start).unwrap()));
                }
                v
            })
    }

    proptest! {
        #[test]
        fn prps_cover_exactly_the_bytes(segs in prp_layout()) {
            let total: usize = segs.iter().map(|s| s.1).sum();
            prop_assume!(total.div_ceil(PAGE) < PRP_LIST_ENTRIES);
            let got = roundtrip(&segs).expect("a PRP-shaped layout");
            let expect: Vec<(u64, usize)> = segs.clone();
            prop_assert_eq!(runs(&got), runs(&expect));
            let walked: usize = got.iter().map(|c| c.1).sum();
            prop_assert_eq!(walked, total);
            // No chunk crosses a page.
            for (a, l) in got {
                prop_assert!((a & PAGE_MASK) + l as u64 <= PAGE_U64);
            }
        }

        #[test]
        fn other_layouts_are_refused_not_mangled(
            segs in prop::collection::vec((0u64..1 << 20, 1usize..3 * PAGE), 1..6)
        ) {
            let segs: Vec<(u64, usize)> = segs.into_iter().map(|(a, l)| (a & !3, l)).collect();
            match roundtrip(&segs) {
                Ok(got) => prop_assert_eq!(runs(&got), runs(&segs)),
                Err(e) => prop_assert!(matches!(e, LayoutError::NotPrpShaped | LayoutError::TooLong)),
            }
        }

        #[test]
        fn short_prps_agree_with_the_list_builder(addr in 0u64..1 << 40, len in 0usize..3 * PAGE) {
            let list = build_prps(std::iter::once((addr, len)), |_, _| {});
            let mut second = 0;
            let two = build_prps(std::iter::once((addr, len)), |i, e| {
                if i == 0 {
                    second = e;
                }
            });
            match short_prps(addr, len) {
                Some((prp1, prp2)) => {
                    let (p1, n) = two.expect("a short layout builds");
                    prop_assert!(n == 1 || n == 2);
                    prop_assert_eq!(prp1, p1);
                    prop_assert_eq!(prp2, if n == 2 { second } else { 0 });
                }
                // Refused: empty, misaligned, or more than two entries.
                None => prop_assert!(
                    len == 0 || addr & 3 != 0 || list.is_ok_and(|(_, n)| n > 2)
                ),
            }
        }

        #[test]
        fn sgl_describes_any_layout(segs in prop::collection::vec((0u64..1 << 40, 1usize..1 << 20), 1..64)) {
            let mut out = Vec::new();
            let n = build_sgl(segs.iter().copied(), false, |i, d| out.push((i, d))).unwrap();
            prop_assert_eq!(n, segs.len());
            for ((i, d), s) in out.iter().zip(&segs) {
                prop_assert_eq!(d.length() as usize, s.1);
                prop_assert!(*i < SGL_LIST_ENTRIES);
            }
        }
    }
}
