//! `bdevperf`: SPDK-compatible block device benchmark and verifier.
//!
//! Same flags and same result table as SPDK's bdevperf, so results compare
//! line by line; extras: p50/p99/p99.9 latencies, `--output-json`, a live
//! progress line on stderr when it is a terminal.

mod args;
mod hist;
mod job;
mod report;
mod setup;

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bdevkit::bdev::BdevManager;
use bdevkit::clock;
use bdevkit::thread::{CpuSet, Runtime, RuntimeOptions, Thread, ThreadHandle};

use crate::args::Opts;
use crate::job::{Job, JobConfig, JobSummary};

thread_local! {
    /// Jobs living on this reactor's threads, by id.
    static JOBS: RefCell<HashMap<u64, Rc<Job>>> = RefCell::new(HashMap::new());
}

fn with_job<R>(id: u64, f: impl FnOnce(&Rc<Job>) -> R) -> Option<R> {
    let job = JOBS.with(|j| j.borrow().get(&id).cloned());
    job.as_ref().map(f)
}

fn main() -> ExitCode {
    let opts = match args::parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bdevperf: error: {e:#}");
            return ExitCode::from(1);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match run(&opts) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("bdevperf: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

struct Placed {
    cfg: JobConfig,
    thread: ThreadHandle,
}

fn run(opts: &Opts) -> Result<bool> {
    if opts.wait_for_tests || opts.rpc_socket.is_some() {
        bail!("-z/-r need the RPC server, which this build does not include yet");
    }
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&stop))?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&stop))?;

    let rt = Runtime::start(RuntimeOptions {
        cpumask: opts.cpumask.clone(),
        interrupt_mode: opts.interrupt_mode,
        ..RuntimeOptions::default()
    })
    .context("start reactors")?;
    let app = rt.app_thread();
    let mgr = BdevManager::default();
    let reg = setup::modules(&mgr)?;
    let result = (|| -> Result<bool> {
        match &opts.config {
            Some(path) => setup::load_config(path, &app, &mgr, &reg)?,
            None => {
                let name = setup::default_bdev(&app, &mgr)?;
                println!(
                    "No -c/--json config given: using a built-in {} MiB malloc bdev {name} (4096-byte blocks)",
                    256
                );
            }
        }
        let mut placed = Vec::new();
        let r = place_jobs(opts, &rt, &app, &mgr, &mut placed)
            .and_then(|()| run_jobs(opts, &placed, &stop));
        close_jobs(&placed);
        r
    })();
    unregister_all(&app, &mgr);
    rt.shutdown();
    result
}

fn place_jobs(
    opts: &Opts,
    rt: &Runtime,
    app: &ThreadHandle,
    mgr: &BdevManager,
    placed: &mut Vec<Placed>,
) -> Result<()> {
    let m = mgr.clone();
    let target = opts.target.clone();
    let (tx, rx) = mpsc::channel();
    let m2 = mgr.clone();
    app.run_sync(move || {
        m2.wait_for_examine(move || {
            let _ = tx.send(());
        });
    })?;
    rx.recv_timeout(Duration::from_secs(60))
        .context("bdev examine did not finish")?;
    let targets: Vec<String> = app.run_sync(move || match target {
        Some(t) => match m.get(&t) {
            Some(b) => Ok(vec![b.name().to_string()]),
            None => Err(anyhow::anyhow!("bdev {t} not found")),
        },
        None => Ok(m
            .bdevs()
            .iter()
            .filter(|b| b.claim().is_none() && !b.is_removing())
            .map(|b| b.name().to_string())
            .collect()),
    })??;
    if targets.is_empty() {
        bail!("no bdevs to run on (every bdev is claimed or none was created)");
    }
    let cores: Vec<u32> = opts.cpumask.iter().collect();
    let handle = rt.handle();
    let tick_timeout = opts
        .timeout_sec
        .map_or(0, |s| clock::us_to_ticks(s * 1_000_000));
    let mut next_core = 0usize;
    let mut id = 0u64;
    for bdev in &targets {
        let jobs_for_bdev: Vec<(u32, (u64, u64))> = if opts.multithread {
            let n = cores.len() as u64;
            cores
                .iter()
                .enumerate()
                .map(|(i, c)| (*c, (i as u64, n)))
                .collect()
        } else {
            let c = cores[next_core % cores.len()];
            next_core += 1;
            vec![(c, (0, 1))]
        };
        for (core, slice) in jobs_for_bdev {
            id += 1;
            let cfg = JobConfig {
                id,
                bdev: bdev.clone(),
                core,
                workload: opts.workload,
                rw_percentage: opts.rw_percentage.unwrap_or(0),
                queue_depth: opts.queue_depth,
                io_size: opts.io_size,
                slice,
                seed: 0x5eed_0000 + id,
                timeout_ticks: tick_timeout,
                continue_on_failure: opts.continue_on_failure,
            };
            let thread = handle
                .spawn_thread(
                    format!("bdevperf_{bdev}_{core}"),
                    Some(&CpuSet::single(core)),
                )
                .context("create job thread")?;
            let (c2, m2) = (cfg.clone(), mgr.clone());
            thread.run_sync(move || -> Result<()> {
                let job = Job::new(c2.clone(), &m2)?;
                JOBS.with(|j| j.borrow_mut().insert(c2.id, job));
                Ok(())
            })??;
            placed.push(Placed { cfg, thread });
        }
    }
    Ok(())
}

fn snapshot(placed: &[Placed]) -> Vec<JobSummary> {
    placed
        .iter()
        .filter_map(|p| {
            let id = p.cfg.id;
            p.thread
                .run_sync(move || with_job(id, |j| j.snapshot()))
                .ok()
                .flatten()
        })
        .collect()
}

fn run_jobs(opts: &Opts, placed: &[Placed], stop: &AtomicBool) -> Result<bool> {
    println!("Running I/O for {} seconds...", opts.time_sec);
    let _ = std::io::stdout().flush();
    let (tx, rx) = mpsc::channel::<JobSummary>();
    let start = Instant::now();
    for p in placed {
        let id = p.cfg.id;
        let tx = tx.clone();
        p.thread.send_msg(move || {
            with_job(id, |j| {
                j.start(Box::new(move |s| drop(tx.send(s))));
            });
        })?;
    }
    drop(tx);
    if let Some(n) = opts.stats_interval {
        print!("{}", report::header(false));
        let _ = n;
    }
    let run_for = Duration::from_secs(opts.time_sec);
    let tty = std::io::stderr().is_terminal();
    let mut last_ios = 0u64;
    let mut last_t = start;
    let mut next_stats = opts.stats_interval.map(|s| start + Duration::from_secs(s));
    let mut interrupted = false;
    let mut finished = Vec::new();
    loop {
        let elapsed = start.elapsed();
        if elapsed >= run_for {
            break;
        }
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        // Jobs that ended early (failures) report on their own.
        while let Ok(s) = rx.try_recv() {
            finished.push(s);
        }
        if finished.len() == placed.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50).min(run_for - elapsed));
        let now = Instant::now();
        if let Some(at) = next_stats {
            if now >= at {
                let snaps = snapshot(placed);
                println!("{}", report::body(&snaps));
                let _ = std::io::stdout().flush();
                next_stats = Some(at + Duration::from_secs(opts.stats_interval.unwrap_or(1)));
            }
        } else if tty && now.duration_since(last_t) >= Duration::from_secs(1) {
            let snaps = snapshot(placed);
            let ios: u64 = snaps.iter().map(|s| s.stats.ios).sum();
            let dt = now.duration_since(last_t).as_secs_f64();
            #[expect(clippy::cast_precision_loss, reason = "display arithmetic")]
            let iops = (ios - last_ios) as f64 / dt;
            #[expect(clippy::cast_precision_loss, reason = "display arithmetic")]
            let mibps = iops * opts.io_size as f64 / (1024.0 * 1024.0);
            eprint!("{iops:12.2} IOPS, {mibps:8.2} MiB/s\r");
            last_ios = ios;
            last_t = now;
        }
    }
    for p in placed {
        let id = p.cfg.id;
        let _ = p.thread.send_msg(move || {
            with_job(id, |j| j.stop());
        });
    }
    let deadline = Instant::now() + Duration::from_secs(30 + opts.timeout_sec.unwrap_or(0));
    while finished.len() < placed.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(s) => finished.push(s),
            Err(_) => bail!(
                "{} job(s) did not finish: I/O still outstanding 30 s after the run ended",
                placed.len() - finished.len()
            ),
        }
    }
    if tty && next_stats_is_none(opts) {
        eprint!("{:60}\r", "");
    }
    if interrupted {
        println!(
            "Received shutdown signal, test time was about {:.6} seconds",
            start.elapsed().as_secs_f64()
        );
    }
    finished.sort_by_key(|s| s.cfg.id);
    let mut out = report::header(true);
    out.push_str(&report::body(&finished));
    out.push_str(&report::percentiles(&finished));
    if opts.latency > 0 {
        out.push_str(&report::latency_summary(&finished, opts.latency));
    }
    print!("{out}");
    let _ = std::io::stdout().flush();
    if let Some(path) = &opts.output_json {
        let cores: std::collections::BTreeSet<u32> = finished.iter().map(|s| s.cfg.core).collect();
        let doc = report::to_json(&finished, cores.len());
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("write {}", path.display()))?;
    }
    let failed = finished
        .iter()
        .any(|s| s.stats.failed > 0 || s.ended_with_error);
    Ok(!failed || opts.continue_on_failure)
}

fn next_stats_is_none(opts: &Opts) -> bool {
    opts.stats_interval.is_none()
}

/// Each job closes its channel and descriptor on its own thread, which
/// then exits.
fn close_jobs(placed: &[Placed]) {
    for p in placed {
        let id = p.cfg.id;
        let _ = p.thread.run_sync(move || {
            if let Some(job) = JOBS.with(|j| j.borrow_mut().remove(&id)) {
                job.close();
            }
            if let Some(t) = Thread::current() {
                t.exit();
            }
        });
    }
}

fn unregister_all(app: &ThreadHandle, mgr: &BdevManager) {
    let m = mgr.clone();
    let (tx, rx) = mpsc::channel();
    let _ = app.send_msg(move || {
        m.unregister_all(move || {
            let _ = tx.send(());
        });
    });
    let _ = rx.recv_timeout(Duration::from_secs(10));
}
