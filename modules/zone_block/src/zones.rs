//! The zones of one zone_block bdev: each zone's state and write pointer in
//! one atomic word, so that every thread's channel writes, appends and
//! manages zones without a lock (SPDK takes a spinlock per zone). A write
//! or append reserves its blocks with one compare-and-swap that moves the
//! write pointer; two appends racing on one zone get distinct blocks.
//!
//! The state machine is the ZNS one, as far as an emulated device has it:
//! no zone is ever read-only or offline, and open zones are not limited.
//!
//! | action | from | to |
//! |---|---|---|
//! | write / append | empty, open, closed | implicitly open (explicitly open stays), full at capacity |
//! | open | empty, open, closed | explicitly open |
//! | close | open, closed | closed (empty when nothing was written) |
//! | finish | any | full |
//! | reset | any | empty (the base's blocks unmapped where it can) |
//!
//! Anything else is refused with the ZNS status ([`ZoneError`]).

use std::sync::atomic::{AtomicU64, Ordering};

use bdevkit::bdev::module::{ZoneAction, ZoneError, ZoneInfo, ZoneState, ZoneType};

/// Bits of a zone word holding the write pointer's offset in the zone.
const WP_BITS: u32 = 56;
const WP_MASK: u64 = (1 << WP_BITS) - 1;

fn pack(state: ZoneState, wp_off: u64) -> u64 {
    (u64::from(state as u8) << WP_BITS) | wp_off
}

fn unpack(w: u64) -> (ZoneState, u64) {
    // Only `pack` writes the words: the code is always a known state.
    let code = u8::try_from(w >> WP_BITS).unwrap_or(u8::MAX);
    let state = ZoneState::from_code(code).unwrap_or(ZoneState::Offline);
    (state, w & WP_MASK)
}

/// What a zone management action leaves to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Managed {
    /// Nothing more.
    Done,
    /// The zone was emptied: its blocks may be unmapped on the base.
    Emptied,
}

/// The zones: `zone_size` blocks each (a power of two), `capacity` of them
/// writable.
#[derive(Debug)]
pub(crate) struct Zones {
    zone_size: u64,
    shift: u32,
    capacity: u64,
    words: Box<[AtomicU64]>,
}

impl Zones {
    /// `num_zones` zones, all full (a zone_block bdev does not know what
    /// its base holds: as SPDK's, its zones start full and are reset
    /// before they are written).
    pub(crate) fn new(zone_size: u64, capacity: u64, num_zones: u64) -> Zones {
        debug_assert!(zone_size.is_power_of_two() && capacity <= zone_size);
        let full = pack(ZoneState::Full, capacity);
        Zones {
            zone_size,
            shift: zone_size.trailing_zeros(),
            capacity,
            words: (0..num_zones).map(|_| AtomicU64::new(full)).collect(),
        }
    }

    pub(crate) fn zone_size(&self) -> u64 {
        self.zone_size
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    fn index(&self, lba: u64) -> Option<usize> {
        let i = usize::try_from(lba >> self.shift).ok()?;
        (i < self.words.len()).then_some(i)
    }

    /// The zone starting at `zone_id` (`None`: no zone starts there).
    fn by_start(&self, zone_id: u64) -> Option<&AtomicU64> {
        if !zone_id.is_multiple_of(self.zone_size) {
            return None;
        }
        self.words.get(self.index(zone_id)?)
    }

    /// The report of the zone starting at `zone_id`.
    pub(crate) fn info(&self, zone_id: u64) -> Option<ZoneInfo> {
        let (state, wp) = unpack(self.by_start(zone_id)?.load(Ordering::Acquire));
        Some(ZoneInfo {
            zone_id,
            write_pointer: zone_id + wp,
            capacity: self.capacity,
            state,
            zone_type: ZoneType::SequentialWriteRequired,
        })
    }

    /// Whether a read of `n` blocks at `lba` stays within its zone's
    /// capacity (SPDK's rule: blocks past the capacity are no data).
    pub(crate) fn check_read(&self, lba: u64, n: u64) -> Result<(), ZoneError> {
        let off = lba & (self.zone_size - 1);
        match self.index(lba) {
            Some(_) if off.checked_add(n).is_some_and(|e| e <= self.capacity) => Ok(()),
            _ => Err(ZoneError::Boundary),
        }
    }

    /// Reserves `n` blocks for a write at `lba`, or an append (`lba` is
    /// then the zone's start): moves the write pointer past them and
    /// returns where they start.
    pub(crate) fn reserve(&self, lba: u64, n: u64, append: bool) -> Result<u64, ZoneError> {
        let start = lba & !(self.zone_size - 1);
        let word = (if append {
            self.by_start(lba)
        } else {
            self.index(lba).map(|i| &self.words[i])
        })
        .ok_or(ZoneError::Boundary)?;
        let mut cur = word.load(Ordering::Acquire);
        loop {
            let (state, wp) = unpack(cur);
            match state {
                ZoneState::Empty
                | ZoneState::ImplicitOpen
                | ZoneState::ExplicitOpen
                | ZoneState::Closed => {}
                ZoneState::Full => return Err(ZoneError::Full),
                ZoneState::ReadOnly => return Err(ZoneError::ReadOnly),
                ZoneState::Offline => return Err(ZoneError::Offline),
            }
            if !append && lba - start != wp {
                return Err(ZoneError::InvalidWrite);
            }
            let end = wp.checked_add(n).filter(|e| *e <= self.capacity);
            let Some(end) = end else {
                return Err(ZoneError::Boundary);
            };
            let next = if end == self.capacity {
                ZoneState::Full
            } else if state == ZoneState::ExplicitOpen {
                ZoneState::ExplicitOpen
            } else {
                ZoneState::ImplicitOpen
            };
            match word.compare_exchange_weak(
                cur,
                pack(next, end),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(start + wp),
                Err(now) => cur = now,
            }
        }
    }

    /// Applies `action` to the zone starting at `zone_id`.
    pub(crate) fn manage(&self, zone_id: u64, action: ZoneAction) -> Result<Managed, ZoneError> {
        let word = self.by_start(zone_id).ok_or(ZoneError::InvalidTransition)?;
        let mut cur = word.load(Ordering::Acquire);
        loop {
            let (state, wp) = unpack(cur);
            let (next, done) = match (action, state) {
                (
                    ZoneAction::Open,
                    ZoneState::Empty
                    | ZoneState::ImplicitOpen
                    | ZoneState::ExplicitOpen
                    | ZoneState::Closed,
                ) => (pack(ZoneState::ExplicitOpen, wp), Managed::Done),
                (
                    ZoneAction::Close,
                    ZoneState::ImplicitOpen | ZoneState::ExplicitOpen | ZoneState::Closed,
                ) => {
                    let to = if wp == 0 {
                        ZoneState::Empty
                    } else {
                        ZoneState::Closed
                    };
                    (pack(to, wp), Managed::Done)
                }
                (ZoneAction::Finish, _) => (pack(ZoneState::Full, self.capacity), Managed::Done),
                (ZoneAction::Reset, ZoneState::Empty) => return Ok(Managed::Done),
                (ZoneAction::Reset, _) => (pack(ZoneState::Empty, 0), Managed::Emptied),
                _ => return Err(ZoneError::InvalidTransition),
            };
            match word.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(done),
                Err(now) => cur = now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn state(z: &Zones, id: u64) -> (ZoneState, u64) {
        let i = z.info(id).unwrap();
        (i.state, i.write_pointer - id)
    }

    #[test]
    fn zones_start_full_and_reset_empties_them() {
        let z = Zones::new(16, 12, 4);
        assert_eq!(state(&z, 16), (ZoneState::Full, 12));
        assert_eq!(z.reserve(16, 1, false), Err(ZoneError::Full));
        assert_eq!(z.manage(16, ZoneAction::Reset), Ok(Managed::Emptied));
        assert_eq!(z.manage(16, ZoneAction::Reset), Ok(Managed::Done));
        assert_eq!(state(&z, 16), (ZoneState::Empty, 0));
    }

    #[test]
    fn writes_follow_the_write_pointer_up_to_the_capacity() {
        let z = Zones::new(16, 12, 4);
        z.manage(32, ZoneAction::Reset).unwrap();
        assert_eq!(z.reserve(33, 1, false), Err(ZoneError::InvalidWrite));
        assert_eq!(z.reserve(32, 4, false), Ok(32));
        assert_eq!(state(&z, 32), (ZoneState::ImplicitOpen, 4));
        assert_eq!(z.reserve(32, 4, true), Ok(36), "append at the pointer");
        assert_eq!(z.reserve(40, 5, false), Err(ZoneError::Boundary));
        assert_eq!(z.reserve(40, 4, false), Ok(40));
        assert_eq!(state(&z, 32), (ZoneState::Full, 12));
        assert_eq!(
            z.reserve(33, 1, true),
            Err(ZoneError::Boundary),
            "not a zone start"
        );
        assert_eq!(
            z.reserve(64, 1, true),
            Err(ZoneError::Boundary),
            "past the end"
        );
        assert!(z.check_read(32, 12).is_ok());
        assert_eq!(z.check_read(40, 5), Err(ZoneError::Boundary));
    }

    #[test]
    fn open_close_finish() {
        let z = Zones::new(8, 8, 2);
        z.manage(0, ZoneAction::Reset).unwrap();
        assert_eq!(
            z.manage(0, ZoneAction::Close),
            Err(ZoneError::InvalidTransition)
        );
        z.manage(0, ZoneAction::Open).unwrap();
        assert_eq!(state(&z, 0).0, ZoneState::ExplicitOpen);
        z.manage(0, ZoneAction::Close).unwrap();
        assert_eq!(state(&z, 0).0, ZoneState::Empty, "nothing written");
        z.reserve(0, 2, false).unwrap();
        z.manage(0, ZoneAction::Open).unwrap();
        z.reserve(2, 2, false).unwrap();
        assert_eq!(state(&z, 0), (ZoneState::ExplicitOpen, 4));
        z.manage(0, ZoneAction::Close).unwrap();
        assert_eq!(state(&z, 0), (ZoneState::Closed, 4));
        z.manage(0, ZoneAction::Finish).unwrap();
        assert_eq!(state(&z, 0), (ZoneState::Full, 8));
        assert_eq!(
            z.manage(0, ZoneAction::Open),
            Err(ZoneError::InvalidTransition)
        );
        assert_eq!(
            z.manage(0, ZoneAction::Offline),
            Err(ZoneError::InvalidTransition)
        );
        assert_eq!(
            z.manage(3, ZoneAction::Reset),
            Err(ZoneError::InvalidTransition)
        );
    }

    #[test]
    fn racing_appends_get_distinct_blocks() {
        let z = std::sync::Arc::new(Zones::new(1 << 12, 4000, 1));
        z.manage(0, ZoneAction::Reset).unwrap();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let z = z.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Ok(l) = z.reserve(0, 1, true) {
                        got.push(l);
                    }
                    got
                })
            })
            .collect();
        let mut all: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..4000).collect::<Vec<_>>());
        assert_eq!(state(&z, 0), (ZoneState::Full, 4000));
    }

    /// A plain model of one zone: (state, write pointer offset).
    fn model(s: (ZoneState, u64), op: u8, n: u64, cap: u64) -> Result<(ZoneState, u64), ()> {
        use ZoneState::*;
        let (st, wp) = s;
        let writable = matches!(st, Empty | ImplicitOpen | ExplicitOpen | Closed);
        match op {
            0 | 1 if writable && wp + n <= cap && n > 0 => {
                let to = if wp + n == cap {
                    Full
                } else if st == ExplicitOpen {
                    ExplicitOpen
                } else {
                    ImplicitOpen
                };
                Ok((to, wp + n))
            }
            2 if writable => Ok((ExplicitOpen, wp)),
            3 if matches!(st, ImplicitOpen | ExplicitOpen | Closed) => {
                Ok((if wp == 0 { Empty } else { Closed }, wp))
            }
            4 => Ok((Full, cap)),
            5 => Ok((Empty, 0)),
            _ => Err(()),
        }
    }

    proptest! {
        #[test]
        fn the_zone_follows_the_model(ops in proptest::collection::vec((0u8..6, 1u64..6), 1..60)) {
            let cap = 12;
            let z = Zones::new(16, cap, 1);
            let mut m = (ZoneState::Full, cap);
            for (op, n) in ops {
                let (_, wp) = state(&z, 0);
                let got = match op {
                    0 => z.reserve(wp, n, false).map(|_| ()),
                    1 => z.reserve(0, n, true).map(|l| assert_eq!(l, wp)),
                    2 => z.manage(0, ZoneAction::Open).map(|_| ()),
                    3 => z.manage(0, ZoneAction::Close).map(|_| ()),
                    4 => z.manage(0, ZoneAction::Finish).map(|_| ()),
                    _ => z.manage(0, ZoneAction::Reset).map(|_| ()),
                };
                let want = model(m, op, n, cap);
                prop_assert_eq!(got.is_ok(), want.is_ok(), "op {} n {} from {:?}", op, n, m);
                if let Ok(next) = want {
                    m = next;
                }
                prop_assert_eq!(state(&z, 0), m);
            }
        }
    }
}
