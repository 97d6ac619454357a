//! `bdev_dd`: copy between files and bdevs, SPDK's `spdk_dd` for bdevkit.
//!
//! Same options and semantics as spdk_dd (`--if/--ib`, `--of/--ob`,
//! `--bs`, `--qd`, `--count`, `--skip`, `--seek`, `--iflag/--oflag`,
//! `--sparse`) on the same app framework and module list as bdevperf:
//! `--json` loads an SPDK-format config. Progress goes to stderr; a failure
//! is one line on stderr and exit status 1 (2 for a malformed command
//! line). See doc/bdev_dd.md.
//!
//! The main thread opens the files, checks the copy ([`plan`]) and
//! reports progress; the copy runs on the app's reactor thread
//! ([`copy`]), with file I/O on helper threads ([`pool`]).
#![forbid(unsafe_code)]

mod args;
mod copy;
mod file;
mod plan;
mod pool;
mod progress;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bdevkit::bdev::BdevManager;
use bdevkit::thread::ThreadHandle;
use bdevkit_app::{App, AppOptions, ErrorChain};

use crate::args::{Opts, Target};
use crate::copy::{Progress, Setup, SideSpec};
use crate::file::FileSide;
use crate::plan::{Plan, Request, Side};

/// At most this many file helper threads.
const MAX_FILE_THREADS: u32 = 8;

fn main() -> ExitCode {
    let opts = match args::parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bdev_dd: error: {e:#}");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = init_logging(&opts) {
        eprintln!("bdev_dd: error: {e:#}");
        return ExitCode::from(1);
    }
    let mut out = Reporter::new();
    match run(&opts, &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            out.end_line();
            eprintln!("bdev_dd: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Warnings only, unless `-L`, `--log-level` or `RUST_LOG` ask for more;
/// the framework's report of a failed start is the one error line
/// bdev_dd prints, so it is not logged as well.
fn init_logging(opts: &Opts) -> Result<()> {
    let filter = if opts.logging_asked || std::env::var_os("RUST_LOG").is_some() {
        opts.common.env_filter()?
    } else {
        tracing_subscriber::EnvFilter::new(
            "warn,bdevkit_app::config=off,bdevkit_app::app=off,bdevkit_app::shared=off",
        )
    };
    let level = opts.common.log_level.as_deref().unwrap_or("warn");
    bdevkit_app::logging::init_with(filter, level, &opts.common.logflag)?;
    Ok(())
}

/// The progress line on stderr: rewritten in place on a terminal, one
/// line per update otherwise.
struct Reporter {
    tty: bool,
    open_line: bool,
}

impl Reporter {
    fn new() -> Reporter {
        Reporter {
            tty: std::io::stderr().is_terminal(),
            open_line: false,
        }
    }

    fn show(&mut self, line: &str) {
        let mut e = std::io::stderr().lock();
        if self.tty {
            let _ = write!(e, "\x1b[2K\r{line}");
            self.open_line = true;
        } else {
            let _ = writeln!(e, "{line}");
        }
        let _ = e.flush();
    }

    fn end_line(&mut self) {
        if self.open_line {
            eprintln!();
            self.open_line = false;
        }
    }
}

fn run(opts: &Opts, out: &mut Reporter) -> Result<()> {
    let app_opts = AppOptions {
        app_thread_name: "bdev_dd".into(),
        ..AppOptions::default()
    };
    let app = App::start_with(&opts.common, &bdevkit_app::default_modules(), app_opts)
        .map_err(|e| anyhow::anyhow!("{}", ErrorChain(&e)))?;
    let r = run_copy(&app, opts, out);
    let shut = app.shutdown();
    r?;
    shut.map_err(|e| anyhow::anyhow!("{}", ErrorChain(&e)))
}

/// One side, opened: a file (on this thread) or a bdev's geometry.
enum Opened {
    File(FileSide),
    Bdev(String, Side),
}

impl Opened {
    fn side(&self) -> Side {
        match self {
            Opened::File(f) => f.side,
            Opened::Bdev(_, s) => *s,
        }
    }

    fn spec(&self) -> Result<SideSpec> {
        Ok(match self {
            Opened::File(f) => SideSpec::File(
                Arc::new(f.file.try_clone().context("duplicate file descriptor")?),
                f.path.display().to_string(),
            ),
            Opened::Bdev(name, _) => SideSpec::Bdev(name.clone()),
        })
    }
}

fn wait_for_examine(app: &ThreadHandle, mgr: &BdevManager) -> Result<()> {
    let (tx, rx) = mpsc::channel();
    let m = mgr.clone();
    app.run_sync(move || {
        m.wait_for_examine(move || {
            let _ = tx.send(());
        });
    })?;
    rx.recv_timeout(Duration::from_secs(60))
        .context("bdev examine did not finish")
}

fn open(target: &Target, input: bool, app: &ThreadHandle, mgr: &BdevManager) -> Result<Opened> {
    match target {
        Target::File { path, flags } => Ok(Opened::File(if input {
            file::open_input(path, *flags)?
        } else {
            file::open_output(path, *flags)?
        })),
        Target::Bdev(name) => {
            let (m, n) = (mgr.clone(), name.clone());
            let geometry = app.run_sync(move || {
                m.get(&n)
                    .map(|b| (u64::from(b.block_size()), b.num_blocks()))
            })?;
            let Some((block_size, blocks)) = geometry else {
                bail!("Could not open bdev {name}: No such device");
            };
            Ok(Opened::Bdev(
                name.clone(),
                Side {
                    size: Some(block_size * blocks),
                    block_size,
                },
            ))
        }
    }
}

fn run_copy(app: &App, opts: &Opts, out: &mut Reporter) -> Result<()> {
    app.wait_init()
        .map_err(|e| anyhow::anyhow!("{}", ErrorChain(&e)))?;
    let (thread, mgr) = (app.app_thread(), app.mgr().clone());
    wait_for_examine(&thread, &mgr)?;
    let input = open(&opts.input, true, &thread, &mgr)?;
    let output = open(&opts.output, false, &thread, &mgr)?;
    let req = Request {
        bs: opts.bs,
        count: opts.count,
        skip: opts.skip,
        seek: opts.seek,
        qd: opts.qd,
    };
    let plan = plan::plan(req, input.side(), output.side())?;
    let data_map = match (&input, opts.sparse) {
        (Opened::File(f), true) => f.data_map(plan.in_start, plan.in_start + plan.copy_size)?,
        _ => None,
    };
    if let Opened::File(f) = &output {
        f.truncate()?;
    }
    let files = matches!(input, Opened::File(_)) || matches!(output, Opened::File(_));
    let (pool, handle) = if files {
        let n = plan.qd.clamp(1, MAX_FILE_THREADS) as usize;
        let (p, h) = pool::Pool::start(n).context("start file helper threads")?;
        (Some(p), Some(h))
    } else {
        (None, None)
    };
    let progress = Arc::new(Progress::default());
    let setup = Setup {
        plan,
        input: input.spec()?,
        output: output.spec()?,
        sparse: opts.sparse,
        data_map,
        pool: handle,
        progress: Arc::clone(&progress),
    };
    let (tx, rx) = mpsc::channel();
    let m = mgr.clone();
    let started = Instant::now();
    thread.run_sync(move || copy::start(&m, setup, tx))??;
    let outcome = watch(app, &plan, &progress, &rx, started, out);
    if let Some(p) = pool {
        p.join();
    }
    if let Some(msg) = progress.removed.lock().take() {
        bail!(msg);
    }
    outcome?;
    if app.stop_handle().is_stopped() {
        bail!(
            "interrupted after {} of {} bytes",
            progress.done.load(Ordering::Relaxed),
            plan.copy_size
        );
    }
    if let Opened::File(f) = &output {
        f.finish_output(plan.out_end())?;
    }
    let secs = started.elapsed().as_secs_f64();
    let done = progress.done.load(Ordering::Relaxed);
    out.show(&progress::line(
        done,
        plan.copy_size,
        progress::rate(done, secs),
        true,
    ));
    out.end_line();
    if opts.sparse {
        eprintln!(
            "{} of {} bytes not written (holes and zeroes)",
            progress.skipped.load(Ordering::Relaxed),
            plan.copy_size
        );
    }
    Ok(())
}

/// Waits for the copy's outcome, printing the progress line once a
/// second and passing a stop request (SIGINT, SIGTERM) on to the workers.
fn watch(
    app: &App,
    plan: &Plan,
    progress: &Progress,
    rx: &mpsc::Receiver<Result<(), String>>,
    started: Instant,
    out: &mut Reporter,
) -> Result<()> {
    let stop = app.stop_handle();
    let mut last = (started, 0u64);
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(r) => return r.map_err(anyhow::Error::msg),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("the copy ended without an outcome"),
        }
        if stop.is_stopped() {
            progress.stop.store(true, Ordering::Release);
        }
        let now = Instant::now();
        if now.duration_since(last.0) >= Duration::from_secs(1) {
            let done = progress.done.load(Ordering::Relaxed);
            let secs = now.duration_since(last.0).as_secs_f64();
            out.show(&progress::line(
                done,
                plan.copy_size,
                progress::rate(done - last.1, secs),
                false,
            ));
            last = (now, done);
        }
    }
}

#[cfg(test)]
mod tests;
