//! SPDK bdevperf's result table (same header, columns, units, per-job and
//! Total lines, byte for byte), our latency percentiles, and the JSON
//! result file.

use std::fmt::Write as _;

use bdevkit::clock;
use serde_json::{json, Value};

use crate::job::JobSummary;
use crate::workload::Workload;

#[expect(clippy::cast_precision_loss, reason = "display arithmetic")]
fn us(ticks: u64) -> f64 {
    clock::ticks_to_ns(ticks) as f64 / 1000.0
}

/// Numbers shown for one job.
#[derive(Debug, Clone, Copy, Default)]
struct Row {
    runtime: f64,
    iops: f64,
    mibps: f64,
    fail_s: f64,
    to_s: f64,
    avg_us: f64,
    min_us: f64,
    max_us: f64,
}

#[expect(clippy::cast_precision_loss, reason = "display arithmetic")]
fn row(s: &JobSummary) -> Row {
    let rt = s.runtime_sec.max(1e-9);
    let st = &s.stats;
    let iops = st.ios as f64 / rt;
    Row {
        runtime: s.runtime_sec,
        iops,
        mibps: iops * s.cfg.io_size as f64 / (1024.0 * 1024.0),
        fail_s: st.failed as f64 / rt,
        to_s: st.timeouts as f64 / rt,
        avg_us: if st.completions == 0 {
            0.0
        } else {
            us(st.total_ticks) / st.completions as f64
        },
        min_us: if st.completions == 0 {
            0.0
        } else {
            us(st.min_ticks)
        },
        max_us: us(st.max_ticks),
    }
}

/// `0x<hex>` of the job's core.
pub fn core_mask(core: u32) -> String {
    let mut set = bdevkit::thread::CpuSet::new();
    set.insert(core);
    set.to_string()
}

/// The table header (SPDK's `Latency(us)` line and column names).
pub fn header(leading_blank: bool) -> String {
    let mut out = String::new();
    if leading_blank {
        out.push('\n');
    }
    let _ = writeln!(out, "{:>107}", "Latency(us)");
    let _ = writeln!(
        out,
        "\r {:<28}: {:>10} {:>10} {:>10} {:>10} {:>8} {:>10} {:>10} {:>10}",
        "Device Information",
        "runtime(s)",
        "IOPS",
        "MiB/s",
        "Fail/s",
        "TO/s",
        "Average",
        "min",
        "max"
    );
    out
}

/// `-P`: the next exponential moving average of IOPS over `n` periods,
/// `ema + (iops - ema) * 2 / (n + 1)`; the first period seeds it (SPDK
/// starts from 0, which reads low for the first periods).
pub fn ema_next(ema: Option<f64>, iops: f64, n: u32) -> f64 {
    match ema {
        None => iops,
        Some(e) => e + (iops - e) * 2.0 / (f64::from(n) + 1.0),
    }
}

/// Per-job blocks, the separator and the Total line.
pub fn body(jobs: &[JobSummary]) -> String {
    body_impl(jobs, None)
}

/// [`body`] with these IOPS per job (`-P`'s moving averages) instead of
/// the cumulative ones; MiB/s follows them.
pub fn body_with_iops(jobs: &[JobSummary], iops: &[f64]) -> String {
    body_impl(jobs, Some(iops))
}

fn body_impl(jobs: &[JobSummary], iops: Option<&[f64]>) -> String {
    let mut out = String::new();
    let mut total = Row::default();
    let (mut ticks, mut n, mut min, mut max) = (0u64, 0u64, u64::MAX, 0u64);
    for (i, s) in jobs.iter().enumerate() {
        let c = &s.cfg;
        let mix = if c.workload.is_mixed() {
            format!(", percentage: {}", c.rw_percentage)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "Job: {} (Core Mask {}, workload: {}{mix}, depth: {}, IO size: {})",
            c.bdev,
            core_mask(c.core),
            c.workload.name(),
            c.queue_depth,
            c.io_size
        );
        if s.ended_with_error && c.workload != Workload::Reset {
            let _ = writeln!(
                out,
                "Job: {} ended in about {:.2} seconds with error",
                c.bdev, s.runtime_sec
            );
        }
        if let Some((start, len)) = s.verify_range {
            let _ = writeln!(
                out,
                "\t Verification LBA range: start 0x{start:x} length 0x{len:x}"
            );
        }
        let mut r = row(s);
        if let Some(v) = iops.and_then(|v| v.get(i)) {
            r.iops = *v;
            #[expect(clippy::cast_precision_loss, reason = "display arithmetic")]
            let size = c.io_size as f64;
            r.mibps = v * size / (1024.0 * 1024.0);
        }
        let _ = writeln!(
            out,
            "\t {:<20}: {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>8.2} {:>10.2} {:>10.2} {:>10.2}",
            c.bdev, r.runtime, r.iops, r.mibps, r.fail_s, r.to_s, r.avg_us, r.min_us, r.max_us
        );
        total.iops += r.iops;
        total.mibps += r.mibps;
        total.fail_s += r.fail_s;
        total.to_s += r.to_s;
        ticks += s.stats.total_ticks;
        n += s.stats.completions;
        if s.stats.completions != 0 {
            min = min.min(s.stats.min_ticks);
        }
        max = max.max(s.stats.max_ticks);
    }
    #[expect(clippy::cast_precision_loss, reason = "display arithmetic")]
    let avg = if n == 0 { 0.0 } else { us(ticks) / n as f64 };
    let min = if min == u64::MAX { 0.0 } else { us(min) };
    let _ = writeln!(out, "\r {}", "=".repeat(115));
    let _ = writeln!(
        out,
        "\r {:<28}: {:>10} {:>10.2} {:>10.2} {:>10.2} {:>8.2} {:>10.2} {:>10.2} {:>10.2}",
        "Total",
        "",
        total.iops,
        total.mibps,
        total.fail_s,
        total.to_s,
        avg,
        min,
        us(max)
    );
    out
}

/// Our extra: p50/p99/p99.9 per job from the histogram.
pub fn percentiles(jobs: &[JobSummary]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n {:<28}: {:>10} {:>10} {:>10}",
        "Latency percentiles(us)", "p50", "p99", "p99.9"
    );
    for s in jobs {
        let h = &s.stats.hist;
        let _ = writeln!(
            out,
            "\t {:<20}: {:>10.2} {:>10.2} {:>10.2}",
            s.cfg.bdev,
            us(h.quantile(0.5)),
            us(h.quantile(0.99)),
            us(h.quantile(0.999))
        );
    }
    out
}

/// SPDK's `-l` latency summary (and `-ll` histogram).
pub fn latency_summary(jobs: &[JobSummary], level: u8) -> String {
    const CUTOFFS: [f64; 15] = [
        1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 98.0, 99.0, 99.5, 99.9, 99.99, 99.999, 99.9999,
        99.99999,
    ];
    let mut out = String::from("\n Latency summary\n");
    for s in jobs {
        let _ = writeln!(out, "\r {}", "=".repeat(45));
        let _ = writeln!(
            out,
            "\r Job: {} (Core Mask {})",
            s.cfg.bdev,
            core_mask(s.cfg.core)
        );
        for c in CUTOFFS {
            let _ = writeln!(
                out,
                "{c:9.5}% : {:9.3}us",
                us(s.stats.hist.quantile(c / 100.0))
            );
        }
        out.push('\n');
    }
    if level >= 2 {
        out.push_str("\r Latency histogram\n");
        for s in jobs {
            let _ = writeln!(out, "\r {}", "=".repeat(45));
            let _ = writeln!(
                out,
                "\r Job: {} (Core Mask {})",
                s.cfg.bdev,
                core_mask(s.cfg.core)
            );
            let total = s.stats.hist.total().max(1);
            let mut seen = 0;
            for (lo, hi, count) in s.stats.hist.buckets() {
                seen += count;
                #[expect(clippy::cast_precision_loss, reason = "display arithmetic")]
                let pct = seen as f64 * 100.0 / total as f64;
                let _ = writeln!(
                    out,
                    "{:9.3} - {:9.3}: {pct:9.4}%  ({count:9})",
                    us(lo),
                    us(hi)
                );
            }
            out.push('\n');
        }
    }
    out
}

/// The result file: SPDK's `perform_tests` shape plus percentiles.
pub fn to_json(jobs: &[JobSummary], core_count: usize) -> Value {
    let results: Vec<Value> = jobs
        .iter()
        .map(|s| {
            let r = row(s);
            let c = &s.cfg;
            let mut m = serde_json::Map::new();
            m.insert("job".into(), json!(c.bdev));
            m.insert("core_mask".into(), json!(core_mask(c.core)));
            m.insert("workload".into(), json!(c.workload.name()));
            if c.workload.is_mixed() {
                m.insert("percentage".into(), json!(c.rw_percentage));
            }
            m.insert(
                "status".into(),
                json!(if s.ended_with_error {
                    "failed"
                } else {
                    "finished"
                }),
            );
            if let Some((start, len)) = s.verify_range {
                m.insert(
                    "verify_range".into(),
                    json!({"start": start, "length": len}),
                );
            }
            m.insert("queue_depth".into(), json!(c.queue_depth));
            m.insert("io_size".into(), json!(c.io_size));
            m.insert("runtime".into(), json!(r.runtime));
            m.insert("iops".into(), json!(r.iops));
            m.insert("mibps".into(), json!(r.mibps));
            m.insert("io_failed".into(), json!(s.stats.failed));
            m.insert("io_timeout".into(), json!(s.stats.timeouts));
            m.insert("avg_latency_us".into(), json!(r.avg_us));
            m.insert("min_latency_us".into(), json!(r.min_us));
            m.insert("max_latency_us".into(), json!(r.max_us));
            let h = &s.stats.hist;
            m.insert("p50_latency_us".into(), json!(us(h.quantile(0.5))));
            m.insert("p99_latency_us".into(), json!(us(h.quantile(0.99))));
            m.insert("p999_latency_us".into(), json!(us(h.quantile(0.999))));
            Value::Object(m)
        })
        .collect();
    json!({"results": results, "core_count": core_count})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ema_seeds_then_moves_by_two_over_n_plus_one() {
        let e = ema_next(None, 1000.0, 2);
        assert_eq!(e, 1000.0);
        // n = 2: weight 2/3 on the new period.
        let e = ema_next(Some(e), 4000.0, 2);
        assert!((e - 3000.0).abs() < 1e-9, "{e}");
        // n = 1: just the last period.
        assert_eq!(ema_next(Some(123.0), 7.0, 1), 7.0);
        // A steady rate stays put.
        assert_eq!(ema_next(Some(500.0), 500.0, 9), 500.0);
    }
}
