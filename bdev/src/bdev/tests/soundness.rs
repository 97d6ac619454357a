//! The memory behind an I/O's segments, from safe code: each way an I/O's
//! memory could have been reached after it was freed, or written while
//! another I/O reads it, now fails cleanly (issue 11's soundness gaps).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::super::module::vbdev;
use super::super::module::{BdevOps, CompletionQueue, ModuleIo};
use super::*;
use crate::error::{BoxError, Error};
use crate::thread::{PollerStatus, Thread};

/// What a probe bdev saw of the I/Os it served.
#[derive(Default)]
struct Seen {
    /// Per I/O: (type, data writable, take_buf gave something,
    /// take_parent gave something).
    ios: Mutex<Vec<(IoType, bool, bool, bool)>>,
    /// Hold I/Os until cleared.
    hold: AtomicBool,
    held_now: AtomicUsize,
}

/// A base bdev that records what a module may do with the I/O it serves,
/// and can hold I/Os back.
struct Probe {
    seen: Arc<Seen>,
    types: &'static [IoType],
}

struct ProbeChannel {
    done: CompletionQueue,
    held: Rc<RefCell<VecDeque<BdevIo>>>,
    poller: crate::thread::Poller,
}

impl Drop for ProbeChannel {
    fn drop(&mut self) {
        self.poller.unregister();
    }
}

impl BdevOps for Probe {
    type Channel = ProbeChannel;

    fn create_channel(&self) -> Result<ProbeChannel, BoxError> {
        let held: Rc<RefCell<VecDeque<BdevIo>>> = Rc::default();
        let (h2, seen) = (Rc::clone(&held), Arc::clone(&self.seen));
        let poller = Thread::try_current()?.register_poller("probe_release", 0, move |_| {
            if seen.hold.load(Ordering::SeqCst) || h2.borrow().is_empty() {
                return PollerStatus::Idle;
            }
            let next = h2.borrow_mut().pop_front();
            if let Some(io) = next {
                seen.held_now.fetch_sub(1, Ordering::SeqCst);
                io.complete(IoStatus::Success);
            }
            PollerStatus::Busy
        });
        Ok(ProbeChannel {
            done: CompletionQueue::new("probe")?,
            held,
            poller,
        })
    }

    fn submit(&self, ch: &ProbeChannel, mut io: BdevIo) {
        let writable = io.data_writable();
        // A module cannot take the buffers or the parent of an I/O it is
        // serving: the memory its segments describe stays put.
        let took_buf = io.take_buf().is_some() || !io.take_bufs().is_empty();
        let took_parent = io.take_parent().is_some();
        self.seen
            .ios
            .lock()
            .unwrap()
            .push((io.io_type(), writable, took_buf, took_parent));
        if io.io_type() == IoType::Read {
            // Writing a read's data is allowed (and refused on shared data).
            let _ = io.for_each_segment_mut(|s| s.fill(0x5a));
        }
        if self.seen.hold.load(Ordering::SeqCst) {
            self.seen.held_now.fetch_add(1, Ordering::SeqCst);
            ch.held.borrow_mut().push_back(io);
        } else {
            ch.done.push(io, IoStatus::Success);
        }
    }

    fn io_type_supported(&self, t: IoType) -> bool {
        self.types.contains(&t)
    }
}

fn probe(mgr: &BdevManager, name: &str, types: &'static [IoType]) -> Arc<Seen> {
    let seen = Arc::new(Seen::default());
    let p = Probe {
        seen: Arc::clone(&seen),
        types,
    };
    mgr.register_bdev(
        "probe",
        BdevProps::new(name, "Probe", 512, 1024),
        Arc::new(p),
    )
    .unwrap();
    seen
}

#[test]
fn taking_the_buffer_back_clears_the_request() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let seen = probe(&mgr, "p0", RW);
        let desc = mgr.open("p0", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        // The misuse of the issue: fill, take the buffer back (and free
        // it), submit. The request no longer describes the buffer, so the
        // bdev layer refuses it before any module sees it.
        let mut io = ch.alloc_io().unwrap();
        io.read(0, 1, DmaBuf::new(512).unwrap());
        drop(io.take_buf().unwrap());
        let e = ch.submit(io).unwrap_err();
        assert!(matches!(
            e.error,
            Error::BufferTooSmall { need: 512, have: 0 }
        ));
        let mut io = e.io;
        io.writev(
            0,
            2,
            vec![DmaBuf::new(512).unwrap(), DmaBuf::new(512).unwrap()],
        );
        assert_eq!(io.take_bufs().len(), 2);
        let e = ch.submit(io).unwrap_err();
        assert!(matches!(e.error, Error::BufferTooSmall { .. }));
        let mut io = e.io;
        io.compare_and_write(0, 1, DmaBuf::new(512).unwrap(), DmaBuf::new(512).unwrap());
        drop(io.take_aux_buf().unwrap());
        let e = ch.submit(io).unwrap_err();
        assert!(matches!(
            e.error,
            Error::NotSupported(_) | Error::BufferTooSmall { .. }
        ));
        assert!(seen.ios.lock().unwrap().is_empty(), "no module saw them");
    });
}

/// A virtual bdev forwarding to a probe: the child carries the parent.
struct Relay {
    base: vbdev::BaseBdev,
}

impl vbdev::BaseEvents for Relay {
    fn base_bdev(&self) -> &vbdev::BaseBdev {
        &self.base
    }
    fn base_removed(&self) {}
    fn base_resized(&self) {}
}

impl BdevOps for Relay {
    type Channel = BdevChannel;
    fn create_channel(&self) -> Result<BdevChannel, BoxError> {
        self.base.channel()
    }
    fn submit(&self, ch: &BdevChannel, io: BdevIo) {
        vbdev::forward(ch, io, |child| {
            child.on_done_fn(|mut child| {
                let parent = child.take_parent().expect("the parent is back");
                // Its segments described the parent's memory: gone with it.
                assert!(child.iovs().is_empty());
                parent.complete_from(&child);
            });
        });
    }
    fn io_type_supported(&self, t: IoType) -> bool {
        self.base.bdev().supports(t)
    }
}

#[test]
fn a_served_io_keeps_its_buffers_and_a_child_keeps_its_parent() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let seen = probe(&mgr, "p1", RW);
        let base = mgr.get("p1").unwrap();
        let (base, link) = vbdev::BaseBdev::open::<Relay>(&mgr, &base, "relay").unwrap();
        let relay = Arc::new(Relay { base });
        link.bind(&relay);
        mgr.register_bdev("relay", BdevProps::new("r1", "Relay", 512, 1024), relay)
            .unwrap();
        let desc = mgr.open("r1", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        ch.write(0, 1, pattern(512, 3)).await.unwrap();
        let got = ch.read(0, 1, DmaBuf::new(512).unwrap()).await.unwrap();
        assert!(
            got.iter().all(|b| *b == 0x5a),
            "the probe wrote the read's data"
        );
        let ios = seen.ios.lock().unwrap();
        assert_eq!(ios.len(), 2);
        for (t, writable, took_buf, took_parent) in ios.iter() {
            assert!(!took_buf, "{t}: a submitted I/O keeps its buffers");
            assert!(!took_parent, "{t}: a submitted child keeps its parent");
            assert!(writable, "{t}: a child owning its parent may write");
        }
    });
}

/// A mirror over two probes: the parent's data shared by two children.
/// `early` completes the parent as soon as the first child is back (a
/// module bug the bdev layer must survive).
struct Mirror {
    legs: [vbdev::BaseBdev; 2],
    early: bool,
}

impl vbdev::BaseEvents for Mirror {
    fn base_bdev(&self) -> &vbdev::BaseBdev {
        &self.legs[0]
    }
    fn base_removed(&self) {}
    fn base_resized(&self) {}
}

/// Parents waiting for their two children, by slot (the children's tag),
/// with the count of children still out.
type Waiting = Rc<RefCell<Vec<Option<(BdevIo, usize)>>>>;

struct MirrorChannel {
    legs: [BdevChannel; 2],
    waiting: Waiting,
    early: bool,
}

struct MirrorDone(Waiting, bool);

impl IoCompletion for MirrorDone {
    fn io_done(&self, child: BdevIo) {
        let slot = usize::try_from(child.tag()).unwrap();
        let status = child.status();
        // Keep the child alive while the parent completes (early mode), to
        // check the parent waits for it; otherwise drop it first.
        let keep = if self.1 { Some(child) } else { None };
        let mut w = self.0.borrow_mut();
        let Some(entry) = w[slot].as_mut() else {
            return;
        };
        entry.1 -= 1;
        if entry.1 == 0 || self.1 {
            let (parent, _) = w[slot].take().expect("present");
            drop(w);
            parent.complete(status);
        }
        drop(keep);
    }
}

impl BdevOps for Mirror {
    type Channel = MirrorChannel;
    fn create_channel(&self) -> Result<MirrorChannel, BoxError> {
        Ok(MirrorChannel {
            legs: [self.legs[0].channel()?, self.legs[1].channel()?],
            waiting: Rc::default(),
            early: self.early,
        })
    }
    fn submit(&self, ch: &MirrorChannel, mut io: BdevIo) {
        let mut kids = Vec::new();
        for leg in &ch.legs {
            let mut child = leg.alloc_io().unwrap();
            child.share_request_of(&mut io);
            assert!(!child.data_writable(), "shared data is read-only");
            kids.push(child);
        }
        assert!(!io.data_writable(), "lent data is read-only");
        let slot = {
            let mut w = ch.waiting.borrow_mut();
            w.push(Some((io, 2)));
            w.len() - 1
        };
        let done: Rc<dyn IoCompletion> = Rc::new(MirrorDone(Rc::clone(&ch.waiting), ch.early));
        for (leg, mut child) in ch.legs.iter().zip(kids) {
            child.set_tag(slot as u64).on_done(Rc::clone(&done));
            leg.submit(child).unwrap();
        }
    }
    fn io_type_supported(&self, t: IoType) -> bool {
        t == IoType::Write
    }
}

fn mirror(mgr: &BdevManager, name: &str, legs: [&str; 2], early: bool) {
    let open = |n: &str| {
        let b = mgr.get(n).unwrap();
        vbdev::BaseBdev::open::<Mirror>(mgr, &b, "mirror").unwrap()
    };
    let ((l0, k0), (l1, _)) = (open(legs[0]), open(legs[1]));
    let m = Arc::new(Mirror {
        legs: [l0, l1],
        early,
    });
    k0.bind(&m);
    mgr.register_bdev("mirror", BdevProps::new(name, "Mirror", 512, 1024), m)
        .unwrap();
}

#[test]
fn a_lent_parent_completes_only_after_its_borrowers() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let a = probe(&mgr, "pa", RW);
        let b = probe(&mgr, "pb", RW);
        mirror(&mgr, "m0", ["pa", "pb"], true);
        let desc = mgr.open("m0", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        // Leg b holds its child: the mirror completes the parent when leg
        // a's child is back, while b's still describes the parent's data.
        b.hold.store(true, Ordering::SeqCst);
        let done = Rc::new(std::cell::Cell::new(false));
        let mut io = ch.alloc_io().unwrap();
        let d2 = Rc::clone(&done);
        io.write(0, 1, pattern(512, 9))
            .on_done_closure(move |mut io| {
                assert_eq!(io.status(), IoStatus::Success);
                // Handed back whole: the buffer is the consumer's again.
                assert_eq!(&io.take_buf().unwrap()[..], &pattern(512, 9)[..]);
                d2.set(true);
            });
        ch.submit(io).unwrap();
        while a.ios.lock().unwrap().is_empty() || b.held_now.load(Ordering::SeqCst) < 1 {
            sleep_ms(1).await;
        }
        sleep_ms(20).await;
        assert!(!done.get(), "parked while leg b still borrows its data");
        b.hold.store(false, Ordering::SeqCst);
        while !done.get() {
            sleep_ms(1).await;
        }
        for seen in [&a, &b] {
            let ios = seen.ios.lock().unwrap();
            assert_eq!(ios.len(), 1);
            assert!(!ios[0].1, "a mirror's child cannot write the shared data");
        }
    });
}

#[test]
fn a_mirror_dropping_its_children_first_completes_at_once() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let _a = probe(&mgr, "qa", RW);
        let _b = probe(&mgr, "qb", RW);
        mirror(&mgr, "m1", ["qa", "qb"], false);
        let desc = mgr.open("m1", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        for i in 0..50u64 {
            ch.write(i, 1, pattern(512, 1)).await.unwrap();
        }
    });
}

#[test]
fn emulated_write_zeroes_writes_read_only_zero_data() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        // No native write zeroes: the bdev layer emulates it with writes
        // of its zero buffer, which every emulated write shares.
        let seen = probe(&mgr, "pz", RW);
        let desc = mgr.open("pz", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        ch.write_zeroes(0, 16).await.unwrap();
        let ios = seen.ios.lock().unwrap();
        assert!(!ios.is_empty());
        for (t, writable, _, _) in ios.iter() {
            assert_eq!(*t, IoType::Write);
            assert!(!writable, "the zero buffer is read-only for modules");
        }
    });
}
