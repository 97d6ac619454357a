//! After warm-up, 100 000 reads and writes at QD 32 on an aio bdev over a
//! tmpfs file cause zero heap allocations: the aio module's submission,
//! kernel round trip, reaping and batch completion allocate nothing per
//! I/O in steady state (the scenario is `bdevkit_test::kernel`'s).

mod common;

#[cfg(test)]
mod tests {
    use bdevkit_test::kernel;
    use bdevkit_test::steady::CountingAlloc;

    use super::common::AIO;

    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;

    #[test]
    fn steady_state_io_allocates_nothing() {
        kernel::steady_state_io_allocates_nothing(&AIO);
    }
}
