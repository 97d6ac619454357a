//! The bdevkit runtime of the fio process: started once, by the first
//! job's setup (or init), torn down when the last job that set up is
//! cleaned up (or, for jobs fio never ran, when the library unloads).
//!
//! fio loads one engine per process and calls it from many threads, so
//! this is process-wide state, behind one mutex that only setup, init and
//! cleanup take (never the I/O path). The app is the framework's
//! ([`bdevkit_app::App`]): the config's bdevs, the bdev layer with
//! [`bdevkit_app::default_modules`], and one reactor in interrupt mode for
//! the control path (config replay, examine, hot-remove events); it sleeps
//! while the jobs run, since their I/O runs on the jobs' own threads.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use bdevkit::bdev::{Bdev, BdevManager};
use bdevkit::thread::{CpuSet, RuntimeHandle, ThreadHandle};
use bdevkit_app::{App, AppOptions, CommonArgs, ErrorChain};
use parking_lot::Mutex;

use crate::args::JobArgs;
use crate::error::{Error, Result};

/// How long start-up waits for the config's bdevs to finish examine.
const EXAMINE_TIMEOUT: Duration = Duration::from_secs(60);

/// What a job needs of the running app (cheap clones, no lock held).
#[derive(Debug, Clone)]
pub struct Handles {
    /// The bdev layer.
    pub mgr: BdevManager,
    /// The runtime, to embed the job's thread in.
    pub runtime: RuntimeHandle,
    /// The config it was started with.
    pub conf: PathBuf,
    /// The app thread (the control path: zone reports and resets before
    /// a job's own thread exists).
    pub app_thread: ThreadHandle,
}

struct Running {
    app: App,
    handles: Handles,
}

struct State {
    running: Option<Running>,
    /// Jobs set up and not yet cleaned up.
    live: usize,
}

static STATE: Mutex<State> = Mutex::new(State {
    running: None,
    live: 0,
});

/// The config a job asks for.
fn job_conf(args: &JobArgs) -> Result<PathBuf> {
    let conf = args.conf.clone().ok_or_else(|| Error::NoConfig {
        job: args.job.clone(),
    })?;
    // The same file, however it is spelled; a path that does not resolve
    // is kept as given (loading it reports why).
    Ok(std::fs::canonicalize(&conf).unwrap_or(conf))
}

/// The first CPU this process may run on: the reactor's default core.
fn first_allowed_cpu() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|list| {
            let first = list.trim().split([',', '-']).next()?;
            first.parse().ok()
        })
        .unwrap_or(0)
}

/// The running app's handles, starting it with `args`' config first if
/// nothing runs yet. Fails when the config differs from the running one.
pub fn ensure_started(args: &JobArgs) -> Result<Handles> {
    let conf = job_conf(args)?;
    let mut st = STATE.lock();
    if let Some(r) = &st.running {
        if r.handles.conf != conf {
            return Err(Error::OtherConfig {
                job: args.job.clone(),
                asked: conf,
                running: r.handles.conf.clone(),
            });
        }
        return Ok(r.handles.clone());
    }
    let running = start(args, conf)?;
    let handles = running.handles.clone();
    st.running = Some(running);
    Ok(handles)
}

fn start(args: &JobArgs, conf: PathBuf) -> Result<Running> {
    crate::logging::init();
    let cpumask = match &args.reactor_mask {
        Some(m) => m.parse::<CpuSet>().map_err(|e| Error::Mask {
            job: args.job.clone(),
            mask: m.clone(),
            reason: e.to_string(),
        })?,
        None => CpuSet::single(first_allowed_cpu()),
    };
    let common = CommonArgs {
        cpumask,
        json: Some(conf.clone()),
        // The reactor carries the control path only: asleep while idle.
        interrupt_mode: true,
        ..CommonArgs::default()
    };
    let opts = AppOptions {
        // fio handles SIGINT/SIGTERM itself (it stops the jobs).
        handle_signals: false,
        app_thread_name: "fio_bdevkit".into(),
        shutdown_timeout: Duration::from_secs(10),
        ..AppOptions::default()
    };
    let fail = |reason: String| Error::Start {
        job: args.job.clone(),
        conf: conf.clone(),
        reason,
    };
    let app = App::start_with(&common, &bdevkit_app::default_modules(), opts)
        .map_err(|e| fail(ErrorChain(&e).to_string()))?;
    app.wait_init()
        .map_err(|e| fail(ErrorChain(&e).to_string()))?;
    let mgr = app.mgr().clone();
    let (tx, rx) = mpsc::channel();
    let m = mgr.clone();
    app.app_thread()
        .run_sync(move || {
            m.wait_for_examine(move || {
                let _ = tx.send(());
            });
        })
        .map_err(|e| fail(e.to_string()))?;
    rx.recv_timeout(EXAMINE_TIMEOUT)
        .map_err(|_| fail("bdev examine did not finish".into()))?;
    tracing::info!(conf = %conf.display(), "bdevkit started for fio");
    let handles = Handles {
        app_thread: app.app_thread(),
        runtime: app.runtime(),
        mgr,
        conf,
    };
    Ok(Running { app, handles })
}

/// A bdev of the running config by name, or the error that lists what
/// there is.
pub fn find_bdev(h: &Handles, job: &str, name: &str) -> Result<Bdev> {
    h.mgr.get(name).ok_or_else(|| {
        let mut known: Vec<String> = h.mgr.bdevs().iter().map(|b| b.name().to_string()).collect();
        known.sort();
        Error::NoBdev {
            job: job.to_string(),
            name: name.to_string(),
            conf: h.conf.clone(),
            known: if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            },
        }
    })
}

/// The running app's handles, if it runs (a job's setup started it).
pub fn running() -> Option<Handles> {
    STATE.lock().running.as_ref().map(|r| r.handles.clone())
}

/// Counts a job as set up: the runtime stays until it is released.
pub fn count_job() {
    STATE.lock().live += 1;
}

/// A job was cleaned up (`counted`: it had been counted). When no job set
/// up is left, the app is shut down: bdevs unregistered, modules
/// finished, the reactor stopped.
pub fn release(counted: bool) {
    let running = {
        let mut st = STATE.lock();
        if counted {
            st.live = st.live.saturating_sub(1);
        }
        if st.live > 0 {
            return;
        }
        st.running.take()
    };
    if let Some(r) = running {
        stop(r);
    }
}

fn stop(r: Running) {
    let conf = r.handles.conf.clone();
    drop(r.handles);
    match r.app.shutdown() {
        Ok(()) => tracing::info!(conf = %conf.display(), "bdevkit stopped"),
        Err(e) => tracing::warn!(error = %ErrorChain(&e), "bdevkit shutdown"),
    }
}

/// At library unload or process exit: stops an app that jobs left
/// running (set up, never run). On a thread of its own: at exit the
/// calling thread's thread-locals may already be gone.
pub fn exit() {
    let running = STATE.lock().running.take();
    if let Some(r) = running {
        let _ = std::thread::Builder::new()
            .name("bdevkit_exit".into())
            .spawn(move || stop(r))
            .map(std::thread::JoinHandle::join);
    }
}

/// Tests that start the runtime take this: it is one per process.
#[cfg(test)]
pub(crate) static TEST_LOCK: Mutex<()> = Mutex::new(());

/// Whether an app runs.
#[cfg(test)]
pub(crate) fn is_running() -> bool {
    STATE.lock().running.is_some()
}
