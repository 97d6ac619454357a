//! Command line: SPDK bdevperf's flags.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use bdevkit::thread::CpuSet;
use clap::Parser;

use crate::jobfile::{self, FileJob};
pub use crate::workload::{parse_size, Workload};

#[derive(Debug, Parser)]
#[command(
    name = "bdevperf",
    about = "Block device benchmark and verifier (SPDK bdevperf compatible)",
    after_help = "With no -c/--json config, a built-in 256 MiB malloc bdev (Malloc0, 4096-byte blocks) is used.\n\
                  SPDK's -Z, -X, -J, -N and -H are not supported (see doc/bdevperf.md).\n\
                  Example: bdevperf -q 128 -o 4096 -w randread -t 5"
)]
struct Cli {
    /// Queue depth per job
    #[arg(short = 'q', value_name = "DEPTH")]
    queue_depth: Option<u32>,
    /// I/O size in bytes (k/m/g suffixes, binary)
    #[arg(short = 'o', value_name = "SIZE")]
    io_size: Option<String>,
    /// Workload: read, write, randread, randwrite, rw, randrw, verify, reset, unmap, flush, write_zeroes
    #[arg(short = 'w', value_name = "TYPE")]
    workload: Option<String>,
    /// Run time in seconds
    #[arg(short = 't', value_name = "SEC")]
    time: Option<u64>,
    /// Read percentage for rw/randrw (0-100)
    #[arg(short = 'M', value_name = "PERCENT")]
    rw_percentage: Option<u8>,
    /// Zipf-distributed random offsets with exponent THETA > 0 (randread, randwrite, randrw); slot 0 of a job is the most frequent
    #[arg(short = 'F', value_name = "THETA", allow_hyphen_values = true)]
    zipf_theta: Option<String>,
    /// Random map: random offsets do not repeat until every slot of the job was used (randread, randwrite, randrw)
    #[arg(short = 'D')]
    random_map: bool,
    /// Unique data in every write: each block is stamped with its address, the job's write count and the job id (verify: a fresh pattern per write)
    #[arg(short = 'U')]
    unique_writes: bool,
    /// Zoned bdevs: write with zone appends (the device picks the blocks in the zone) instead of writes at the write pointer
    #[arg(long = "zone-append")]
    zone_append: bool,
    #[arg(
        short = 'm',
        long = "cpumask",
        default_value = "0x1",
        value_name = "MASK",
        help = "Core mask: 0x3, [0,1], [0-3]"
    )]
    cpumask: String,
    /// SPDK-format JSON config creating the bdevs
    #[arg(
        short = 'c',
        long = "json",
        visible_alias = "config",
        value_name = "FILE"
    )]
    config: Option<PathBuf>,
    #[arg(
        short = 'j',
        value_name = "FILE",
        help = "FIO-like job file: [global] and job sections with filename, cpumask, bs, iodepth, rwmixread, offset, length, rw (-q/-o/-w then optional)"
    )]
    job_file: Option<PathBuf>,
    /// Run only on this bdev (default: every bdev nobody claimed)
    #[arg(short = 'T', value_name = "BDEV")]
    target: Option<String>,
    /// Every core runs a job on every bdev, each on its own slice of the bdev
    #[arg(short = 'C')]
    multithread: bool,
    /// Jobs on the same core share one lightweight thread (not with -j)
    #[arg(short = 'E')]
    thread_per_core: bool,
    /// Print the full table every N seconds
    #[arg(short = 'S', value_name = "SEC")]
    stats_interval: Option<u64>,
    /// With -S: show IOPS as an exponential moving average over N periods (EMA += (IOPS - EMA) * 2/(N+1))
    #[arg(short = 'P', value_name = "N")]
    ema_period: Option<u32>,
    /// Start, then wait for the perform_tests RPC
    #[arg(short = 'z')]
    wait_for_tests: bool,
    /// RPC socket (with -z)
    #[arg(short = 'r', long = "rpc-socket", value_name = "PATH")]
    rpc_socket: Option<PathBuf>,
    /// Continue after I/O failures
    #[arg(short = 'f')]
    continue_on_failure: bool,
    /// Count I/Os slower than this many seconds as timed out (TO/s)
    #[arg(short = 'k', value_name = "SEC")]
    timeout: Option<u64>,
    /// Latency summary (-ll adds the histogram)
    #[arg(short = 'l', action = clap::ArgAction::Count)]
    latency: u8,
    /// Write results as JSON (SPDK perform_tests shape plus percentiles)
    #[arg(long = "output-json", value_name = "FILE")]
    output_json: Option<PathBuf>,
    /// Sleep when idle instead of polling (for shared machines)
    #[arg(long = "interrupt-mode")]
    interrupt_mode: bool,
}

/// Validated options.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Queue depth.
    pub queue_depth: u32,
    /// I/O size in bytes.
    pub io_size: u64,
    /// Workload.
    pub workload: Workload,
    /// Run time in seconds.
    pub time_sec: u64,
    /// Read percentage for mixed workloads.
    pub rw_percentage: Option<u8>,
    /// Cores.
    pub cpumask: CpuSet,
    /// Config file.
    pub config: Option<PathBuf>,
    /// Single target bdev.
    pub target: Option<String>,
    /// `-C`.
    pub multithread: bool,
    /// `-S`.
    pub stats_interval: Option<u64>,
    /// `-z`.
    pub wait_for_tests: bool,
    /// `-r`.
    pub rpc_socket: Option<PathBuf>,
    /// `-f`.
    pub continue_on_failure: bool,
    /// `-k`.
    pub timeout_sec: Option<u64>,
    /// `-l` count.
    pub latency: u8,
    /// `--output-json`.
    pub output_json: Option<PathBuf>,
    /// `--interrupt-mode`.
    pub interrupt_mode: bool,
    /// `-F`: zipf exponent of random offsets.
    pub zipf_theta: Option<f64>,
    /// `-D` (off when `-F` is on, as in SPDK).
    pub random_map: bool,
    /// `-U`.
    pub unique_writes: bool,
    /// `--zone-append`.
    pub zone_append: bool,
    /// `-P`, only when `-S` is given.
    pub ema_period: Option<u32>,
    /// `-E`.
    pub thread_per_core: bool,
    /// `-j`: the job file's job sections.
    pub job_file: Option<Vec<FileJob>>,
}

/// Parses `-F`: a finite number above 0.
fn parse_theta(s: &str) -> Result<f64> {
    match s.trim().parse::<f64>() {
        Ok(t) if t.is_finite() && t > 0.0 => Ok(t),
        _ => bail!("zipf theta (-F) must be a number greater than 0, got '{s}'"),
    }
}

/// Parses and validates the command line.
pub fn parse() -> Result<Opts> {
    let cli = Cli::parse();
    let cpumask: CpuSet = cli.cpumask.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let need = |what: &str, flag: &str| anyhow::anyhow!("missing {what} ({flag}); see --help");
    let zipf_theta = cli.zipf_theta.as_deref().map(parse_theta).transpose()?;
    let job_file = match &cli.job_file {
        None => None,
        Some(path) => {
            if cli.thread_per_core {
                bail!("-E cannot be used with -j: a job file gives each section its own thread");
            }
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read job file {}", path.display()))?;
            let overrides = jobfile::Overrides {
                bdev: cli.target.clone(),
                io_size: cli.io_size.as_deref().map(parse_size).transpose()?,
                queue_depth: cli.queue_depth,
                workload: cli.workload.as_deref().map(Workload::parse).transpose()?,
                rw_percentage: cli.rw_percentage,
            };
            if overrides.rw_percentage.is_some_and(|p| p > 100) {
                bail!("read percentage (-M) is above 100");
            }
            let jobs = jobfile::parse(&text, &overrides)
                .with_context(|| format!("job file {}", path.display()))?;
            if cli.multithread {
                eprintln!("warning: -C is ignored with -j (the job file places the jobs)");
            }
            Some(jobs)
        }
    };
    let (queue_depth, io_size, workload) = if cli.wait_for_tests || job_file.is_some() {
        (
            cli.queue_depth.unwrap_or(1),
            cli.io_size
                .as_deref()
                .map(parse_size)
                .transpose()?
                .unwrap_or(4096),
            Workload::parse(cli.workload.as_deref().unwrap_or("randread"))?,
        )
    } else {
        (
            cli.queue_depth.ok_or_else(|| need("queue depth", "-q"))?,
            parse_size(&cli.io_size.ok_or_else(|| need("I/O size", "-o"))?)?,
            Workload::parse(&cli.workload.ok_or_else(|| need("workload", "-w"))?)?,
        )
    };
    if queue_depth == 0 {
        bail!("queue depth (-q) must be at least 1");
    }
    let time_sec = match cli.time {
        Some(0) => bail!("run time (-t) must be greater than 0"),
        Some(t) => t,
        None if cli.wait_for_tests => 1,
        None => return Err(need("run time", "-t")),
    };
    if job_file.is_some() {
        // Each section has its own workload and rwmixread.
    } else if workload.is_mixed() {
        match cli.rw_percentage {
            Some(p) if p <= 100 => {}
            Some(p) => bail!("read percentage (-M) {p} is above 100"),
            None => bail!(
                "workload {} needs a read percentage (-M 0-100)",
                workload.name()
            ),
        }
    } else if cli.rw_percentage.is_some() {
        eprintln!("warning: -M is ignored for workload {}", workload.name());
    }
    if let Some(path) = &cli.config {
        if !path.is_file() {
            bail!("config file {} is not readable", path.display());
        }
    }
    if cli.stats_interval == Some(0) {
        bail!("stats interval (-S) must be at least 1 second");
    }
    // -F and -D shape random offsets only: with -j they apply to the
    // random jobs, and at least one job must be random.
    let any_random = match &job_file {
        Some(jobs) => jobs.iter().any(|j| j.workload.is_random()),
        None => workload.is_random(),
    };
    let sequential_why = || match &job_file {
        Some(_) => "no job in the job file is randread, randwrite or randrw".to_string(),
        None => format!("workload {} is not random", workload.name()),
    };
    if zipf_theta.is_some() && !any_random {
        bail!(
            "-F needs a random workload (randread, randwrite or randrw): zipf only shapes random offsets, and {}",
            sequential_why()
        );
    }
    if cli.random_map && !any_random {
        bail!(
            "-D needs a random workload (randread, randwrite or randrw): the random map only tracks random offsets, and {}",
            sequential_why()
        );
    }
    if cli.random_map && zipf_theta.is_some() {
        eprintln!("warning: -D has no effect with -F: zipf offsets repeat by design (as in SPDK)");
    }
    if cli.unique_writes && job_file.is_none() && !workload.writes_data() {
        eprintln!(
            "warning: -U has no effect: workload {} writes no data",
            workload.name()
        );
    }
    if cli.ema_period == Some(0) {
        bail!("moving average period (-P) must be at least 1");
    }
    if cli.ema_period.is_some() && cli.stats_interval.is_none() {
        eprintln!("warning: -P is ignored without -S (it averages the periodic tables)");
    }
    Ok(Opts {
        queue_depth,
        io_size,
        workload,
        time_sec,
        rw_percentage: workload
            .is_mixed()
            .then_some(cli.rw_percentage.unwrap_or(0)),
        cpumask,
        config: cli.config,
        target: cli.target,
        multithread: cli.multithread,
        stats_interval: cli.stats_interval,
        wait_for_tests: cli.wait_for_tests,
        rpc_socket: cli.rpc_socket,
        continue_on_failure: cli.continue_on_failure,
        timeout_sec: cli.timeout.filter(|t| *t > 0),
        latency: cli.latency,
        output_json: cli.output_json,
        interrupt_mode: cli.interrupt_mode,
        random_map: cli.random_map && zipf_theta.is_none(),
        zipf_theta,
        unique_writes: cli.unique_writes,
        zone_append: cli.zone_append,
        ema_period: cli.ema_period.filter(|_| cli.stats_interval.is_some()),
        thread_per_core: cli.thread_per_core,
        job_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("4kb").is_err());
    }

    #[test]
    fn zipf_theta() {
        assert_eq!(parse_theta("1.2").unwrap(), 1.2);
        assert_eq!(parse_theta("1").unwrap(), 1.0);
        for bad in ["0", "-1", "0.0", "abc", "", "nan", "inf", "1e999"] {
            let e = parse_theta(bad).unwrap_err().to_string();
            assert!(e.contains("must be a number greater than 0"), "{bad}: {e}");
        }
    }

    #[test]
    fn workloads() {
        assert_eq!(Workload::parse("randrw").unwrap(), Workload::RandRw);
        assert!(Workload::parse("randomread").is_err());
        assert_eq!(Workload::WriteZeroes.name(), "write_zeroes");
    }
}
