//! What a job does: the workload, as SPDK names it, and I/O sizes as
//! bdevperf's flags spell them.

use anyhow::{bail, Context, Result};

/// Workloads, as SPDK names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Uniform random reads.
    RandRead,
    /// Uniform random writes.
    RandWrite,
    /// Sequential mix (`-M` % reads).
    Rw,
    /// Random mix (`-M` % reads).
    RandRw,
    /// Write a pattern, read it back, compare.
    Verify,
    /// Verify plus a bdev reset every 10 s.
    Reset,
    /// Sequential unmaps.
    Unmap,
    /// Sequential flushes.
    Flush,
    /// Sequential write-zeroes.
    WriteZeroes,
}

impl Workload {
    /// Parses SPDK's workload name.
    pub fn parse(s: &str) -> Result<Workload> {
        Ok(match s {
            "read" => Workload::Read,
            "write" => Workload::Write,
            "randread" => Workload::RandRead,
            "randwrite" => Workload::RandWrite,
            "rw" => Workload::Rw,
            "randrw" => Workload::RandRw,
            "verify" => Workload::Verify,
            "reset" => Workload::Reset,
            "unmap" => Workload::Unmap,
            "flush" => Workload::Flush,
            "write_zeroes" => Workload::WriteZeroes,
            other => bail!(
                "unknown workload '{other}' (expected one of read, write, randread, randwrite, rw, randrw, verify, reset, unmap, flush, write_zeroes)"
            ),
        })
    }

    /// SPDK's name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Read => "read",
            Workload::Write => "write",
            Workload::RandRead => "randread",
            Workload::RandWrite => "randwrite",
            Workload::Rw => "rw",
            Workload::RandRw => "randrw",
            Workload::Verify => "verify",
            Workload::Reset => "reset",
            Workload::Unmap => "unmap",
            Workload::Flush => "flush",
            Workload::WriteZeroes => "write_zeroes",
        }
    }

    /// Whether offsets are random.
    pub fn is_random(self) -> bool {
        matches!(
            self,
            Workload::RandRead | Workload::RandWrite | Workload::RandRw
        )
    }

    /// Whether `-M` applies.
    pub fn is_mixed(self) -> bool {
        matches!(self, Workload::Rw | Workload::RandRw)
    }

    /// Whether the data is checked.
    pub fn verifies(self) -> bool {
        matches!(self, Workload::Verify | Workload::Reset)
    }

    /// Whether it writes data from its buffers (what `-U` stamps).
    pub fn writes_data(self) -> bool {
        matches!(
            self,
            Workload::Write
                | Workload::RandWrite
                | Workload::Rw
                | Workload::RandRw
                | Workload::Verify
                | Workload::Reset
        )
    }
}

impl Workload {
    /// Checks a job on bdev `bdev`, zoned or not, with `--zone-append` or
    /// not. Writing workloads run on a zoned bdev zone by zone (the job's
    /// `zoned` module); unmap and write_zeroes would write anywhere, and
    /// each such I/O would fail with the device's status, so the job fails
    /// at once with one clear error instead.
    pub fn check_zoned(self, bdev: &str, zoned: bool, append: bool) -> Result<()> {
        if zoned && matches!(self, Workload::Unmap | Workload::WriteZeroes) {
            bail!(
                "bdev {bdev} is zoned (written only at its zones' write pointers): workload {} \
                 would write anywhere; bdevperf writes zoned bdevs zone by zone with write, \
                 randwrite, rw, randrw, verify and reset",
                self.name()
            );
        }
        if append && !zoned {
            bail!("--zone-append needs a zoned bdev, and bdev {bdev} is not zoned");
        }
        if append && !self.writes_data() {
            eprintln!(
                "warning: --zone-append has no effect: workload {} writes no data",
                self.name()
            );
        }
        Ok(())
    }
}

/// Parses `4096`, `4k`, `1M`, `2g` (binary multiples).
pub fn parse_size(s: &str) -> Result<u64> {
    bdevkit_app::parse_size(s).with_context(|| format!("invalid I/O size '{}'", s.trim()))
}
