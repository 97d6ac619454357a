//! Reactors: one pinned OS thread per core of the core mask, each running
//! the loop "drain messages, run pollers, run due timed pollers" over the
//! lightweight threads placed on it.
//!
//! The top layer of the `thread` module: it builds reactors
//! (`reactor.rs`), places threads on them (`handle.rs`) and runs them
//! (`lwthread.rs`).

use std::any::Any;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::cpuset::CpuSet;
use super::lwthread::{Thread, ThreadHandle};
use super::reactor::{TOKEN_TIMER, TOKEN_WAKE};
use super::shared::{Reactor, ThreadShared};
use super::sys::{self, Epoll, EventFd, TimerFd};
use crate::clock;
use crate::error::{Error, Result};

/// How a runtime is started.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Cores to run reactors on (SPDK's `-m`). Default: core 0.
    pub cpumask: CpuSet,
    /// Sleep in epoll when idle instead of spinning (SPDK's
    /// `--interrupt-mode`). Polling is the default; tests use interrupt mode.
    pub interrupt_mode: bool,
    /// Name of the first lightweight thread (on the first reactor).
    pub app_thread_name: String,
    /// Pin each reactor to its core with `sched_setaffinity`.
    pub pin_reactors: bool,
    /// How long [`Runtime::shutdown`] waits for threads to release their
    /// pollers and channels before dropping them forcibly.
    pub shutdown_grace: Duration,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            cpumask: CpuSet::single(0),
            interrupt_mode: false,
            app_thread_name: "app_thread".to_string(),
            pin_reactors: true,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

impl RuntimeOptions {
    /// Options for tests and embedders on shared machines: interrupt mode on
    /// the given mask.
    #[must_use]
    pub fn interrupt(cpumask: CpuSet) -> Self {
        RuntimeOptions {
            cpumask,
            interrupt_mode: true,
            ..Self::default()
        }
    }
}

pub(crate) struct RuntimeShared {
    pub(crate) reactors: Vec<Arc<Reactor>>,
    pub(crate) threads: Mutex<Vec<ThreadHandle>>,
    stop: AtomicBool,
    app_thread: ThreadHandle,
    pub(crate) opts: RuntimeOptions,
}

/// A cloneable, `Send + Sync` handle to a running runtime.
#[derive(Clone)]
pub struct RuntimeHandle(pub(crate) Arc<RuntimeShared>);

impl std::fmt::Debug for RuntimeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeHandle")
            .field("cpumask", &self.0.opts.cpumask)
            .field("interrupt_mode", &self.0.opts.interrupt_mode)
            .finish()
    }
}

/// Busy/idle statistics of one reactor (`framework_get_reactors`).
#[derive(Debug, Clone)]
pub struct ReactorStats {
    /// Core number.
    pub lcore: u32,
    /// Kernel thread id of the reactor.
    pub tid: i32,
    /// Ticks spent in iterations that did work.
    pub busy: u64,
    /// Ticks spent in idle iterations (polling or sleeping).
    pub idle: u64,
    /// Whether the reactor sleeps when idle.
    pub in_interrupt: bool,
    /// Lightweight threads placed on it.
    pub lw_threads: Vec<ThreadHandle>,
}

/// Statistics of one lightweight thread (`thread_get_stats`).
#[derive(Debug, Clone)]
pub struct ThreadStats {
    /// Thread id.
    pub id: u64,
    /// Thread name.
    pub name: String,
    /// CPU mask as hex without `0x`.
    pub cpumask: String,
    /// Busy ticks.
    pub busy: u64,
    /// Idle ticks.
    pub idle: u64,
    /// Ticks since the thread was created.
    pub elapsed: u64,
    /// Registered active pollers.
    pub active_pollers_count: u32,
    /// Registered timed pollers.
    pub timed_pollers_count: u32,
    /// Paused pollers.
    pub paused_pollers_count: u32,
}

impl RuntimeHandle {
    /// The first lightweight thread (on the first reactor): where an
    /// application runs its control plane.
    #[must_use]
    pub fn app_thread(&self) -> ThreadHandle {
        self.0.app_thread.clone()
    }

    /// Whether reactors sleep when idle.
    #[must_use]
    pub fn interrupt_mode(&self) -> bool {
        self.0.opts.interrupt_mode
    }

    /// The core mask the runtime runs on.
    #[must_use]
    pub fn cpumask(&self) -> &CpuSet {
        &self.0.opts.cpumask
    }

    /// Number of reactors.
    #[must_use]
    pub fn reactor_count(&self) -> usize {
        self.0.reactors.len()
    }

    /// Cores of the reactors, in order.
    #[must_use]
    pub fn cores(&self) -> Vec<u32> {
        self.0.reactors.iter().map(|r| r.core).collect()
    }

    /// Creates a lightweight thread on the least loaded reactor whose core is
    /// in `cpumask` (any reactor if `None`).
    pub fn spawn_thread(
        &self,
        name: impl Into<String>,
        cpumask: Option<&CpuSet>,
    ) -> Result<ThreadHandle> {
        if self.0.stop.load(Ordering::Acquire) {
            return Err(Error::RuntimeStopped);
        }
        let mask = cpumask
            .cloned()
            .unwrap_or_else(|| self.0.opts.cpumask.clone());
        let reactor = self
            .0
            .reactors
            .iter()
            .filter(|r| mask.contains(r.core))
            .min_by_key(|r| r.thread_count.load(Ordering::Relaxed))
            .ok_or_else(|| Error::NoReactorForMask(mask.to_string()))?;
        Ok(self.place(name.into(), mask.and(&self.0.opts.cpumask), reactor))
    }

    fn place(&self, name: String, mask: CpuSet, reactor: &Arc<Reactor>) -> ThreadHandle {
        let runtime: Weak<dyn Any + Send + Sync> = Arc::<RuntimeShared>::downgrade(&self.0);
        let shared = ThreadShared::new(name, mask, Arc::clone(reactor), runtime);
        let handle = ThreadHandle(Arc::clone(&shared));
        reactor.thread_count.fetch_add(1, Ordering::Relaxed);
        self.0.threads.lock().push(handle.clone());
        reactor.incoming.push(shared);
        fence(Ordering::SeqCst);
        reactor.wake_if_sleeping();
        handle
    }

    /// Every live lightweight thread.
    #[must_use]
    pub fn threads(&self) -> Vec<ThreadHandle> {
        self.0.threads.lock().clone()
    }

    /// Runs `f` on every thread, one after another, then `done` on the
    /// calling thread (or inline when called from outside any thread).
    pub fn for_each_thread<F, D>(&self, f: F, done: D)
    where
        F: Fn(&Thread) + Send + Sync + 'static,
        D: FnOnce() + Send + 'static,
    {
        let threads = self.threads();
        let origin = Thread::current().map(|t| t.handle());
        step_threads(Arc::new(threads), 0, Arc::new(f), origin, Box::new(done));
    }

    /// Per-reactor statistics.
    #[must_use]
    pub fn reactor_stats(&self) -> Vec<ReactorStats> {
        let threads = self.threads();
        self.0
            .reactors
            .iter()
            .map(|r| ReactorStats {
                lcore: r.core,
                tid: r.tid.load(Ordering::Relaxed),
                busy: r.busy_ticks.load(Ordering::Relaxed),
                idle: r.idle_ticks.load(Ordering::Relaxed),
                in_interrupt: r.in_interrupt,
                lw_threads: threads
                    .iter()
                    .filter(|t| t.0.reactor.index == r.index)
                    .cloned()
                    .collect(),
            })
            .collect()
    }

    /// Per-thread statistics.
    #[must_use]
    pub fn thread_stats(&self) -> Vec<ThreadStats> {
        let now = clock::ticks();
        self.threads()
            .iter()
            .map(|t| thread_stats(t, now))
            .collect()
    }

    /// Asks every reactor to stop. Threads are asked to exit; reactors end
    /// once their threads are gone (or after the grace period).
    pub fn stop(&self) {
        if !self.0.stop.swap(true, Ordering::AcqRel) {
            for r in &self.0.reactors {
                r.wake();
            }
        }
    }

    /// Whether [`RuntimeHandle::stop`] was called.
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        self.0.stop.load(Ordering::Acquire)
    }
}

impl Thread {
    /// The runtime this thread belongs to.
    pub fn runtime(&self) -> Result<RuntimeHandle> {
        self.0
            .shared
            .runtime
            .upgrade()
            .and_then(|rt| rt.downcast::<RuntimeShared>().ok())
            .map(RuntimeHandle)
            .ok_or(Error::RuntimeStopped)
    }
}

/// Statistics of one thread, as of `now`.
#[must_use]
pub fn thread_stats(t: &ThreadHandle, now: u64) -> ThreadStats {
    let s = &t.0;
    ThreadStats {
        id: s.id,
        name: s.name.clone(),
        cpumask: s.cpumask.to_hex(),
        busy: s.busy_ticks.load(Ordering::Relaxed),
        idle: s.idle_ticks.load(Ordering::Relaxed),
        elapsed: now.saturating_sub(s.created_ticks),
        active_pollers_count: s.active_pollers.load(Ordering::Relaxed),
        timed_pollers_count: s.timed_pollers.load(Ordering::Relaxed),
        paused_pollers_count: s.paused_pollers.load(Ordering::Relaxed),
    }
}

type StepFn = Arc<dyn Fn(&Thread) + Send + Sync>;

/// One walk over a list of threads. If the message carrying it is dropped
/// without running (its thread exited meanwhile), `Drop` skips that thread
/// and goes on, so `done` always runs.
struct ThreadWalk {
    threads: Arc<Vec<ThreadHandle>>,
    idx: usize,
    f: StepFn,
    origin: Option<ThreadHandle>,
    done: Option<Box<dyn FnOnce() + Send>>,
}

impl ThreadWalk {
    fn next(mut self) {
        self.advance();
    }

    /// Goes on to the next thread; only the first call does (it takes
    /// `done` along).
    fn advance(&mut self) {
        if let Some(done) = self.done.take() {
            step_threads(
                Arc::clone(&self.threads),
                self.idx + 1,
                Arc::clone(&self.f),
                self.origin.clone(),
                done,
            );
        }
    }
}

impl Drop for ThreadWalk {
    fn drop(&mut self) {
        self.advance();
    }
}

fn step_threads(
    threads: Arc<Vec<ThreadHandle>>,
    idx: usize,
    f: StepFn,
    origin: Option<ThreadHandle>,
    done: Box<dyn FnOnce() + Send>,
) {
    let Some(t) = threads.get(idx).cloned() else {
        match origin {
            Some(o) => {
                if let Err(e) = o.send_boxed(done) {
                    tracing::warn!(error = %e, "for_each_thread: origin thread gone");
                }
            }
            None => done(),
        }
        return;
    };
    let walk = ThreadWalk {
        threads,
        idx,
        f,
        origin,
        done: Some(done),
    };
    // On failure the message (and the walk in it) is dropped, which moves
    // the walk on to the next thread.
    let _ = t.send_msg(move || {
        if let Some(cur) = Thread::current() {
            (walk.f)(&cur);
        }
        walk.next();
    });
}

/// A started runtime. Dropping it without [`Runtime::shutdown`] stops the
/// reactors and joins them too.
pub struct Runtime {
    handle: RuntimeHandle,
    joins: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("handle", &self.handle)
            .finish()
    }
}

impl Runtime {
    /// Starts one reactor per core of `opts.cpumask` and the app thread on
    /// the first one.
    pub fn start(opts: RuntimeOptions) -> Result<Runtime> {
        if opts.cpumask.is_empty() {
            return Err(Error::NoReactorForMask(opts.cpumask.to_string()));
        }
        if opts.pin_reactors {
            let allowed = sys::allowed_cpus().map_err(Error::Affinity)?;
            if let Some(c) = opts.cpumask.iter().find(|c| !allowed.contains(c)) {
                return Err(Error::CoreUnavailable(c));
            }
        }
        let _ = clock::tick_rate();
        let mut reactors = Vec::new();
        for (index, core) in opts.cpumask.iter().enumerate() {
            let epoll = Epoll::new().map_err(Error::Epoll)?;
            let wake = EventFd::new().map_err(Error::Epoll)?;
            let timer = TimerFd::new().map_err(Error::Epoll)?;
            epoll.add(wake.fd(), TOKEN_WAKE).map_err(Error::Epoll)?;
            epoll.add(timer.fd(), TOKEN_TIMER).map_err(Error::Epoll)?;
            reactors.push(Arc::new(Reactor::new(
                index,
                core,
                epoll,
                wake,
                timer,
                opts.interrupt_mode,
            )));
        }
        let first = Arc::clone(&reactors[0]);
        let app_mask = CpuSet::single(first.core);
        let shared = Arc::new_cyclic(|weak: &Weak<RuntimeShared>| {
            let runtime: Weak<dyn Any + Send + Sync> = weak.clone();
            let app = ThreadShared::new(
                opts.app_thread_name.clone(),
                app_mask,
                Arc::clone(&first),
                runtime,
            );
            RuntimeShared {
                reactors,
                threads: Mutex::new(Vec::new()),
                stop: AtomicBool::new(false),
                app_thread: ThreadHandle(app),
                opts,
            }
        });
        let handle = RuntimeHandle(shared);
        {
            let app = handle.0.app_thread.clone();
            first.thread_count.fetch_add(1, Ordering::Relaxed);
            handle.0.threads.lock().push(app.clone());
            first.incoming.push(Arc::clone(&app.0));
        }
        let mut joins = Vec::new();
        for r in &handle.0.reactors {
            let rt = Arc::clone(&handle.0);
            let r2 = Arc::clone(r);
            let join = std::thread::Builder::new()
                .name(format!("reactor_{}", r.core))
                .spawn(move || reactor_main(&rt, &r2))
                .map_err(Error::SpawnReactor);
            match join {
                Ok(j) => joins.push(j),
                Err(e) => {
                    handle.stop();
                    for j in joins {
                        let _ = j.join();
                    }
                    return Err(e);
                }
            }
        }
        Ok(Runtime { handle, joins })
    }

    /// A cloneable handle.
    #[must_use]
    pub fn handle(&self) -> RuntimeHandle {
        self.handle.clone()
    }

    /// The app thread.
    #[must_use]
    pub fn app_thread(&self) -> ThreadHandle {
        self.handle.app_thread()
    }

    /// Blocks until some thread calls [`RuntimeHandle::stop`] and every
    /// reactor has ended.
    pub fn wait(mut self) {
        for j in self.joins.drain(..) {
            let _ = j.join();
        }
    }

    /// Stops the reactors and joins them.
    pub fn shutdown(self) {
        self.handle.stop();
        self.wait();
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if !self.joins.is_empty() {
            self.handle.stop();
            for j in self.joins.drain(..) {
                let _ = j.join();
            }
        }
    }
}

/// Marks the reactor dead if its thread unwinds, so that callers blocked on
/// it (`run_sync`, `block_on`) fail instead of waiting forever.
struct DeathWatch<'a>(&'a Reactor);

impl Drop for DeathWatch<'_> {
    fn drop(&mut self) {
        Thread::leave();
        if std::thread::panicking() {
            self.0.dead.store(true, Ordering::Release);
            tracing::error!(core = self.0.core, "reactor thread panicked");
        }
    }
}

// Kept out of line: when the compiler inlined it into the thread's start
// closure (after unrelated changes elsewhere), bdevperf's null randread lost
// 8% with the same instruction count per I/O.
#[inline(never)]
fn reactor_main(rt: &Arc<RuntimeShared>, r: &Arc<Reactor>) {
    let _watch = DeathWatch(r);
    r.tid.store(sys::gettid(), Ordering::Relaxed);
    if rt.opts.pin_reactors {
        if let Err(e) = sys::pin_current_thread(r.core) {
            tracing::warn!(core = r.core, error = %e, "cannot pin reactor");
        }
    }
    let _span = tracing::debug_span!("reactor", core = r.core).entered();
    let mut threads: Vec<Thread> = Vec::new();
    let mut tokens = Vec::with_capacity(32);
    let mut stop_seen: Option<Instant> = None;
    let mut now = clock::ticks();
    let (mut busy_ticks, mut idle_ticks) = (0u64, 0u64);
    loop {
        if !r.incoming.is_empty() {
            while let Some(ts) = r.incoming.pop() {
                threads.push(Thread::adopt(ts));
            }
        }
        let iter_start = now;
        let mut busy = false;
        let mut polled = false;
        for t in &threads {
            // A thread with nothing to do is skipped: no entering, no tick
            // reading (its poll takes no time).
            if !t.has_work(now) {
                continue;
            }
            polled = true;
            let b = t.poll_top(now);
            // One tick reading per polled thread: its end is the next start.
            let end = clock::ticks();
            t.account(b, end.wrapping_sub(now));
            now = end;
            busy |= b;
        }
        if !polled {
            now = clock::ticks();
        }
        if threads.iter().any(Thread::is_exiting) && threads.iter().any(Thread::can_finish_exit) {
            threads.retain(|t| {
                if t.can_finish_exit() {
                    finish_thread(rt, r, t);
                    false
                } else {
                    true
                }
            });
        }
        // Single writer: plain stores, no read-modify-write on the loop.
        let spent = now.wrapping_sub(iter_start);
        if busy {
            busy_ticks += spent;
            r.busy_ticks.store(busy_ticks, Ordering::Relaxed);
        } else {
            idle_ticks += spent;
            r.idle_ticks.store(idle_ticks, Ordering::Relaxed);
        }

        if rt.stop.load(Ordering::Acquire) {
            let started = *stop_seen.get_or_insert_with(Instant::now);
            for t in &threads {
                t.exit();
            }
            if threads.is_empty() && r.incoming.is_empty() {
                break;
            }
            if started.elapsed() > rt.opts.shutdown_grace {
                for t in &threads {
                    tracing::warn!(
                        thread = t.name(),
                        "thread did not release its pollers/channels in time; dropping it"
                    );
                    finish_thread(rt, r, t);
                }
                threads.clear();
                while let Some(ts) = r.incoming.pop() {
                    let t = Thread::adopt(ts);
                    finish_thread(rt, r, &t);
                }
                break;
            }
        }

        if !busy && (rt.opts.interrupt_mode || stop_seen.is_some()) {
            sleep(rt, r, &threads, &mut tokens, stop_seen.is_some());
            let woke = clock::ticks();
            idle_ticks += woke.wrapping_sub(now);
            r.idle_ticks.store(idle_ticks, Ordering::Relaxed);
            now = woke;
        }
    }
}

fn finish_thread(rt: &RuntimeShared, r: &Reactor, t: &Thread) {
    Thread::leave();
    t.finish();
    r.thread_count.fetch_sub(1, Ordering::Relaxed);
    rt.threads.lock().retain(|h| h.id() != t.id());
}

fn sleep(
    rt: &RuntimeShared,
    r: &Reactor,
    threads: &[Thread],
    tokens: &mut Vec<u64>,
    stopping: bool,
) {
    let now = clock::ticks();
    let mut deadline = threads.iter().filter_map(Thread::next_deadline).min();
    if stopping {
        // Re-check exit conditions regularly while shutting down.
        let d = now + clock::us_to_ticks(10_000);
        deadline = Some(deadline.map_or(d, |x| x.min(d)));
    }
    r.sleeping.store(true, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    let pending = !r.incoming.is_empty()
        || threads.iter().any(Thread::has_pending_msgs)
        || (rt.stop.load(Ordering::Acquire) && !stopping);
    if !pending {
        let timeout = match deadline {
            Some(d) if d <= now => Some(Duration::ZERO),
            Some(d) => Some(clock::ticks_to_duration(d - now)),
            None => None,
        };
        match timeout {
            Some(t) if t.is_zero() => {}
            Some(t) => {
                r.timer.arm(t);
                let _ = r.epoll.wait(tokens, -1);
            }
            None => {
                let _ = r.epoll.wait(tokens, -1);
            }
        }
        for tok in tokens.iter() {
            match *tok {
                TOKEN_WAKE => r.wake.drain(),
                TOKEN_TIMER => r.timer.drain(),
                _ => {}
            }
        }
    }
    r.sleeping.store(false, Ordering::SeqCst);
}
