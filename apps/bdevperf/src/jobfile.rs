//! `-j`: SPDK bdevperf's FIO-like job file.
//!
//! INI sections; `[global]` sets defaults for the sections after it (a
//! later `[global]` starts again from the built-in defaults and replaces
//! them for the sections after it); every other section is one job
//! section. Keys: `filename` (bdevs separated by `:`), `cpumask`, `bs`,
//! `iodepth`, `rwmixread` (default 50), `offset` and `length` (in blocks;
//! length 0 or absent = to the end of the bdev), `rw`. `key=value`,
//! `key = value` and `key value` all work; `#` and `;` start comment
//! lines. Command-line `-T/-o/-q/-M/-w` override the values of every
//! `[global]` section (and the built-in defaults), not those a job section
//! sets itself, as in SPDK.

use anyhow::{bail, Context, Result};
use bdevkit::thread::CpuSet;

use crate::workload::{parse_size, Workload};

/// One job section, resolved against the `[global]` before it.
#[derive(Debug, Clone, PartialEq)]
pub struct FileJob {
    /// Section name.
    pub section: String,
    /// Bdevs to run on (one job each).
    pub bdevs: Vec<String>,
    /// Cores the section may run on (`None`: every core of `-m`).
    pub cpumask: Option<CpuSet>,
    /// I/O size in bytes.
    pub io_size: u64,
    /// Queue depth.
    pub queue_depth: u32,
    /// Workload.
    pub workload: Workload,
    /// Read percentage for `rw`/`randrw`.
    pub rw_percentage: u8,
    /// First block of the range.
    pub offset_blocks: u64,
    /// Blocks in the range; 0 = to the end of the bdev.
    pub length_blocks: u64,
}

/// Command-line values that replace those of every `[global]` section.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `-T`.
    pub bdev: Option<String>,
    /// `-o`.
    pub io_size: Option<u64>,
    /// `-q`.
    pub queue_depth: Option<u32>,
    /// `-w`.
    pub workload: Option<Workload>,
    /// `-M`.
    pub rw_percentage: Option<u8>,
}

/// Values of one section before defaults are checked.
#[derive(Debug, Clone)]
struct Values {
    filename: Option<Vec<String>>,
    cpumask: Option<CpuSet>,
    bs: Option<u64>,
    iodepth: Option<u32>,
    rwmixread: u8,
    offset: u64,
    length: u64,
    rw: Option<Workload>,
}

impl Values {
    /// Built-in defaults with the command line applied.
    fn defaults(cli: &Overrides) -> Values {
        let mut v = Values {
            filename: None,
            cpumask: None,
            bs: None,
            iodepth: None,
            // FIO's default; bdevperf's -M has none.
            rwmixread: 50,
            offset: 0,
            length: 0,
            rw: None,
        };
        v.apply_cli(cli);
        v
    }

    fn apply_cli(&mut self, cli: &Overrides) {
        if let Some(b) = &cli.bdev {
            self.filename = Some(vec![b.clone()]);
        }
        if cli.io_size.is_some() {
            self.bs = cli.io_size;
        }
        if cli.queue_depth.is_some() {
            self.iodepth = cli.queue_depth;
        }
        if let Some(m) = cli.rw_percentage {
            self.rwmixread = m;
        }
        if cli.workload.is_some() {
            self.rw = cli.workload;
        }
    }

    /// Sets `key` from the text `value`.
    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T> {
            value
                .parse()
                .map_err(|_| anyhow::anyhow!("{key} must be a whole number, got '{value}'"))
        }
        match key {
            "filename" => {
                let names: Vec<String> = value
                    .split(':')
                    .map(|n| n.split_whitespace().collect::<String>())
                    .filter(|n| !n.is_empty())
                    .collect();
                if names.is_empty() {
                    bail!("filename names no bdev");
                }
                self.filename = Some(names);
            }
            "cpumask" => {
                self.cpumask = Some(
                    value
                        .parse()
                        .map_err(|e| anyhow::anyhow!("bad cpumask '{value}': {e}"))?,
                );
            }
            "bs" => {
                self.bs = Some(
                    parse_size(value)
                        .map_err(|_| anyhow::anyhow!("bs must be a size above 0, got '{value}'"))?,
                );
            }
            "iodepth" => {
                let d: u32 = number(key, value)?;
                if d == 0 {
                    bail!("iodepth must be at least 1");
                }
                self.iodepth = Some(d);
            }
            "rwmixread" => {
                let m: u8 = number(key, value)?;
                if m > 100 {
                    bail!("rwmixread must be 0-100, got {m}");
                }
                self.rwmixread = m;
            }
            "offset" => self.offset = number(key, value)?,
            "length" => self.length = number(key, value)?,
            "rw" => self.rw = Some(Workload::parse(value)?),
            other => bail!(
                "unknown key '{other}' (known: filename, cpumask, bs, iodepth, rwmixread, offset, length, rw)"
            ),
        }
        Ok(())
    }

    /// A job section's job; fails if a required value is missing.
    fn job(&self, section: &str) -> Result<FileJob> {
        let missing = |what: &str| anyhow::anyhow!("section [{section}] has no '{what}'");
        Ok(FileJob {
            section: section.to_string(),
            bdevs: self.filename.clone().ok_or_else(|| missing("filename"))?,
            cpumask: self.cpumask.clone(),
            io_size: self.bs.ok_or_else(|| missing("bs"))?,
            queue_depth: self.iodepth.ok_or_else(|| missing("iodepth"))?,
            workload: self.rw.ok_or_else(|| missing("rw"))?,
            rw_percentage: self.rwmixread,
            offset_blocks: self.offset,
            length_blocks: self.length,
        })
    }
}

/// One `key value` line: `key=value`, `key = value` or `key value`.
fn split_key(line: &str) -> (&str, &str) {
    let (k, v) = match line.find(['=', ' ', '\t']) {
        Some(i) => {
            let (k, rest) = line.split_at(i);
            let rest = rest.trim_start();
            (k, rest.strip_prefix('=').unwrap_or(rest))
        }
        None => (line, ""),
    };
    (k.trim(), v.trim())
}

/// Parses a job file's text into its job sections, in file order.
pub fn parse(text: &str, cli: &Overrides) -> Result<Vec<FileJob>> {
    let defaults = Values::defaults(cli);
    let mut global = defaults.clone();
    let mut jobs = Vec::new();
    // The section being read: name, whether it is [global], its values.
    let mut current: Option<(String, Values)> = None;
    let finish = |cur: Option<(String, Values)>,
                  global: &mut Values,
                  jobs: &mut Vec<FileJob>|
     -> Result<()> {
        if let Some((name, mut v)) = cur {
            if name == "global" {
                v.apply_cli(cli);
                *global = v;
            } else {
                jobs.push(v.job(&name)?);
            }
        }
        Ok(())
    };
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let at = || format!("line {}", i + 1);
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let name = rest
                .strip_suffix(']')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .with_context(|| format!("{}: bad section header '{line}'", at()))?;
            finish(current.take(), &mut global, &mut jobs)?;
            // A [global] starts from the built-in defaults, a job section
            // from the last [global].
            let base = if name == "global" { &defaults } else { &global };
            current = Some((name.to_string(), base.clone()));
            continue;
        }
        let (key, value) = split_key(line);
        let Some((_, values)) = current.as_mut() else {
            bail!("{}: '{key}' comes before any [section]", at());
        };
        if value.is_empty() {
            bail!("{}: '{key}' has no value", at());
        }
        values.set(key, value).with_context(at)?;
    }
    finish(current.take(), &mut global, &mut jobs)?;
    if jobs.is_empty() {
        bail!("no job sections (a section other than [global])");
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(text: &str) -> Vec<FileJob> {
        parse(text, &Overrides::default()).unwrap()
    }

    fn err(text: &str, cli: &Overrides) -> String {
        format!("{:#}", parse(text, cli).unwrap_err())
    }

    #[test]
    fn globals_apply_to_the_sections_after_them() {
        let jobs = parse_ok(
            "# comment\n\
             [global]\n\
             bs=4k\n\
             iodepth = 8\n\
             rw randread\n\
             [a]\n\
             filename=Null0:Malloc0\n\
             [b]\n\
             filename=Null0\n\
             iodepth=2\n\
             rw=randrw\n\
             rwmixread=70\n\
             offset=16\n\
             length=32\n\
             ; a later global starts again from the defaults\n\
             [global]\n\
             iodepth=64\n\
             [c]\n\
             filename = Null1\n\
             bs=512\n\
             rw=write\n\
             cpumask=0x2\n",
        );
        assert_eq!(jobs.len(), 3);
        let (a, b, c) = (&jobs[0], &jobs[1], &jobs[2]);
        assert_eq!(a.section, "a");
        assert_eq!(a.bdevs, ["Null0", "Malloc0"]);
        assert_eq!(
            (a.io_size, a.queue_depth, a.workload),
            (4096, 8, Workload::RandRead)
        );
        assert_eq!(
            (a.offset_blocks, a.length_blocks, a.cpumask.clone()),
            (0, 0, None)
        );
        assert_eq!(
            (b.queue_depth, b.workload, b.rw_percentage),
            (2, Workload::RandRw, 70)
        );
        assert_eq!((b.offset_blocks, b.length_blocks), (16, 32));
        // bs and rw of the first [global] are gone; rwmixread is back to 50.
        assert_eq!(
            (c.io_size, c.queue_depth, c.workload, c.rw_percentage),
            (512, 64, Workload::Write, 50)
        );
        assert_eq!(
            c.cpumask.as_ref().map(ToString::to_string),
            Some("0x2".into())
        );
    }

    #[test]
    fn cli_overrides_globals_not_sections() {
        let cli = Overrides {
            queue_depth: Some(16),
            io_size: Some(8192),
            workload: Some(Workload::Read),
            rw_percentage: Some(10),
            bdev: None,
        };
        let jobs = parse(
            "[global]\niodepth=4\nbs=4096\nrw=randread\nrwmixread=90\n\
             [own]\nfilename=A\niodepth=2\n\
             [inherits]\nfilename=B\n",
            &cli,
        )
        .unwrap();
        assert_eq!((jobs[0].queue_depth, jobs[0].io_size), (2, 8192));
        assert_eq!((jobs[1].queue_depth, jobs[1].io_size), (16, 8192));
        assert_eq!(jobs[1].workload, Workload::Read);
        assert_eq!(jobs[1].rw_percentage, 10);
        // Without any [global], the command line is the default.
        let jobs = parse("[x]\nfilename=A\n", &cli).unwrap();
        assert_eq!((jobs[0].queue_depth, jobs[0].io_size), (16, 8192));
        // -T replaces the [global] filename.
        let t = Overrides {
            bdev: Some("T0".into()),
            ..cli
        };
        let jobs = parse("[global]\nfilename=A\n[x]\n", &t).unwrap();
        assert_eq!(jobs[0].bdevs, ["T0"]);
    }

    #[test]
    fn errors_name_the_line_or_section() {
        let none = Overrides::default();
        let base = "[j]\nfilename=A\nbs=4096\niodepth=1\nrw=read\n";
        assert!(parse(base, &none).is_ok());
        let e = err(&format!("{base}numjobs=4\n"), &none);
        assert!(e.contains("line 6: unknown key 'numjobs'"), "{e}");
        let e = err(&base.replace("iodepth=1", "iodepth=x"), &none);
        assert!(
            e.contains("line 4: iodepth must be a whole number, got 'x'"),
            "{e}"
        );
        let e = err(&base.replace("iodepth=1", "iodepth=0"), &none);
        assert!(e.contains("iodepth must be at least 1"), "{e}");
        let e = err(&base.replace("bs=4096", "bs=4q"), &none);
        assert!(e.contains("line 3: bs must be a size above 0"), "{e}");
        let e = err(&format!("{base}rwmixread=101\n"), &none);
        assert!(e.contains("rwmixread must be 0-100"), "{e}");
        let e = err(&base.replace("rw=read", "rw=sideways"), &none);
        assert!(e.contains("unknown workload 'sideways'"), "{e}");
        let e = err(&base.replace("bs=4096\n", ""), &none);
        assert!(e.contains("section [j] has no 'bs'"), "{e}");
        let e = err(&format!("bs=1\n{base}"), &none);
        assert!(e.contains("line 1: 'bs' comes before any [section]"), "{e}");
        let e = err(&format!("{base}offset\n"), &none);
        assert!(e.contains("line 6: 'offset' has no value"), "{e}");
        let e = err("[global]\nbs=4096\n", &none);
        assert!(e.contains("no job sections"), "{e}");
        let e = err("", &none);
        assert!(e.contains("no job sections"), "{e}");
        let e = err("[j\nfilename=A\n", &none);
        assert!(e.contains("line 1: bad section header"), "{e}");
        let e = err(&base.replace("filename=A", "filename=::"), &none);
        assert!(e.contains("filename names no bdev"), "{e}");
        let e = err(&format!("{base}cpumask=zz\n"), &none);
        assert!(e.contains("bad cpumask 'zz'"), "{e}");
    }
}
