//! After warm-up, 100 000 reads and writes at QD 32 on an xnvme bdev over
//! a tmpfs file cause zero heap allocations, through the `io_uring`
//! mechanism and then through `libaio` (one test: the allocation count is
//! process-wide). The scenario is `bdevkit_test::kernel`'s; the binary is
//! its own because it installs the counting allocator.

mod common;

#[cfg(test)]
mod tests {
    use bdevkit_test::kernel;
    use bdevkit_test::steady::CountingAlloc;

    use super::common::{IO_URING, LIBAIO};

    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;

    #[test]
    fn steady_state_io_allocates_nothing() {
        kernel::steady_state_io_allocates_nothing(&IO_URING);
        kernel::steady_state_io_allocates_nothing(&LIBAIO);
    }
}
