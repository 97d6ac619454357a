//! The superblock on the members: reading a member's copy, and writing the
//! raid's after every member-state change.
//!
//! One writer runs per raid, on its home thread: it takes a snapshot of
//! the member states under the control lock (with the `sb_dirty`
//! generation it covers), writes it to every member that is present and
//! not failed (block 0, then a flush where the member has one), records it
//! as the raid's superblock and raises `sb_durable` to that generation;
//! then it runs again if more changed meanwhile. A member that fails the
//! write is failed (raid1), which is itself a change, so the next round
//! records it. Waiters (a raid1 write's completion, a removal, the end of
//! a rebuild) run once `sb_durable` reaches their generation.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bdevkit::bdev::module::{BdevChannel, IoType};
use bdevkit::dma::DmaBuf;
use bdevkit::thread::Thread;

use crate::raid::{DurableWaiter, Raid, MEMBER_OK, MEMBER_REBUILDING};
use crate::sb::{SbError, Superblock, MAX_LEN};
use crate::wait::callback;

/// Member `i` failed an I/O: marks it failed (raid1, see
/// [`Raid::member_failed`]) and has the superblock record it. Returns
/// whether the member is out.
pub(crate) fn fail_member(raid: &Arc<Raid>, i: usize) -> bool {
    let out = raid.member_failed(i);
    request(raid);
    out
}

/// Has the superblock written if a member state changed since the last
/// write (superblock raids; nothing otherwise). Any thread.
pub(crate) fn request(raid: &Arc<Raid>) {
    if !raid.superblock || raid.sb_behind().is_none() {
        return;
    }
    {
        let mut ctl = raid.ctl.lock();
        if ctl.persisting {
            return;
        }
        ctl.persisting = true;
    }
    let r = Arc::clone(raid);
    let run = move || {
        if let Some(t) = Thread::current() {
            t.spawn_local(write_loop(r));
        }
    };
    match &raid.home {
        Some(h) if Thread::current().map(|t| t.id()) != Some(h.id()) => {
            if h.send_msg(run).is_err() {
                raid.ctl.lock().persisting = false;
            }
        }
        _ => run(),
    }
}

/// Runs `f` once the superblock records generation `gen` (at once if it
/// does already; `true` if written, `false` if it could not be).
pub(crate) fn when_durable(raid: &Arc<Raid>, gen: u64, f: DurableWaiter) {
    {
        let mut ctl = raid.ctl.lock();
        if raid.sb_durable.load(Ordering::Acquire) < gen {
            ctl.durable_waiters.push((gen, f));
            drop(ctl);
            request(raid);
            return;
        }
    }
    f(true);
}

/// Writes the superblock now (raising its sequence number even if no
/// member state changed: a resize, a new member's slot) and waits until
/// it is on the members. `true` when at least one member took it.
pub(crate) async fn write_now(raid: &Arc<Raid>) -> bool {
    if !raid.superblock {
        return true;
    }
    let gen = {
        let _ctl = raid.ctl.lock();
        raid.sb_dirty.fetch_add(1, Ordering::AcqRel) + 1
    };
    let r = Arc::clone(raid);
    callback(move |done| when_durable(&r, gen, Box::new(done))).await
}

/// The writer: snapshot, write, record, repeat while behind.
async fn write_loop(raid: Arc<Raid>) {
    loop {
        let (gen, sb, targets) = {
            let mut ctl = raid.ctl.lock();
            let gen = raid.sb_dirty.load(Ordering::Acquire);
            if raid.sb_durable.load(Ordering::Acquire) >= gen {
                ctl.persisting = false;
                return;
            }
            let Some(sb) = raid.sb_snapshot(&ctl) else {
                // Not started yet: nothing to write; nobody may wait.
                ctl.persisting = false;
                raid.sb_durable.store(gen, Ordering::Release);
                let w = take_waiters(&mut ctl.durable_waiters, gen);
                drop(ctl);
                w.into_iter().for_each(|f| f(true));
                return;
            };
            let targets: Vec<(usize, BdevChannel)> = ctl
                .members
                .iter()
                .enumerate()
                .filter(|(i, _)| {
                    matches!(
                        raid.member_state[*i].load(Ordering::Acquire),
                        MEMBER_OK | MEMBER_REBUILDING
                    )
                })
                .filter_map(|(i, m)| Some((i, m.as_ref()?.desc.get_io_channel().ok()?)))
                .collect();
            (gen, sb, targets)
        };
        let mut written = 0;
        for (slot, ch) in &targets {
            match write_copy(ch, &sb).await {
                Ok(()) => written += 1,
                Err(why) => {
                    tracing::error!(raid = %raid.name, slot, why, "superblock write failed");
                    raid.member_failed(*slot);
                }
            }
        }
        let ok = written > 0;
        if !ok {
            tracing::error!(raid = %raid.name, seq = sb.seq_number,
                "the superblock reached no member");
        } else {
            tracing::debug!(raid = %raid.name, seq = sb.seq_number, members = written,
                "superblock written");
        }
        let waiters = {
            let mut ctl = raid.ctl.lock();
            if ok {
                ctl.sb = Some(sb);
            }
            raid.sb_durable.store(gen, Ordering::Release);
            take_waiters(&mut ctl.durable_waiters, gen)
        };
        for f in waiters {
            f(ok);
        }
    }
}

fn take_waiters(all: &mut Vec<(u64, DurableWaiter)>, gen: u64) -> Vec<DurableWaiter> {
    let mut due = Vec::new();
    let mut i = 0;
    while i < all.len() {
        if all[i].0 <= gen {
            due.push(all.swap_remove(i).1);
        } else {
            i += 1;
        }
    }
    due
}

/// Writes `sb` at block 0 of the member behind `ch`, then flushes it.
pub(crate) async fn write_copy(ch: &BdevChannel, sb: &Superblock) -> Result<(), String> {
    let bytes = sb.encode(ch.bdev().block_size());
    let mut buf = DmaBuf::new(bytes.len()).map_err(|e| e.to_string())?;
    buf.as_mut_slice().copy_from_slice(&bytes);
    put(ch, sb, buf).await
}

/// Zeroes the superblock blocks of the member behind `ch`
/// (`bdev_raid_delete` with `clear_sb`).
pub(crate) async fn clear_copy(ch: &BdevChannel, sb: &Superblock) -> Result<(), String> {
    let bs = ch.bdev().block_size();
    let len = usize::try_from(sb.blocks(bs) * u64::from(bs)).map_err(|e| e.to_string())?;
    put(ch, sb, DmaBuf::new(len).map_err(|e| e.to_string())?).await
}

/// Writes `buf` over the superblock's blocks, then flushes them where the
/// member has a flush.
async fn put(ch: &BdevChannel, sb: &Superblock, buf: DmaBuf) -> Result<(), String> {
    let bdev = ch.bdev();
    let blocks = sb.blocks(bdev.block_size());
    ch.write(0, blocks, buf)
        .await
        .map_err(|f| format!("write: {}", f.error))?;
    if bdev.supports(IoType::Flush) {
        ch.flush(0, blocks)
            .await
            .map_err(|e| format!("flush: {e}"))?;
    }
    Ok(())
}

/// Reads the superblock of the bdev behind `ch`: `Ok(None)` when it has
/// none, `Err` when it has a damaged or unreadable one (with why).
pub(crate) async fn read_sb(ch: &BdevChannel) -> Result<Option<Superblock>, String> {
    let bdev = ch.bdev();
    let bs = u64::from(bdev.block_size());
    let mut want = bs.max(1);
    loop {
        let blocks = want.div_ceil(bs).min(bdev.num_blocks());
        if blocks == 0 {
            return Ok(None);
        }
        let len = usize::try_from(blocks * bs).map_err(|e| e.to_string())?;
        let buf = DmaBuf::new(len).map_err(|e| e.to_string())?;
        let buf = ch
            .read(0, blocks, buf)
            .await
            .map_err(|f| format!("read: {}", f.error))?;
        match Superblock::decode(buf.as_slice()) {
            Ok(sb) => return Ok(Some(sb)),
            Err(SbError::NoSignature) => return Ok(None),
            Err(SbError::Short(n)) if (n as u64) > want && n <= MAX_LEN => want = n as u64,
            Err(SbError::Short(_)) => return Err("superblock beyond the bdev's end".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
}
