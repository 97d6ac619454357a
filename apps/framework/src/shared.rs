//! What the app, its RPC handlers and its app-thread work share: the stop
//! handle, the initialisation state and `AppShared`. Below both the app
//! (`app.rs`) and the RPC handlers (`rpc/`), which import it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bdevkit::bdev::BdevManager;
use bdevkit::thread::RuntimeHandle;
use bdevkit_jsonrpc::{ErrorChain, MethodRegistry, Responder, RpcError, RUNTIME};
use bdevkit_keyring::Keyring;
use parking_lot::{Condvar, Mutex};

use crate::config::{load_config, JsonConfig, LoadOptions};
use crate::error::{Error, Result};
use crate::subsystem::Running;

/// Why an app stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// [`StopHandle::stop`] was called.
    Requested,
    /// A signal arrived (SIGINT, SIGTERM), directly or via `spdk_kill_instance`.
    Signal(i32),
    /// `framework_start_init` failed.
    InitFailed,
}

struct StopInner {
    reason: Mutex<Option<StopReason>>,
    cv: Condvar,
}

/// Requests an app's stop from anywhere: any OS thread, an RPC handler, the
/// signal thread. Cheap to clone, `Send + Sync`. The first reason given
/// wins; later requests are no-ops.
#[derive(Clone)]
pub struct StopHandle(Arc<StopInner>);

impl std::fmt::Debug for StopHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StopHandle").field(&self.reason()).finish()
    }
}

impl Default for StopHandle {
    fn default() -> Self {
        Self::new()
    }
}

impl StopHandle {
    /// A handle nobody has stopped yet.
    #[must_use]
    pub fn new() -> Self {
        StopHandle(Arc::new(StopInner {
            reason: Mutex::new(None),
            cv: Condvar::new(),
        }))
    }

    /// Requests the stop ([`StopReason::Requested`]).
    pub fn stop(&self) {
        self.stop_with(StopReason::Requested);
    }

    /// Requests the stop with a reason.
    pub fn stop_with(&self, reason: StopReason) {
        let mut r = self.0.reason.lock();
        if r.is_none() {
            *r = Some(reason);
            self.0.cv.notify_all();
        }
    }

    /// Whether a stop was requested.
    #[must_use]
    pub fn is_stopped(&self) -> bool {
        self.0.reason.lock().is_some()
    }

    /// Why the app stops, once it does.
    #[must_use]
    pub fn reason(&self) -> Option<StopReason> {
        *self.0.reason.lock()
    }

    /// Blocks until a stop is requested.
    pub fn wait(&self) -> StopReason {
        let mut r = self.0.reason.lock();
        loop {
            if let Some(reason) = *r {
                return reason;
            }
            self.0.cv.wait(&mut r);
        }
    }

    /// Like [`StopHandle::wait`], giving up after `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<StopReason> {
        let mut r = self.0.reason.lock();
        if r.is_none() {
            let _ = self.0.cv.wait_for(&mut r, timeout);
        }
        *r
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InitPhase {
    NotStarted,
    Running,
    Done,
    Failed,
}

pub(crate) struct InitState {
    pub(crate) phase: InitPhase,
    pub(crate) waiters: Vec<Responder>,
}

pub(crate) type Callback = Box<dyn FnOnce() + Send>;

/// State shared by the app, its RPC handlers and its app-thread work.
pub(crate) struct AppShared {
    pub(crate) mgr: BdevManager,
    pub(crate) keyring: Arc<Keyring>,
    pub(crate) registry: MethodRegistry,
    pub(crate) runtime: RuntimeHandle,
    pub(crate) stop: StopHandle,
    pub(crate) init: Mutex<InitState>,
    pub(crate) init_cv: Condvar,
    pub(crate) config: Option<Arc<JsonConfig>>,
    pub(crate) load_opts: LoadOptions,
    pub(crate) rpc_installed: AtomicBool,
    pub(crate) rpc_paused: AtomicBool,
    pub(crate) rpc_closing: AtomicBool,
    pub(crate) rpc_closed: Mutex<Option<Callback>>,
    /// The framework subsystems above bdev the app links, in
    /// initialisation order.
    pub(crate) subsystems: Vec<Running>,
}

impl AppShared {
    /// `framework_wait_init`: answers `true` once initialised.
    pub(crate) fn wait_init_rpc(&self, resp: Responder) {
        let mut st = self.init.lock();
        match st.phase {
            InitPhase::Done => {
                drop(st);
                resp.ok(serde_json::Value::Bool(true));
            }
            InitPhase::Failed => {
                drop(st);
                resp.err(RpcError::internal_error("framework_initialization failed"));
            }
            InitPhase::NotStarted | InitPhase::Running => st.waiters.push(resp),
        }
    }

    /// Initialises the framework (SPDK's subsystem init) on the app thread:
    /// pauses the RPC server, runs every module's init, then the linked
    /// subsystems' init (in order), switches to RUNTIME,
    /// replays the RUNTIME part of the `--json` config, resumes the server,
    /// then calls `done` on the app thread.
    pub(crate) fn start_init(self: &Arc<Self>, done: impl FnOnce(Result<()>) + Send + 'static) {
        {
            let mut st = self.init.lock();
            if st.phase != InitPhase::NotStarted {
                drop(st);
                return done(Err(Error::InitAgain));
            }
            st.phase = InitPhase::Running;
        }
        self.rpc_paused.store(true, Ordering::Release);
        let me = Arc::clone(self);
        let finish = move |r: Result<()>| {
            me.rpc_paused.store(false, Ordering::Release);
            let waiters = {
                let mut st = me.init.lock();
                st.phase = if r.is_ok() {
                    InitPhase::Done
                } else {
                    InitPhase::Failed
                };
                me.init_cv.notify_all();
                std::mem::take(&mut st.waiters)
            };
            for w in waiters {
                if r.is_ok() {
                    w.ok(serde_json::Value::Bool(true));
                } else {
                    w.err(RpcError::internal_error("framework_initialization failed"));
                }
            }
            match &r {
                Ok(()) => tracing::info!("framework initialized"),
                Err(e) => {
                    tracing::error!(error = %ErrorChain(e), "framework initialization failed")
                }
            }
            done(r);
        };
        if let Err(e) = self.mgr.init_modules() {
            return finish(Err(Error::Init(e)));
        }
        for r in &self.subsystems {
            if let Err(source) = r.sub.init() {
                return finish(Err(Error::InitSubsystem {
                    name: r.info.name.to_string(),
                    source,
                }));
            }
        }
        self.registry.set_state(RUNTIME);
        match &self.config {
            Some(cfg) => load_config(
                &self.registry,
                Arc::clone(cfg),
                self.load_opts.clone(),
                finish,
            ),
            None => finish(Ok(())),
        }
    }

    /// The linked subsystem named `name` (not `bdev`).
    pub(crate) fn linked(&self, name: &str) -> Option<&Running> {
        self.subsystems.iter().find(|r| r.info.name == name)
    }

    pub(crate) fn init_phase(&self) -> InitPhase {
        self.init.lock().phase
    }
}
