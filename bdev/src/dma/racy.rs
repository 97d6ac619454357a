//! Copies between a buffer and memory other threads (or processes) may
//! write at the same time ([`super::SharedMem`], [`super::ExtMem`]),
//! without undefined behaviour.
//!
//! Rust's memory model makes a data race undefined even through raw
//! pointers, so these copies are not Rust loads and stores: on x86_64 they
//! are inline assembly (`rep movsb`, `rep stosb`, streaming AVX2 stores),
//! which the compiler treats as opaque and which, per Rust's inline
//! assembly rules, behaves as the machine does: every byte is read or
//! written whole, so two overlapping copies at once leave a mix of their
//! bytes, exactly as two overlapping I/Os do on a device. Elsewhere the same
//! guarantee comes from relaxed atomic byte accesses (slower, and correct).
//! This file is the only code that reads or writes such memory's bytes.

/// Copies `len` bytes from `src` to `dst`.
///
/// # Safety
///
/// `src` is valid for reads and `dst` for writes of `len` bytes for the
/// whole call; the two ranges do not overlap. Either may be memory other
/// threads access at the same time *only* through this module.
pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let bulk = len & !(BLOCK - 1);
        let (mut dst, mut src, mut len) = (dst, src, len);
        if bulk != 0 && has_avx() {
            // SAFETY: AVX was detected; the caller's promise covers the
            // first `bulk` bytes, a non-zero multiple of BLOCK.
            unsafe { copy_blocks(dst, src, bulk) };
            // The rest follows the bulk.
            (dst, src, len) = (dst.wrapping_add(bulk), src.wrapping_add(bulk), len - bulk);
        }
        // SAFETY: the caller's promise, for what is left; `rep movsb`
        // copies rcx bytes from rsi to rdi, forward (the ABI keeps the
        // direction flag clear), and only touches those registers and the
        // two ranges.
        unsafe {
            std::arch::asm!(
                "rep movsb",
                inout("rcx") len => _,
                inout("rdi") dst => _,
                inout("rsi") src => _,
                options(nostack, preserves_flags)
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    for i in 0..len {
        // SAFETY: the caller's promise; every access to such memory is
        // atomic (this module), so relaxed byte accesses cannot race.
        unsafe {
            let b = std::sync::atomic::AtomicU8::from_ptr(src.add(i).cast_mut())
                .load(std::sync::atomic::Ordering::Relaxed);
            std::sync::atomic::AtomicU8::from_ptr(dst.add(i))
                .store(b, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Bytes one turn of [`copy_blocks`] moves.
#[cfg(target_arch = "x86_64")]
const BLOCK: usize = 128;

#[cfg(target_arch = "x86_64")]
fn has_avx() -> bool {
    static AVX: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVX.get_or_init(|| std::arch::is_x86_feature_detected!("avx"))
}

/// The bulk of a copy, [`BLOCK`] bytes a turn in four 32-byte registers
/// (as fast as the C library's copy; `rep movsb` alone is as fast on
/// current CPUs but counts one instruction per byte under callgrind, which
/// we measure with).
///
/// # Safety
///
/// AVX is available; as [`copy`], and `len` is a non-zero multiple of
/// [`BLOCK`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn copy_blocks(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: the caller's promise; unaligned loads and stores, 128 bytes a
    // turn until rcx reaches zero.
    unsafe {
        std::arch::asm!(
            "2:",
            "vmovdqu {a}, ymmword ptr [{src}]",
            "vmovdqu {b}, ymmword ptr [{src} + 32]",
            "vmovdqu {c}, ymmword ptr [{src} + 64]",
            "vmovdqu {d}, ymmword ptr [{src} + 96]",
            "vmovdqu ymmword ptr [{dst}], {a}",
            "vmovdqu ymmword ptr [{dst} + 32], {b}",
            "vmovdqu ymmword ptr [{dst} + 64], {c}",
            "vmovdqu ymmword ptr [{dst} + 96], {d}",
            "add {src}, 128",
            "add {dst}, 128",
            "sub {len}, 128",
            "jnz 2b",
            src = inout(reg) src => _,
            dst = inout(reg) dst => _,
            len = inout(reg) len => _,
            a = out(ymm_reg) _,
            b = out(ymm_reg) _,
            c = out(ymm_reg) _,
            d = out(ymm_reg) _,
            options(nostack)
        );
    }
}

/// Fills `len` bytes at `dst` with `byte`.
///
/// # Safety
///
/// `dst` is valid for writes of `len` bytes for the whole call, and other
/// threads access it at the same time only through this module.
pub(crate) unsafe fn fill(dst: *mut u8, byte: u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's promise; `rep stosb` stores al to rcx bytes at
    // rdi, forward.
    unsafe {
        std::arch::asm!(
            "rep stosb",
            inout("rcx") len => _,
            inout("rdi") dst => _,
            in("al") byte,
            options(nostack, preserves_flags)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    for i in 0..len {
        // SAFETY: as in `copy`.
        unsafe {
            std::sync::atomic::AtomicU8::from_ptr(dst.add(i))
                .store(byte, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Copies `src` to `dst` with non-temporal stores when that suits them
/// (AVX2, `dst` 32-byte aligned, length a multiple of 32 and at least a
/// page): data written to a RAM disk is rarely read back at once, and
/// streaming it past the cache halves the memory traffic of a random write
/// (no read-for-ownership of the destination). Returns false when it did
/// nothing.
///
/// # Safety
///
/// As [`copy`].
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn stream(dst: *mut u8, src: *const u8, len: usize) -> bool {
    static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if len < 4096 || !len.is_multiple_of(32) || !(dst as usize).is_multiple_of(32) {
        return false;
    }
    if !*AVX2.get_or_init(|| std::arch::is_x86_feature_detected!("avx2")) {
        return false;
    }
    #[target_feature(enable = "avx2")]
    // SAFETY (caller): AVX2 is available; as `copy`, and `dst` is 32-byte
    // aligned and `len` a non-zero multiple of 32.
    unsafe fn run(dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: the caller's promise; the loops move 128, then 32 bytes
        // a turn with unaligned loads and aligned streaming stores until
        // `len` reaches zero, then order the streaming stores before
        // anything that follows (the completion that tells a reader the
        // data is there).
        unsafe {
            std::arch::asm!(
                // 128 bytes a turn while at least that much is left...
                "cmp {len}, 128",
                "jb 3f",
                "2:",
                "vmovdqu {a}, ymmword ptr [{src}]",
                "vmovdqu {b}, ymmword ptr [{src} + 32]",
                "vmovdqu {c}, ymmword ptr [{src} + 64]",
                "vmovdqu {d}, ymmword ptr [{src} + 96]",
                "vmovntdq ymmword ptr [{dst}], {a}",
                "vmovntdq ymmword ptr [{dst} + 32], {b}",
                "vmovntdq ymmword ptr [{dst} + 64], {c}",
                "vmovntdq ymmword ptr [{dst} + 96], {d}",
                "add {src}, 128",
                "add {dst}, 128",
                "sub {len}, 128",
                "cmp {len}, 128",
                "jae 2b",
                // ...then 32 at a time.
                "3:",
                "test {len}, {len}",
                "jz 5f",
                "4:",
                "vmovdqu {a}, ymmword ptr [{src}]",
                "vmovntdq ymmword ptr [{dst}], {a}",
                "add {src}, 32",
                "add {dst}, 32",
                "sub {len}, 32",
                "jnz 4b",
                "5:",
                "sfence",
                src = inout(reg) src => _,
                dst = inout(reg) dst => _,
                len = inout(reg) len => _,
                a = out(ymm_reg) _,
                b = out(ymm_reg) _,
                c = out(ymm_reg) _,
                d = out(ymm_reg) _,
                options(nostack)
            );
        }
    }
    // SAFETY: AVX2 was detected, the alignment and length were checked,
    // the rest is the caller's promise.
    unsafe { run(dst, src, len) };
    true
}

/// Streaming stores are an x86_64 optimisation: nothing done elsewhere.
///
/// # Safety
///
/// As [`copy`] (nothing is accessed).
#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn stream(_dst: *mut u8, _src: *const u8, _len: usize) -> bool {
    false
}
