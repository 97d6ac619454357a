//! Runtime micro-benchmarks (polling mode):
//! * cross-reactor message rate: a thread on core 0 sends to a thread on
//!   core 1 (throughput), and a ping-pong between them (round trip);
//! * active-poller overhead: ns per idle poller per loop iteration.
//!
//! `runtime [messages] [pollers]`

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use bdevkit::thread::{CpuSet, PollerStatus, Runtime, RuntimeOptions, Thread, ThreadHandle};

fn message_rate(rt: &Runtime, n: u64) {
    let h = rt.handle();
    let cores = h.cores();
    let far = *cores.last().unwrap_or(&0);
    let target = h
        .spawn_thread("sink", Some(&CpuSet::single(far)))
        .expect("sink thread");
    let got = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let (t2, g2) = (target.clone(), Arc::clone(&got));
    let start = Instant::now();
    rt.app_thread()
        .send_msg(move || {
            for _ in 0..n {
                let g = Arc::clone(&g2);
                let tx = tx.clone();
                let _ = t2.send_msg(move || {
                    if g.fetch_add(1, Ordering::Relaxed) + 1 == n {
                        let _ = tx.send(());
                    }
                });
            }
        })
        .expect("send");
    rx.recv_timeout(Duration::from_secs(120))
        .expect("messages delivered");
    let el = start.elapsed();
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let rate = n as f64 / el.as_secs_f64();
    println!(
        "cross-reactor messages: {n} in {:.3} s = {:.2} M msg/s (core 0 -> core {far})",
        el.as_secs_f64(),
        rate / 1e6
    );
    let rounds = n / 10;
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    let app = rt.app_thread();
    ping(app.clone(), target, rounds, tx);
    rx.recv_timeout(Duration::from_secs(120))
        .expect("ping-pong done");
    let el = start.elapsed();
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let rtt = el.as_nanos() as f64 / rounds as f64;
    println!("ping-pong between reactors: {rounds} round trips, {rtt:.0} ns per round trip");
}

fn ping(home: ThreadHandle, far: ThreadHandle, left: u64, done: mpsc::Sender<()>) {
    if left == 0 {
        let _ = done.send(());
        return;
    }
    let far2 = far.clone();
    let _ = far.send_msg(move || {
        let h2 = home.clone();
        let _ = home.send_msg(move || ping(h2, far2, left - 1, done));
    });
}

fn poller_overhead(rt: &Runtime, pollers: u32) {
    for k in [0, pollers] {
        let (tx, rx) = mpsc::channel();
        rt.app_thread()
            .send_msg(move || {
                let t = Thread::current().expect("on a thread");
                let mut idle = Vec::new();
                for i in 0..k {
                    idle.push(t.register_poller(format!("idle{i}"), 0, |_| PollerStatus::Idle));
                }
                let iters = Rc::new(Cell::new(0u64));
                let start = Instant::now();
                let tx = Cell::new(Some(tx));
                t.register_poller("counter", 0, move |me| {
                    iters.set(iters.get() + 1);
                    if start.elapsed() >= Duration::from_secs(1) {
                        me.unregister();
                        for p in &idle {
                            p.unregister();
                        }
                        if let Some(tx) = tx.take() {
                            let _ = tx.send((iters.get(), start.elapsed()));
                        }
                    }
                    PollerStatus::Busy
                });
            })
            .expect("send");
        let (iters, el) = rx.recv().expect("poller run");
        #[expect(clippy::cast_precision_loss, reason = "display")]
        let ns = el.as_nanos() as f64 / iters as f64;
        println!("loop iteration with {k} idle active pollers: {ns:.1} ns");
        if k > 0 {
            println!(
                "  => {:.2} ns per idle active poller per iteration",
                ns / f64::from(k)
            );
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let pollers: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100);
    let mask: CpuSet = if std::thread::available_parallelism().map_or(1, usize::from) > 1 {
        "0x3".parse().expect("mask")
    } else {
        CpuSet::single(0)
    };
    let rt = Runtime::start(RuntimeOptions {
        cpumask: mask,
        ..RuntimeOptions::default()
    })
    .expect("runtime");
    message_rate(&rt, n);
    poller_overhead(&rt, pollers);
    rt.shutdown();
}
