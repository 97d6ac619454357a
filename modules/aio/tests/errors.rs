//! A real kernel error reaches the I/O: `ENOSPC` from a full 64 KiB tmpfs
//! (mounted for the test; needs root, skips with the reason otherwise), see
//! `bdevkit_test::kernel::enospc_reaches_the_io_status`.

mod common;

#[cfg(test)]
mod tests {
    use bdevkit_test::kernel;

    use super::common::AIO;

    #[test]
    fn enospc_reaches_the_io_status() {
        kernel::enospc_reaches_the_io_status(&AIO);
    }
}
