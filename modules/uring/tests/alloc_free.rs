//! After warm-up, 100 000 reads and writes at QD 32 on a uring bdev over a
//! tmpfs file cause zero heap allocations: the uring module's submission,
//! kernel round trip, reaping and batch completion allocate nothing per
//! I/O in steady state (the scenario is `bdevkit_test::kernel`'s; the
//! binary is its own because it installs the counting allocator).

mod common;

#[cfg(test)]
mod tests {
    use super::common::URING;

    bdevkit_test::kernel_alloc_free_test!(URING);
}
