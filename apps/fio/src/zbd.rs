//! fio's zone hooks (`zonemode=zbd`): the zoned model, zone reports, write
//! pointer resets and the open-zone limit of a bdev, in fio's units
//! (bytes) and codes (`enum zbd_zone_type`, `enum zbd_zone_cond`).
//!
//! fio calls them on the control path: reports while it sets the job's
//! files up (on fio's main thread before the job's thread exists, with
//! `create_serialize`, the default), resets between I/Os when a zone is to
//! be written again (after the zone's I/O completed). Each runs as a
//! future on a bdevkit thread: the job's own (polled here, as `getevents`
//! polls it) once the job has one, else the app thread. It opens the bdev
//! for that one request and closes it after.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bdevkit::bdev::{BdevManager, ZoneAction, ZoneInfo, ZoneState, ZoneType};
use bdevkit::thread::Thread;

use crate::global;
use crate::job::Job;

/// How long a zone request may take before fio gets `ETIMEDOUT`.
const ZONE_TIMEOUT: Duration = Duration::from_secs(30);

/// Most zones one report asks for (fio asks for up to 4096 at a time).
const MAX_REPORT: u64 = 4096;

/// fio's `enum zbd_zoned_model`: no zones (fio may emulate them) or host
/// managed.
pub const MODEL_NONE: i32 = 1;
/// `ZBD_HOST_MANAGED`.
pub const MODEL_HOST_MANAGED: i32 = 3;

/// A zone as fio's `struct zbd_zone` holds it (bytes, fio's codes); the
/// shim's `struct bk_zone`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FioZone {
    /// First byte.
    pub start: u64,
    /// Write pointer.
    pub wp: u64,
    /// Zone size.
    pub len: u64,
    /// Writable bytes.
    pub capacity: u64,
    /// `ZBD_ZONE_TYPE_*`.
    pub zone_type: i32,
    /// `ZBD_ZONE_COND_*`.
    pub cond: i32,
}

impl FioZone {
    /// `info` in bytes of `block_size`, for zones of `zone_size` blocks.
    fn of(info: &ZoneInfo, block_size: u64, zone_size: u64) -> FioZone {
        let conventional = info.zone_type == ZoneType::Conventional;
        let cond = if conventional {
            0 // NOT_WP
        } else {
            match info.state {
                ZoneState::Empty => 0x1,
                ZoneState::ImplicitOpen => 0x2,
                ZoneState::ExplicitOpen => 0x3,
                ZoneState::Closed => 0x4,
                ZoneState::ReadOnly => 0xD,
                ZoneState::Full => 0xE,
                ZoneState::Offline => 0xF,
            }
        };
        // ZNS leaves a full zone's pointer undefined; fio expects its end.
        let wp = if info.state == ZoneState::Full || conventional {
            info.zone_id + info.capacity
        } else {
            info.write_pointer
        };
        FioZone {
            start: info.zone_id * block_size,
            wp: wp * block_size,
            len: zone_size * block_size,
            capacity: info.capacity * block_size,
            zone_type: info.zone_type as i32,
            cond,
        }
    }
}

/// Runs the future `make` builds (given the bdev layer) on a bdevkit
/// thread: the job's when the caller is on it, else the app thread.
/// Errors are positive errnos.
fn run<R, F, M>(job: Option<&Job>, make: M) -> Result<R, i32>
where
    M: FnOnce(BdevManager) -> F + Send + 'static,
    F: std::future::Future<Output = Result<R, i32>> + 'static,
    R: Send + 'static,
{
    let h = global::running().ok_or(libc::ENODEV)?;
    let here = Thread::current();
    match (job, here) {
        (Some(job), Some(t)) => {
            let out: Rc<RefCell<Option<Result<R, i32>>>> = Rc::new(RefCell::new(None));
            let slot = Rc::clone(&out);
            let fut = make(h.mgr.clone());
            t.spawn_local(async move {
                *slot.borrow_mut() = Some(fut.await);
            });
            let start = Instant::now();
            loop {
                if let Some(r) = out.borrow_mut().take() {
                    return r;
                }
                if start.elapsed() > ZONE_TIMEOUT {
                    return Err(libc::ETIMEDOUT);
                }
                job.poll();
            }
        }
        (_, Some(_)) => Err(libc::EDEADLK),
        (_, None) => {
            let mgr = h.mgr.clone();
            h.app_thread
                .block_on(move || make(mgr))
                .map_err(|_| libc::ENODEV)?
        }
    }
}

/// fio's zoned model of bdev `name`.
pub fn model(name: &str) -> Result<i32, i32> {
    let h = global::running().ok_or(libc::ENODEV)?;
    let bdev = h.mgr.get(name).ok_or(libc::ENODEV)?;
    Ok(if bdev.props().zoned.is_some() {
        MODEL_HOST_MANAGED
    } else {
        MODEL_NONE
    })
}

/// The most zones bdev `name` keeps open at once (0: no limit).
pub fn max_open_zones(name: &str) -> Result<u32, i32> {
    let h = global::running().ok_or(libc::ENODEV)?;
    let bdev = h.mgr.get(name).ok_or(libc::ENODEV)?;
    Ok(bdev.props().zoned.map_or(0, |g| g.max_open_zones))
}

/// Geometry of a zoned bdev: `(block size, zone size in blocks, blocks)`.
fn geometry(mgr: &BdevManager, name: &str) -> Result<(u64, u64, u64), i32> {
    let bdev = mgr.get(name).ok_or(libc::ENODEV)?;
    let g = bdev.props().zoned.ok_or(libc::EINVAL)?;
    Ok((u64::from(bdev.block_size()), g.zone_size, bdev.num_blocks()))
}

/// Up to `max` zones of bdev `name` from the one holding byte `offset`.
pub fn report(job: Option<&Job>, name: &str, offset: u64, max: u64) -> Result<Vec<FioZone>, i32> {
    let name = name.to_string();
    run(job, move |mgr| async move {
        let (bs, zs, blocks) = geometry(&mgr, &name)?;
        let first = offset / bs / zs * zs;
        if first >= blocks {
            return Ok(Vec::new());
        }
        let n = max.min((blocks - first) / zs).min(MAX_REPORT);
        if n == 0 {
            return Ok(Vec::new());
        }
        let desc = mgr.open(&name, false, |_| {}).map_err(|e| e.errno())?;
        let ch = desc.get_io_channel().map_err(|e| e.errno())?;
        let infos = ch.get_zone_info(first, n).await.map_err(|e| e.errno())?;
        // A report that does not describe the zones asked for is refused.
        let expected = (0..n).map(|i| first + i * zs);
        if infos
            .iter()
            .zip(expected)
            .any(|(i, want)| i.zone_id != want || i.capacity > zs)
        {
            tracing::error!(bdev = %name, "malformed zone report");
            return Err(libc::EIO);
        }
        Ok(infos.iter().map(|i| FioZone::of(i, bs, zs)).collect())
    })
}

/// Resets the write pointers of the zones of bdev `name` in
/// `offset..offset + len` (bytes, whole zones).
pub fn reset(job: Option<&Job>, name: &str, offset: u64, len: u64) -> Result<(), i32> {
    let name = name.to_string();
    run(job, move |mgr| async move {
        let (bs, zs, blocks) = geometry(&mgr, &name)?;
        let zone_bytes = bs * zs;
        if !offset.is_multiple_of(zone_bytes) || !len.is_multiple_of(zone_bytes) {
            return Err(libc::EINVAL);
        }
        let (first, end) = (offset / bs, (offset + len) / bs);
        if end > blocks {
            return Err(libc::EINVAL);
        }
        let desc = mgr.open(&name, true, |_| {}).map_err(|e| e.errno())?;
        let ch = desc.get_io_channel().map_err(|e| e.errno())?;
        let mut zone = first;
        while zone < end {
            ch.zone_management(zone, ZoneAction::Reset)
                .await
                .map_err(|e| e.errno())?;
            zone += zs;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_reach_fio_in_bytes_and_its_codes() {
        let info = |state, wp| ZoneInfo {
            zone_id: 1024,
            write_pointer: wp,
            capacity: 1000,
            state,
            zone_type: ZoneType::SequentialWriteRequired,
        };
        let z = FioZone::of(&info(ZoneState::ImplicitOpen, 1030), 4096, 1024);
        assert_eq!(
            z,
            FioZone {
                start: 1024 * 4096,
                wp: 1030 * 4096,
                len: 1024 * 4096,
                capacity: 1000 * 4096,
                zone_type: 2,
                cond: 2,
            }
        );
        // A full zone's pointer is its end, whatever the device said.
        let z = FioZone::of(&info(ZoneState::Full, 0), 512, 1024);
        assert_eq!((z.wp, z.cond), (2024 * 512, 0xE));
        let mut c = info(ZoneState::Empty, 1024);
        c.zone_type = ZoneType::Conventional;
        assert_eq!(FioZone::of(&c, 512, 1024).cond, 0);
    }
}
