//! Small process-level helpers.

/// Hands free heap memory back to the operating system. glibc's allocator
/// keeps freed memory in its arenas, and after thousands of bdevs are
/// created and deleted the heap is too fragmented for it to shrink on its
/// own; `malloc_trim` releases the free pages inside the heap too. A no-op
/// with other C libraries. Takes a few milliseconds on a large heap: call it
/// from the control path, never per I/O.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes a plain integer and only touches the
    // allocator's own free lists; it is thread safe.
    unsafe {
        libc::malloc_trim(0);
    }
}
