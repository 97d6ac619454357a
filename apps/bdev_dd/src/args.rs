//! Command line: spdk_dd's options, plus the options every bdevkit app
//! has (`-m`, `-c/--json`, `-r`, `--interrupt-mode`, ...).

use std::path::PathBuf;

use anyhow::{bail, Result};
use bdevkit_app::CommonArgs;
use clap::Parser;

/// spdk_dd's default I/O unit size.
pub const DEFAULT_BS: u64 = 4096;
/// spdk_dd's default queue depth.
pub const DEFAULT_QD: u32 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "bdev_dd",
    about = "Copy between files and bdevs (SPDK spdk_dd compatible)",
    after_help = "File flags (--iflag, --oflag; comma-separated): direct, dsync, sync, noatime, \
                  nofollow, nonblock, noctty, directory.\n\
                  Example: bdev_dd --json bdevs.json --if disk.img --ob Malloc0 --bs 1M --qd 4"
)]
struct Cli {
    /// Input file. Give either --if or --ib.
    #[arg(long = "if", value_name = "FILE")]
    input_file: Option<PathBuf>,
    /// Input bdev. Give either --if or --ib.
    #[arg(long = "ib", value_name = "BDEV")]
    input_bdev: Option<String>,
    /// Output file (created if missing, truncated). Give either --of or --ob.
    #[arg(long = "of", value_name = "FILE")]
    output_file: Option<PathBuf>,
    /// Output bdev. Give either --of or --ob.
    #[arg(long = "ob", value_name = "BDEV")]
    output_bdev: Option<String>,
    /// Input file flags (comma-separated)
    #[arg(long = "iflag", value_name = "FLAGS")]
    input_flags: Option<String>,
    /// Output file flags (comma-separated)
    #[arg(long = "oflag", value_name = "FLAGS")]
    output_flags: Option<String>,
    /// I/O unit size in bytes (k/m/g suffixes, binary) [default: 4096]
    #[arg(long = "bs", value_name = "SIZE", allow_hyphen_values = true)]
    bs: Option<String>,
    /// Queue depth: I/O units in flight [default: 2]
    #[arg(long = "qd", value_name = "N", allow_hyphen_values = true)]
    qd: Option<String>,
    /// Number of I/O units to copy (0 = all of the input) [default: all]
    #[arg(long = "count", value_name = "N", allow_hyphen_values = true)]
    count: Option<String>,
    /// Skip this many I/O units at the start of the input
    #[arg(long = "skip", value_name = "N", allow_hyphen_values = true)]
    skip: Option<String>,
    /// Skip this many I/O units at the start of the output
    #[arg(long = "seek", value_name = "N", allow_hyphen_values = true)]
    seek: Option<String>,
    /// Skip holes of the input: I/O units in a hole of an input file, and
    /// units that read back as all zeroes, are not written
    #[arg(long)]
    sparse: bool,
    /// Accepted for spdk_dd compatibility; no effect (file I/O always goes
    /// through bdev_dd's helper threads)
    #[arg(long)]
    aio: bool,
    #[command(flatten)]
    common: CommonArgs,
}

/// One side of the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A file (regular file, block or character device).
    File {
        /// Its path.
        path: PathBuf,
        /// Extra `open` flags from `--iflag`/`--oflag`.
        flags: i32,
    },
    /// A bdev of the configuration.
    Bdev(String),
}

/// The validated command line.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Where to read.
    pub input: Target,
    /// Where to write.
    pub output: Target,
    /// I/O unit size in bytes.
    pub bs: u64,
    /// I/O units in flight.
    pub qd: u32,
    /// I/O units to copy; `None` = all of the input.
    pub count: Option<u64>,
    /// I/O units skipped at the start of the input.
    pub skip: u64,
    /// I/O units skipped at the start of the output.
    pub seek: u64,
    /// `--sparse`.
    pub sparse: bool,
    /// The framework's options (`--json`, `-m`, ...).
    pub common: CommonArgs,
    /// `-L` or `--log-level` was given (else bdev_dd logs warnings only).
    pub logging_asked: bool,
}

/// spdk_dd's file flags and the `open` flags they stand for.
const FILE_FLAGS: &[(&str, i32)] = &[
    ("direct", libc::O_DIRECT),
    ("directory", libc::O_DIRECTORY),
    ("dsync", libc::O_DSYNC),
    ("noatime", libc::O_NOATIME),
    ("noctty", libc::O_NOCTTY),
    ("nofollow", libc::O_NOFOLLOW),
    ("nonblock", libc::O_NONBLOCK),
    ("sync", libc::O_SYNC),
];

/// Parses `--iflag`/`--oflag`: comma-separated names of [`FILE_FLAGS`].
pub fn parse_flags(s: &str) -> Result<i32> {
    let mut flags = 0;
    for name in s.split(',') {
        if name == "append" {
            bail!(
                "File flag append is not supported: bdev_dd writes each I/O unit at its own offset, several at a time"
            );
        }
        match FILE_FLAGS.iter().find(|(n, _)| *n == name) {
            Some((_, f)) => flags |= f,
            None => bail!("Unknown file flag: {name}"),
        }
    }
    Ok(flags)
}

/// A decimal count (`--count`, `--skip`, `--seek`, `--qd`), with SPDK's
/// message when it is not one.
fn parse_count(value: Option<&str>, flag: &str, default: u64) -> Result<u64> {
    match value {
        None => Ok(default),
        Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => match v.parse() {
            Ok(n) => Ok(n),
            Err(_) => bail!("Invalid {flag} value"),
        },
        Some(_) => bail!("Invalid {flag} value"),
    }
}

fn target(file: Option<PathBuf>, flags: i32, bdev: Option<String>) -> Option<Target> {
    match (file, bdev) {
        (Some(path), _) => Some(Target::File { path, flags }),
        (None, Some(name)) => Some(Target::Bdev(name)),
        (None, None) => None,
    }
}

impl Cli {
    /// The checks spdk_dd makes before starting, in its order and with
    /// its messages.
    fn validate(self) -> Result<Opts> {
        if self.input_file.is_some() && self.input_bdev.is_some() {
            bail!("You may specify either --if or --ib, but not both.");
        }
        if self.output_file.is_some() && self.output_bdev.is_some() {
            bail!("You may specify either --of or --ob, but not both.");
        }
        if self.input_file.is_none() && self.input_bdev.is_none() {
            bail!("You must specify either --if or --ib");
        }
        if self.output_file.is_none() && self.output_bdev.is_none() {
            bail!("You must specify either --of or --ob");
        }
        let bs = match self.bs.as_deref() {
            None => DEFAULT_BS,
            Some(s) => match bdevkit_app::parse_size(s) {
                Some(v) => v,
                None => bail!("Invalid --bs value"),
            },
        };
        let count = parse_count(self.count.as_deref(), "--count", 0)?;
        if self.output_file.is_none() && self.output_flags.is_some() {
            bail!("--oflags may be used only with --of");
        }
        if self.input_file.is_none() && self.input_flags.is_some() {
            bail!("--iflags may be used only with --if");
        }
        let qd = parse_count(self.qd.as_deref(), "--qd", u64::from(DEFAULT_QD))?;
        let qd = match u32::try_from(qd) {
            Ok(q) if q > 0 => q,
            _ => bail!("Invalid --qd value"),
        };
        let skip = parse_count(self.skip.as_deref(), "--skip", 0)?;
        let seek = parse_count(self.seek.as_deref(), "--seek", 0)?;
        let iflags = self.input_flags.as_deref().map_or(Ok(0), parse_flags)?;
        let oflags = self.output_flags.as_deref().map_or(Ok(0), parse_flags)?;
        let input = target(self.input_file, iflags, self.input_bdev)
            .expect("invariant: one of --if/--ib was checked above");
        let output = target(self.output_file, oflags, self.output_bdev)
            .expect("invariant: one of --of/--ob was checked above");
        let logging_asked = !self.common.logflag.is_empty() || self.common.log_level.is_some();
        Ok(Opts {
            input,
            output,
            bs,
            qd,
            count: (count > 0).then_some(count),
            skip,
            seek,
            sparse: self.sparse,
            common: self.common,
            logging_asked,
        })
    }
}

/// Parses and validates the command line (clap prints `--help` and
/// malformed command lines itself and exits).
pub fn parse() -> Result<Opts> {
    Cli::parse().validate()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(args: &[&str]) -> Result<Opts> {
        Cli::try_parse_from(std::iter::once("bdev_dd").chain(args.iter().copied()))?.validate()
    }

    fn err(args: &[&str]) -> String {
        opts(args).unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_spdk_dds() {
        let o = opts(&["--if", "a", "--ob", "M0"]).unwrap();
        assert_eq!((o.bs, o.qd, o.count, o.skip, o.seek), (4096, 2, None, 0, 0));
        assert_eq!(
            o.input,
            Target::File {
                path: "a".into(),
                flags: 0
            }
        );
        assert_eq!(o.output, Target::Bdev("M0".into()));
        assert!(!o.sparse && !o.logging_asked);
        assert!(o.common.json.is_none());
    }

    #[test]
    fn every_option() {
        let o = opts(&[
            "--ib=M0",
            "--of=out",
            "--oflag=direct,dsync",
            "--bs=1M",
            "--qd",
            "8",
            "--count",
            "3",
            "--skip=1",
            "--seek=2",
            "--sparse",
            "--aio",
            "--json",
            "c.json",
            "-m",
            "0x1",
            "-L",
            "bdev",
        ])
        .unwrap();
        assert_eq!(o.input, Target::Bdev("M0".into()));
        assert_eq!(
            o.output,
            Target::File {
                path: "out".into(),
                flags: libc::O_DIRECT | libc::O_DSYNC
            }
        );
        assert_eq!(
            (o.bs, o.qd, o.count, o.skip, o.seek),
            (1 << 20, 8, Some(3), 1, 2)
        );
        assert!(o.sparse && o.logging_asked);
        assert_eq!(o.common.json.unwrap().to_str(), Some("c.json"));
        // --count 0 means all, as in spdk_dd.
        assert_eq!(
            opts(&["--ib", "a", "--ob", "b", "--count", "0"])
                .unwrap()
                .count,
            None
        );
    }

    #[test]
    fn spdk_dd_messages() {
        assert_eq!(
            err(&["--if", "a", "--ib", "b", "--of", "c"]),
            "You may specify either --if or --ib, but not both."
        );
        assert_eq!(
            err(&["--if", "a", "--of", "c", "--ob", "d"]),
            "You may specify either --of or --ob, but not both."
        );
        assert_eq!(err(&["--of", "c"]), "You must specify either --if or --ib");
        assert_eq!(err(&["--if", "c"]), "You must specify either --of or --ob");
        for bs in ["0", "-1", "x", "4kb"] {
            assert_eq!(
                err(&["--if", "a", "--of", "b", "--bs", bs]),
                "Invalid --bs value"
            );
        }
        assert_eq!(
            err(&["--if", "a", "--of", "b", "--count", "-1"]),
            "Invalid --count value"
        );
        assert_eq!(
            err(&["--if", "a", "--ob", "b", "--oflag", "direct"]),
            "--oflags may be used only with --of"
        );
        assert_eq!(
            err(&["--ib", "a", "--of", "b", "--iflag", "direct"]),
            "--iflags may be used only with --if"
        );
        assert_eq!(
            err(&["--if", "a", "--of", "b", "--iflag", "direct,fast"]),
            "Unknown file flag: fast"
        );
        assert!(err(&["--if", "a", "--of", "b", "--oflag", "append"]).contains("append"));
        for qd in ["0", "x", "99999999999"] {
            assert_eq!(
                err(&["--if", "a", "--of", "b", "--qd", qd]),
                "Invalid --qd value"
            );
        }
        assert_eq!(
            err(&["--if", "a", "--of", "b", "--skip", "1k"]),
            "Invalid --skip value"
        );
        assert_eq!(
            err(&["--if", "a", "--of", "b", "--seek", ""]),
            "Invalid --seek value"
        );
    }
}
