//! `bdevperf`: SPDK-compatible block device benchmark and verifier.
//!
//! Same flags and same result table as SPDK's bdevperf, so results compare
//! line by line; extras: p50/p99/p99.9 latencies, `--output-json`, a live
//! progress line on stderr when it is a terminal.

mod args;
mod hist;
mod job;
mod jobfile;
mod offsets;
mod pattern;
mod repeats;
mod report;
mod setup;
mod workload;

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use bdevkit::bdev::BdevManager;
use bdevkit::clock;
use bdevkit::thread::{CpuSet, RuntimeHandle, Thread, ThreadHandle};
use bdevkit_app::{App, AppOptions, CommonArgs};
use bdevkit_jsonrpc::{MethodRegistry, Responder, RpcError, RUNTIME};
use serde_json::Value;

use crate::args::Opts;
use crate::job::{with_job, Job, JobConfig, JobSummary};

fn main() -> ExitCode {
    let opts = match args::parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bdevperf: error: {e:#}");
            return ExitCode::from(1);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // The framework's own report of a failed start is what bdevperf
        // prints as its one error line; do not log it twice.
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(
                "warn,bdevkit_app::config=off,bdevkit_app::app=off,bdevkit_app::shared=off",
            )
        });
    // Through the framework, so that `-z` users can change it with the
    // `log_*` RPCs.
    if let Err(e) = bdevkit_app::logging::init_with(filter, "warn", &[]) {
        eprintln!("bdevperf: error: {e}");
        return ExitCode::from(1);
    }
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
    /// This entry created `thread` and makes it exit when the jobs close
    /// (several jobs share a thread with `-E` and job files).
    exit_thread: bool,
}

/// Which lightweight thread a job runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ThreadKey {
    /// Its own (by job id): the default.
    Own(u64),
    /// The one thread of its core (`-E`).
    Core(u32),
    /// The thread of its job file section (by index), as SPDK does.
    Section(usize),
}

/// A job to create, and where.
struct Plan {
    cfg: JobConfig,
    thread: ThreadKey,
    thread_name: String,
}

fn run(opts: &Opts) -> Result<bool> {
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&stop))?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&stop))?;

    let serve_rpc = opts.wait_for_tests || opts.rpc_socket.is_some();
    let args = CommonArgs {
        cpumask: opts.cpumask.clone(),
        rpc_socket: serve_rpc.then(|| {
            opts.rpc_socket
                .clone()
                .unwrap_or_else(|| PathBuf::from(bdevkit_app::DEFAULT_RPC_SOCKET))
        }),
        json: opts.config.clone(),
        interrupt_mode: opts.interrupt_mode,
        ..CommonArgs::default()
    };
    if let Some(jobs) = &opts.job_file {
        println!("Using job config with {} jobs", jobs.len());
    }
    // perform_tests is there from the first request on: a client that
    // calls it as soon as the socket answers must not get "Method not found".
    let registry = MethodRegistry::new();
    let perform = if opts.wait_for_tests {
        Some(register_perform_tests(&registry)?)
    } else {
        None
    };
    let app_opts = AppOptions {
        handle_signals: false,
        registry: Some(registry),
        ..AppOptions::default()
    };
    let app = App::start_with(&args, &bdevkit_app::default_modules(), app_opts)
        .map_err(|e| setup::start_error(&e, opts.rpc_socket.is_some()))?;
    let result = if let Some(perform) = perform {
        serve_perform_tests(&app, opts, &stop, &perform)
    } else {
        (|| -> Result<bool> {
            if opts.config.is_none() {
                let name = setup::default_bdev(&app.app_thread(), app.mgr())?;
                println!(
                    "No -c/--json config given: using a built-in {} MiB malloc bdev {name} (4096-byte blocks)",
                    setup::DEFAULT_SIZE_MIB
                );
            }
            let (summaries, interrupted) = run_test(&app, opts, &stop)?;
            print_results(opts, &summaries, interrupted)
        })()
    };
    let shut = app.shutdown();
    let ok = result?;
    shut.map_err(|e| anyhow::anyhow!("{}", bdevkit_app::ErrorChain(&e)))?;
    Ok(ok)
}

/// Places, runs and closes one test; returns the summaries and whether a
/// signal cut it short.
fn run_test(app: &App, opts: &Opts, stop: &AtomicBool) -> Result<(Vec<JobSummary>, bool)> {
    let mut placed = Vec::new();
    let r = place_jobs(
        opts,
        &app.runtime(),
        &app.app_thread(),
        app.mgr(),
        &mut placed,
    )
    .and_then(|()| run_jobs(opts, &placed, stop));
    close_jobs(&placed);
    r
}

/// `perform_tests` calls on their way to the main thread, and whether one
/// runs.
struct PerformTests {
    calls: mpsc::Receiver<(Option<Value>, Responder)>,
    busy: Arc<AtomicBool>,
}

/// Registers `perform_tests`: it hands its call to [`serve_perform_tests`],
/// or answers "Operation now in progress" while a test runs.
fn register_perform_tests(registry: &MethodRegistry) -> Result<PerformTests> {
    let (tx, rx) = mpsc::channel::<(Option<Value>, Responder)>();
    let busy = Arc::new(AtomicBool::new(false));
    let b2 = Arc::clone(&busy);
    registry
        .register("perform_tests", RUNTIME, move |params, resp| {
            if b2.swap(true, Ordering::AcqRel) {
                resp.err(RpcError::internal_error("Operation now in progress"));
                return;
            }
            let _ = tx.send((params, resp));
        })
        .map_err(|e| anyhow::anyhow!("register perform_tests: {e}"))?;
    Ok(PerformTests { calls: rx, busy })
}

/// `-z`: wait for `perform_tests` RPCs and run one test per call until a
/// signal or `spdk_kill_instance` stops the app.
fn serve_perform_tests(
    app: &App,
    opts: &Opts,
    stop: &AtomicBool,
    perform: &PerformTests,
) -> Result<bool> {
    let (rx, busy) = (&perform.calls, &perform.busy);
    if let Some(sock) = app.rpc_socket() {
        println!("bdevperf waiting for perform_tests on {}", sock.display());
    }
    let mut current = opts.clone();
    let stopper = app.stop_handle();
    let mut all_ok = true;
    while !stop.load(Ordering::Relaxed) && !stopper.is_stopped() {
        let Ok((params, resp)) = rx.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        let answer = match apply_perform_params(&current, params) {
            Err(msg) => Err(RpcError::new(-32700, msg)),
            Ok(next) => {
                current = next;
                match run_test(app, &current, stop) {
                    Ok((summaries, interrupted)) if !summaries.is_empty() => {
                        all_ok &= print_results(&current, &summaries, interrupted)?;
                        let cores: std::collections::BTreeSet<u32> =
                            summaries.iter().map(|s| s.cfg.core).collect();
                        Ok(report::to_json(&summaries, cores.len()))
                    }
                    Ok(_) => Err(RpcError::invalid_params("No jobs defined or bdevs created")),
                    Err(e) if e.to_string().starts_with("no bdevs to run on") => {
                        Err(RpcError::invalid_params("No jobs defined or bdevs created"))
                    }
                    Err(e) => {
                        eprintln!("bdevperf: error: {e:#}");
                        Err(RpcError::internal_error(format!(
                            "bdevperf failed with error {e}"
                        )))
                    }
                }
            }
        };
        // Free before answering: a client that calls again as soon as it
        // has the answer finds no test running.
        busy.store(false, Ordering::Release);
        match answer {
            Ok(v) => resp.ok(v),
            Err(e) => resp.err(e),
        }
    }
    Ok(all_ok)
}

/// Applies `perform_tests` params (relaxed: unknown keys ignored, as SPDK).
fn apply_perform_params(base: &Opts, params: Option<Value>) -> std::result::Result<Opts, String> {
    let invalid = || "Invalid parameters provided".to_string();
    let mut o = base.clone();
    let Some(p) = params else { return Ok(o) };
    let Some(p) = p.as_object() else {
        return Err("spdk_json_decode_object failed".into());
    };
    if let Some(v) = p.get("time_in_sec") {
        o.time_sec = v.as_u64().filter(|t| *t > 0).ok_or_else(invalid)?;
    }
    if let Some(v) = p.get("queue_depth") {
        o.queue_depth = v
            .as_u64()
            .and_then(|q| u32::try_from(q).ok())
            .filter(|q| *q > 0)
            .ok_or_else(invalid)?;
    }
    if let Some(v) = p.get("io_size") {
        let s = v.as_str().ok_or_else(invalid)?;
        o.io_size = args::parse_size(s).map_err(|_| invalid())?;
    }
    if let Some(v) = p.get("workload_type") {
        o.workload =
            args::Workload::parse(v.as_str().ok_or_else(invalid)?).map_err(|_| invalid())?;
    }
    match p.get("rw_percentage").and_then(Value::as_u64) {
        Some(pct) if pct > 0 => {
            o.rw_percentage = Some(
                u8::try_from(pct)
                    .ok()
                    .filter(|p| *p <= 100)
                    .ok_or_else(invalid)?,
            );
        }
        _ => o.rw_percentage = None,
    }
    if o.workload.is_mixed() && o.rw_percentage.is_none() {
        return Err(invalid());
    }
    Ok(o)
}

fn place_jobs(
    opts: &Opts,
    rt: &RuntimeHandle,
    app: &ThreadHandle,
    mgr: &BdevManager,
    placed: &mut Vec<Placed>,
) -> Result<()> {
    let (tx, rx) = mpsc::channel();
    let m2 = mgr.clone();
    app.run_sync(move || {
        m2.wait_for_examine(move || {
            let _ = tx.send(());
        });
    })?;
    rx.recv_timeout(Duration::from_secs(60))
        .context("bdev examine did not finish")?;
    let plans = match &opts.job_file {
        Some(file_jobs) => plan_file_jobs(opts, file_jobs, app, mgr)?,
        None => plan_cli_jobs(opts, app, mgr)?,
    };
    let mut threads: HashMap<ThreadKey, ThreadHandle> = HashMap::new();
    for plan in plans {
        let (thread, exit_thread) = match threads.get(&plan.thread) {
            Some(t) => (t.clone(), false),
            None => {
                let t = rt
                    .spawn_thread(plan.thread_name, Some(&CpuSet::single(plan.cfg.core)))
                    .context("create job thread")?;
                threads.insert(plan.thread, t.clone());
                (t, true)
            }
        };
        let (c2, m2) = (plan.cfg.clone(), mgr.clone());
        // Listed before the job exists so that a failure still closes
        // the thread.
        placed.push(Placed {
            cfg: plan.cfg,
            thread: thread.clone(),
            exit_thread,
        });
        thread.run_sync(move || -> Result<()> {
            job::register(Job::new(c2, &m2)?);
            Ok(())
        })??;
    }
    Ok(())
}

/// What every job shares: the command line's options.
fn job_config(opts: &Opts, id: u64, bdev: &str, core: u32) -> JobConfig {
    JobConfig {
        id,
        bdev: bdev.to_string(),
        core,
        workload: opts.workload,
        rw_percentage: opts.rw_percentage.unwrap_or(0),
        queue_depth: opts.queue_depth,
        io_size: opts.io_size,
        slice: (0, 1),
        range_blocks: None,
        seed: 0x5eed_0000 + id,
        timeout_ticks: opts
            .timeout_sec
            .map_or(u64::MAX, |s| clock::us_to_ticks(s * 1_000_000)),
        continue_on_failure: opts.continue_on_failure,
        zipf_theta: opts.zipf_theta,
        random_map: opts.random_map,
        unique_writes: opts.unique_writes,
        zone_append: opts.zone_append,
    }
}

/// Jobs from the command line: one per bdev round robin over the cores,
/// or with `-C` one per core per bdev.
fn plan_cli_jobs(opts: &Opts, app: &ThreadHandle, mgr: &BdevManager) -> Result<Vec<Plan>> {
    let m = mgr.clone();
    let target = opts.target.clone();
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
    let mut next_core = 0usize;
    let mut id = 0u64;
    let mut plans = Vec::new();
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
            let (thread, thread_name) = if opts.thread_per_core {
                (ThreadKey::Core(core), format!("bdevperf_lcore_{core}"))
            } else {
                (ThreadKey::Own(id), format!("bdevperf_{bdev}_{core}"))
            };
            plans.push(Plan {
                cfg: JobConfig {
                    slice,
                    ..job_config(opts, id, bdev, core)
                },
                thread,
                thread_name,
            });
        }
    }
    Ok(plans)
}

/// Jobs from a job file: one per bdev of each section; a section's jobs
/// share one thread, placed on the next core of its cpumask in turn (as
/// SPDK's reactors place a thread with a multi-core mask).
fn plan_file_jobs(
    opts: &Opts,
    file_jobs: &[jobfile::FileJob],
    app: &ThreadHandle,
    mgr: &BdevManager,
) -> Result<Vec<Plan>> {
    let names: Vec<String> = file_jobs.iter().flat_map(|j| j.bdevs.clone()).collect();
    let m = mgr.clone();
    let missing: Option<String> =
        app.run_sync(move || names.into_iter().find(|n| m.get(n).is_none()))?;
    if let Some(name) = missing {
        let section = file_jobs
            .iter()
            .find(|j| j.bdevs.contains(&name))
            .map_or("?", |j| j.section.as_str());
        bail!("job file section [{section}]: bdev {name} not found");
    }
    let cores: Vec<u32> = opts.cpumask.iter().collect();
    let mut cursor = 0usize;
    let mut id = 0u64;
    let mut plans = Vec::new();
    for (index, fj) in file_jobs.iter().enumerate() {
        let mask = fj.cpumask.as_ref().unwrap_or(&opts.cpumask);
        if mask.iter().any(|c| !opts.cpumask.contains(c))
            && mask.iter().any(|c| opts.cpumask.contains(c))
        {
            eprintln!(
                "warning: job file section [{}]: cpumask {mask} has cores outside the core mask {} (-m); they are not used",
                fj.section, opts.cpumask
            );
        }
        let Some(step) =
            (0..cores.len()).find(|s| mask.contains(cores[(cursor + s) % cores.len()]))
        else {
            bail!(
                "job file section [{}]: cpumask {mask} has no core in the core mask {} (-m)",
                fj.section,
                opts.cpumask
            );
        };
        let core = cores[(cursor + step) % cores.len()];
        cursor = (cursor + step + 1) % cores.len();
        for bdev in &fj.bdevs {
            id += 1;
            let base = job_config(opts, id, bdev, core);
            plans.push(Plan {
                cfg: JobConfig {
                    workload: fj.workload,
                    rw_percentage: fj.rw_percentage,
                    queue_depth: fj.queue_depth,
                    io_size: fj.io_size,
                    range_blocks: Some((fj.offset_blocks, fj.length_blocks)),
                    ..base
                },
                thread: ThreadKey::Section(index),
                thread_name: format!("bdevperf_{}", fj.section),
            });
        }
    }
    Ok(plans)
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

fn run_jobs(opts: &Opts, placed: &[Placed], stop: &AtomicBool) -> Result<(Vec<JobSummary>, bool)> {
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
    // -P: per job, completions at the last table and the moving average.
    let mut ema: HashMap<u64, (u64, Option<f64>)> = HashMap::new();
    let mut last_table = start;
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
                let table = match opts.ema_period {
                    None => report::body(&snaps),
                    Some(n) => {
                        let dt = now.duration_since(last_table).as_secs_f64().max(1e-9);
                        let iops: Vec<f64> = snaps
                            .iter()
                            .map(|s| {
                                let (last_ios, avg) = ema.entry(s.cfg.id).or_insert((0, None));
                                #[expect(
                                    clippy::cast_precision_loss,
                                    reason = "display arithmetic"
                                )]
                                let period = s.stats.ios.saturating_sub(*last_ios) as f64 / dt;
                                *last_ios = s.stats.ios;
                                let v = report::ema_next(*avg, period, n);
                                *avg = Some(v);
                                v
                            })
                            .collect();
                        report::body_with_iops(&snaps, &iops)
                    }
                };
                last_table = now;
                println!("{table}");
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
    finished.sort_by_key(|s| s.cfg.id);
    Ok((finished, interrupted))
}

/// Prints the table (and writes the JSON file); returns whether the run
/// counts as a success for the exit status.
fn print_results(opts: &Opts, finished: &[JobSummary], interrupted: bool) -> Result<bool> {
    if interrupted {
        let secs = finished.iter().map(|s| s.runtime_sec).fold(0.0, f64::max);
        println!("Received shutdown signal, test time was about {secs:.6} seconds");
    }
    let mut out = report::header(true);
    out.push_str(&report::body(finished));
    out.push_str(&report::percentiles(finished));
    if opts.latency > 0 {
        out.push_str(&report::latency_summary(finished, opts.latency));
    }
    print!("{out}");
    let _ = std::io::stdout().flush();
    if let Some(path) = &opts.output_json {
        let cores: std::collections::BTreeSet<u32> = finished.iter().map(|s| s.cfg.core).collect();
        let doc = report::to_json(finished, cores.len());
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

/// Each job closes its channel and descriptor on its own thread; then
/// each thread exits once all its jobs are closed.
fn close_jobs(placed: &[Placed]) {
    for p in placed {
        let id = p.cfg.id;
        let _ = p.thread.run_sync(move || {
            if let Some(job) = job::unregister(id) {
                job.close();
            }
        });
    }
    for p in placed.iter().filter(|p| p.exit_thread) {
        let _ = p.thread.run_sync(|| {
            if let Some(t) = Thread::current() {
                t.exit();
            }
        });
    }
}
