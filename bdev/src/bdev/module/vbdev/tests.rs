//! Tests of the virtual bdev building blocks.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use super::*;
use crate::bdev::module::{BdevOps, ModuleIo};
use crate::bdev::{Bdev, BdevEvent, BdevIo, BdevManager, BdevProps, ClaimType, IoStatus, IoType};
use crate::error::{BoxError, Error, Result};

/// A bdev with no I/O path: enough for the control path.
struct Plain;

impl BdevOps for Plain {
    type Channel = ();
    fn create_channel(&self) -> std::result::Result<(), BoxError> {
        Err("no channels".into())
    }
    fn submit(&self, _ch: &(), io: BdevIo) {
        io.complete_deferred(IoStatus::Failed);
    }
    fn io_type_supported(&self, _io_type: IoType) -> bool {
        false
    }
}

fn plain(mgr: &BdevManager, module: &str, props: BdevProps) -> Bdev {
    mgr.register_bdev(module, props, Arc::new(Plain)).unwrap()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Cfg {
    name: String,
    base: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    uuid: Option<Uuid>,
}

impl VbdevConfig for Cfg {
    const MODULE: &'static str = "vtest";
    const CREATE_METHOD: &'static str = "bdev_vtest_create";
    type Attached = ();
    fn attach(&self, _mgr: &BdevManager, _base: &Bdev) -> Result<()> {
        Ok(())
    }
    fn base_name(&self) -> &str {
        &self.base
    }
    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.name)
    }
    fn uuid_mut(&mut self) -> Option<&mut Option<Uuid>> {
        Some(&mut self.uuid)
    }
}

fn cfg(name: &str, base: &str) -> Cfg {
    Cfg {
        name: name.into(),
        base: base.into(),
        uuid: None,
    }
}

fn names(v: &[Cfg]) -> Vec<&str> {
    v.iter().map(|c| c.name.as_str()).collect()
}

#[test]
fn configurations_wait_attach_and_save_the_uuid_they_got() {
    let mgr = BdevManager::default();
    let configs = VbdevConfigs::<Cfg>::default();
    let never = |_: &Cfg, _: &Bdev| -> Result<()> { panic!("no base yet") };
    assert!(configs
        .create(&mgr, cfg("V0", "B0"), never)
        .unwrap()
        .is_none());
    let dup = configs.create(&mgr, cfg("V0", "B9"), never).unwrap_err();
    assert!(matches!(dup, Error::Exists(n) if n == "V0"));

    let b0 = plain(&mgr, "test", BdevProps::new("B0", "Test", 512, 8));
    assert_eq!(names(&configs.waiting_for(&mgr, &b0)), ["V0"]);
    // By alias (the UUID string) as well as by name.
    assert!(configs.update("V0", |c| c.base = b0.uuid().to_string()));
    assert_eq!(names(&configs.waiting_for(&mgr, &b0)), ["V0"]);

    // Attaching now; failures other than a vanishing base undo.
    let attached = configs.create(&mgr, cfg("V2", "B0"), |c, base| {
        assert_eq!(base.name(), "B0");
        let mut p = BdevProps::new(&c.name, "VTest", 512, 8);
        p.uuid = Some(Uuid::from_u128(7));
        plain(&mgr, Cfg::MODULE, p);
        Ok(42)
    });
    assert_eq!(attached.unwrap(), Some(42));
    let vanishing =
        |_: &Cfg, base: &Bdev| -> Result<()> { Err(Error::NotFound(base.name().to_string())) };
    assert!(configs
        .create(&mgr, cfg("V3", "B0"), vanishing)
        .unwrap()
        .is_none());
    let failing = |_: &Cfg, _: &Bdev| -> Result<()> { Err(Error::InvalidArg("no".into())) };
    assert!(configs.create(&mgr, cfg("V4", "B0"), failing).is_err());
    assert_eq!(names(&configs.waiting_for(&mgr, &b0)), ["V0", "V3"]);

    let uuid0 = b0.uuid().to_string();
    assert_eq!(
        configs.config_json(&mgr),
        [
            json!({"method": "bdev_vtest_create",
                "params": {"name": "V0", "base": uuid0}}),
            json!({"method": "bdev_vtest_create",
                "params": {"name": "V2", "base": "B0", "uuid": Uuid::from_u128(7)}}),
            json!({"method": "bdev_vtest_create", "params": {"name": "V3", "base": "B0"}}),
        ]
    );
    assert!(configs.remove("V3"));
    assert!(!configs.remove("V3"));
    assert!(!configs.update("V3", |_| {}));
}

#[test]
fn delete_answers_for_bdevs_and_waiting_configurations() {
    let mgr = BdevManager::default();
    let configs = VbdevConfigs::<Cfg>::default();
    configs
        .create(&mgr, cfg("W", "none"), |_, _| Ok(()))
        .unwrap();
    let answers = Arc::new(Mutex::new(Vec::new()));
    let record = |a: &Arc<Mutex<Vec<String>>>| {
        let a = Arc::clone(a);
        move |r: Result<()>| a.lock().push(format!("{r:?}"))
    };
    configs.delete(&mgr, "W", record(&answers));
    configs.delete(&mgr, "W", record(&answers));
    plain(&mgr, Cfg::MODULE, BdevProps::new("V", "VTest", 512, 8));
    plain(&mgr, "other", BdevProps::new("X", "Test", 512, 8));
    configs.delete(&mgr, "V", record(&answers));
    configs.delete(&mgr, "X", record(&answers));
    assert_eq!(
        *answers.lock(),
        [
            "Ok(())",
            r#"Err(NotFound("W"))"#,
            "Ok(())",
            r#"Err(NotFound("X"))"#
        ]
    );
    assert!(mgr.get("V").is_none() && mgr.get("X").is_some());
}

/// Counts the events it gets.
struct Follower {
    base: BaseBdev,
    removed: AtomicUsize,
    resized: AtomicUsize,
}

impl BaseEvents for Follower {
    fn base_bdev(&self) -> &BaseBdev {
        &self.base
    }
    fn base_removed(&self) {
        self.removed.fetch_add(1, Ordering::SeqCst);
    }
    fn base_resized(&self) {
        self.resized.fetch_add(1, Ordering::SeqCst);
    }
}

fn follow(base: BaseBdev) -> Arc<Follower> {
    Arc::new(Follower {
        base,
        removed: AtomicUsize::new(0),
        resized: AtomicUsize::new(0),
    })
}

#[test]
fn the_base_is_claimed_followed_and_closed() {
    // Outside any thread events and closing run inline.
    let mgr = BdevManager::default();
    let b = plain(&mgr, "test", BdevProps::new("B", "Test", 512, 8));
    let (base, link) = BaseBdev::open::<Follower>(&mgr, &b, "vtest").unwrap();
    assert_eq!(b.claim(), Some((ClaimType::ExclusiveWrite, "vtest".into())));
    let e = BaseBdev::open::<Follower>(&mgr, &b, "other").unwrap_err();
    assert_eq!(e.errno(), libc::EPERM);

    let f = follow(base);
    link.bind(&f);
    link.catch_up();
    b.notify_resize(4);
    assert_eq!(f.resized.load(Ordering::SeqCst), 1);
    assert!(!f.base.is_removing());
    mgr.unregister(&b, || {});
    b.send_event(BdevEvent::Remove);
    assert_eq!(f.removed.load(Ordering::SeqCst), 1, "delivered once");
    assert!(f.base.is_removing());

    let closed = Arc::new(AtomicBool::new(false));
    let c2 = Arc::clone(&closed);
    f.base.close(move || c2.store(true, Ordering::SeqCst));
    assert!(closed.load(Ordering::SeqCst));
    assert!(mgr.get("B").is_none(), "closing let the removal finish");
    let e = f.base.channel().unwrap_err();
    assert_eq!(e.to_string(), "vtest base bdev is closed");
}

#[test]
fn a_removal_before_bind_is_caught_up() {
    let mgr = BdevManager::default();
    let b = plain(&mgr, "test", BdevProps::new("B", "Test", 512, 8));
    let (base, link) = BaseBdev::open::<Follower>(&mgr, &b, "vtest").unwrap();
    mgr.unregister(&b, || {});
    let f = follow(base);
    link.bind(&f);
    assert_eq!(f.removed.load(Ordering::SeqCst), 0);
    link.catch_up();
    assert_eq!(f.removed.load(Ordering::SeqCst), 1);
    assert!(f.base.is_removing());
}

#[test]
fn props_follow_the_base_and_own_bdev_is_this_one() {
    let mgr = BdevManager::default();
    let mut p = BdevProps::new("B", "Test", 520, 64);
    p.md_size = 8;
    p.md_interleave = true;
    p.dif_type = 1;
    p.required_alignment = 9;
    p.write_cache = true;
    p.optimal_io_boundary = 16;
    let b = plain(&mgr, "test", p);
    let v = props_over(&b, "V", "VTest", 32);
    assert_eq!((v.name.as_str(), v.product_name.as_str()), ("V", "VTest"));
    assert_eq!((v.block_size, v.num_blocks), (520, 32));
    assert_eq!((v.md_size, v.md_interleave, v.dif_type), (8, true, 1));
    assert_eq!((v.required_alignment, v.write_cache), (9, true));
    assert_eq!(v.optimal_io_boundary, 0);

    let ops = Arc::new(Plain);
    let own = mgr.register_bdev("vtest", v, Arc::clone(&ops)).unwrap();
    assert!(own_bdev(&mgr, "V", &*ops).is_some());
    assert!(own_bdev(&mgr, "V", &Plain).is_none());
    assert!(own_bdev(&mgr, "B", &*ops).is_none());

    // Another bdev's ops change nothing.
    resize_own(&mgr, "V", &Plain, 16);
    unregister_own(&mgr, "V", &Plain);
    assert_eq!(own.num_blocks(), 32);
    assert!(!own.is_removing());
    resize_own(&mgr, "V", &*ops, 16);
    assert_eq!(own.num_blocks(), 16);
    unregister_own(&mgr, "V", &*ops);
    assert!(mgr.get("V").is_none());
}

/// Part UUIDs are SPDK's: these are the UUIDs SPDK v26.05 gave an error
/// bdev over a 16384-block base and two split parts
/// (test/tests/e2e/fixtures/spdk-v26.05-bdev-bdevs.json).
#[test]
fn part_uuids_are_spdks() {
    let u = |s: &str| Uuid::parse_str(s).unwrap();
    assert_eq!(
        part_uuid(u("0e110000-0000-4000-8000-000000000000"), 0, 16384),
        u("7a211790-3574-5c0e-b97e-2ae3b38370ab")
    );
    assert_eq!(
        part_uuid(u("3a110c00-0000-4000-8000-000000000007"), 0, 8192),
        u("0dddb156-76c8-54e8-b037-e24720676562")
    );
    assert_eq!(
        part_uuid(u("0e110000-0000-4000-8000-000000000002"), 2048, 2048),
        u("13f28fae-b6c3-5f9c-8e53-0809353dde2a")
    );
}
