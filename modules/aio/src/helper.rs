//! A small pool of helper OS threads for the blocking calls AIO cannot do
//! asynchronously: `fallocate` (unmap, write zeroes) and `fdatasync` on
//! files whose kernel lacks `IOCB_CMD_FDSYNC` support. Reactors never
//! block; they hand the call here and get the result back as a message.

use std::sync::{mpsc, Arc, Mutex, OnceLock};

/// A blocking call to run off the reactor.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// Helper threads: two, so that one slow `fdatasync` does not hold up
/// every other bdev's unmaps.
const HELPERS: usize = 2;

static POOL: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();

fn start() -> Option<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let mut started = 0;
    for i in 0..HELPERS {
        let rx = Arc::clone(&rx);
        let spawned = std::thread::Builder::new()
            .name(format!("aio-helper{i}"))
            .spawn(move || loop {
                // The lock is held only while waiting for the next job.
                let job = match rx.lock() {
                    Ok(g) => g.recv(),
                    Err(_) => return,
                };
                match job {
                    Ok(job) => job(),
                    Err(_) => return,
                }
            });
        match spawned {
            Ok(_) => started += 1,
            Err(e) => tracing::error!(error = %e, "cannot start aio helper thread"),
        }
    }
    (started > 0).then_some(tx)
}

/// Runs `job` on a helper thread; gives it back if there is none.
pub(crate) fn run(job: Job) -> Result<(), Job> {
    match POOL.get_or_init(start) {
        Some(tx) => tx.send(job).map_err(|e| e.0),
        None => Err(job),
    }
}
