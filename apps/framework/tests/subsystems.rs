//! Subsystems above bdev: an app links the ones of `SUBSYSTEMS` it wants;
//! `framework_get_subsystems`, `framework_get_config`, init and fini see
//! exactly those, and a config's section of one the app lacks is skipped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bdevkit::error::BoxError;
use bdevkit_app::{
    App, AppOptions, AppSubsystem, CommonArgs, Error, SubsystemCtx, SubsystemDef, SUBSYSTEMS,
};
use bdevkit_jsonrpc::{Responder, RpcError};
use serde_json::{json, Value};

static INITS: AtomicUsize = AtomicUsize::new(0);
static FINIS: AtomicUsize = AtomicUsize::new(0);

/// A stand-in for nvmf: counts init and fini, saves one entry.
struct Fake;

impl AppSubsystem for Fake {
    fn init(&self) -> Result<(), BoxError> {
        INITS.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn config_json(&self) -> Option<Vec<Value>> {
        Some(vec![
            json!({"method": "nvmf_set_max_subsystems", "params": {"max_subsystems": 7}}),
        ])
    }

    fn fini(&self, done: Box<dyn FnOnce() + Send>) {
        FINIS.fetch_add(1, Ordering::SeqCst);
        done();
    }
}

fn create(_ctx: &SubsystemCtx<'_>) -> Result<Arc<dyn AppSubsystem>, BoxError> {
    Ok(Arc::new(Fake))
}

const FAKE_NVMF: SubsystemDef = SubsystemDef {
    name: "nvmf",
    create,
};

fn args() -> CommonArgs {
    CommonArgs {
        interrupt_mode: true,
        ..CommonArgs::default()
    }
}

fn start(subsystems: Vec<SubsystemDef>) -> Result<App, Error> {
    let opts = AppOptions {
        subsystems,
        ..AppOptions::default()
    };
    App::start_with(&args(), &[], opts)
}

fn call(app: &App, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
    let registry = app.registry().clone();
    let method = method.to_string();
    app.app_thread()
        .run_sync(move || {
            let (resp, rx) = Responder::channel();
            registry.dispatch(&method, params, resp);
            rx
        })
        .expect("app thread alive")
        .recv()
        .expect("an answer")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_keyring_then_bdev_then_nvmf() {
        let names: Vec<_> = SUBSYSTEMS.iter().map(|s| (s.name, s.depends_on)).collect();
        assert_eq!(
            names,
            vec![
                ("keyring", &[][..]),
                ("bdev", &["keyring"][..]),
                ("nvmf", &["bdev", "keyring"][..]),
            ]
        );
    }

    #[test]
    fn without_nvmf_only_the_built_ins_are_there() {
        let app = start(Vec::new()).unwrap();
        assert_eq!(
            call(&app, "framework_get_subsystems", None),
            Ok(json!([
                {"subsystem": "keyring", "depends_on": []},
                {"subsystem": "bdev", "depends_on": ["keyring"]}
            ]))
        );
        assert_eq!(
            call(
                &app,
                "framework_get_config",
                Some(json!({"name": "keyring"}))
            ),
            Ok(json!([]))
        );
        let e = call(&app, "framework_get_config", Some(json!({"name": "nvmf"}))).unwrap_err();
        assert_eq!(e.message, "Subsystem 'nvmf' not found");
        assert!(!app.registry().contains("nvmf_create_transport"));
        app.shutdown().unwrap();
    }

    #[test]
    fn a_linked_subsystem_is_listed_saved_initialised_and_finished() {
        let (i0, f0) = (INITS.load(Ordering::SeqCst), FINIS.load(Ordering::SeqCst));
        let app = start(vec![FAKE_NVMF]).unwrap();
        assert_eq!(INITS.load(Ordering::SeqCst), i0 + 1);
        assert_eq!(
            call(&app, "framework_get_subsystems", None),
            Ok(json!([
                {"subsystem": "keyring", "depends_on": []},
                {"subsystem": "bdev", "depends_on": ["keyring"]},
                {"subsystem": "nvmf", "depends_on": ["bdev", "keyring"]}
            ]))
        );
        assert_eq!(
            call(&app, "framework_get_config", Some(json!({"name": "nvmf"}))),
            Ok(json!([{"method": "nvmf_set_max_subsystems", "params": {"max_subsystems": 7}}]))
        );
        let e = call(&app, "framework_get_config", Some(json!({"name": "iscsi"}))).unwrap_err();
        assert_eq!(e.message, "Subsystem 'iscsi' not found");
        app.shutdown().unwrap();
        assert_eq!(FINIS.load(Ordering::SeqCst), f0 + 1);
    }

    #[test]
    fn a_config_section_of_a_subsystem_the_app_lacks_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tgt.json");
        let cfg = json!({"subsystems": [
            {"subsystem": "bdev", "config": [
                {"method": "bdev_wait_for_examine"}]},
            {"subsystem": "nvmf", "config": [
                {"method": "nvmf_create_transport", "params": {"trtype": "TCP"}}]}]});
        std::fs::write(&path, cfg.to_string()).unwrap();
        let args = CommonArgs {
            json: Some(path),
            ..args()
        };
        let app = App::start_with(&args, &[], AppOptions::default()).unwrap();
        app.wait_init().unwrap();
        app.shutdown().unwrap();
    }

    #[test]
    fn only_table_subsystems_link_and_once() {
        let other = SubsystemDef {
            name: "iscsi",
            create,
        };
        let bdev = SubsystemDef {
            name: "bdev",
            create,
        };
        for defs in [vec![other], vec![bdev], vec![FAKE_NVMF, FAKE_NVMF]] {
            let name = defs[0].name;
            match start(defs) {
                Err(Error::UnknownSubsystem(n)) => assert_eq!(n, name),
                Err(e) => panic!("{name}: wrong error {e}"),
                Ok(app) => {
                    app.shutdown().unwrap();
                    panic!("{name}: linked");
                }
            }
        }
    }
}
