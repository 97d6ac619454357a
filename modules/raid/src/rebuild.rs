//! raid1 rebuild: copies every block from a working member to a member
//! added by `bdev_raid_add_base_bdev`, window by window, while the raid
//! keeps serving I/O.
//!
//! The new member is attached to every channel first, so that writes go
//! to it from then on (reads do not, until the rebuild is done). Each
//! window (`process_window_size_kb`) is then *quiesced*: raid1 writes to it
//! wait on their channel, writes already in flight there are waited for,
//! the window is read from a working member and written to the new one,
//! and the held writes go out. A write therefore never lands between the
//! copy's read and its write: the copy cannot put old data over new.
//!
//! The rebuild runs as a task on the thread that asked for it and stops
//! when the new member fails or goes away, when no working member can be
//! read, or when the raid goes away; the raid then stays degraded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bdevkit::dma::DmaBuf;
use bdevkit::thread::Thread;

use crate::config::RaidState;
use crate::io::RaidBdev;
use crate::persist;
use crate::raid::{Raid, RebuildProgress};
use crate::wait::{callback, sleep_us};

/// How often a quiesce checks whether the window's writes drained.
const DRAIN_POLL_US: u64 = 100;

/// Starts the rebuild of slot `target` on the current thread.
pub(crate) fn start(raid: Arc<Raid>, bdev: Arc<RaidBdev>, target: usize) {
    let Some(t) = Thread::current() else {
        tracing::error!(raid = %raid.name(), "raid rebuild must start on a bdevkit thread");
        raid.set_rebuild(None);
        raid.rebuild_task_ended();
        return;
    };
    t.spawn_local(async move {
        let started = Instant::now();
        // A superblock raid first records the new member's UUID in its
        // slot (not in sync): after a crash, examine knows it and rebuilds
        // it again.
        let r = if persist::write_now(&raid).await {
            copy_all(&raid, &bdev, target).await
        } else {
            Err("the superblock could not be written".into())
        };
        // Never leave writes held, whatever happened.
        callback(|done| bdev.unquiesce(move || done(()))).await;
        match r {
            Ok(blocks) => {
                tracing::info!(raid = %raid.name(), slot = target, blocks,
                    secs = started.elapsed().as_secs_f64(), "raid rebuild copied every block");
                raid.rebuild_done(target);
                // Now the superblock says the member is in sync.
                if !persist::write_now(&raid).await {
                    tracing::error!(raid = %raid.name(), slot = target,
                        "cannot record the rebuilt member in the superblock");
                }
            }
            Err(why) => {
                tracing::warn!(raid = %raid.name(), slot = target, why, "raid rebuild stopped");
                raid.set_rebuild(None);
            }
        }
        raid.rebuild_task_ended();
    });
}

async fn copy_all(raid: &Arc<Raid>, bdev: &RaidBdev, target: usize) -> Result<u64, String> {
    callback(|done| bdev.attach_member(target, move || done(()))).await;
    let total = raid
        .rebuild_progress()
        .map(|p| p.total)
        .ok_or("the rebuild was cancelled")?;
    let tgt = raid
        .member_channel(target)
        .ok_or("the new member went away")?;
    let tgt_off = raid.data_offset(target);
    let bs = u64::from(tgt.bdev().block_size());
    let (window_kb, max_mib_s) = raid.process_options();
    let window = (u64::from(window_kb) * 1024 / bs).max(1);
    let buf_len = usize::try_from(window * bs).map_err(|e| e.to_string())?;
    let mut buf = Some(DmaBuf::new(buf_len).map_err(|e| format!("rebuild buffer: {e}"))?);
    let started = Instant::now();
    let mut off = 0u64;
    while off < total {
        if !raid.member_rebuilding(target) {
            return Err("the new member failed or was removed".into());
        }
        if !matches!(raid.state(), RaidState::Online | RaidState::Degraded) {
            return Err("the raid went away".into());
        }
        let n = window.min(total - off);
        callback(|done| bdev.quiesce(off, off + n, move || done(()))).await;
        while callback(|done| bdev.in_window(done)).await > 0 {
            sleep_us(DRAIN_POLL_US).await;
        }
        let data = read_window(raid, off, n, buf.take()).await?;
        match tgt.write(tgt_off + off, n, data).await {
            Ok(b) => buf = Some(b),
            Err(f) => {
                persist::fail_member(raid, target);
                return Err(format!("writing the new member failed: {}", f.error));
            }
        }
        callback(|done| bdev.unquiesce(move || done(()))).await;
        off += n;
        raid.set_rebuild(Some(RebuildProgress {
            target,
            done: off,
            total,
        }));
        if max_mib_s > 0 {
            // Stay under the bandwidth cap on average.
            let due = Duration::from_secs_f64(
                (off * bs) as f64 / (f64::from(max_mib_s) * 1024.0 * 1024.0),
            );
            // In short naps, so that a raid going away is noticed soon.
            while let Some(wait) = due.checked_sub(started.elapsed()) {
                if !matches!(raid.state(), RaidState::Online | RaidState::Degraded)
                    || !raid.member_rebuilding(target)
                {
                    break;
                }
                let nap = wait.min(Duration::from_millis(20));
                sleep_us(u64::try_from(nap.as_micros()).unwrap_or(u64::MAX)).await;
            }
        }
    }
    Ok(total)
}

/// Reads blocks `off..off + n` from a working member (another one when a
/// read fails, which marks that member failed).
async fn read_window(
    raid: &Arc<Raid>,
    off: u64,
    n: u64,
    mut buf: Option<DmaBuf>,
) -> Result<DmaBuf, String> {
    for src in raid.rebuild_sources() {
        let Some(ch) = raid.member_channel(src) else {
            continue;
        };
        let b = match buf.take() {
            Some(b) => b,
            None => DmaBuf::new(
                usize::try_from(n * u64::from(ch.bdev().block_size()))
                    .map_err(|e| e.to_string())?,
            )
            .map_err(|e| format!("rebuild buffer: {e}"))?,
        };
        match ch.read(raid.data_offset(src) + off, n, b).await {
            Ok(b) => return Ok(b),
            Err(f) => {
                tracing::warn!(raid = %raid.name(), slot = src, error = %f.error,
                    "rebuild read failed");
                persist::fail_member(raid, src);
                buf = f.buf;
            }
        }
    }
    Err("no working member could be read".into())
}
