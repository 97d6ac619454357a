//! The application object: start-up (reactors, bdev layer, RPC server,
//! JSON config, initialisation), the stop handle and orderly shutdown.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use bdevkit::bdev::{BdevManager, BdevOptions};
use bdevkit::thread::{PollerStatus, Runtime, RuntimeHandle, RuntimeOptions, Thread, ThreadHandle};
use bdevkit_jsonrpc::{MethodRegistry, Server, ServerOptions};
use bdevkit_keyring::Keyring;
use parking_lot::{Condvar, Mutex};

use crate::args::CommonArgs;
use crate::config::{load_config, JsonConfig, LoadOptions};
use crate::error::{Error, Result};
use crate::rpc;
use crate::shared::{AppShared, InitPhase, InitState};
pub use crate::shared::{StopHandle, StopReason};
use crate::subsystem::{create_subsystems, fini_subsystems, Running, SubsystemCtx, SubsystemDef};

/// A bdev module as the app links it: its name, how to add it to the bdev
/// layer, how to register its RPC methods and its log flags. Each module
/// crate exports one (`bdevkit_<name>::MODULE_DEF`).
pub type ModuleDef = bdevkit::bdev::module::ModuleDef<MethodRegistry, bdevkit_jsonrpc::Error>;

/// Start-up choices beyond the command line.
#[derive(Debug, Clone)]
pub struct AppOptions {
    /// Stop on SIGINT and SIGTERM (default). Embedders with their own signal
    /// handling turn it off and use [`App::stop_handle`].
    pub handle_signals: bool,
    /// RPC server poll period in polling mode (SPDK: 4 ms). In interrupt
    /// mode the server is polled when its fd is readable instead.
    pub rpc_poll_period_us: u64,
    /// How long shutdown waits for bdevs to unregister before stopping the
    /// reactors anyway.
    pub shutdown_timeout: Duration,
    /// Name of the first lightweight thread.
    pub app_thread_name: String,
    /// A registry with the embedder's own methods, registered before the
    /// start so that they answer from the first request on (bdevperf's
    /// `perform_tests`); the app adds its methods to it. `None`: a new one.
    pub registry: Option<MethodRegistry>,
    /// Framework subsystems above the bdev layer the app links (bdev_tgt:
    /// nvmf), each named in [`crate::SUBSYSTEMS`]; initialised in that
    /// table's order after `bdev`, finished in reverse.
    pub subsystems: Vec<SubsystemDef>,
    /// A reactor that panics ends the process with status
    /// [`crate::REACTOR_PANIC_EXIT`] after the panic message (default).
    /// Embedders that catch reactor deaths themselves turn it off.
    pub exit_on_reactor_panic: bool,
}

impl Default for AppOptions {
    fn default() -> Self {
        AppOptions {
            handle_signals: true,
            rpc_poll_period_us: 4_000,
            shutdown_timeout: Duration::from_secs(30),
            app_thread_name: "app_thread".into(),
            registry: None,
            subsystems: Vec::new(),
            exit_on_reactor_panic: true,
        }
    }
}

/// A running application: reactors, the bdev layer with its modules, the
/// method registry and (when a socket was given) the RPC server, polled on
/// the app thread.
///
/// [`App::wait`] blocks until a stop is requested, then shuts down in
/// order: RPC server closed, every bdev unregistered (top of each stack
/// first), module `fini`, reactors stopped and joined, socket and lock file
/// removed. Dropping an `App` shuts it down the same way.
pub struct App {
    shared: Arc<AppShared>,
    runtime: Option<Runtime>,
    signals: Option<(signal_hook::iterator::Handle, JoinHandle<()>)>,
    rpc_socket: Option<PathBuf>,
    shutdown_timeout: Duration,
    finished: bool,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("rpc_socket", &self.rpc_socket)
            .field("stop", &self.shared.stop)
            .finish()
    }
}

impl App {
    /// Starts an app with [`AppOptions::default`]; see [`App::start_with`].
    pub fn start(args: &CommonArgs, modules: &[ModuleDef]) -> Result<App> {
        Self::start_with(args, modules, AppOptions::default())
    }

    /// Starts an app: reads the `--json` config, binds the RPC socket (if
    /// `args.rpc_socket` is set), starts one reactor per core of the mask,
    /// creates the bdev layer with `modules`, registers the framework, bdev
    /// and module RPC methods, replays the STARTUP part of the config, and,
    /// unless `--wait-for-rpc`, initialises the framework and replays the
    /// RUNTIME part. Returns once the RPC server is serving.
    ///
    /// A failing config entry fails the start (unless
    /// `--json-ignore-init-errors`); everything started is stopped again.
    pub fn start_with(args: &CommonArgs, modules: &[ModuleDef], opts: AppOptions) -> Result<App> {
        let config = match &args.json {
            Some(p) => Some(Arc::new(JsonConfig::from_file(p)?)),
            None => None,
        };
        let registry = opts.registry.clone().unwrap_or_default();
        if let Some(allowed) = &args.rpcs_allowed {
            registry.set_allowed(Some(allowed.clone()));
        }
        let server = match &args.rpc_socket {
            Some(path) => {
                let sopts = ServerOptions {
                    unix_path: Some(path.clone()),
                    stall_timeout: (args.rpc_stall_timeout > 0)
                        .then(|| Duration::from_secs(args.rpc_stall_timeout)),
                    ..ServerOptions::default()
                };
                Some(Server::bind(sopts, registry.clone()).map_err(|e| match e {
                    bdevkit_jsonrpc::Error::BindInUse { path } => Error::RpcSocketInUse { path },
                    source => Error::BindRpc {
                        path: path.clone(),
                        source,
                    },
                })?)
            }
            None => None,
        };
        let rt_opts = RuntimeOptions {
            cpumask: args.cpumask.clone(),
            interrupt_mode: args.interrupt_mode,
            app_thread_name: opts.app_thread_name.clone(),
            shutdown_grace: Duration::from_secs(2),
            ..RuntimeOptions::default()
        };
        if opts.exit_on_reactor_panic {
            crate::panic::exit_on_reactor_panic(args.rpc_socket.clone());
        }
        let runtime = Runtime::start(rt_opts).map_err(Error::StartRuntime)?;
        let mgr = BdevManager::new(BdevOptions::default());
        let keyring = Arc::new(Keyring::new());
        mgr.provide(Arc::clone(&keyring));
        for m in modules {
            (m.register)(&mgr);
        }
        let rt_handle = runtime.handle();
        let ctx = SubsystemCtx {
            registry: &registry,
            mgr: &mgr,
            runtime: &rt_handle,
        };
        let subsystems = create_subsystems(&opts.subsystems, &ctx)?;
        let mut load_opts = LoadOptions {
            ignore_errors: args.json_ignore_init_errors,
            ..LoadOptions::default()
        };
        load_opts
            .subsystems
            .extend(subsystems.iter().map(|r| r.info.name.to_string()));
        let stop = StopHandle::new();
        let shared = Arc::new(AppShared {
            mgr: mgr.clone(),
            keyring: Arc::clone(&keyring),
            registry: registry.clone(),
            runtime: runtime.handle(),
            stop: stop.clone(),
            init: Mutex::new(InitState {
                phase: InitPhase::NotStarted,
                waiters: Vec::new(),
            }),
            init_cv: Condvar::new(),
            config,
            load_opts,
            rpc_installed: AtomicBool::new(false),
            rpc_paused: AtomicBool::new(true),
            rpc_closing: AtomicBool::new(false),
            rpc_closed: Mutex::new(None),
            subsystems,
        });
        let mut app = App {
            shared: Arc::clone(&shared),
            runtime: Some(runtime),
            signals: None,
            rpc_socket: args.rpc_socket.clone(),
            shutdown_timeout: opts.shutdown_timeout,
            finished: false,
        };
        rpc::register(&shared)?;
        bdevkit_keyring::rpc::register(&registry, &keyring).map_err(|source| {
            Error::RegisterRpc {
                what: crate::KEYRING_SUBSYSTEM.to_string(),
                source,
            }
        })?;
        for m in modules {
            (m.register_rpcs)(&registry, &mgr).map_err(|source| Error::RegisterRpc {
                what: m.name.to_string(),
                source,
            })?;
        }
        if opts.handle_signals {
            app.signals = Some(install_signals(&stop)?);
        }

        let (tx, rx) = mpsc::sync_channel::<Result<()>>(1);
        let wait_for_rpc = args.wait_for_rpc;
        let period = opts.rpc_poll_period_us;
        let sh = Arc::clone(&shared);
        app.app_thread()
            .send_msg(move || startup(&sh, server, period, wait_for_rpc, tx))
            .map_err(|_| Error::AppThreadGone)?;
        match rx.recv() {
            Ok(Ok(())) => {
                tracing::info!(
                    socket = ?app.rpc_socket,
                    cpumask = %args.cpumask,
                    interrupt_mode = args.interrupt_mode,
                    wait_for_rpc,
                    "app started"
                );
                Ok(app)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::AppThreadGone),
        }
    }

    /// The bdev layer.
    #[must_use]
    pub fn mgr(&self) -> &BdevManager {
        &self.shared.mgr
    }

    /// The runtime (reactors and threads).
    #[must_use]
    pub fn runtime(&self) -> RuntimeHandle {
        self.shared.runtime.clone()
    }

    /// The method registry the RPC server and the config loader use. Apps
    /// may register their own methods (bdevperf's `perform_tests`).
    #[must_use]
    pub fn registry(&self) -> &MethodRegistry {
        &self.shared.registry
    }

    /// The app thread: where RPC handlers and config replay run.
    #[must_use]
    pub fn app_thread(&self) -> ThreadHandle {
        self.shared.runtime.app_thread()
    }

    /// A handle that stops the app from anywhere.
    #[must_use]
    pub fn stop_handle(&self) -> StopHandle {
        self.shared.stop.clone()
    }

    /// The RPC socket path, if serving one.
    #[must_use]
    pub fn rpc_socket(&self) -> Option<&Path> {
        self.rpc_socket.as_deref()
    }

    /// Requests the stop (same as `stop_handle().stop()`).
    pub fn stop(&self) {
        self.shared.stop.stop();
    }

    /// Blocks until the framework is initialised (immediately unless
    /// `--wait-for-rpc`), or fails when initialisation failed or the app
    /// was stopped first.
    pub fn wait_init(&self) -> Result<()> {
        let mut st = self.shared.init.lock();
        loop {
            match st.phase {
                InitPhase::Done => return Ok(()),
                InitPhase::Failed => return Err(Error::Init(bdevkit::Error::RuntimeStopped)),
                InitPhase::NotStarted | InitPhase::Running => {
                    if self.shared.stop.is_stopped() {
                        return Err(Error::Stopped);
                    }
                    let _ = self
                        .shared
                        .init_cv
                        .wait_for(&mut st, Duration::from_millis(100));
                }
            }
        }
    }

    /// Replays `config` for the current RPC state (as the `--json` file is
    /// at start-up) and blocks until done. Call from outside the reactors.
    pub fn load_config(&self, config: JsonConfig, opts: LoadOptions) -> Result<()> {
        if Thread::current().is_some() {
            return Err(Error::WouldDeadlock);
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let registry = self.shared.registry.clone();
        let config = Arc::new(config);
        self.app_thread()
            .send_msg(move || {
                load_config(&registry, config, opts, move |r| {
                    let _ = tx.send(r);
                });
            })
            .map_err(|_| Error::AppThreadGone)?;
        rx.recv().map_err(|_| Error::AppThreadGone)?
    }

    /// Blocks until a stop is requested (signal, `spdk_kill_instance`, the
    /// stop handle), then shuts down. Fails only when the stop was caused by
    /// a failed `framework_start_init`.
    pub fn wait(mut self) -> Result<()> {
        let reason = self.shared.stop.wait();
        match reason {
            StopReason::Signal(sig) => tracing::info!(signal = sig, "shutdown signal received"),
            StopReason::Requested => tracing::info!("stop requested"),
            StopReason::InitFailed => tracing::error!("stopping: initialization failed"),
        }
        self.shutdown_now();
        if reason == StopReason::InitFailed {
            return Err(Error::Init(bdevkit::Error::RuntimeStopped));
        }
        Ok(())
    }

    /// Requests the stop and shuts down ([`App::stop`] + [`App::wait`]).
    pub fn shutdown(self) -> Result<()> {
        self.stop();
        self.wait()
    }

    fn shutdown_now(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        if let Some(p) = &self.rpc_socket {
            crate::panic::forget_socket(p);
        }
        self.shared.stop.stop();
        let (tx, rx) = mpsc::channel::<()>();
        let sh = Arc::clone(&self.shared);
        if self
            .app_thread()
            .send_msg(move || teardown(&sh, tx))
            .is_ok()
            && rx.recv_timeout(self.shutdown_timeout).is_err()
        {
            tracing::warn!("bdevs did not unregister in time; stopping reactors anyway");
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown();
        }
        if let Some((h, j)) = self.signals.take() {
            h.close();
            let _ = j.join();
        }
        tracing::info!("app stopped");
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.shutdown_now();
    }
}

fn install_signals(stop: &StopHandle) -> Result<(signal_hook::iterator::Handle, JoinHandle<()>)> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).map_err(Error::Signals)?;
    let handle = signals.handle();
    let stop = stop.clone();
    let join = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                stop.stop_with(StopReason::Signal(sig));
            }
        })
        .map_err(Error::Signals)?;
    Ok((handle, join))
}

/// Runs on the app thread: RPC poller, STARTUP config pass, then
/// initialisation unless `--wait-for-rpc`.
/// Once a second, if bdevs went away since the last look, hands the freed
/// heap back to the OS, so that the daemon's RSS returns near its idle
/// value after mass deletes.
fn install_heap_trimmer(shared: &Arc<AppShared>) {
    let Some(t) = Thread::current() else { return };
    let weak: Weak<AppShared> = Arc::downgrade(shared);
    let mut last = 0usize;
    let p = t.register_poller("heap_trim", 1_000_000, move |p| {
        let Some(sh) = weak.upgrade() else {
            p.unregister();
            return PollerStatus::Idle;
        };
        // No allocation here: this runs beside I/O threads that are
        // checked to allocate nothing (the fio engine's jobs, in-process).
        let n = sh.mgr.bdev_count();
        let shrank = n < last;
        last = n;
        if shrank {
            bdevkit::os::trim_heap();
        }
        PollerStatus::from(shrank)
    });
    TRIMMER.with(|t| *t.borrow_mut() = Some(p));
}

thread_local! {
    /// The app thread's heap trimmer, unregistered at teardown (on the
    /// same thread).
    static TRIMMER: std::cell::RefCell<Option<bdevkit::thread::Poller>> =
        const { std::cell::RefCell::new(None) };
}

fn startup(
    shared: &Arc<AppShared>,
    server: Option<Server>,
    period_us: u64,
    wait_for_rpc: bool,
    tx: mpsc::SyncSender<Result<()>>,
) {
    if let Some(server) = server {
        install_rpc_server(shared, server, period_us);
    }
    install_heap_trimmer(shared);
    let sh = Arc::clone(shared);
    let after_startup_pass = move |r: Result<()>| {
        if let Err(e) = r {
            let _ = tx.send(Err(e));
            return;
        }
        if wait_for_rpc {
            sh.rpc_paused.store(false, Ordering::Release);
            tracing::info!("waiting for framework_start_init");
            let _ = tx.send(Ok(()));
        } else {
            sh.start_init(move |r| {
                let _ = tx.send(r);
            });
        }
    };
    match &shared.config {
        Some(cfg) => load_config(
            &shared.registry,
            Arc::clone(cfg),
            shared.load_opts.clone(),
            after_startup_pass,
        ),
        None => after_startup_pass(Ok(())),
    }
}

/// Polls `server` from a poller on the current (app) thread: every
/// `period_us` in polling mode, or whenever its fd is readable in interrupt
/// mode. The poller owns the server; [`teardown`] closes it through flags.
fn install_rpc_server(shared: &Arc<AppShared>, server: Server, period_us: u64) {
    let Some(t) = Thread::current() else {
        return;
    };
    let irq = if shared.runtime.interrupt_mode() {
        match t.register_interrupt_fd(server.as_raw_fd()) {
            Ok(g) => Some(g),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the rpc socket fd; polling it instead");
                None
            }
        }
    } else {
        None
    };
    let period = if irq.is_some() { 0 } else { period_us };
    let weak: Weak<AppShared> = Arc::downgrade(shared);
    let slot = Rc::new(RefCell::new(Some((server, irq))));
    shared.rpc_installed.store(true, Ordering::Release);
    if period > 0 {
        // Polling on a period: an answer produced between two polls (an
        // operation that finished on this or another thread) goes out on
        // the next reactor turn, not at the next period.
        let answers = Rc::clone(&slot);
        let paused = Weak::clone(&weak);
        t.register_poller("rpc_answers", 0, move |p| {
            let mut s = answers.borrow_mut();
            let Some((server, _)) = s.as_mut() else {
                p.unregister();
                return PollerStatus::Idle;
            };
            // One atomic load a turn; the rest only when answers wait.
            if !server.answers_pending()
                || paused
                    .upgrade()
                    .is_none_or(|sh| sh.rpc_paused.load(Ordering::Acquire))
            {
                return PollerStatus::Idle;
            }
            server.poll().into()
        });
    }
    t.register_poller("rpc_subsystem_poll", period, move |p| {
        let Some(sh) = weak.upgrade() else {
            p.unregister();
            *slot.borrow_mut() = None;
            return PollerStatus::Idle;
        };
        if sh.rpc_closing.load(Ordering::Acquire) {
            let taken = slot.borrow_mut().take();
            if let Some((mut server, irq)) = taken {
                // Flush answers already produced (spdk_kill_instance's).
                server.poll();
                // Out of the epoll set before the fd closes.
                drop(irq);
                drop(server);
            }
            p.unregister();
            let cb = sh.rpc_closed.lock().take();
            if let Some(cb) = cb {
                cb();
            }
            return PollerStatus::Busy;
        }
        if sh.rpc_paused.load(Ordering::Acquire) {
            return PollerStatus::Idle;
        }
        match slot.borrow_mut().as_mut() {
            Some((server, _)) => server.poll().into(),
            None => PollerStatus::Idle,
        }
    });
}

/// Runs on the app thread at shutdown: closes the RPC server, unregisters
/// every bdev, runs module `fini`, then signals `tx`.
fn teardown(shared: &Arc<AppShared>, tx: mpsc::Sender<()>) {
    if let Some(p) = TRIMMER.with(|t| t.borrow_mut().take()) {
        p.unregister();
    }
    let sh = Arc::clone(shared);
    let after_rpc = move || {
        let waiters = std::mem::take(&mut sh.init.lock().waiters);
        drop(waiters);
        let subsystems: Vec<Running> = sh.subsystems.iter().rev().cloned().collect();
        let thread = Thread::current().map(|t| t.handle());
        fini_subsystems(subsystems, thread, move || unregister_bdevs(&sh, tx));
    };
    if shared.rpc_installed.load(Ordering::Acquire) {
        *shared.rpc_closed.lock() = Some(Box::new(after_rpc));
        shared.rpc_closing.store(true, Ordering::Release);
    } else {
        after_rpc();
    }
}

/// Unregisters every bdev (top of each stack first), runs module `fini`,
/// then signals `tx`.
fn unregister_bdevs(sh: &Arc<AppShared>, tx: mpsc::Sender<()>) {
    let mgr = sh.mgr.clone();
    let phase = sh.init_phase();
    let count = mgr.bdevs().len();
    tracing::info!(bdevs = count, "unregistering bdevs");
    mgr.clone().unregister_all(move || {
        if phase != InitPhase::NotStarted {
            for m in mgr.modules() {
                m.fini(&mgr);
            }
        }
        let _ = tx.send(());
    });
}
