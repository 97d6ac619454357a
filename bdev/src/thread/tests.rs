use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::*;
use crate::clock;

fn rt(mask: &str) -> Runtime {
    // Tests leave pollers registered on purpose; do not wait long for them.
    let opts = RuntimeOptions {
        shutdown_grace: Duration::from_millis(100),
        ..RuntimeOptions::interrupt(mask.parse().unwrap())
    };
    Runtime::start(opts).unwrap()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn start_stop_repeatedly() {
    for _ in 0..20 {
        let r = rt("0x3");
        let name = r
            .app_thread()
            .run_sync(|| Thread::current().unwrap().name().to_string());
        assert_eq!(name.unwrap(), "app_thread");
        r.shutdown();
    }
}

#[test]
fn messages_from_one_sender_arrive_in_order() {
    let r = rt("0x3");
    let h = r.handle();
    let target = h.spawn_thread("target", Some(&CpuSet::single(1))).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    for i in 0..10_000u32 {
        let seen = Arc::clone(&seen);
        target.send_msg(move || seen.lock().push(i)).unwrap();
    }
    target.run_sync(|| ()).unwrap();
    let seen = seen.lock();
    assert_eq!(seen.len(), 10_000);
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
    drop(seen);
    r.shutdown();
}

#[test]
fn many_senders_each_message_exactly_once() {
    const SENDERS: usize = 8;
    const MSGS: usize = 5_000;
    let r = rt("0x3");
    let h = r.handle();
    let targets: Vec<ThreadHandle> = (0..4)
        .map(|i| h.spawn_thread(format!("t{i}"), None).unwrap())
        .collect();
    let counts: Arc<Vec<AtomicUsize>> =
        Arc::new((0..SENDERS * MSGS).map(|_| AtomicUsize::new(0)).collect());
    // Senders are both plain OS threads and lightweight threads.
    let mut joins = Vec::new();
    for s in 0..SENDERS {
        let targets = targets.clone();
        let counts = Arc::clone(&counts);
        let app = h.app_thread();
        joins.push(std::thread::spawn(move || {
            let send_all = move || {
                for m in 0..MSGS {
                    let idx = s * MSGS + m;
                    let counts = Arc::clone(&counts);
                    targets[idx % targets.len()]
                        .send_msg(move || {
                            counts[idx].fetch_add(1, Ordering::Relaxed);
                        })
                        .unwrap();
                }
            };
            if s % 2 == 0 {
                send_all();
            } else {
                app.run_sync(send_all).unwrap();
            }
        }));
    }
    for j in joins {
        j.join().unwrap();
    }
    for t in &targets {
        t.run_sync(|| ()).unwrap();
    }
    assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1));
    r.shutdown();
}

/// A thread on no reactor, polled by the test at the ticks it picks: the
/// poll loop's timing is checked exactly, whatever the machine's load (the
/// reactor passes `now` to `poll_top` the same way).
struct ManualThread(Thread);

impl ManualThread {
    fn new() -> ManualThread {
        let epoll = super::sys::Epoll::new().unwrap();
        let wake = super::sys::EventFd::new().unwrap();
        let timer = super::sys::TimerFd::new().unwrap();
        let reactor = Arc::new(super::shared::Reactor::new(0, 0, epoll, wake, timer, true));
        let runtime: std::sync::Weak<dyn std::any::Any + Send + Sync> =
            std::sync::Weak::<()>::new();
        let ts =
            super::shared::ThreadShared::new("manual".into(), CpuSet::single(0), reactor, runtime);
        ManualThread(Thread::adopt(ts))
    }

    /// One loop iteration at `now`, as the reactor runs it.
    fn poll(&self, now: u64) -> bool {
        let busy = self.0.poll_top(now);
        Thread::leave();
        busy
    }
}

impl Drop for ManualThread {
    fn drop(&mut self) {
        self.0.finish();
    }
}

#[test]
fn timed_poller_fires_once_per_period_and_catches_up() {
    let t = ManualThread::new();
    let count = Rc::new(Cell::new(0u64));
    let c2 = Rc::clone(&count);
    let p = t.0.register_poller("tick", 10_000, move |_| {
        c2.set(c2.get() + 1);
        PollerStatus::Busy
    });
    let period = clock::us_to_ticks(10_000);
    let first = t.0.next_deadline().unwrap();
    // Not before its deadline.
    assert!(!t.poll(first - 1));
    assert_eq!(count.get(), 0);
    // Once per period, at each deadline.
    for k in 0..50 {
        assert!(t.poll(first + k * period));
        assert_eq!(count.get(), k + 1);
        assert!(!t.poll(first + k * period + period / 2));
        assert_eq!(count.get(), k + 1);
    }
    // A reactor held up for 3.5 periods makes up the 3 runs it missed in
    // one iteration (fixed rate), then keeps the old phase.
    let last = first + 49 * period;
    t.poll(last + 3 * period + period / 2);
    assert_eq!(count.get(), 50 + 3);
    assert_eq!(t.0.next_deadline(), Some(last + 4 * period));
    // Held up for more than 10 periods: one run, then a period from now.
    let late = last + 100 * period;
    t.poll(late);
    assert_eq!(count.get(), 50 + 3 + 1);
    assert_eq!(t.0.next_deadline(), Some(late + period));
    p.unregister();
}

#[test]
fn timed_poller_runs_on_a_reactor() {
    let r = rt("0x1");
    let count = Arc::new(AtomicU64::new(0));
    let c2 = Arc::clone(&count);
    r.app_thread()
        .run_sync(move || {
            let t = Thread::current().unwrap();
            // The poller stays registered without its handle.
            drop(t.register_poller("tick", 10_000, move |_| {
                c2.fetch_add(1, Ordering::Relaxed);
                PollerStatus::Busy
            }));
        })
        .unwrap();
    // The reactor's timer wakes it for each run (the period itself is
    // checked exactly above, on a manual thread).
    wait_until("timed poller ran 20 times", || {
        count.load(Ordering::Relaxed) >= 20
    });
    r.shutdown();
}

#[test]
fn poller_unregisters_itself_and_pause_resume() {
    let r = rt("0x1");
    let runs = Arc::new(AtomicU64::new(0));
    let r2 = Arc::clone(&runs);
    let (tx, rx) = mpsc::channel();
    r.app_thread()
        .send_msg(move || {
            let t = Thread::current().unwrap();
            let n = Cell::new(0);
            t.register_poller("self-unreg", 0, move |me| {
                n.set(n.get() + 1);
                r2.fetch_add(1, Ordering::Relaxed);
                if n.get() == 5 {
                    me.unregister();
                    assert!(!me.is_registered());
                    tx.send(()).unwrap();
                }
                PollerStatus::Busy
            });
        })
        .unwrap();
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(runs.load(Ordering::Relaxed), 5);

    // pause / resume of a timed poller
    let hits = Arc::new(AtomicU64::new(0));
    let h2 = Arc::clone(&hits);
    // The resumer waits for the test's word (a resume after a fixed time
    // could come before the test looked, on a loaded machine).
    let go = Arc::new(AtomicBool::new(false));
    let go2 = Arc::clone(&go);
    let paused_count = r
        .app_thread()
        .run_sync(move || {
            let t = Thread::current().unwrap();
            let p = t.register_poller("pausable", 1_000, move |_| {
                h2.fetch_add(1, Ordering::Relaxed);
                PollerStatus::Idle
            });
            p.pause();
            assert!(p.is_paused());
            let stats = thread_stats(&t.handle(), clock::ticks());
            // Leak the handle into a poller that resumes it later.
            let p2 = p.clone();
            t.register_poller("resumer", 5_000, move |me| {
                if go2.load(Ordering::SeqCst) {
                    p2.resume();
                    me.unregister();
                }
                PollerStatus::Idle
            });
            stats.paused_pollers_count
        })
        .unwrap();
    assert_eq!(paused_count, 1);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(hits.load(Ordering::Relaxed), 0, "paused poller ran");
    go.store(true, Ordering::SeqCst);
    wait_until("resumed poller runs", || hits.load(Ordering::Relaxed) > 3);
    r.shutdown();
}

struct Ctx {
    thread_id: u64,
    destroyed: Arc<AtomicUsize>,
}

impl Drop for Ctx {
    fn drop(&mut self) {
        assert_eq!(
            current_thread_id(),
            self.thread_id,
            "destroyed on a foreign thread"
        );
        self.destroyed.fetch_add(1, Ordering::Relaxed);
    }
}

fn counting_device(created: &Arc<AtomicUsize>, destroyed: &Arc<AtomicUsize>) -> IoDevice<Ctx> {
    let (c, d) = (Arc::clone(created), Arc::clone(destroyed));
    IoDevice::register("counting", move || {
        c.fetch_add(1, Ordering::Relaxed);
        Ok(Ctx {
            thread_id: current_thread_id(),
            destroyed: Arc::clone(&d),
        })
    })
}

#[test]
fn channel_created_once_per_thread_destroyed_on_last_put() {
    let r = rt("0x3");
    let created = Arc::new(AtomicUsize::new(0));
    let destroyed = Arc::new(AtomicUsize::new(0));
    let dev = counting_device(&created, &destroyed);
    let d2 = dev.clone();
    let (c, d) = (Arc::clone(&created), Arc::clone(&destroyed));
    r.app_thread()
        .run_sync(move || {
            let a = d2.get_channel().unwrap();
            let b = d2.get_channel().unwrap();
            assert_eq!(c.load(Ordering::Relaxed), 1);
            assert_eq!(a.ref_count(), 2);
            drop(a);
            assert_eq!(d.load(Ordering::Relaxed), 0);
            drop(b);
            assert_eq!(d.load(Ordering::Relaxed), 1);
            let again = d2.get_channel().unwrap();
            assert_eq!(c.load(Ordering::Relaxed), 2);
            drop(again);
        })
        .unwrap();
    assert_eq!(destroyed.load(Ordering::Relaxed), 2);
    assert_eq!(dev.channel_count(), 0);
    r.shutdown();
}

#[test]
fn for_each_channel_visits_each_holder_once_in_sequence() {
    let r = rt("0x3");
    let h = r.handle();
    let created = Arc::new(AtomicUsize::new(0));
    let destroyed = Arc::new(AtomicUsize::new(0));
    let dev = counting_device(&created, &destroyed);
    let threads: Vec<ThreadHandle> = (0..6)
        .map(|i| h.spawn_thread(format!("w{i}"), None).unwrap())
        .collect();
    // Each holder keeps its channel in a thread-local slot.
    let slots: Vec<_> = threads
        .iter()
        .map(|t| {
            let dev = dev.clone();
            t.run_sync(move || {
                let ch = dev.get_channel().unwrap();
                let t = Thread::current().unwrap();
                // Park the channel in a paused poller so it stays alive.
                let p = t.register_poller("hold", 1_000_000, move |_| {
                    let _ = &ch;
                    PollerStatus::Idle
                });
                p.pause();
                t.id()
            })
            .unwrap()
        })
        .collect();
    let visits = Arc::new(Mutex::new(Vec::new()));
    let in_visit = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let (v2, iv) = (Arc::clone(&visits), Arc::clone(&in_visit));
    let dev2 = dev.clone();
    r.app_thread()
        .send_msg(move || {
            let origin = current_thread_id();
            dev2.for_each_channel_async(
                move |ch, step| {
                    assert!(!iv.swap(true, Ordering::SeqCst), "visits overlapped");
                    assert_eq!(ch.thread_id(), current_thread_id());
                    v2.lock().push(current_thread_id());
                    // Finish the step later, from a poller, to prove async steps.
                    let t = Thread::current().unwrap();
                    let iv = Arc::clone(&iv);
                    let step = Cell::new(Some(step));
                    t.register_poller("later", 100, move |me| {
                        iv.store(false, Ordering::SeqCst);
                        if let Some(s) = step.take() {
                            s.next();
                        }
                        me.unregister();
                        PollerStatus::Busy
                    });
                },
                move || {
                    assert_eq!(current_thread_id(), origin);
                    tx.send(()).unwrap();
                },
            );
        })
        .unwrap();
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let mut v = visits.lock().clone();
    v.sort_unstable();
    let mut expect = slots.clone();
    expect.sort_unstable();
    assert_eq!(v, expect);
    r.shutdown();
}

#[test]
fn unregister_waits_for_outstanding_channels() {
    let r = rt("0x3");
    let h = r.handle();
    let created = Arc::new(AtomicUsize::new(0));
    let destroyed = Arc::new(AtomicUsize::new(0));
    let dev = counting_device(&created, &destroyed);
    let t = h.spawn_thread("holder", Some(&CpuSet::single(1))).unwrap();
    let d2 = dev.clone();
    // The holder keeps its channel until told to drop it.
    let release = Arc::new(AtomicBool::new(false));
    let rel2 = Arc::clone(&release);
    t.run_sync(move || {
        let ch = Cell::new(Some(d2.get_channel().unwrap()));
        Thread::current()
            .unwrap()
            .register_poller("holder", 1_000, move |me| {
                if rel2.load(Ordering::Relaxed) {
                    ch.take();
                    me.unregister();
                }
                PollerStatus::Idle
            });
    })
    .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let done2 = Arc::clone(&done);
    let d3 = dev.clone();
    r.app_thread()
        .run_sync(move || {
            d3.unregister(move || {
                done2.store(true, Ordering::SeqCst);
            });
            assert!(d3.get_channel().is_err());
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !done.load(Ordering::SeqCst),
        "unregister completed with a live channel"
    );
    release.store(true, Ordering::Relaxed);
    wait_until("unregister done", || done.load(Ordering::SeqCst));
    assert_eq!(destroyed.load(Ordering::Relaxed), 1);
    r.shutdown();
}

#[test]
fn thread_exit_waits_for_pollers_and_channels() {
    let r = rt("0x3");
    let h = r.handle();
    let t = h.spawn_thread("exiting", None).unwrap();
    let created = Arc::new(AtomicUsize::new(0));
    let destroyed = Arc::new(AtomicUsize::new(0));
    let dev = counting_device(&created, &destroyed);
    let d2 = dev.clone();
    t.run_sync(move || {
        let th = Thread::current().unwrap();
        let ch = Cell::new(Some(d2.get_channel().unwrap()));
        let n = Cell::new(0);
        th.register_poller("slow-release", 1_000, move |me| {
            n.set(n.get() + 1);
            if n.get() == 20 {
                ch.take();
                me.unregister();
            }
            PollerStatus::Idle
        });
        th.exit();
    })
    .unwrap();
    assert!(!t.is_exited());
    wait_until("thread exit", || t.is_exited());
    assert_eq!(destroyed.load(Ordering::Relaxed), 1);
    assert!(t.send_msg(|| ()).is_err());
    assert!(!h.threads().iter().any(|x| x.id() == t.id()));
    r.shutdown();
}

#[test]
fn for_each_thread_visits_all_then_done_on_origin() {
    let r = rt("0x3");
    let h = r.handle();
    for i in 0..4 {
        h.spawn_thread(format!("x{i}"), None).unwrap();
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = Arc::clone(&seen);
    let (tx, rx) = mpsc::channel();
    let h2 = h.clone();
    r.app_thread()
        .send_msg(move || {
            let origin = current_thread_id();
            h2.for_each_thread(
                move |t| s2.lock().push(t.id()),
                move || {
                    assert_eq!(current_thread_id(), origin);
                    tx.send(()).unwrap();
                },
            );
        })
        .unwrap();
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(seen.lock().len(), 5);
    r.shutdown();
}

#[test]
fn async_tasks_run_on_the_thread() {
    let r = rt("0x1");
    let v = r
        .app_thread()
        .block_on(|| async {
            let a = std::future::ready(20).await;
            a + 22
        })
        .unwrap();
    assert_eq!(v, 42);
    r.shutdown();
}

fn thread_cpu_ns() -> u64 {
    // SAFETY: getrusage writes a rusage struct we own; RUSAGE_THREAD measures
    // the calling thread only.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &raw mut ru);
        ru
    };
    let tv = |t: libc::timeval| {
        u64::try_from(t.tv_sec).unwrap() * 1_000_000_000 + u64::try_from(t.tv_usec).unwrap() * 1_000
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[test]
fn interrupt_mode_idle_reactors_sleep_and_still_deliver() {
    let r = rt("0x3");
    let h = r.handle();
    let t1 = h.spawn_thread("idle1", Some(&CpuSet::single(1))).unwrap();
    // A slow timed poller must not keep the reactor awake between runs.
    r.app_thread()
        .run_sync(|| {
            Thread::current()
                .unwrap()
                .register_poller("slow", 100_000, |_| PollerStatus::Idle);
        })
        .unwrap();
    let before: Vec<u64> = [r.app_thread(), t1.clone()]
        .iter()
        .map(|t| t.run_sync(thread_cpu_ns).unwrap())
        .collect();
    let wall = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let after: Vec<u64> = [r.app_thread(), t1.clone()]
        .iter()
        .map(|t| t.run_sync(thread_cpu_ns).unwrap())
        .collect();
    let wall_ns = u64::try_from(wall.elapsed().as_nanos()).unwrap();
    for (b, a) in before.iter().zip(&after) {
        let used = a - b;
        assert!(
            used * 20 < wall_ns,
            "idle reactor used {used} ns of CPU over {wall_ns} ns (>= 5%)"
        );
    }
    // Still delivers.
    assert_eq!(t1.run_sync(|| 7).unwrap(), 7);
    r.shutdown();
}

#[test]
fn stats_count_pollers_and_ticks() {
    let r = rt("0x1");
    let h = r.handle();
    r.app_thread()
        .run_sync(|| {
            let t = Thread::current().unwrap();
            t.register_poller("a", 0, |me| {
                me.unregister();
                PollerStatus::Busy
            });
            t.register_poller("b", 50_000, |_| PollerStatus::Idle);
        })
        .unwrap();
    wait_until("active poller gone", || {
        h.thread_stats()[0].active_pollers_count == 0
    });
    // The count drops inside the poll that ran "a"; that poll's ticks are
    // added once it returns. A message runs in a later poll: its answer
    // means they are in.
    r.app_thread().run_sync(|| ()).unwrap();
    let s = &h.thread_stats()[0];
    assert_eq!(s.timed_pollers_count, 1);
    assert!(s.busy > 0);
    let rs = h.reactor_stats();
    assert_eq!(rs.len(), 1);
    assert!(rs[0].in_interrupt);
    assert!(rs[0].tid > 0);
    r.shutdown();
}

#[test]
fn a_thread_reaches_its_runtime() {
    let r = rt("0x1");
    let t = r.handle().spawn_thread("worker", None).unwrap();
    for h in [r.app_thread(), t] {
        let (cores, interrupt) = h
            .run_sync(|| {
                let rt = Thread::current().unwrap().runtime().unwrap();
                (rt.cores(), rt.interrupt_mode())
            })
            .unwrap();
        assert_eq!(cores, vec![0]);
        assert!(interrupt);
    }
    r.shutdown();
}

#[test]
fn spawn_thread_outside_mask_fails() {
    let r = rt("0x1");
    let err = r.handle().spawn_thread("x", Some(&CpuSet::single(1)));
    assert!(err.is_err());
    r.shutdown();
}

#[test]
fn io_channels_report_device_names_and_refs() {
    let r = rt("0x1");
    let dev = IoDevice::register("named_dev", || Ok(7u32));
    let d2 = dev.clone();
    let (names, after) = r
        .app_thread()
        .run_sync(move || {
            let t = Thread::current().unwrap();
            let a = d2.get_channel().unwrap();
            let b = a.clone();
            let names = t.io_channels();
            drop((a, b));
            (names, t.io_channels())
        })
        .unwrap();
    assert_eq!(names, vec![("named_dev".to_string(), 2)]);
    assert!(after.is_empty());
    r.shutdown();
}

#[test]
fn a_panic_on_a_reactor_fails_callers_instead_of_hanging() {
    let r = rt("0x1");
    let app = r.app_thread();
    let err = app.run_sync(|| {
        if current_thread_id() != 0 {
            panic!("test panic on a reactor");
        }
    });
    assert!(err.is_err());
    assert!(app.run_sync(|| ()).is_err(), "dead reactor still answers");
    drop(r);
}
